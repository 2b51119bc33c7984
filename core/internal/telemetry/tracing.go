// Package telemetry records the engine's traces and metrics through the
// OpenTelemetry API: the spans of batches, applies, rewinds and stages,
// and the instruments of every measurement point.
package telemetry

import (
	"context"
	"errors"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/vantage-go/vantage/core/internal/monitor"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/core/internal/stage"
	"github.com/vantage-go/vantage/ports"
)

// tracerName is the instrumentation scope of the engine's spans.
const tracerName = "github.com/vantage-go/vantage"

// Attributes of the engine's spans. The observability guide (docs/observability.md)
// lists which span carries which.
const (
	attrStreamID       = attribute.Key("vantage.stream.id")
	attrPerspective    = attribute.Key("vantage.perspective")
	attrEventID        = attribute.Key("vantage.event.id")
	attrEventType      = attribute.Key("vantage.event.type")
	attrEventVersion   = attribute.Key("vantage.event.version")
	attrBatchStreams   = attribute.Key("vantage.batch.streams")
	attrBatchApplied   = attribute.Key("vantage.batch.applied")
	attrRewindTrigger  = attribute.Key("vantage.rewind.trigger_version")
	attrRewindFrom     = attribute.Key("vantage.rewind.from_version")
	attrRewindReplayed = attribute.Key("vantage.rewind.replayed")
	attrRewindNew      = attribute.Key("vantage.rewind.new")
	attrStage          = attribute.Key("vantage.lifecycle.stage")
	attrStageEvents    = attribute.Key("vantage.lifecycle.events")
	attrStageClaimed   = attribute.Key("vantage.lifecycle.claimed")
	attrReceptor       = attribute.Key("vantage.lifecycle.receptor")
)

// Span names: a batch's, and those of an apply and a rewind, which end
// with the perspective's name (see stageSpanName for the stages').
const (
	batchSpanName    = "vantage.batch"
	applySpanPrefix  = "vantage.apply "
	rewindSpanPrefix = "vantage.rewind "
)

// tracing starts the engine's spans, from Options.Telemetry.TracerProvider.
//
// A drain batch is a root span: it is background work that no request
// waits for, and it serves the events of many requests. The apply of each
// event is a child of its batch, linked to the span the event was appended
// under (see injectTraceContext), which is how a request's trace reaches
// the projection of its events. Rewinds and lifecycle stages are children
// of the batch that runs them, or roots when a background loop does.
type Tracing struct {
	tracer trace.Tracer
}

func NewTracing(tp trace.TracerProvider) Tracing {
	return Tracing{tracer: tp.Tracer(tracerName)}
}

// WithoutSpan returns ctx without the span it may carry: the engine's
// background work outlives the call that started the worker, and its spans
// must not join that call's trace.
func WithoutSpan(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, trace.SpanContext{})
}

// StartBatch starts the span of a drain batch of streams.
func (t Tracing) StartBatch(ctx context.Context, streams int) (context.Context, trace.Span) {
	ctx, span := t.tracer.Start(ctx, batchSpanName, trace.WithNewRoot())
	if span.IsRecording() {
		span.SetAttributes(attrBatchStreams.Int(streams))
	}
	return ctx, span
}

// EndBatch ends a batch's span, which applied applied (event, perspective)
// pairs.
func EndBatch(span trace.Span, applied int) {
	if span.IsRecording() {
		span.SetAttributes(attrBatchApplied.Int(applied))
	}
	span.End()
}

// StartApply starts the span of perspective's apply of e: a child of the
// span ctx carries (the batch's), linked to the span e was appended under.
// It is a consumer span: it processes a message that another trace
// produced, which is what that kind means to trace backends.
//
// Applies are the engine's hot path, run for every event and perspective.
// When ctx's span is not recording (no TracerProvider installed, or a
// batch the sampler dropped, whose children it would drop too) startApply
// returns ctx and a nil span, having allocated nothing; endApply accepts
// the nil span.
func (t Tracing) StartApply(ctx context.Context, perspective string, e *ports.Event) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, nil
	}
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attrStreamID.String(e.StreamID.String()),
			attrPerspective.String(perspective),
			attrEventID.String(e.ID.String()),
			attrEventType.String(e.Type),
			attrEventVersion.Int64(e.Version),
		),
	}
	if sc, ok := AppendedSpanContext(&e.Metadata); ok {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	return t.tracer.Start(ctx, applySpanPrefix+perspective, opts...)
}

// Recording reports whether ctx's span records, so that spans started
// under it record too.
func Recording(ctx context.Context) bool {
	return trace.SpanFromContext(ctx).IsRecording()
}

// EndApply ends an apply's span (nil when startApply started none),
// Recording err when the apply failed.
func EndApply(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		FailSpan(span, spanError(err))
	}
	span.End()
}

// StartRewind starts the span of the rewind of a pair, whose first late
// event has version trigger.
func (t Tracing) StartRewind(ctx context.Context, key pair.Key, trigger int64) (context.Context, trace.Span) {
	ctx, span := t.tracer.Start(ctx, rewindSpanPrefix+key.Perspective)
	if span.IsRecording() {
		span.SetAttributes(attrStreamID.String(key.Stream.String()), attrPerspective.String(key.Perspective), attrRewindTrigger.Int64(trigger))
	}
	return ctx, span
}

