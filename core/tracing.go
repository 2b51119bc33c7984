package core

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/vantage-go/vantage/ports"
)

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

// injectTraceContext stores the trace context of ctx's span in md, so that
// the spans of the event's applies link to the code that appended it. It
// does nothing outside a trace, or when md carries a trace context already.
func injectTraceContext(ctx context.Context, md *ports.Metadata) {
	if md.TraceParent != "" || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	traceContext.Inject(ctx, metadataCarrier{md})
}

// appendedSpanContext returns the span context an event was appended under,
// as its metadata records it; ok is false when it records none, or an
// invalid one.
func appendedSpanContext(md *ports.Metadata) (sc trace.SpanContext, ok bool) {
	if md.TraceParent == "" {
		return sc, false
	}
	sc = trace.SpanContextFromContext(traceContext.Extract(context.Background(), metadataCarrier{md}))
	return sc, sc.IsValid()
}
