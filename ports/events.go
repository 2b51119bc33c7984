package ports

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
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

// Scope is the security scope an event was appended under.
type Scope struct {
	// TenantID identifies the tenant, empty when the host is single-tenant.
	TenantID string `json:"t,omitempty"`
	// UserID identifies the acting user, empty for system actions.
	UserID string `json:"u,omitempty"`
	// Extras carries further claims the host wants to propagate.
	Extras map[string]string `json:"x,omitempty"`
}

// Metadata travels with an event: tracing ids, the scope, free-form headers.
type Metadata struct {
	// CorrelationID ties together every event caused by one request.
	CorrelationID uuid.UUID `json:"correlation_id,omitzero"`
	// CausationID is the id of the message that caused this event.
	CausationID uuid.UUID `json:"causation_id,omitzero"`
	// Scope is the security scope, nil when none was known.
	Scope *Scope `json:"scope,omitempty"`
	// Headers carries free-form string metadata.
	Headers map[string]string `json:"headers,omitempty"`
	// TraceParent and TraceState are the W3C Trace Context
	// (https://www.w3.org/TR/trace-context/) of the code that appended the
	// event: the traceparent and tracestate header values, empty when it
	// ran outside a trace. Adapters store them as they are given.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// Clone returns a deep copy of m: adapters keep and hand out copies, never
// the caller's maps. An empty map is copied as nil, as the JSON encoding of
// Metadata stores it, so that an adapter that keeps values and one that
// stores JSON hand out the same metadata.
func (m Metadata) Clone() Metadata {
	if m.Scope != nil {
		scope := *m.Scope
		scope.Extras = cloneNonEmpty(scope.Extras)
		m.Scope = &scope
	}
	m.Headers = cloneNonEmpty(m.Headers)
	return m
}

// cloneNonEmpty returns a copy of m, nil when m is empty.
func cloneNonEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// Event is a stored event.
type Event struct {
	// ID is the event's unique id (UUIDv7).
	ID uuid.UUID
	// StreamID is the stream (aggregate) the event belongs to.
	StreamID uuid.UUID
	// Type is the registered event type name, the key that selects perspectives.
	Type string
	// Version is the 1-based position of the event in its stream. Within a
	// stream, Version is the processing order.
	Version int64
	// Data is the JSON payload.
	Data []byte
	// Metadata carries correlation, causation, scope and headers.
	Metadata Metadata
	// CreatedAt is when the backend stored the event.
	CreatedAt time.Time
}

// NewEvent is an event to append.
type NewEvent struct {
	// ID is the event id. Zero means the backend assigns a UUIDv7.
	ID uuid.UUID
	// Type is the event type name. Required.
	Type string
	// Version places the event explicitly (imports). Zero means the next
	// version of the stream. An explicit version below the stream's head that
	// is still free is stored as a late arrival: perspectives whose cursor is
	// past it are flagged RewindRequired.
	Version int64
	// Data is the JSON payload. Required (use "{}" for an empty payload);
	// JSON null is refused.
	Data []byte
	// Metadata is stored with the event.
	Metadata Metadata
}

// Subscription declares that a perspective applies events of a type.
type Subscription struct {
	EventType   string
	Perspective string
}
