package ports

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// CursorStatus is the flags value stored on a cursor. Several flags may be set
// at once (Failed|RewindRequired, say).
type CursorStatus uint16

// Cursor status flags. The numeric values are stored and must not change.
const (
	CursorNone       CursorStatus = 0
	CursorProcessing CursorStatus = 1
	CursorCompleted  CursorStatus = 2
	CursorFailed     CursorStatus = 4
	// 8 and 16 are not used and stay reserved.
	CursorRewindRequired CursorStatus = 32
)

// Has reports whether every flag of f is set in s.
func (s CursorStatus) Has(f CursorStatus) bool { return s&f == f && f != 0 }

// String lists the set flags, "None" when none is set.
func (s CursorStatus) String() string {
	if s == CursorNone {
		return "None"
	}
	var parts []string
	for _, f := range []struct {
		flag CursorStatus
		name string
	}{
		{CursorProcessing, "Processing"},
		{CursorCompleted, "Completed"},
		{CursorFailed, "Failed"},
		{CursorRewindRequired, "RewindRequired"},
	} {
		if s.Has(f.flag) {
			parts = append(parts, f.name)
		}
	}
	if len(parts) == 0 {
		return "Unknown"
	}
	return strings.Join(parts, "|")
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

// WorkItem is one pending (stream, perspective, event) work row.
type WorkItem struct {
	// WorkID identifies the work row; completions and dedup refer to it.
	WorkID uuid.UUID
	// StreamID is the event's stream.
	StreamID uuid.UUID
	// Perspective is the name of the perspective that must apply the event.
	Perspective string
	// EventID is the event to apply.
	EventID uuid.UUID
	// EventVersion is the event's version in its stream.
	EventVersion int64
	// Attempts counts the applies of the row that failed and the times it
	// was taken over from a dead instance (see WorkClaimer); 0 for a row
	// nobody failed on.
	Attempts int
	// Late is set on a row whose event was stored below its pair's cursor
	// (a late arrival, a dead letter requeued past it) or that a completion
	// found pending below the position it reported (a straggler): its event
	// was never applied, although the cursor passed it, and only a rewind
	// can apply it in order. It is set too on a row stored below its
	// pair's handed-out mark (see WorkClaimer; whether or not the stream's
	// lease is still live): rows above it were handed to an apply whose
	// save may move the cursor past the new row before the pair is fetched
	// again, and a crash may then keep the completion that would find the
	// straggler from ever being reported. A Late row above the cursor is
	// applied as any other. Once set it stays until the row is deleted.
	Late bool
	// Replay is set on a row that CursorStore.WorkFail stored for a
	// Failure's FailedEventID: a replay of the pair (a rewind, a rebuild)
	// failed on an event that its model had reflected already, and the row
	// stands for that event's retry. Its event was applied before, so a
	// replay that applies it again applies nothing new: the engine neither
	// counts it among the new events nor runs its stages as for a first
	// apply. It is false on every other row, a dead letter's requeued row
	// included (the replays after the move left its event out of the
	// model). It never changes while the row is pending.
	Replay bool
}

// Cursor records how far a perspective has applied a stream.
type Cursor struct {
	StreamID    uuid.UUID
	Perspective string
	// LastEventID is the last applied event, zero when none was applied.
	LastEventID uuid.UUID
	// LastVersion is the version of LastEventID, zero when none was applied.
	LastVersion int64
	// Epoch counts the saves that replaced the pair's history (a rewind or
	// a rebuild; see ModelSaveParams.Rebase), 0 for a pair never replayed.
	// A model is current only at the cursor's version and epoch: one saved
	// at an earlier epoch reflects a history the pair no longer has,
	// whatever its version, and no save based on it passes (see
	// ModelStore.ModelSave). Only model saves change it; completions and
	// failures leave it as it is.
	Epoch int64
	// Status holds the CursorStatus flags.
	Status CursorStatus
	// Error is the last failure text, empty after a success.
	Error string
	// RewindTriggerEventID is the earliest late event that forces a rewind.
	RewindTriggerEventID uuid.UUID
	// RewindTriggerVersion is the version of RewindTriggerEventID.
	RewindTriggerVersion int64
	// RewindFlaggedAt is the last time a late event was detected (sliding
	// debounce edge); zero when not flagged.
	RewindFlaggedAt time.Time
	// RewindFirstFlaggedAt is the first detection (debounce cap anchor).
	RewindFirstFlaggedAt time.Time
	// UpdatedAt is the last time the cursor changed.
	UpdatedAt time.Time
}

// Completion reports that a perspective applied events of a stream.
type Completion struct {
	StreamID    uuid.UUID
	Perspective string
	// LastEventID and LastVersion are the last event now reflected in the
	// stored model.
	LastEventID uuid.UUID
	LastVersion int64
	// WorkIDs are exactly the work rows to complete: rows of this perspective
	// whose events are applied (or were already at or below the cursor).
	WorkIDs []uuid.UUID
}

// Failure reports that a perspective failed on an event of a stream.
type Failure struct {
	StreamID    uuid.UUID
	Perspective string
	// LastEventID and LastVersion are the last event successfully applied and
	// saved before the failure; zero when none was.
	LastEventID uuid.UUID
	LastVersion int64
	// AppliedWorkIDs are rows applied before the failure; they complete.
	AppliedWorkIDs []uuid.UUID
	// FailedWorkIDs are the rows that failed (the engine reports one): each
	// gains an attempt and is scheduled at RetryAt. Later rows of the pair
	// are not listed: they wait behind it.
	FailedWorkIDs []uuid.UUID
	// Attempt, when set, is the attempt that failed, counted from 1 (a
	// failed row's WorkItem.Attempts when fetched, plus one): the failed
	// rows' attempts become at least Attempt, however many times the
	// report is sent, so that a report re-sent after a lost
	// acknowledgement charges nothing again even when a fetch handed the
	// rows out since. Zero: each failed row gains an attempt while it is
	// handed out to the caller.
	Attempt int
	// FailedEventID and FailedEventVersion, set by a rewind instead of
	// FailedWorkIDs, name an event whose replay failed and that has no
	// pending row of the pair (it was applied long ago): the backend stores
	// one for it, marked WorkItem.Replay, so the failure is charged to the
	// event that failed (see CursorStore.WorkFail).
	FailedEventID      uuid.UUID
	FailedEventVersion int64
	// Error is the failure text stored on the cursor and the failed rows.
	Error string
	// RetryAt is the earliest time the failed rows may be claimed again.
	RetryAt time.Time
}

// Instance is a live engine instance as recorded by heartbeats.
type Instance struct {
	ID              uuid.UUID
	ServiceName     string
	HostName        string
	ProcessID       int
	Metadata        map[string]string
	StartedAt       time.Time
	LastHeartbeatAt time.Time
	// Passive is what the latest heartbeat declared (see
	// InstanceHeartbeatParams.Passive): the instance takes no share of the
	// streams nobody holds.
	Passive bool
	// LeasedStreams counts the streams whose lease names the instance,
	// expired or not (nobody took them since; see WorkClaimer): the streams
	// it holds. Set by Admin.InstancesList; zero elsewhere.
	LeasedStreams int
}

// DeadLetter is a work row the engine gave up on, with the cause.
type DeadLetter struct {
	ID           uuid.UUID
	WorkID       uuid.UUID
	StreamID     uuid.UUID
	Perspective  string
	EventID      uuid.UUID
	EventVersion int64
	// Attempts counts the failed applies and takeovers (see WorkItem).
	Attempts int
	// Reason says why the engine gave up (ReasonFailed, ...).
	Reason string
	// Error is the last apply (or decode) error text.
	Error string
	// InstanceID and Generation are the instance that gave up, and its
	// deploy generation ("" when it named none).
	InstanceID     uuid.UUID
	Generation     string
	DeadLetteredAt time.Time
	// Status is where the dead letter stands: waiting, requeued, recovered
	// or ignored.
	Status DeadLetterStatus
	// Requeues counts the times its row was stored again; RequeuedAt and
	// RequeueGeneration describe the latest (zero before the first).
	Requeues          int
	RequeuedAt        time.Time
	RequeueGeneration string
	// ResolvedAt is when it was recovered or ignored; zero otherwise.
	ResolvedAt time.Time
}

// DeadLetterStatus is where a dead letter stands. The values are stored and
// must not change.
type DeadLetterStatus string

// Dead-letter statuses (see DeadLetterStore).
const (
	// DeadLetterDead: waiting for a requeue, by an operator or by a new
	// deploy generation.
	DeadLetterDead DeadLetterStatus = "dead"
	// DeadLetterRequeued: its work row is pending again.
	DeadLetterRequeued DeadLetterStatus = "requeued"
	// DeadLetterRecovered: its requeued row was applied and completed.
	DeadLetterRecovered DeadLetterStatus = "recovered"
	// DeadLetterIgnored: an operator gave up on it; never retried again
	// unless requeued explicitly.
	DeadLetterIgnored DeadLetterStatus = "ignored"
)

// Dead-letter reasons recorded by the engine.
const (
	// ReasonFailed: the apply returned an error (or panicked) on every
	// attempt.
	ReasonFailed = "failed"
	// ReasonTimedOut: the last apply ran past its deadline.
	ReasonTimedOut = "timed_out"
	// ReasonUndecodable: the payload does not decode into the event's
	// registered Go type.
	ReasonUndecodable = "undecodable"
	// ReasonUnknownType: the event's type is not registered, or the
	// perspective has no apply function for it.
	ReasonUnknownType = "unknown_type"
	// ReasonLate: the event was stored below its pair's cursor while the
	// engine could not rewind (rewinds disabled, or a backend without a
	// RewindStore); requeue it once rewinds are on.
	ReasonLate = "late"
	// ReasonMaxAttemptsExceeded: takeovers from dead instances used up the
	// attempts before an apply could fail on its own (say, an event whose
	// apply crashes the process).
	ReasonMaxAttemptsExceeded = "max_attempts_exceeded"
)

// StoredModel is a perspective's model for one stream with its cursor position.
type StoredModel struct {
	StreamID    uuid.UUID
	Perspective string
	// Data is the JSON encoding of the model.
	Data []byte
	// LastEventID and LastVersion are the last event reflected in Data.
	LastEventID uuid.UUID
	LastVersion int64
	// Epoch is the pair's epoch (see Cursor.Epoch) the model was saved at;
	// a save based on the model sends it as ModelSaveParams.ExpectedEpoch.
	Epoch     int64
	UpdatedAt time.Time
}

// Subscription declares that a perspective applies events of a type.
type Subscription struct {
	EventType   string
	Perspective string
}

// RetireResult counts what PerspectiveRetire removed.
type RetireResult struct {
	// Subscriptions, Work: the subscriptions and pending work rows deleted.
	Subscriptions int
	Work          int
	// Cursors, Models, Snapshots: the state dropped (with DropState).
	Cursors   int
	Models    int
	Snapshots int
}

// Wake is a notification that new work may be available.
type Wake struct {
	// Reconnected is true when the listener reconnected and notifications may
	// have been missed; the receiver should poll.
	Reconnected bool
	// Streams, when set, are the streams whose appends this wake reports,
	// and the wake reports nothing else: a receiver may drain them without
	// asking the backend which streams have work. Empty means unknown (a
	// NotifierPublish, a requeue, wakes merged past WakeStreamsMax): the
	// receiver should poll.
	Streams []uuid.UUID
}

// WakeStreamsMax bounds the Streams of a merged Wake; past it the merged
// wake names none, which asks for a poll.
const WakeStreamsMax = 256

// OfferWake hands w to a listener's channel of capacity one without
// blocking: when a wake is still buffered it is replaced by its Merge with
// w. The caller must be the channel's only sender (an adapter sends under
// one lock), so that once the buffered wake is taken back, or was received
// meanwhile, the send cannot block.
func OfferWake(ch chan Wake, w Wake) {
	select {
	case ch <- w:
		return
	default:
	}
	select {
	case buffered := <-ch:
		ch <- buffered.Merge(w)
	default:
		ch <- w
	}
}

// Merge returns the wake that reports what w and o report, for a listener
// that coalesces a wake into one still buffered: Reconnected when either
// is, and the streams of both, unless either names none (unknown stays
// unknown) or they would exceed WakeStreamsMax. It does not modify w or o.
func (w Wake) Merge(o Wake) Wake {
	m := Wake{Reconnected: w.Reconnected || o.Reconnected}
	if len(w.Streams) == 0 || len(o.Streams) == 0 || len(w.Streams)+len(o.Streams) > WakeStreamsMax {
		return m
	}
	m.Streams = make([]uuid.UUID, 0, len(w.Streams)+len(o.Streams))
	m.Streams = append(m.Streams, w.Streams...)
	for _, id := range o.Streams {
		if !slices.Contains(m.Streams, id) {
			m.Streams = append(m.Streams, id)
		}
	}
	return m
}
