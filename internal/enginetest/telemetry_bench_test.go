package enginetest_test

import (
	"context"
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
// catch-up on the memory backend: 20,000 events over 200 streams, applied
// by 2 perspectives, with the no-op providers, with the OpenTelemetry SDK's
// MeterProvider (read by a ManualReader), and with it plus the SDK's
// TracerProvider (parent-based 1% sampling, no exporter). Every iteration
// runs the three variants one after the other, starting with a different
// one each time, so that the drift of a shared machine weighs on each
// alike; it reports the events caught up per second of each variant's
// fastest catch-up, which load from elsewhere can only slow down, and the
// slowdown of the SDK variants against the no-op one, in percent. Run it
// with
//
//	go test -run '^$' -bench TelemetryOverhead -benchtime 5x ./internal/enginetest/
func BenchmarkTelemetryOverhead(b *testing.B) {
	const (
		perspectives = 2
		streams      = 200
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
	for n := range b.N {
		for k := range variants {
			i := (n + k) % len(variants)
			v := variants[i]
			p, shutdown := v.new()
			store := memory.New(memory.Options{})
			took := enginebench.CatchUp(b, store.Backend(), perspectives, streams, perStream,
				core.Options{MeterProvider: p.meter, TracerProvider: p.tracer})
			if best[i] == 0 || took < best[i] {
				best[i] = took
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
	for i, v := range variants[1:] {
		b.ReportMetric(100*(rate(best[0])/rate(best[i+1])-1), v.name+"-overhead-%")
	}
}
