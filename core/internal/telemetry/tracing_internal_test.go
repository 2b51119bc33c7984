package telemetry

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/vantage-go/vantage/ports"
)

// tracedEvent is an event appended under a sampled span.
func tracedEvent() *ports.Event {
	return &ports.Event{
		ID: uuid.New(), StreamID: uuid.New(), Type: "placed", Version: 3,
		Metadata: ports.Metadata{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceState: "vendor=opaque"},
	}
}

// TestApplySpanAllocatesNothingUntraced measures the apply span's cost
// where nothing is traced: without a TracerProvider (the global one, or a
// no-op one) and under a batch the sampler dropped, starting and ending
// it allocates nothing, as the applies run without spans.
//
// It does not call t.Parallel: AllocsPerRun counts the allocations of
// every goroutine, so the test runs alone, before the parallel tests.
func TestApplySpanAllocatesNothingUntraced(t *testing.T) {
	ev := tracedEvent()
	failed := errors.New("apply failed")
	for name, tp := range map[string]trace.TracerProvider{
		"Global":  otel.GetTracerProvider(),
		"Noop":    noop.NewTracerProvider(),
		"Dropped": sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())),
	} {
		t.Run(name, func(t *testing.T) {
			tr := NewTracing(tp)
			ctx, batch := tr.StartBatch(t.Context(), 1)
			t.Cleanup(func() { batch.End() })
			var got int
			allocs := testing.AllocsPerRun(1000, func() {
				actx, span := tr.StartApply(ctx, "orders", ev)
				if actx == ctx && span == nil {
					got++
				}
				EndApply(span, failed)
			})
			require.Zero(t, allocs, "allocations per untraced apply span")
			require.Positive(t, got, "no span started and the context passed through")
		})
	}
}

// TestApplySpan starts an apply span under a recorded batch: a consumer
// span, child of the batch, linked to the span the event was appended
// under, with the event's attributes; a failure sets its status.
func TestApplySpan(t *testing.T) {
	t.Parallel()

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.WithoutCancel(t.Context()))) })
	tr := NewTracing(tp)
	ev := tracedEvent()

	ctx, batch := tr.StartBatch(t.Context(), 2)
	actx, span := tr.StartApply(ctx, "orders", ev)
	require.NotNil(t, span)
	require.Equal(t, span, trace.SpanFromContext(actx), "the apply's context holds its span")
	EndApply(span, errors.New("apply failed"))
	EndBatch(batch, 1)

	ended := rec.Ended()
	require.Len(t, ended, 2)
	apply, b := ended[0], ended[1]
	require.Equal(t, "vantage.apply orders", apply.Name())
	require.Equal(t, trace.SpanKindConsumer, apply.SpanKind())
	require.Equal(t, b.SpanContext(), apply.Parent(), "a child of the batch")
	require.False(t, b.Parent().IsValid(), "the batch is a root")
	require.Len(t, apply.Links(), 1)
	appended, ok := AppendedSpanContext(&ev.Metadata)
	require.True(t, ok)
	require.Equal(t, appended, apply.Links()[0].SpanContext, "linked to the append")
	require.Equal(t, codes.Error, apply.Status().Code)
	require.Equal(t, "apply failed", apply.Status().Description)
	attrs := map[string]any{}
	for _, kv := range apply.Attributes() {
		attrs[string(kv.Key)] = kv.Value.AsInterface()
	}
	require.Equal(t, map[string]any{
		"vantage.stream.id":     ev.StreamID.String(),
		"vantage.perspective":   "orders",
		"vantage.event.id":      ev.ID.String(),
		"vantage.event.type":    "placed",
		"vantage.event.version": int64(3),
	}, attrs)
}

// TestWithoutSpan drops the span of the context a worker is started with,
// so that its background work does not join the starter's trace.
func TestWithoutSpan(t *testing.T) {
	t.Parallel()

	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(t.Context(), sc)
	require.False(t, trace.SpanContextFromContext(WithoutSpan(ctx)).IsValid())
	require.Equal(t, t.Context(), WithoutSpan(t.Context()), "nothing to drop: the context itself")
}
