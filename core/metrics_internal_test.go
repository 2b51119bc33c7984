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
		reg:   reg,
		opts:  Options{MeterProvider: provider},
		clock: ports.SystemClock{},
		log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
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
		started := time.Now()
		allocs := testing.AllocsPerRun(100, func() {
			m.applyTook(ctx, "bench", started)
			m.pairRan(ctx, "bench", 10, 1)
			m.deduped(ctx, "bench", 2)
			m.batchDrained(ctx, 3, 30, time.Millisecond)
		})
		require.Zero(t, allocs, "%s: allocations per pair run", name)
	}
}

// BenchmarkMetricsPerEvent measures what metrics add to each event a drain
// applies: the apply duration, and a share of the per-run count.
func BenchmarkMetricsPerEvent(b *testing.B) {
	for name, provider := range map[string]metric.MeterProvider{"noop": metricnoop.NewMeterProvider(), "sdk": sdkProvider(b)} {
		b.Run(name, func(b *testing.B) {
			m := newTestMetrics(b, provider)
			ctx := b.Context()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				m.applyTook(ctx, "bench", time.Now())
				if i++; i%100 == 0 {
					m.pairRan(ctx, "bench", 100, 0)
				}
			}
		})
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
		m.applyTook(t.Context(), "bench", time.Now())
		require.Equal(t, tc.reads, clock.reads.Load(), "%s: clock reads", name)
	}
}
