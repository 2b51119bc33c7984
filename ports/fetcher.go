package ports

import (
	"cmp"
	"context"
	"time"

	"github.com/google/uuid"
)

// EventFetcher claims and fetches the pending events of streams, and reads
// whole streams for rewinds.
type EventFetcher interface {
	// EventsFetchPending first takes the lease (see WorkClaimer) of each
	// given stream that is drainable (see WorkClaim) and not under another
	// instance's live lease: one that is unleased, expired, or held by the
	// caller or by an instance that is not live. The lease runs until Now +
	// LeaseDuration, except that a lease the caller holds with at least
	// half of LeaseDuration left is left as it is, so every stream returned
	// has at least half a lease left. Taking a stream from a holder that is
	// not live charges the rows handed out under that lease an attempt;
	// taking an unleased or expired stream, or the caller's own, charges
	// nothing (see Attempts). No partition rule applies, and the caller
	// need not be live.
	//
	// It then returns, for each leased stream and each of its
	// perspectives, the longest prefix in version order of pending rows
	// that are not scheduled in the future: a row waiting for its retry
	// time ends its pair's prefix, so nothing is ever returned ahead of an
	// earlier unfinished event. Work is ordered by stream, perspective,
	// version; Events holds each referenced event once, ordered by stream
	// and version. MaxRows, when positive, bounds the number of work rows
	// returned, cutting the last stream in that order (the rest stay
	// pending for a refetch). The lease records, per pair, the highest
	// version returned as handed out. Cursors holds, read in the same
	// atomic step, the cursor of every (stream, perspective) of Work that
	// has one: the position and epoch its stored model is at, and its
	// rewind flags.
	//
	// A requested stream that is under another instance's live lease, or
	// is not drainable, contributes nothing; a requested stream the caller
	// holds that has no pending row is released. Every requested stream the
	// call may lease is leased, also one that MaxRows leaves out of the
	// result.
	EventsFetchPending(ctx context.Context, params *EventsFetchPendingParams) (*EventsFetchPendingResult, error)

	// EventsReadStream returns the events of a stream with a version greater
	// than AfterVersion, in version order, at most Limit when positive.
	EventsReadStream(ctx context.Context, params *EventsReadStreamParams) ([]Event, error)
}

// EventsFetchPendingParams are the inputs of EventsFetchPending.
type EventsFetchPendingParams struct {
	InstanceID     uuid.UUID
	StreamIDs      []uuid.UUID
	LeaseDuration  time.Duration
	StaleThreshold time.Duration
	MaxRows        int
	Now            time.Time
}

// EventsFetchPendingResult is the output of EventsFetchPending.
type EventsFetchPendingResult struct {
	Events []Event
	Work   []WorkItem
	// Cursors are the cursors of the pairs of Work, in no particular order;
	// a pair without a cursor is absent.
	Cursors []Cursor
}

// EventsReadStreamParams are the inputs of EventsReadStream.
type EventsReadStreamParams struct {
	StreamID     uuid.UUID
	AfterVersion int64
	Limit        int
}

// Validate reports the first field every EventFetcher rejects with
// ErrInvalidArgument: a nil InstanceID, a LeaseDuration or StaleThreshold
// that is not positive, or a negative MaxRows.
func (p *EventsFetchPendingParams) Validate() error {
	return cmp.Or(
		checkID("EventsFetchPendingParams.InstanceID", p.InstanceID),
		checkPositive("EventsFetchPendingParams.LeaseDuration", p.LeaseDuration),
		checkPositive("EventsFetchPendingParams.StaleThreshold", p.StaleThreshold),
		checkNotNegative("EventsFetchPendingParams.MaxRows", p.MaxRows),
	)
}

// Validate reports the first field every EventFetcher rejects with
// ErrInvalidArgument: a nil StreamID or a negative Limit.
func (p *EventsReadStreamParams) Validate() error {
	return cmp.Or(
		checkID("EventsReadStreamParams.StreamID", p.StreamID),
		checkNotNegative("EventsReadStreamParams.Limit", p.Limit),
	)
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
