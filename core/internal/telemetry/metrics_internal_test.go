package telemetry

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/vantage-go/vantage/ports"
)

// applyEvery is the default interval of the sampled apply duration.
const applyEvery = time.Millisecond

// newTestMetrics returns the instruments of an engine with a "bench"
// perspective, created from provider.
func newTestMetrics(tb testing.TB, provider metric.MeterProvider) *Metrics {
	tb.Helper()
	return NewMetrics(MetricsConfig{
		Provider: provider, Clock: ports.SystemClock{}, Log: slog.New(slog.DiscardHandler),
		ApplyEvery: applyEvery, Perspectives: []string{"bench"},
	})
}

// sdkProvider returns an SDK MeterProvider with opts, shut down at
// cleanup.
func sdkProvider(tb testing.TB, opts ...sdkmetric.Option) *sdkmetric.MeterProvider {
	tb.Helper()
	mp := sdkmetric.NewMeterProvider(append(opts, sdkmetric.WithReader(sdkmetric.NewManualReader()))...)
	tb.Cleanup(func() { require.NoError(tb, mp.Shutdown(context.Background())) })
	return mp
}

// The measurements of the drain's hot path allocate nothing, with the SDK
// as with the no-op provider: their attribute sets are built once.
// Not parallel: testing.AllocsPerRun counts the allocations of every
// goroutine.
func TestMetricsHotPathAllocatesNothing(t *testing.T) {
	for name, provider := range map[string]metric.MeterProvider{"noop": metricnoop.NewMeterProvider(), "sdk": sdkProvider(t)} {
		m := newTestMetrics(t, provider)
		ctx := t.Context()
		p := m.Perspective("bench")
		started := time.Now()
		allocs := testing.AllocsPerRun(100, func() {
			m.SampleApply(p, started)
			m.ApplyTook(ctx, p, started)
			m.PairRan(ctx, "bench", 10, 1)
			m.Deduped(ctx, "bench", 2)
			m.BatchDrained(ctx, 3, 30, time.Millisecond)
		})
		require.Zero(t, allocs, "%s: allocations per pair run", name)
	}
}

// BenchmarkMetricsPerEvent measures what metrics add to each event a drain
// applies: the sampled apply duration, and a share of the per-run count.
// The apply's start is read by the drain anyway; every sub-benchmark reads
// it, so that they differ by the metrics alone. "every" measures every
// apply (ApplyDurationInterval below zero).
func BenchmarkMetricsPerEvent(b *testing.B) {
	for _, tc := range []struct {
		name     string
		provider metric.MeterProvider
		every    time.Duration
	}{
		{"noop", metricnoop.NewMeterProvider(), applyEvery},
		{"sdk", sdkProvider(b), applyEvery},
		{"sdk-every", sdkProvider(b), -1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m := newTestMetrics(b, tc.provider)
			m.applyEvery = tc.every
			p := m.Perspective("bench")
			ctx := b.Context()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				started := time.Now()
				if m.SampleApply(p, started) {
					m.ApplyTook(ctx, p, started)
				}
				if i++; i%100 == 0 {
					m.PairRan(ctx, "bench", 100, 0)
				}
			}
		})
	}
}

// Of a perspective's applies, the first to start at least
// ApplyDurationInterval after the last measured one is measured; a
// negative interval measures each.
func TestApplyDurationSampled(t *testing.T) {
	t.Parallel()

	m := newTestMetrics(t, metricnoop.NewMeterProvider())
	p, other := m.Perspective("bench"), newPerspectiveAttrs("other")
	t0 := time.Unix(1_700_000_000, 0)
	for _, step := range []struct {
		p     *PerspectiveAttrs
		at    time.Duration
		taken bool
	}{
		{p, 0, true},
		{p, 0, false},
		{other, 0, true}, // each perspective is sampled on its own
		{p, 999 * time.Microsecond, false},
		{p, time.Millisecond, true},
		{p, 1500 * time.Microsecond, false},
		{p, 5 * time.Millisecond, true}, // a pause does not bank samples
		{p, 5*time.Millisecond + 999*time.Microsecond, false},
		{p, 6 * time.Millisecond, true},
	} {
		require.Equal(t, step.taken, m.SampleApply(step.p, t0.Add(step.at)), "%s apply at +%s", step.p.name, step.at)
	}

	m.applyEvery = -1
	for range 3 {
		require.True(t, m.SampleApply(p, t0), "every apply measured")
	}
}

// countingClock counts the reads of the system clock.
type countingClock struct {
	ports.SystemClock
	reads atomic.Int64
}

func (c *countingClock) Now() time.Time {
	c.reads.Add(1)
	return c.SystemClock.Now()
}

// An application that drops the apply duration with a view saves the
// clock read it needs, as with no SDK at all.
func TestApplyDurationDroppedReadsNoClock(t *testing.T) {
	t.Parallel()

	drop := sdkmetric.NewView(sdkmetric.Instrument{Name: "vantage.perspective.apply.duration"}, sdkmetric.Stream{Aggregation: sdkmetric.AggregationDrop{}})
	for name, tc := range map[string]struct {
		provider metric.MeterProvider
		reads    int64
	}{
		"noop":    {metricnoop.NewMeterProvider(), 0},
		"sdk":     {sdkProvider(t), 1},
		"dropped": {sdkProvider(t, sdkmetric.WithView(drop)), 0},
	} {
		m := newTestMetrics(t, tc.provider)
		clock := &countingClock{}
		m.clock = clock
		m.ApplyTook(t.Context(), m.Perspective("bench"), time.Now())
		require.Equal(t, tc.reads, clock.reads.Load(), "%s: clock reads", name)
	}
}
