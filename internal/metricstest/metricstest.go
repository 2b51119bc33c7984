// Package metricstest checks the engine's metrics on a backend: Run drives a
// known workload through a Worker whose MeterProvider is the OpenTelemetry
// SDK's, read with a ManualReader, and compares what it collects with what
// the workload must produce. Each backend's tests call it, so both measure
// the same scenario.
package metricstest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// Features says what the backend under test offers.
type Features struct {
	// Notifications: the backend's Notifier is healthy while the worker
	// runs, so the listener gauge reads 1.
	Notifications bool
}

// Workload: streams × perStream events of type tick, applied by two
// perspectives; "strict" fails on the poison event, which is dead-lettered
// after its attempts, and a PrePerspective receptor fails on one event.
const (
	streams   = 4
	perStream = 5
	total     = streams * perStream
	attempts  = 2

	typeTick = "metricstest.tick"
	lenient  = "lenient"
	strict   = "strict"

	scenarioTimeout = 60 * time.Second
)

type tick struct {
	N        int  `json:"n"`
	Poison   bool `json:"poison,omitempty"`
	BadStage bool `json:"bad_stage,omitempty"`
}

type count struct {
	Events int `json:"events"`
}

var errPoison = errors.New("poison pill")

// Run runs the workload on a backend newBackend returns (fresh, with its
// own cleanup). The backend must have a Stats port: the lag gauges are
// checked.
func Run(t *testing.T, newBackend func(t *testing.T) ports.Backend, f Features) {
	t.Helper()
	clock := clocktest.NewOffset()
	b := newBackend(t)
	require.NotNil(t, b.Stats, "the backend has no Stats port")
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, provider.Shutdown(context.Background())) })

	reg := registry(t)
	ids := make([]uuid.UUID, streams)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
		events := make([]any, perStream)
		for v := range perStream {
			events[v] = tick{N: v + 1, Poison: i == 0 && v == 2, BadStage: i == 1 && v == 0}
		}
		_, err := reg.Append(t.Context(), b.Events, ids[i], ports.ExpectNoStream, events...)
		require.NoError(t, err)
	}

	progress := make(chan struct{}, 1)
	poke := func() {
		select {
		case progress <- struct{}{}:
		default:
		}
	}
	w, err := core.New(b, reg, &core.Options{
		Clock:  clock,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError + 1})),
		Telemetry: core.TelemetryOptions{
			MeterProvider:         provider,
			StatsInterval:         time.Nanosecond, // every Collection reads the backlog
			ApplyDurationInterval: -1,              // every apply's duration, to count them
		},
		Retries: core.RetryOptions{
			MaxEventAttempts: attempts,
			Event:            core.Backoff{Initial: 20 * time.Millisecond, Max: 20 * time.Millisecond},
		},
		Drain: core.DrainOptions{
			PollingInterval:              20 * time.Millisecond,
			NotifyHealthyPollingInterval: 20 * time.Millisecond,
			Batcher:                      core.DrainBatcherOptions{SlidingWindow: 2 * time.Millisecond, MaxWait: 20 * time.Millisecond},
		},
		Claims: core.ClaimOptions{
			Interval:              10 * time.Millisecond,
			NotifyHealthyInterval: 20 * time.Millisecond,
			HeartbeatInterval:     50 * time.Millisecond,
		},
		Hooks: core.Hooks{
			OnBatchCycleComplete:  func(core.BatchCycle) { poke() },
			OnCompletionsFlushed:  func(core.CompletionsFlushed) { poke() },
			OnDeadLettered:        func(ports.DeadLetter) { poke() },
			OnLifecycleCompleted:  func([]ports.Event) { poke() },
			OnWorkProcessingIdle:  poke,
			OnApplyAbandoned:      func(core.AbandonedApply) { poke() },
			OnStartupScanComplete: poke,
		},
	})
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			require.NoError(t, w.Stop(context.Background()))
		}
	})

	// Built, not started: the backlog is reported; no heartbeat yet.
	m := Collect(t, reader)
	for _, p := range []string{lenient, strict} {
		require.Equal(t, int64(total), m.GaugeInt(t, "vantage.perspective.lag.pending", perspective(p)), "%s: every row pending", p)
		require.Positive(t, m.GaugeFloat(t, "vantage.perspective.lag.oldest_age", perspective(p)), "%s: the oldest row has waited", p)
	}
	require.False(t, m.Has("vantage.instances.live"), "no heartbeat before Start")
	require.Zero(t, m.GaugeInt(t, "vantage.listener.healthy"), "not listening before Start")
	require.Zero(t, m.GaugeInt(t, "vantage.apply.stuck"))

	require.NoError(t, w.Start(t.Context()))

	// Applied: lenient every event, strict all but the poison event, which
	// failed once, was retried, failed again and was dead-lettered.
	want := map[string]int64{
		lenient: total,
		strict:  total - 1,
	}
	deadline := time.NewTimer(scenarioTimeout)
	defer deadline.Stop()
	for {
		m = Collect(t, reader)
		if m.Sum("vantage.perspective.events", perspective(lenient), outcome("applied")) == want[lenient] &&
			m.Sum("vantage.perspective.events", perspective(strict), outcome("applied")) == want[strict] &&
			m.Sum("vantage.perspective.dead_letters", perspective(strict), reason(ports.ReasonFailed)) == 1 &&
			m.GaugeInt(t, "vantage.perspective.lag.pending", perspective(lenient)) == 0 &&
			m.GaugeInt(t, "vantage.perspective.lag.pending", perspective(strict)) == 0 {
			break
		}
		select {
		case <-progress:
		case <-deadline.C:
			t.Fatalf("timed out waiting for the workload to be applied; last Collection:\n%s", m)
		}
	}

	// While running.
	require.Equal(t, int64(1), m.GaugeInt(t, "vantage.instances.live"), "this instance is the only one")
	require.GreaterOrEqual(t, m.GaugeFloat(t, "vantage.heartbeat.age"), 0.0)
	if f.Notifications {
		require.Equal(t, int64(1), m.GaugeInt(t, "vantage.listener.healthy"), "notifications arrive")
	}
	for _, p := range []string{lenient, strict} {
		require.Zero(t, m.GaugeFloat(t, "vantage.perspective.lag.oldest_age", perspective(p)), "%s: nothing pending", p)
	}

	// Stop: the counts are final, and the observable instruments are gone.
	require.NoError(t, w.Stop(t.Context()))
	stopped = true
	m = Collect(t, reader)
	require.Equal(t, "github.com/vantage-go/vantage", m.Scope, "instrumentation scope")
	for _, name := range []string{"vantage.instances.live", "vantage.listener.healthy", "vantage.apply.stuck", "vantage.perspective.lag.pending"} {
		require.False(t, m.Has(name), "%s unregistered at Stop", name)
	}

	require.Equal(t, want[lenient], m.Sum("vantage.perspective.events", perspective(lenient), outcome("applied")))
	require.Equal(t, want[strict], m.Sum("vantage.perspective.events", perspective(strict), outcome("applied")))
	require.Zero(t, m.Sum("vantage.perspective.events", perspective(lenient), outcome("failed")))
	require.Equal(t, int64(attempts), m.Sum("vantage.perspective.events", perspective(strict), outcome("failed")), "one failed apply per attempt")
	require.Zero(t, m.Sum("vantage.perspective.failures", perspective(lenient), reason(ports.ReasonFailed)))
	require.Equal(t, int64(attempts-1), m.Sum("vantage.perspective.failures", perspective(strict), reason(ports.ReasonFailed)),
		"every failure but the last was retried")
	require.Equal(t, int64(1), m.Sum("vantage.perspective.dead_letters", perspective(strict), reason(ports.ReasonFailed)))
	require.Equal(t, int64(1), m.SumAll("vantage.perspective.dead_letters"), "no other dead letter")
	require.Zero(t, m.SumAll("vantage.apply.abandoned"))
	require.Zero(t, m.SumAll("vantage.perspective.backend_errors"))

	// One apply duration per apply: lenient's, and strict's including the
	// failed ones.
	require.Equal(t, uint64(total), m.HistCount("vantage.perspective.apply.duration", perspective(lenient)))
	require.Equal(t, uint64(total-1+attempts), m.HistCount("vantage.perspective.apply.duration", perspective(strict)))

	// Batches: the events they applied add up to the applies.
	batches := m.HistCount("vantage.batch.duration")
	require.Positive(t, batches)
	require.Equal(t, batches, m.HistCount("vantage.batch.streams"))
	require.Equal(t, batches, m.HistCount("vantage.batch.events"))
	require.Equal(t, float64(want[lenient]+want[strict]), m.HistSum("vantage.batch.events"))
	require.Positive(t, m.HistCount("vantage.claim.duration", outcome("ok")))
	require.Positive(t, m.SumAll("vantage.claim.streams"))

	// Flushes: completions and the one failure reached the backend.
	require.Positive(t, m.HistCount("vantage.completion.flush.size", flusher("completions")))
	require.Positive(t, m.HistCount("vantage.completion.flush.duration", flusher("completions"), outcome("ok")))
	require.Equal(t, float64(attempts-1), m.HistSum("vantage.completion.flush.size", flusher("failures")), "the retried failure")
	require.Zero(t, m.SumAll("vantage.completion.flush.dropped"))

	// Lifecycle: PrePerspective ran, and its receptor failed on one event.
	require.Positive(t, m.Sum("vantage.lifecycle.stage.runs", stage("PrePerspective")))
	require.Equal(t, int64(1), m.Sum("vantage.lifecycle.stage.failures", stage("PrePerspective"), reason("receptor")))
	require.Equal(t, int64(1), m.SumAll("vantage.lifecycle.stage.failures"))
	require.Zero(t, m.SumAll("vantage.rewinds"), "nothing was late")
}

