package ports

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// EventStore appends events and fans them out to perspectives.
type EventStore interface {
	// EventsAppend stores events in a stream and, atomically with them, one
	// pending work row per perspective subscribed to each event's type;
	// after commit it publishes a wake notification.
	//
	// ExpectedVersion 0 skips the concurrency check, ExpectNoStream requires
	// an empty stream, and a positive value must equal the stream's current
	// version; otherwise ErrVersionConflict. Events without an explicit
	// Version get consecutive versions after the stream head; an explicit
	// version that is taken is ErrVersionConflict. A stored event below a
	// perspective's cursor flags that cursor RewindRequired and stores its
	// row Late; so does, without the flag, an event below its pair's
	// handed-out mark (see WorkItem.Late).
	//
	// Subscriptions, when set, are the subscriptions the caller's
	// perspectives call for: the store registers them in the same atomic
	// step, before it fans out (as SubscriptionsRegister would, retired
	// perspectives excepted), so an append never creates fewer work rows
	// than its caller's perspectives call for, whatever happened to the
	// recorded subscriptions.
	//
	// Retries are safe: when every event of the call carries an ID that is
	// already stored, in this stream, with the same type and data (and at
	// its explicit Version where one is given), and the lowest of their
	// versions is ExpectedVersion+1 when that is positive (1 for
	// ExpectNoStream), the call is a repeat of an append that took effect
	// (say, one whose commit was acknowledged on a connection that then
	// broke, reported as ErrTransient): it stores nothing and returns the
	// stored events with AlreadyStored set. Any other stored event id is
	// ErrVersionConflict.
	EventsAppend(ctx context.Context, params *EventsAppendParams) (*EventsAppendResult, error)

	// SubscriptionsRegister records which perspectives apply which event
	// types. Additive and idempotent; affects appends made after it returns.
	// Subscriptions of a retired perspective (see Admin) are ignored.
	SubscriptionsRegister(ctx context.Context, params *SubscriptionsRegisterParams) error
}

// ExpectNoStream is the ExpectedVersion that requires an empty stream.
const ExpectNoStream int64 = -1

// EventsAppendParams are the inputs of EventsAppend.
type EventsAppendParams struct {
	StreamID        uuid.UUID
	ExpectedVersion int64
	Events          []NewEvent
	// Subscriptions are registered with the events (see EventsAppend).
	Subscriptions []Subscription
	Now           time.Time
}

// Validate reports the first reason every EventStore rejects params with
// ErrInvalidArgument: a nil stream id, no events, an ExpectedVersion below
// ExpectNoStream, an event with an empty type, a negative version, or data
// that is not a JSON document or is JSON null (a payload that holds no
// event), or a subscription with an empty event type or perspective.
// Adapters call it before they store anything.
func (p *EventsAppendParams) Validate() error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("appending to stream %s: %s: %w", p.StreamID, fmt.Sprintf(format, args...), ErrInvalidArgument)
	}
	switch {
	case p.StreamID == uuid.Nil:
		return fmt.Errorf("appending events: nil stream id: %w", ErrInvalidArgument)
	case len(p.Events) == 0:
		return invalid("no events")
	case p.ExpectedVersion < ExpectNoStream:
		return invalid("expected version %d is invalid", p.ExpectedVersion)
	}
	for i, e := range p.Events {
		switch {
		case e.Type == "":
			return invalid("event %d has an empty type", i)
		case e.Version < 0:
			return invalid("event %d has negative version %d", i, e.Version)
		case len(e.Data) == 0 || !json.Valid(e.Data):
			return invalid("event %d data is not a JSON document", i)
		case isJSONNull(e.Data):
			return invalid("event %d (%s) data is JSON null", i, e.Type)
		}
	}
	return checkSubscriptions("EventsAppendParams.Subscriptions", p.Subscriptions)
}

// SubscriptionsRegisterParams are the inputs of SubscriptionsRegister.
type SubscriptionsRegisterParams struct {
	Subscriptions []Subscription
}

// EventsAppendResult is the output of EventsAppend.
type EventsAppendResult struct {
	// Events are the stored events with their ids and versions.
	Events []Event
	// WorkRows counts the work rows stored.
	WorkRows int
	// AlreadyStored is true when the call repeated an append that had taken
	// effect: Events are as stored then, and nothing was stored now.
	AlreadyStored bool
}

// Validate reports the first field every EventStore rejects with
// ErrInvalidArgument: a subscription with an empty EventType or
// Perspective.
func (p *SubscriptionsRegisterParams) Validate() error {
	return checkSubscriptions("SubscriptionsRegisterParams.Subscriptions", p.Subscriptions)
}
