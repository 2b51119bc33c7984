package core

import (
	"cmp"
	"context"
	"maps"

	"github.com/google/uuid"

	"fmt"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"

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

// SecurityProvider establishes the security scope under which an event is
// processed, typically from the event's metadata (a token, a tenant header).
// Return nil, nil to fall back to the event's own scope.
type SecurityProvider interface {
	EstablishScope(ctx context.Context, event ports.Event) (*ports.Scope, error)
}

// SecurityProviderFunc adapts a function to SecurityProvider.
type SecurityProviderFunc func(ctx context.Context, event ports.Event) (*ports.Scope, error)

// EstablishScope calls f.
func (f SecurityProviderFunc) EstablishScope(ctx context.Context, event ports.Event) (*ports.Scope, error) {
	return f(ctx, event)
}

// SecurityCallback is told about a scope established from an event's own
// metadata (when the provider returned none). A provider that returns a
// scope is responsible for its own side effects, so callbacks do not run for
// it. Callbacks run once per event in an instance (the provider too),
// whatever the number of perspectives, receptors or replays handling it.
type SecurityCallback func(ctx context.Context, sc SecurityContext, event ports.Event) error

// SecurityOptions configure security-context establishment. The zero value
// uses each event's own scope and runs no callbacks.
type SecurityOptions struct {
	// Provider establishes the scope per event. Nil uses the event's scope.
	Provider SecurityProvider
	// Callbacks run, in order, when the event's own scope is promoted.
	Callbacks []SecurityCallback
}

// Scope sources of a SecurityContext.
const (
	ScopeFromProvider = "provider"
	ScopeFromEvent    = "event"
)

// SecurityContext is the identity an apply function or receptor runs under.
type SecurityContext struct {
	// Scope holds tenant, user and extra claims.
	Scope ports.Scope
	// Source is ScopeFromProvider or ScopeFromEvent.
	Source string
	// Propagating is true for a scope promoted from the event: it flows into
	// events appended while handling this one.
	Propagating bool
}

type securityKey struct{}

// SecurityFromContext returns the security context of the event being
// processed.
func SecurityFromContext(ctx context.Context) (SecurityContext, bool) {
	sc, ok := ctx.Value(securityKey{}).(SecurityContext)
	return sc, ok
}

// TenantID returns the tenant of the scope in ctx, empty when none.
func TenantID(ctx context.Context) string {
	s, _ := ScopeFromContext(ctx)
	return s.TenantID
}

// UserID returns the user of the scope in ctx, empty when none.
func UserID(ctx context.Context) string {
	s, _ := ScopeFromContext(ctx)
	return s.UserID
}

// establish returns ctx carrying the event and its security context.
// Each event gets its own context, so batches that mix tenants and users
// never leak one event's identity into another's handler. The context is
// established once per event in this instance (provider and callbacks
// included) and reused for every apply, receptor and replay of the event.
func (c *scopeCache) establish(ctx context.Context, event ports.Event) (context.Context, error) {
	ctx = withEvent(ctx, &event)
	sc, err := c.get(event.ID, func() (establishedScope, error) { return newSecurityContext(ctx, c.sec, event) })
	if err != nil {
		return ctx, err
	}
	return withSecurity(ctx, sc), nil
}

// establishedScope is the security context established for an event; ok is
// false when none was (no provider scope, none on the event).
type establishedScope struct {
	sc SecurityContext
	ok bool
}

// withSecurity returns ctx carrying sc, or explicitly no scope.
func withSecurity(ctx context.Context, s establishedScope) context.Context {
	if !s.ok {
		// No provider scope and none on the event: process without one,
		// and make sure no outer scope leaks in.
		return context.WithValue(context.WithValue(ctx, scopeKey{}, nil), securityKey{}, nil)
	}
	// Each handler gets its own copy: one cannot change another's scope.
	sc := s.sc
	sc.Scope = copyScope(sc.Scope)
	ctx = context.WithValue(ctx, securityKey{}, sc)
	return WithScope(ctx, sc.Scope)
}

// newSecurityContext establishes the security context of an event: the
// provider's scope, or the event's own, announced to the callbacks.
func newSecurityContext(ctx context.Context, sec SecurityOptions, event ports.Event) (establishedScope, error) {
	var sc SecurityContext
	established := false
	if sec.Provider != nil {
		scope, err := sec.Provider.EstablishScope(ctx, event)
		if err != nil {
			return establishedScope{}, fmt.Errorf("establishing security context: %w", err)
		}
		if scope != nil {
			sc = SecurityContext{Scope: copyScope(*scope), Source: ScopeFromProvider}
			established = true
		}
	}
	if !established && event.Metadata.Scope != nil {
		sc = SecurityContext{Scope: copyScope(*event.Metadata.Scope), Source: ScopeFromEvent, Propagating: true}
		established = true
		for _, cb := range sec.Callbacks {
			if err := ctx.Err(); err != nil {
				return establishedScope{}, err
			}
			if err := cb(ctx, sc, event); err != nil {
				return establishedScope{}, fmt.Errorf("security callback: %w", err)
			}
		}
	}
	return establishedScope{sc: sc, ok: established}, nil
}

// scopeCacheSize bounds the security contexts kept per instance.
const scopeCacheSize = 10_000

// scopeCache keeps the security context established per event id, so that
// an event's provider and callbacks run once in an instance, however many
// perspectives, receptors and replays handle it, and however many of them
// ask at the same time. Bounded, least recently used first out.
type scopeCache struct {
	sec    SecurityOptions
	lru    *lru.Cache[uuid.UUID, establishedScope]
	flight singleflight.Group
}

func newScopeCache(sec SecurityOptions) *scopeCache {
	c, _ := lru.New[uuid.UUID, establishedScope](scopeCacheSize) // fails only for a size below 1
	return &scopeCache{sec: sec, lru: c}
}

// get returns the security context of event, establishing it with
// establish when no other caller has: concurrent callers for the same event
// share one establishment. A failed establishment is not kept.
func (c *scopeCache) get(event uuid.UUID, establish func() (establishedScope, error)) (establishedScope, error) {
	if s, ok := c.lru.Get(event); ok {
		return s, nil
	}
	v, err, _ := c.flight.Do(event.String(), func() (any, error) {
		if s, ok := c.lru.Get(event); ok {
			return s, nil
		}
		s, err := establish()
		if err != nil {
			return nil, err
		}
		c.lru.Add(event, s)
		return s, nil
	})
	if err != nil {
		return establishedScope{}, err
	}
	return v.(establishedScope), nil
}

// copyScope returns s with its own Extras, so a handler cannot change the
// event's scope through its security context.
func copyScope(s ports.Scope) ports.Scope {
	s.Extras = maps.Clone(s.Extras)
	return s
}

// applyContext returns the context an apply function gets for event, as
// establish builds it. The common case, no SecurityProvider and no scope on
// the event, takes one allocation instead of a chain of context.WithValue.
func (c *scopeCache) applyContext(ctx context.Context, event *ports.Event) (context.Context, error) {
	if c.sec.Provider != nil || event.Metadata.Scope != nil {
		return c.establish(ctx, *event)
	}
	return &unscopedEventContext{Context: ctx, event: event}, nil
}

// unscopedEventContext carries the event being applied and no scope or
// security context: both read as absent, whatever the parent holds (see
// establish).
type unscopedEventContext struct {
	context.Context
	event *ports.Event // what withEvent stores: the event itself, never changed
}

func (c *unscopedEventContext) Value(key any) any {
	switch key.(type) {
	case eventKey:
		return c.event
	case scopeKey, securityKey:
		return nil
	}
	return c.Context.Value(key)
}
