// Package perspective is the engine's view of what an application
// registers: perspectives it decodes, applies and encodes without knowing
// their model types, table projections whose writes run in the save's
// transaction, and the registry that finds them by name and decodes
// events. The public types live in package core, which adapts them to
// these interfaces; the drain and the rewinder depend on these alone.
package perspective

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/modelstore"
	"github.com/vantage-go/vantage/core/internal/stage"
	"github.com/vantage-go/vantage/ports"
)

// Errors an apply or a decode fails with when an event cannot be applied
// at all; a dead letter names them with reasons of their own.
var (
	// ErrUnknownEventType: the event's type is not registered.
	ErrUnknownEventType = errors.New("unknown event type")
	// ErrNoHandler: the perspective has no apply function for the type.
	ErrNoHandler = errors.New("no apply function")
	// ErrUndecodable: the payload does not decode into the type.
	ErrUndecodable = errors.New("undecodable event")
)

// Perspective is a registered perspective with its model type erased.
type Perspective interface {
	// Name is the perspective's registered name.
	Name() string
	// EventTypes are the registered names of the event types it applies.
	EventTypes() []string
	// DecodeModel returns the model stored as data; nil data is the
	// initial model.
	DecodeModel(data []byte) (any, error)
	// EncodeModel returns what to store of model.
	EncodeModel(model any) ([]byte, error)
	// Apply applies a decoded event of type typ to model and returns the
	// next model.
	Apply(ctx context.Context, model any, typ string, event any) (any, error)
}

// Table is a table projection: a perspective whose model is the writes of
// the events applied since its last save (a Writes), run by the save in the
// transaction that moves its cursor. Its stored model is TableData.
type Table interface {
	Perspective
	// Writes returns the Apply of a ports.ModelSaveTxParams that runs the
	// reset of stream when reset is set, then the writes w in order, each
	// within limit. A write's error, panic or deadline is returned as a
	// *modelstore.WriteFailure naming the write's index (-1 for the
	// reset).
	Writes(w Writes, stream uuid.UUID, reset bool, limit modelstore.WriteLimit) func(ctx context.Context, tx ports.Tx) error
}

// Writes is the model of a Table: the events applied since its last save,
// waiting for its transaction. It is a value; each apply returns a longer
// copy, so a run's model is exactly its unsaved events.
type Writes []Write

// Write is one event waiting for its projection's transaction.
type Write struct {
	// Values carries the event's context values (the event, its scope);
	// the transaction's context supplies cancellation.
	Values context.Context //nolint:containedctx // values only, read while the save that owns it runs
	Type   string
	Event  any
}

// TableData is what a table projection stores as its model: the cursor
// position is what counts.
var TableData = []byte(`{}`)

// IsTable reports whether p is a table projection.
func IsTable(p Perspective) bool {
	_, ok := p.(Table)
	return ok
}

// Registry finds perspectives and decodes events.
type Registry interface {
	// Lookup returns the perspective registered under name.
	Lookup(name string) (Perspective, bool)
	// Decode decodes a stored event into its registered Go type. shareable
	// is whether the value may be handed to several applies (its type
	// holds nothing an apply could change under another).
	Decode(e ports.Event) (value any, shareable bool, err error)
	// HasReceptors reports whether any receptor listens at one of stages.
	HasReceptors(stages ...stage.Stage) bool
}
