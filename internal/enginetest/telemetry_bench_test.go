package enginetest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/enginebench"
	"github.com/vantage-go/vantage/internal/metricstest"
)

// BenchmarkTelemetryOverhead measures what metrics and traces cost a
// catch-up on the memory backend: 100,000 events over 1,000 streams, applied
// by 2 perspectives, with the no-op providers, with the OpenTelemetry SDK's
// MeterProvider (read by a ManualReader), and with it plus the SDK's
// TracerProvider (parent-based 1% sampling, no exporter). Every iteration
// runs the three variants one after the other, starting with a different
// one each time, so that the drift of a shared machine weighs on each
// alike. It reports the events caught up per second of each variant's
// fastest catch-up, which load from elsewhere can only slow down, and the
// slowdown of each SDK variant against the no-op one, in percent: the
// median over the iterations of the ratio of their durations within the
// iteration, which a burst of load skews less than a ratio of fastest
// runs, and the same for the CPU time the process used, which depends
// less on how the scheduler shares the cores. Run it with
//
//	go test -run '^$' -bench TelemetryOverhead -benchtime 5x ./internal/enginetest/
func BenchmarkTelemetryOverhead(b *testing.B) {
	const (
		perspectives = 2
		streams      = 1000
		perStream    = 100
		events       = streams * perStream
	)
	type providers struct {
		meter  metric.MeterProvider
		tracer trace.TracerProvider
		reader *sdkmetric.ManualReader
	}
	variants := []struct {
		name string
		new  func() (providers, func())
	}{
		{"noop", func() (providers, func()) {
			return providers{meter: metricnoop.NewMeterProvider(), tracer: tracenoop.NewTracerProvider()}, func() {}
		}},
		{"metrics", func() (providers, func()) {
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			return providers{meter: mp, tracer: tracenoop.NewTracerProvider(), reader: reader}, func() {
				require.NoError(b, mp.Shutdown(context.Background()))
			}
		}},
		{"metrics+traces", func() (providers, func()) {
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))))
			return providers{meter: mp, tracer: tp, reader: reader}, func() {
				require.NoError(b, mp.Shutdown(context.Background()))
				require.NoError(b, tp.Shutdown(context.Background()))
			}
		}},
	}
	best := make([]time.Duration, len(variants))
	took := make([][]time.Duration, len(variants))
	cpu := make([][]time.Duration, len(variants))
	for n := range b.N {
		for k := range variants {
			i := (n + k) % len(variants)
			v := variants[i]
			p, shutdown := v.new()
			store := memory.New(memory.Options{})
			d, c := enginebench.CatchUpCPU(b, store.Backend(), perspectives, streams, perStream,
				core.Options{Telemetry: core.TelemetryOptions{MeterProvider: p.meter, TracerProvider: p.tracer}})
			took[i] = append(took[i], d)
			cpu[i] = append(cpu[i], c)
			if best[i] == 0 || d < best[i] {
				best[i] = d
			}
			if p.reader != nil {
				// The instruments did record: every event, once per perspective.
				var applied int64
				m := metricstest.Collect(b, p.reader)
				for _, name := range []string{"sum0", "sum1"} {
					applied += m.Sum("vantage.perspective.events", attribute.String("vantage.perspective", name), attribute.String("vantage.outcome", "applied"))
				}
				require.Equal(b, int64(perspectives*events), applied, "%s recorded every apply", v.name)
			}
			require.NoError(b, store.Close())
			shutdown()
		}
	}
	rate := func(d time.Duration) float64 { return events / d.Seconds() }
	for i, v := range variants {
		b.ReportMetric(rate(best[i]), v.name+"-events/s")
	}
	// overhead is the median over the iterations of the ratio of variant
	// i's figure to the no-op one's in the same iteration, in percent.
	overhead := func(of [][]time.Duration, i int) float64 {
		ratios := make([]float64, b.N)
		for n := range ratios {
			ratios[n] = of[i][n].Seconds() / of[0][n].Seconds()
		}
		slices.Sort(ratios)
		return 100 * (ratios[len(ratios)/2] - 1)
	}
	for i, v := range variants {
		if i > 0 {
			b.ReportMetric(overhead(took, i), v.name+"-overhead-%")
			if cpu[0][0] > 0 {
				b.ReportMetric(overhead(cpu, i), v.name+"-cpu-overhead-%")
			}
		}
	}
}