func registry(t *testing.T) *core.Registry {
	t.Helper()
	reg := core.NewRegistry()
	require.NoError(t, core.RegisterEvent[tick](reg, typeTick))
	for _, name := range []string{lenient, strict} {
		p := core.NewPerspective[count](name)
		core.MustHandle(p, func(_ context.Context, m count, e tick) (count, error) {
			if name == strict && e.Poison {
				return m, errPoison
			}
			m.Events++
			return m, nil
		})
		require.NoError(t, reg.AddPerspective(p))
	}
	require.NoError(t, core.AddReceptor(reg, core.PrePerspective, core.Inline, func(_ context.Context, e tick, _ core.StageInfo) error {
		if e.BadStage {
			return errors.New("receptor failed")
		}
		return nil
	}))
	return reg
}

func perspective(name string) attribute.KeyValue {
	return attribute.String("vantage.perspective", name)
}
func outcome(name string) attribute.KeyValue { return attribute.String("vantage.outcome", name) }
func reason(name string) attribute.KeyValue  { return attribute.String("vantage.reason", name) }
func flusher(name string) attribute.KeyValue { return attribute.String("vantage.flusher", name) }
func stage(name string) attribute.KeyValue   { return attribute.String("vantage.lifecycle.stage", name) }

// Collection is what one collection of a reader returned, by instrument
// name.
type Collection struct {
	// Scope is the instrumentation scope of the instruments.
	Scope   string
	metrics map[string]metricdata.Metrics
}

