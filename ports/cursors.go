package ports

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// CursorStore reads cursors and records the outcome of processing.
type CursorStore interface {
	// CursorsGet returns the cursors of the given streams, restricted to one
	// perspective when Perspective is set. Missing cursors are simply absent.
	CursorsGet(ctx context.Context, params *CursorsGetParams) ([]Cursor, error)

	// WorkComplete records completions in one atomic step. For every
	// completion it deletes exactly the listed work rows of that
	// (stream, perspective) that are pending, provided the caller holds the
	// stream's lease (live or expired: nobody took the stream; see
	// WorkClaimer); in DebugMode it keeps them, marked processed, invisible
	// to claims and fetches. It never touches rows of other perspectives.
	// Then it upserts each cursor from the payload: the position only moves
	// forward, status becomes Completed (Failed and the error are cleared),
	// and the rewind columns are cleared. A completed row that
	// Admin.DeadLetterRequeue stored marks its dead letter
	// DeadLetterRecovered. Then, for each cursor, the pending rows of the
	// pair below the position this call reports for it (stragglers) become
	// Late and set RewindRequired with the smallest such event as trigger.
	// Rows below the stored cursor but not below the reported position are
	// rows applied earlier whose completions are still on their way, not
	// stragglers; nor are the rows the call lists, which stay pending when
	// the caller lost the stream although their events are applied. All deletions of the call happen before any cursor is
	// examined. Finally the leases of the streams of the call that have no
	// pending rows left are released. Idempotent: completing missing rows
	// is a no-op and cursor writes are set-to-value.
	//
	// The cursor writes are not fenced: a caller that lost the stream
	// deletes no row, but its completion still moves the cursor forward
	// (never back) and flags stragglers, since the model it saved, which
	// ModelStore fenced by its expected version and epoch, is at that
	// position. It leaves the cursor's epoch as it is (0 for a cursor it
	// creates). It never creates the missing cursor of a retired
	// perspective (see Admin.PerspectiveRetire): such a completion was sent
	// before a retirement whose DropState deleted the model its position
	// stands for. WorkFail neither.
	WorkComplete(ctx context.Context, params *WorkCompleteParams) (*WorkCompleteResult, error)

	// WorkFail records failures in one atomic step: applied rows complete as
	// in WorkComplete, the cursor advances to LastVersion (when set), gets the
	// Failed flag and the error text, unless the report is stale, which
	// leaves its status and error: LastVersion is set and the cursor is
	// already past it (the pair went on since the failure), or the failure
	// names no event and the caller (InstanceID set) does not hold the
	// stream's lease (it lost the stream since: without a position, the
	// failure of a pair's first event could not tell otherwise, and would
	// mark the pair Failed for good under the holder that went on); failed rows of streams whose lease
	// the caller holds (as in WorkComplete) are charged the failed attempt:
	// their attempts become at least the failure's Attempt when it is set,
	// else they gain one attempt when they are handed out under that lease
	// (at or below their pair's mark, see WorkClaimer); either way a report
	// sent again after its acknowledgement was lost charges nothing twice
	// (with Attempt, even when a fetch handed the rows out again since).
	// They keep the error and are scheduled at RetryAt, and
	// their pair's handed-out mark drops to just below the lowest of them
	// (its version minus one) when it was higher (see WorkClaimer): the
	// pair's later rows wait behind them. A FailedEventID (a replay
	// failed on an event with no pending row of the pair) stores a pending
	// row for that event, marked Replay (see WorkItem.Replay), with one
	// attempt, the error and RetryAt (or, when the pair has a pending row
	// for it, adds the attempt to that row as for a failed row, whoever
	// holds the stream, leaving its Replay as it is), and flags the
	// cursor RewindRequired when it is past the event, keeping an earlier
	// trigger (such a row is Late); it leaves the handed-out marks as they
	// are. When a failure moves the cursor past pending rows, those become
	// Late and flag the cursor as in WorkComplete (the call's
	// AppliedWorkIDs excepted). Rewind flags are
	// otherwise left as they are. The stream's lease stays with the caller,
	// unless the stream has no pending rows left: it is then released, as
	// by WorkComplete.
	WorkFail(ctx context.Context, params *WorkFailParams) error
}

// CursorsGetParams are the inputs of CursorsGet.
type CursorsGetParams struct {
	StreamIDs   []uuid.UUID
	Perspective string
}

// WorkCompleteParams are the inputs of WorkComplete.
type WorkCompleteParams struct {
	InstanceID  uuid.UUID
	Completions []Completion
	DebugMode   bool
	Now         time.Time
}

// WorkCompleteResult is the output of WorkComplete.
type WorkCompleteResult struct {
	// Completed counts the work rows deleted (or marked, in debug mode).
	Completed int
	// RewindsFlagged counts cursors that got RewindRequired from stragglers.
	RewindsFlagged int
}

// WorkFailParams are the inputs of WorkFail.
type WorkFailParams struct {
	InstanceID uuid.UUID
	Failures   []Failure
	DebugMode  bool
	Now        time.Time
}

// Validate reports the first field every CursorStore rejects with
// ErrInvalidArgument: a completion with a nil StreamID, an empty
// Perspective or a negative LastVersion.
func (p *WorkCompleteParams) Validate() error {
	for i, c := range p.Completions {
		if err := checkPair(fmt.Sprintf("WorkCompleteParams.Completions[%d]", i), c.StreamID, c.Perspective, c.LastVersion); err != nil {
			return err
		}
	}
	return nil
}

// Validate reports the first field every CursorStore rejects with
// ErrInvalidArgument: a failure with a nil StreamID, an empty Perspective
// or a negative LastVersion or Attempt, or with only one of FailedEventID
// and FailedEventVersion set, or a FailedEventVersion that is not positive.
func (p *WorkFailParams) Validate() error {
	for i, f := range p.Failures {
		at := fmt.Sprintf("WorkFailParams.Failures[%d]", i)
		if err := cmp.Or(
			checkPair(at, f.StreamID, f.Perspective, f.LastVersion),
			checkNotNegative(at+".Attempt", int64(f.Attempt)),
		); err != nil {
			return err
		}
		if f.FailedEventID == uuid.Nil && f.FailedEventVersion == 0 {
			continue
		}
		if err := cmp.Or(
			checkID(at+".FailedEventID", f.FailedEventID),
			checkPositive(at+".FailedEventVersion", f.FailedEventVersion),
		); err != nil {
			return fmt.Errorf("%w (FailedEventID and FailedEventVersion are set together)", err)
		}
	}
	return nil
}

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
