package ports

import (
	"cmp"
	"context"
	"time"

	"github.com/google/uuid"
)

// DeadLetterStore keeps the work rows the engine gave up on, with their
// cause, and brings them back once per deploy generation for a retry on new
// code; an operator brings one back through Admin.DeadLetterRequeue.
//
// A dead letter is DeadLetterDead while it waits; DeadLetterRequeued once
// its work row was stored again; DeadLetterRecovered once that row
// completed; DeadLetterIgnored when an operator gave up on it. A requeued
// row that the engine gives up on again turns its dead letter back to
// DeadLetterDead, with the new cause and generation, so "failed again on
// generation G" reads Generation == RequeueGeneration.
//
// Moving a row is the engine's decision, fenced like its completions and
// failures; an operator acts on dead letters only (Admin requeues and
// ignores them), which takes no lease: a requeue stores a row as an append
// does.
type DeadLetterStore interface {
	// DeadLetterMove atomically deletes a pending work row and records it as
	// a dead letter with status DeadLetterDead. When the row was stored by
	// Admin.DeadLetterRequeue, that dead letter is updated instead of a new one
	// recorded: same id, the new cause, attempts, instance, generation and
	// time. Attempts is the row's, or params.Attempts when that is larger;
	// an empty Error keeps the error the row recorded. It reports Moved
	// false, with no error, when the row is already gone (idempotent under
	// retry). A stream left with no pending rows is released (see
	// WorkClaimer).
	//
	// The move is fenced to the holder of the stream's lease, live or
	// expired, as completions and failures are (see WorkClaimer): when the
	// row is pending in a stream whose lease params.InstanceID does not hold
	// (another instance took it, or it was released), it returns
	// ErrLeaseLost and changes nothing. An instance that lost a stream
	// cannot dead-letter a row that the new holder may have applied and
	// saved already.
	DeadLetterMove(ctx context.Context, params *DeadLetterMoveParams) (*DeadLetterMoveResult, error)
	// DeadLettersList returns dead letters filtered by the non-zero fields
	// of params, ordered by the time they were last dead-lettered, then by
	// id (byte order): oldest first, or newest first with
	// params.NewestFirst. At most Limit when positive; a listing continues
	// page by page with params.After. It changes nothing.
	DeadLettersList(ctx context.Context, params *DeadLettersListParams) ([]DeadLetter, error)
	// DeadLettersRecover requeues, as Admin.DeadLetterRequeue would, up to Limit
	// dead letters, oldest first, that are DeadLetterDead, failed on a
	// generation other than Generation and were never requeued on it, and
	// returns them as they are after the requeue. Concurrent callers never
	// requeue one twice. Returns ErrInvalidArgument for an empty Generation
	// or a Limit below 1.
	DeadLettersRecover(ctx context.Context, params *DeadLettersRecoverParams) ([]DeadLetter, error)
}

// DeadLetterMoveParams are the inputs of DeadLetterMove.
type DeadLetterMoveParams struct {
	WorkID uuid.UUID
	// InstanceID is the instance that gave up on the row; it must hold the
	// lease of the row's stream.
	InstanceID uuid.UUID
	// Generation is that instance's deploy generation ("" for none).
	Generation string
	// Reason says why (ReasonFailed, ReasonUndecodable, ...).
	Reason string
	// Error is the last error text; empty keeps the one the row recorded.
	Error string
	// Attempts, when larger than the row's, is recorded instead: the engine
	// counts the apply that just failed, which the row never recorded.
	Attempts int
	Now      time.Time
}

// DeadLetterMoveResult is the output of DeadLetterMove.
type DeadLetterMoveResult struct {
	// DeadLetter is the dead letter as recorded; zero when Moved is false.
	DeadLetter DeadLetter
	// Moved is false when the row was already gone and nothing changed.
	Moved bool
}

// DeadLettersListParams filter and order DeadLettersList. Zero fields
// filter nothing.
type DeadLettersListParams struct {
	Perspective string
	StreamID    uuid.UUID
	// Status, when set, keeps the dead letters in that status only.
	Status DeadLetterStatus
	// Since, when set, keeps the dead letters last dead-lettered at or
	// after it.
	Since time.Time
	// NewestFirst lists the most recently dead-lettered first.
	NewestFirst bool
	// After, when its DeadLetteredAt is set, continues a listing: only the
	// dead letters that come after it in the listing's order are returned.
	// Set it to the Cursor of the last dead letter of the previous page,
	// keeping the filters and the order; a dead letter dead-lettered again
	// meanwhile moves to its new place in the order.
	After DeadLetterCursor
	// Limit bounds the dead letters returned when positive.
	Limit int
}

// DeadLetterCursor is a place in a listing of dead letters: the time a
// dead letter was last dead-lettered, and its id, which orders those of
// the same time (a nil id comes before every other).
type DeadLetterCursor struct {
	DeadLetteredAt time.Time
	ID             uuid.UUID
}

// Cursor returns the place of dl in a listing, for
// DeadLettersListParams.After.
func (dl DeadLetter) Cursor() DeadLetterCursor {
	return DeadLetterCursor{DeadLetteredAt: dl.DeadLetteredAt, ID: dl.ID}
}

// DeadLettersRecoverParams are the inputs of DeadLettersRecover.
type DeadLettersRecoverParams struct {
	// Generation is the caller's deploy generation. Required.
	Generation string
	// Limit bounds the dead letters requeued by one call. Must be positive.
	Limit int
	Now   time.Time
}

// Validate reports the first field every DeadLetterStore rejects with
// ErrInvalidArgument: a negative Limit or a Status that is none of the
// DeadLetterStatus values.
func (p *DeadLettersListParams) Validate() error {
	if err := checkNotNegative("DeadLettersListParams.Limit", p.Limit); err != nil {
		return err
	}
	switch p.Status {
	case "", DeadLetterDead, DeadLetterRequeued, DeadLetterRecovered, DeadLetterIgnored:
		return nil
	}
	return invalidParam("DeadLettersListParams.Status", "must be a DeadLetterStatus, got %q", p.Status)
}

// Validate reports the first field every DeadLetterStore rejects with
// ErrInvalidArgument: an empty Generation or a Limit below 1.
func (p *DeadLettersRecoverParams) Validate() error {
	return cmp.Or(
		checkName("DeadLettersRecoverParams.Generation", p.Generation),
		checkPositive("DeadLettersRecoverParams.Limit", p.Limit),
	)
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
