package core

import (
	"context"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

type eventKey struct{}
type scopeKey struct{}

// EventFromContext returns the event being applied, inside an apply function.
func EventFromContext(ctx context.Context) (ports.Event, bool) {
	e, ok := ctx.Value(eventKey{}).(ports.Event)
	return e, ok
}

func withEvent(ctx context.Context, e ports.Event) context.Context {
	return context.WithValue(ctx, eventKey{}, e)
}

// WithScope returns a context carrying a security scope; events appended with
// Registry.Append under it store the scope.
func WithScope(ctx context.Context, s ports.Scope) context.Context {
	return context.WithValue(ctx, scopeKey{}, s)
}

// ScopeFromContext returns the scope carried by ctx.
func ScopeFromContext(ctx context.Context) (ports.Scope, bool) {
	s, ok := ctx.Value(scopeKey{}).(ports.Scope)
	return s, ok
}

func metadataFromContext(ctx context.Context) ports.Metadata {
	var md ports.Metadata
	if s, ok := ScopeFromContext(ctx); ok {
		sc := s
		md.Scope = &sc
	}
	if e, ok := EventFromContext(ctx); ok {
		md.CausationID = e.ID
		md.CorrelationID = e.Metadata.CorrelationID
		if md.CorrelationID == uuid.Nil {
			md.CorrelationID = e.ID
		}
		if md.Scope == nil && e.Metadata.Scope != nil {
			sc := *e.Metadata.Scope
			md.Scope = &sc
		}
	}
	return md
}
