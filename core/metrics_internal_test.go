package core

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/ports"
)

// newTestMetrics returns the instruments of an engine with a "bench"
// perspective, created from provider.
func newTestMetrics(tb testing.TB, provider metric.MeterProvider) *metrics {
	tb.Helper()
	reg := NewRegistry()
	require.NoError(tb, RegisterEvent[benchEvent](reg, "bench.event"))
	p := NewPerspective[benchModel]("bench")
	require.NoError(tb, Handle(p, func(_ context.Context, m benchModel, _ benchEvent) (benchModel, error) { return m, nil }))
	require.NoError(tb, reg.AddPerspective(p))
	return newMetrics(&engine{
		reg:  reg,
		opts: Options{MeterProvider: provider, ApplyDurationInterval: ApplyDurationIntervalDefault},
		Env:  &base.Env{Clock: ports.SystemClock{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
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
		p := m.perspective("bench")
		started := time.Now()
		allocs := testing.AllocsPerRun(100, func() {
			m.sampleApply(p, started)
			m.applyTook(ctx, p, started)
			m.pairRan(ctx, "bench", 10, 1)
			m.deduped(ctx, "bench", 2)
			m.batchDrained(ctx, 3, 30, time.Millisecond)
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
		{"noop", metricnoop.NewMeterProvider(), ApplyDurationIntervalDefault},
		{"sdk", sdkProvider(b), ApplyDurationIntervalDefault},
		{"sdk-every", sdkProvider(b), -1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m := newTestMetrics(b, tc.provider)
			m.applyEvery = tc.every
			p := m.perspective("bench")
			ctx := b.Context()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				started := time.Now()
				if m.sampleApply(p, started) {
					m.applyTook(ctx, p, started)
				}
				if i++; i%100 == 0 {
					m.pairRan(ctx, "bench", 100, 0)
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
	p, other := m.perspective("bench"), newPerspectiveAttrs("other")
	t0 := time.Unix(1_700_000_000, 0)
	for _, step := range []struct {
		p     *perspectiveAttrs
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
		require.Equal(t, step.taken, m.sampleApply(step.p, t0.Add(step.at)), "%s apply at +%s", step.p.name, step.at)
	}

	m.applyEvery = -1
	for range 3 {
		require.True(t, m.sampleApply(p, t0), "every apply measured")
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
		m.applyTook(t.Context(), m.perspective("bench"), time.Now())
		require.Equal(t, tc.reads, clock.reads.Load(), "%s: clock reads", name)
	}
}
