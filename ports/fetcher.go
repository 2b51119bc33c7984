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
	// EventsFetchPending first leases to the caller every pending row of the
	// given streams that is unleased, lease-expired or already the caller's,
	// not scheduled in the future, whose stream is not pinned to a different
	// live instance, and that passes the ordering guard (see WorkClaim).
	// A row leased from another instance's expired lease gains an attempt;
	// taking an unleased row, or the caller's own whether its lease expired
	// or not, does not (see WorkClaimer). A row under the caller's live
	// lease is extended only when
	// less than half of LeaseDuration is left (otherwise it is left as it
	// is, so a fetch right after a claim or an earlier fetch writes
	// nothing); every row returned therefore has at least half a lease left.
	// The streams in which it leased or holds a row are pinned to the
	// caller.
	//
	// It then returns, per (stream, perspective), the longest prefix in
	// version order of pending rows leased to the caller: a row held
	// elsewhere or scheduled in the future ends the prefix, so nothing is
	// ever returned ahead of an earlier unfinished event. Work is ordered by
	// stream, perspective, version; Events holds each referenced event once,
	// ordered by stream and version. MaxRows, when positive, bounds the
	// number of work rows returned (the rest stay leased for a refetch).
	// Cursors holds, read in the same atomic step, the cursor of every
	// (stream, perspective) of Work that has one: the position its stored
	// model is at, and its rewind flags.
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
