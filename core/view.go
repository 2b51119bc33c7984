package core

import (
	"context"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/modelstore"
	"github.com/vantage-go/vantage/core/internal/perspective"
	"github.com/vantage-go/vantage/core/internal/stage"
	"github.com/vantage-go/vantage/ports"
)

// view is a registered perspective as the engine runs it: the methods the
// public types keep unexported, under the names the engine's interface
// gives them.
type view struct{ p registered }

func (v view) Name() string                         { return v.p.Name() }
func (v view) EventTypes() []string                 { return v.p.eventTypes() }
func (v view) DecodeModel(data []byte) (any, error) { return v.p.decodeModel(data) }
func (v view) EncodeModel(model any) ([]byte, error) {
	return v.p.encodeModel(model)
}

func (v view) Apply(ctx context.Context, model any, typ string, event any) (any, error) {
	return v.p.apply(ctx, model, typ, event)
}

// tableView is the view of a table projection.
type tableView struct {
	view
	t *Projection
}

func (v tableView) Writes(w perspective.Writes, stream uuid.UUID, reset bool, limit modelstore.WriteLimit) func(context.Context, ports.Tx) error {
	return v.t.writes(w, stream, reset, limit)
}

// viewOf returns the engine's view of p.
func viewOf(p registered) perspective.Perspective {
	if t, ok := p.(*Projection); ok {
		return tableView{view{p}, t}
	}
	return view{p}
}

// lookup returns the engine's view of the perspective registered under
// name.
func (r *Registry) lookup(name string) (perspective.Perspective, bool) {
	p, ok := r.perspective(name)
	if !ok {
		return nil, false
	}
	return viewOf(p), true
}

// engineRegistry is the registry as the drain and the rewinder read it.
type engineRegistry struct{ r *Registry }

func (e engineRegistry) Lookup(name string) (perspective.Perspective, bool) { return e.r.lookup(name) }

func (e engineRegistry) Decode(ev ports.Event) (any, bool, error) { return e.r.decode(ev) }

func (e engineRegistry) HasReceptors(stages ...stage.Stage) bool { return e.r.hasReceptors(stages...) }
