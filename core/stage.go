package core

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/vantage-go/vantage/core/internal/stage"
	"github.com/vantage-go/vantage/ports"
)

// Stage is a point in an event's lifecycle where receptors run.
type Stage = stage.Stage

// Lifecycle stages, in the order they fire for an event.
const (
	// PrePerspective fires once per event, before the first perspective
	// applies it.
	PrePerspective = stage.PrePerspective
	// PostPerspective fires once per (event, perspective), after that
	// perspective's model including the event was saved.
	PostPerspective = stage.PostPerspective
	// PostAllPerspectives fires once per event, after every perspective
	// registered for its type applied it (in any batch, on any instance).
	PostAllPerspectives = stage.PostAllPerspectives
	// PostLifecycle fires once per event, after PostAllPerspectives.
	PostLifecycle = stage.PostLifecycle
)

// Mode says how a receptor runs.
type Mode = stage.Mode

const (
	// Inline receptors are awaited, in registration order; an error (or a
	// panic, recovered) is logged and the next receptor still runs. The
	// stage is recorded done once they all returned: exactly once per event
	// (and perspective, for PostPerspective) while no instance crashes, at
	// least once across crashes. Use StageInfo.DeliveryKey to recognise a
	// repeat.
	Inline = stage.Inline
	// Detached receptors start in the background when their stage fires,
	// before its inline receptors; their errors and panics are logged. Stop
	// and WaitLifecycle wait for them. The stage is recorded done without
	// waiting for them, so a crash may lose one: at most once.
	Detached = stage.Detached
	// ImmediateDetached receptors start in the background right after the
	// inline receptors of their stage returned for the event, under the
	// event's security context; otherwise as Detached.
	ImmediateDetached = stage.ImmediateDetached
)

// StageInfo describes one receptor invocation: its Stage and Mode, the
// stored Event (id, stream, version, metadata), the Perspective that
// applied it (for PostPerspective; empty otherwise) and the Receptor's
// place among the registry's receptors, in registration order. Its
// DeliveryKey identifies the delivery: a stage that a crash interrupted
// runs again with the same keys.
type StageInfo = stage.Info

// receptor is a receptor as AddReceptor registered it: at a stage, for
// events of a Go type.
type receptor struct {
	stage.Receptor
	stage  Stage
	goType reflect.Type
}

// AddReceptor registers fn to run at a stage, in mode, for events of type E
// (registered with RegisterEvent before the worker starts). Receptors run
// under the event's security context (see SecurityFromContext).
func AddReceptor[E any](r *Registry, at Stage, mode Mode, fn func(ctx context.Context, event E, info StageInfo) error) error {
	if r == nil || fn == nil {
		return errors.New("adding receptor: nil registry or function")
	}
	if at < PrePerspective || at > PostLifecycle {
		return fmt.Errorf("adding receptor: unknown stage %d", int(at))
	}
	if mode < Inline || mode > ImmediateDetached {
		return fmt.Errorf("adding receptor: unknown mode %d", int(mode))
	}
	t := reflect.TypeFor[E]()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byGoType[t]; !ok {
		return fmt.Errorf("adding receptor for %s: %w (call RegisterEvent first)", t, ErrUnknownEventType)
	}
	call := func(ctx context.Context, e any, info StageInfo) error { return fn(ctx, e.(E), info) }
	r.receptors = append(r.receptors, receptor{Receptor: stage.Receptor{Index: len(r.receptors), Mode: mode, Call: call}, stage: at, goType: t})
	r.receptorStages.Or(1 << at)
	return nil
}

// receptorsFor returns the receptors of a stage for an event type name.
func (r *Registry) receptorsFor(at Stage, typ string) []stage.Receptor {
	r.mu.RLock()
	defer r.mu.RUnlock()
	et, ok := r.byName[typ]
	if !ok {
		return nil
	}
	var out []stage.Receptor
	for _, rc := range r.receptors {
		if rc.stage == at && rc.goType == et.goType {
			out = append(out, rc.Receptor)
		}
	}
	return out
}

// hasReceptors reports whether any receptor is registered for any of the
// stages. It takes no lock: the drain path asks it for every pair.
func (r *Registry) hasReceptors(stages ...Stage) bool {
	added := r.receptorStages.Load()
	for _, s := range stages {
		if added&(1<<s) != 0 {
			return true
		}
	}
	return false
}

// stageRegistry is the registry as the lifecycle reads it.
type stageRegistry struct{ r *Registry }

func (s stageRegistry) Receptors(at Stage, typ string) []stage.Receptor {
	return s.r.receptorsFor(at, typ)
}

func (s stageRegistry) HasReceptors(stages ...Stage) bool { return s.r.hasReceptors(stages...) }

func (s stageRegistry) Decode(e ports.Event) (any, error) { return s.r.Decode(e) }

func (s stageRegistry) Subscribers() map[string][]string { return s.r.subscribers() }
