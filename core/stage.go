package core

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/vantage-go/vantage/ports"
)

// Stage is a point in an event's lifecycle where receptors run.
type Stage int

// Lifecycle stages, in the order they fire for an event.
const (
	// PrePerspective fires once per event, before the first perspective
	// applies it.
	PrePerspective Stage = iota + 1
	// PostPerspective fires once per (event, perspective), after that
	// perspective's model including the event was saved.
	PostPerspective
	// PostAllPerspectives fires once per event, after every perspective
	// registered for its type applied it (in any batch, on any instance).
	PostAllPerspectives
	// PostLifecycle fires once per event, after PostAllPerspectives.
	PostLifecycle
)

// String returns the stage's name.
func (s Stage) String() string {
	switch s {
	case PrePerspective:
		return "PrePerspective"
	case PostPerspective:
		return "PostPerspective"
	case PostAllPerspectives:
		return "PostAllPerspectives"
	case PostLifecycle:
		return "PostLifecycle"
	}
	return fmt.Sprintf("Stage(%d)", int(s))
}

// Mode says how a receptor runs.
type Mode int

const (
	// Inline receptors are awaited, in registration order; an error (or a
	// panic, recovered) is logged and the next receptor still runs. The
	// stage is recorded done once they all returned: exactly once per event
	// (and perspective, for PostPerspective) while no instance crashes, at
	// least once across crashes. Use StageInfo.DeliveryKey to recognise a
	// repeat.
	Inline Mode = iota
	// Detached receptors start in the background when their stage fires,
	// before its inline receptors; their errors and panics are logged. Stop
	// and WaitLifecycle wait for them. The stage is recorded done without
	// waiting for them, so a crash may lose one: at most once.
	Detached
	// ImmediateDetached receptors start in the background right after the
	// inline receptors of their stage returned for the event, under the
	// event's security context; otherwise as Detached.
	ImmediateDetached
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Detached:
		return "Detached"
	case ImmediateDetached:
		return "ImmediateDetached"
	}
	return "Inline"
}

// StageInfo describes one receptor invocation.
type StageInfo struct {
	Stage Stage
	Mode  Mode
	// Event is the stored event (id, stream, version, metadata).
	Event ports.Event
	// Perspective is the perspective that applied the event, for
	// PostPerspective; empty otherwise.
	Perspective string
	// Receptor is the receptor's place among the registry's receptors, in
	// registration order.
	Receptor int
}

// DeliveryKey identifies this delivery: the event, the stage, the
// perspective (for PostPerspective) and the receptor. A stage that a crash
// interrupted runs again with the same keys, so a receptor with effects
// outside the process can recognise a repeat.
func (i StageInfo) DeliveryKey() string {
	return fmt.Sprintf("%s/%s/%s/%d", i.Event.ID, i.Stage, i.Perspective, i.Receptor)
}

type receptor struct {
	index  int
	stage  Stage
	mode   Mode
	goType reflect.Type
	call   func(ctx context.Context, event any, info StageInfo) error
}

// AddReceptor registers fn to run at stage, in mode, for events of type E
// (registered with RegisterEvent before the worker starts). Receptors run
// under the event's security context (see SecurityFromContext).
func AddReceptor[E any](r *Registry, stage Stage, mode Mode, fn func(ctx context.Context, event E, info StageInfo) error) error {
	if r == nil || fn == nil {
		return errors.New("adding receptor: nil registry or function")
	}
	if stage < PrePerspective || stage > PostLifecycle {
		return fmt.Errorf("adding receptor: unknown stage %d", int(stage))
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
	r.receptors = append(r.receptors, receptor{index: len(r.receptors), stage: stage, mode: mode, goType: t, call: func(ctx context.Context, e any, info StageInfo) error {
		return fn(ctx, e.(E), info)
	}})
	r.receptorStages.Or(1 << stage)
	return nil
}

// receptorsFor returns the receptors of a stage for an event type name.
func (r *Registry) receptorsFor(stage Stage, typ string) []receptor {
	r.mu.RLock()
	defer r.mu.RUnlock()
	et, ok := r.byName[typ]
	if !ok {
		return nil
	}
	var out []receptor
	for _, rc := range r.receptors {
		if rc.stage == stage && rc.goType == et.goType {
			out = append(out, rc)
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