// Collect collects what reader's instruments measured.
func Collect(t testing.TB, reader *sdkmetric.ManualReader) Collection {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	c := Collection{metrics: map[string]metricdata.Metrics{}}
	for _, sm := range rm.ScopeMetrics {
		c.Scope = sm.Scope.Name
		for _, m := range sm.Metrics {
			c.metrics[m.Name] = m
		}
	}
	return c
}

// String lists the counters and gauges with their data points, for
// failure messages.
func (c Collection) String() string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(c.metrics)) {
		fmt.Fprintf(&b, "%s:", name)
		switch d := c.metrics[name].Data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range d.DataPoints {
				fmt.Fprintf(&b, " {%s}=%d", dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value)
			}
		case metricdata.Gauge[int64]:
			for _, dp := range d.DataPoints {
				fmt.Fprintf(&b, " {%s}=%d", dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value)
			}
		case metricdata.Gauge[float64]:
			for _, dp := range d.DataPoints {
				fmt.Fprintf(&b, " {%s}=%g", dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Has reports whether the instrument reported anything.
func (c Collection) Has(name string) bool {
	_, ok := c.metrics[name]
	return ok
}

// matches reports whether set holds exactly kvs.
func matches(set attribute.Set, kvs []attribute.KeyValue) bool {
	want := attribute.NewSet(kvs...)
	return set.Equals(&want)
}

// Sum returns the value of the counter's data point with exactly kvs, 0
// when there is none.
func (c Collection) Sum(name string, kvs ...attribute.KeyValue) int64 {
	d, _ := c.metrics[name].Data.(metricdata.Sum[int64])
	for _, dp := range d.DataPoints {
		if matches(dp.Attributes, kvs) {
			return dp.Value
		}
	}
	return 0
}

// SumAll returns the total of the counter over its data points.
func (c Collection) SumAll(name string) int64 {
	d, _ := c.metrics[name].Data.(metricdata.Sum[int64])
	var n int64
	for _, dp := range d.DataPoints {
		n += dp.Value
	}
	return n
}

func (c Collection) histogram(name string, kvs []attribute.KeyValue) (uint64, float64) {
	switch d := c.metrics[name].Data.(type) {
	case metricdata.Histogram[int64]:
		for _, dp := range d.DataPoints {
			if matches(dp.Attributes, kvs) {
				return dp.Count, float64(dp.Sum)
			}
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			if matches(dp.Attributes, kvs) {
				return dp.Count, dp.Sum
			}
		}
	}
	return 0, 0
}

// HistCount returns the number of measurements of the histogram's data
// point with exactly kvs.
func (c Collection) HistCount(name string, kvs ...attribute.KeyValue) uint64 {
	n, _ := c.histogram(name, kvs)
	return n
}

// HistSum returns the sum of the measurements of the histogram's data point
// with exactly kvs.
func (c Collection) HistSum(name string, kvs ...attribute.KeyValue) float64 {
	_, s := c.histogram(name, kvs)
	return s
}

// GaugeInt returns the gauge's value for exactly kvs; the gauge must have
// been observed.
func (c Collection) GaugeInt(t testing.TB, name string, kvs ...attribute.KeyValue) int64 {
	t.Helper()
	d, ok := c.metrics[name].Data.(metricdata.Gauge[int64])
	require.True(t, ok, "%s is an observed int64 gauge", name)
	for _, dp := range d.DataPoints {
		if matches(dp.Attributes, kvs) {
			return dp.Value
		}
	}
	t.Fatalf("%s has no data point %v", name, kvs)
	return 0
}

// GaugeFloat is GaugeInt for a float64 gauge.
func (c Collection) GaugeFloat(t testing.TB, name string, kvs ...attribute.KeyValue) float64 {
	t.Helper()
	d, ok := c.metrics[name].Data.(metricdata.Gauge[float64])
	require.True(t, ok, "%s is an observed float64 gauge", name)
	for _, dp := range d.DataPoints {
		if matches(dp.Attributes, kvs) {
			return dp.Value
		}
	}
	t.Fatalf("%s has no data point %v", name, kvs)
	return 0
}
