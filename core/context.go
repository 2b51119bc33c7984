package core

import (
	"cmp"
	"context"
	"maps"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/telemetry"
	"github.com/vantage-go/vantage/ports"
)

type eventKey struct{}
type scopeKey struct{}
type correlationKey struct{}
type headersKey struct{}

// EventFromContext returns the event being applied, inside an apply function.
func EventFromContext(ctx context.Context) (ports.Event, bool) {
	e, ok := ctx.Value(eventKey{}).(*ports.Event)
	if !ok {
		return ports.Event{}, false
	}
	return *e, true
}

// withEvent returns a context carrying e for EventFromContext. The context
// holds e itself, not a copy: the engine never changes an event it applies,
// and EventFromContext hands out copies.
func withEvent(ctx context.Context, e *ports.Event) context.Context {
	return context.WithValue(ctx, eventKey{}, e)
}

// WithScope returns a context carrying a security scope; events appended with
// Registry.Append or AppendTx under it store the scope.
func WithScope(ctx context.Context, s ports.Scope) context.Context {
	return context.WithValue(ctx, scopeKey{}, s)
}

// ScopeFromContext returns the scope carried by ctx.
func ScopeFromContext(ctx context.Context) (ports.Scope, bool) {
	s, ok := ctx.Value(scopeKey{}).(ports.Scope)
	return s, ok
}

// appendValue is a value set for the events appended under a context,
// tagged with the id of the event being handled when it was set (uuid.Nil
// outside a handler). A handler's context derives from the one its Worker
// was started with, so without the tag a correlation id or headers set on
// that context would be stamped on every event any handler appends; with
// it, only values set inside the handler count there.
type appendValue[T any] struct {
	value T
	under uuid.UUID
}

// handledID returns the id of the event being handled under ctx, uuid.Nil
// outside a handler.
func handledID(ctx context.Context) uuid.UUID {
	e, _ := EventFromContext(ctx)
	return e.ID
}

// appendValueFrom returns the value ctx carries under key, if it was set
// under the event handled now (or, outside a handler, outside any).
func appendValueFrom[T any](ctx context.Context, key any) (T, bool) {
	v, ok := ctx.Value(key).(appendValue[T])
	if !ok || v.under != handledID(ctx) {
		var zero T
		return zero, false
	}
	return v.value, true
}

// WithCorrelationID returns a context under which events appended with
// Registry.Append or AppendTx carry id as their correlation id, the id that
// ties together every event caused by one request. Without it, events
// appended from a handler inherit the handled event's correlation id (its
// own id when it has none), and others have none; uuid.Nil restores that
// default. Inside a handler, only a correlation id set in the handler
// overrides the inherited one: one on the context the Worker was started
// with does not.
func WithCorrelationID(ctx context.Context, id uuid.UUID) context.Context {
	return context.WithValue(ctx, correlationKey{}, appendValue[uuid.UUID]{value: id, under: handledID(ctx)})
}

// WithHeaders returns a context under which events appended with
// Registry.Append or AppendTx carry the headers h, added to those set by an
// earlier WithHeaders on ctx (h wins on a shared key). The map is copied:
// changing it afterwards changes nothing. Headers are not inherited from a
// handled event: they describe the append they are set for, and inside a
// handler only those set in the handler count.
func WithHeaders(ctx context.Context, h map[string]string) context.Context {
	merged, _ := appendValueFrom[map[string]string](ctx, headersKey{})
	merged = maps.Clone(merged)
	if merged == nil {
		merged = make(map[string]string, len(h))
	}
	maps.Copy(merged, h)
	return context.WithValue(ctx, headersKey{}, appendValue[map[string]string]{value: merged, under: handledID(ctx)})
}

// MetadataFromContext returns the metadata Registry.Append and AppendTx store
// with the events they append under ctx, for callers that build
// ports.EventsAppendParams themselves:
//   - Scope: the scope ctx carries (see WithScope); inside a handler, the
//     one the handled event is processed under unless the handler set
//     another;
//   - CausationID: inside a handler, the handled event's id;
//   - CorrelationID: the id of WithCorrelationID, or inside a handler the
//     handled event's correlation id (its id when it has none);
//   - Headers: those of WithHeaders, nil when none;
//   - TraceParent and TraceState: the W3C trace context of the span ctx
//     carries (go.opentelemetry.io/otel/trace), when it is valid; inside a
//     handler, the span of the apply.
//
// The result shares no map with ctx.
func MetadataFromContext(ctx context.Context) ports.Metadata {
	var md ports.Metadata
	if s, ok := ScopeFromContext(ctx); ok {
		sc := copyScope(s)
		md.Scope = &sc
	}
	if e, ok := EventFromContext(ctx); ok {
		md.CausationID = e.ID
		md.CorrelationID = cmp.Or(e.Metadata.CorrelationID, e.ID)
		if md.Scope == nil && e.Metadata.Scope != nil {
			sc := copyScope(*e.Metadata.Scope)
			md.Scope = &sc
		}
	}
	if id, ok := appendValueFrom[uuid.UUID](ctx, correlationKey{}); ok && id != uuid.Nil {
		md.CorrelationID = id
	}
	if h, ok := appendValueFrom[map[string]string](ctx, headersKey{}); ok && len(h) > 0 {
		md.Headers = maps.Clone(h)
	}
	telemetry.InjectTraceContext(ctx, &md)
	return md
}