// EndRewind ends a rewind's span with what its replay did, linking it to
// the spans that appended the events it applied for the first time. err
// is the reason the rewind stopped, if it did not complete.
func EndRewind(span trace.Span, from int64, replayed int, fresh []ports.Event, err error) {
	if span.IsRecording() {
		span.SetAttributes(attrRewindFrom.Int64(from), attrRewindReplayed.Int(replayed), attrRewindNew.Int(len(fresh)))
		for i := range fresh {
			if sc, ok := AppendedSpanContext(&fresh[i].Metadata); ok {
				span.AddLink(trace.Link{SpanContext: sc})
			}
		}
	}
	if err != nil {
		FailSpan(span, spanError(err))
	}
	span.End()
}

// spanError is the error a span records for err: a run abandoned is what
// monitor.ErrAbandoned says to a reader.
func spanError(err error) error {
	if errors.Is(err, pair.ErrRunAbandoned) {
		return monitor.ErrAbandoned
	}
	return err
}

// StartStage starts the span of a lifecycle stage run for events (of
// perspective, for stage.PostPerspective); none, and a nil span, when there are
// no events.
func (t Tracing) StartStage(ctx context.Context, stage stage.Stage, perspective string, events []ports.Event) (context.Context, trace.Span) {
	if len(events) == 0 {
		return ctx, nil
	}
	ctx, span := t.tracer.Start(ctx, stageSpanName(stage))
	if span.IsRecording() {
		attrs := []attribute.KeyValue{attrStage.String(stage.String()), attrStageEvents.Int(len(events))}
		if perspective != "" {
			attrs = append(attrs, attrPerspective.String(perspective))
		}
		if stream := events[0].StreamID; !slices.ContainsFunc(events, func(e ports.Event) bool { return e.StreamID != stream }) {
			attrs = append(attrs, attrStreamID.String(stream.String()))
		}
		span.SetAttributes(attrs...)
	}
	return ctx, span
}

// EndStage ends a stage's span (nil when startStage started none), which
// ran its receptors for claimed events, or failed with err.
func EndStage(span trace.Span, claimed int, err error) {
	if span == nil {
		return
	}
	if span.IsRecording() {
		span.SetAttributes(attrStageClaimed.Int(claimed))
	}
	if err != nil {
		FailSpan(span, err)
	}
	span.End()
}

// ReceptorFailed records on the stage span ctx carries that the inline
// receptor of index receptor failed with err.
func ReceptorFailed(ctx context.Context, receptor int, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.RecordError(err, trace.WithAttributes(attrReceptor.Int(receptor)))
	span.SetStatus(codes.Error, "inline receptor failed")
}

// stageSpanName returns the name of a stage's span.
func stageSpanName(s stage.Stage) string {
	switch s {
	case stage.PrePerspective:
		return "vantage.lifecycle PrePerspective"
	case stage.PostPerspective:
		return "vantage.lifecycle PostPerspective"
	case stage.PostAllPerspectives:
		return "vantage.lifecycle PostAllPerspectives"
	case stage.PostLifecycle:
		return "vantage.lifecycle PostLifecycle"
	}
	return "vantage.lifecycle"
}

// FailSpan records err on span and marks it failed.
func FailSpan(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// traceContext is the W3C Trace Context propagator. The engine uses it
// directly, not the global propagator the application may have installed:
// what is stored with an event must be readable by every instance,
// whatever its configuration.
var traceContext propagation.TraceContext

// metadataCarrier lets the propagator read and write the trace context
// fields of an event's metadata.
type metadataCarrier struct{ md *ports.Metadata }

const (
	traceParentHeader = "traceparent"
	traceStateHeader  = "tracestate"
)

func (c metadataCarrier) Get(key string) string {
	switch key {
	case traceParentHeader:
		return c.md.TraceParent
	case traceStateHeader:
		return c.md.TraceState
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) {
	switch key {
	case traceParentHeader:
		c.md.TraceParent = value
	case traceStateHeader:
		c.md.TraceState = value
	}
}

func (c metadataCarrier) Keys() []string { return []string{traceParentHeader, traceStateHeader} }

// InjectTraceContext stores the trace context of ctx's span in md, so that
// the spans of the event's applies link to the code that appended it. It
// does nothing outside a trace, or when md carries a trace context already.
func InjectTraceContext(ctx context.Context, md *ports.Metadata) {
	if md.TraceParent != "" || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	traceContext.Inject(ctx, metadataCarrier{md})
}

// AppendedSpanContext returns the span context an event was appended under,
// as its metadata records it; ok is false when it records none, or an
// invalid one.
func AppendedSpanContext(md *ports.Metadata) (sc trace.SpanContext, ok bool) {
	if md.TraceParent == "" {
		return sc, false
	}
	sc = trace.SpanContextFromContext(traceContext.Extract(context.Background(), metadataCarrier{md}))
	return sc, sc.IsValid()
}

// Stages records the lifecycle's stages in the engine's traces and
// metrics (stage.Telemetry).
type Stages struct {
	Tracing Tracing
	Metrics *Metrics
}

// StartStage implements stage.Telemetry.
func (t Stages) StartStage(ctx context.Context, at stage.Stage, perspective string, events []ports.Event) (context.Context, func(int, error)) {
	ctx, span := t.Tracing.StartStage(ctx, at, perspective, events)
	return ctx, func(claimed int, err error) { EndStage(span, claimed, err) }
}

// StageRan implements stage.Telemetry.
func (t Stages) StageRan(ctx context.Context, at stage.Stage, claimed int, err error) {
	t.Metrics.StageRan(ctx, at, claimed, err)
}

// ReceptorFailed implements stage.Telemetry.
func (t Stages) ReceptorFailed(ctx context.Context, at stage.Stage, receptor int, inline bool, err error) {
	if inline {
		ReceptorFailed(ctx, receptor, err)
	}
	t.Metrics.ReceptorFailed(ctx, at)
}

var _ stage.Telemetry = Stages{}
