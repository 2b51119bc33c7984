// Package stage runs the receptors of an event's lifecycle stages and
// keeps the stage records that make them survive crashes: a durable stage
// is claimed in the backend, its receptors run, and it is recorded done.
// The public names (core.Stage, core.Mode, core.StageInfo) are aliases of
// this package's types.
package stage

import (
	"context"
	"fmt"

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
	// least once across crashes. Use Info.DeliveryKey to recognise a
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

// Info describes one receptor invocation (core.StageInfo).
type Info struct {
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
func (i Info) DeliveryKey() string {
	return fmt.Sprintf("%s/%s/%s/%d", i.Event.ID, i.Stage, i.Perspective, i.Receptor)
}

// Receptor is a receptor as the registry holds it: its place among the
// registry's receptors, its mode, and its function over the decoded event.
type Receptor struct {
	Index int
	Mode  Mode
	Call  func(ctx context.Context, event any, info Info) error
}

// Registry is what a Lifecycle reads of the perspectives and receptors.
type Registry interface {
	// Receptors returns the receptors of stage for an event type name, in
	// registration order.
	Receptors(stage Stage, eventType string) []Receptor
	// HasReceptors reports whether any receptor listens at any of stages.
	HasReceptors(stages ...Stage) bool
	// Decode decodes a stored event's payload.
	Decode(e ports.Event) (any, error)
	// Subscribers returns, per event type name, the perspectives that
	// apply it.
	Subscribers() map[string][]string
}

// Telemetry records the stages' runs.
type Telemetry interface {
	// StartStage starts the span of a stage's run for events (of
	// perspective, for PostPerspective); end ends it with the events it
	// claimed, or the claim's error.
	StartStage(ctx context.Context, stage Stage, perspective string, events []ports.Event) (_ context.Context, end func(claimed int, err error))
	// StageRan counts a stage's run for claimed events, or its failed claim.
	StageRan(ctx context.Context, stage Stage, claimed int, err error)
	// ReceptorFailed counts a receptor that returned an error or panicked;
	// inline ones are recorded on the stage's span ctx carries too.
	ReceptorFailed(ctx context.Context, stage Stage, receptor int, inline bool, err error)
}
