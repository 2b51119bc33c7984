package ports

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Admin is the optional port of operator queries and actions: the methods
// operator tools need and the engine never calls, PerspectivesRetired
// excepted (the engine reads it at start to warn about retired
// perspectives it runs, and skips the warning without an Admin).
type Admin interface {
	// InstancesList returns the recorded instances ordered by id, each with
	// the count of streams it holds (Instance.LeasedStreams). Instances
	// stay recorded until they deregister or another instance abandons
	// them (see WorkClaimer): an operator tool tells a live one by the age
	// of its LastHeartbeatAt, which is on the clock of its heartbeats (the
	// database's on PostgreSQL, unless the engine passes its own).
	InstancesList(ctx context.Context) ([]Instance, error)

	// DeadLetterRequeue stores the dead letter's work row (see
	// DeadLetterStore) again, pending, with zero attempts, under its
	// original work id, and marks
	// the dead letter DeadLetterRequeued (counting the requeue and recording
	// params.Generation and the time); listeners are woken. If the pair's
	// cursor is already at or past the event (no model holds a
	// dead-lettered event, even when a save left the cursor at it), the
	// row is Late and the cursor is
	// flagged RewindRequired, so that a rewind applies the event in order;
	// the row is Late too when the event is below its pair's handed-out
	// mark (see WorkItem.Late). Only a
	// DeadLetterDead or DeadLetterIgnored dead letter is requeued: it
	// returns ErrNotFound for an unknown id and ErrVersionConflict for one
	// that is requeued or recovered.
	DeadLetterRequeue(ctx context.Context, params *DeadLetterRequeueParams) error

	// DeadLettersRequeue requeues the dead letters params selects, each as
	// DeadLetterRequeue would (its row stored again, Late and flagging a
	// rewind where that one would be; the dead letter marked
	// DeadLetterRequeued on params.Generation at Now), all in one atomic
	// step, and returns how many it requeued; listeners are woken once when
	// it requeued any. With IDs it requeues those of them that are
	// DeadLetterDead or DeadLetterIgnored (and of Perspective, and
	// dead-lettered since Since, when set): unknown ids, and dead letters
	// requeued or recovered, are left out without an error, which the count
	// tells. Without IDs it requeues every DeadLetterDead dead letter of
	// Perspective (dead-lettered since Since, when set); ignored ones are
	// requeued only when named. Concurrent requeues never requeue a dead
	// letter twice. Returns ErrInvalidArgument for a nil id, or when
	// neither Perspective nor IDs is given.
	DeadLettersRequeue(ctx context.Context, params *DeadLettersRequeueParams) (int, error)

	// DeadLetterGet returns the dead letter params.ID as DeadLettersList
	// lists it, or ErrNotFound for an unknown id.
	DeadLetterGet(ctx context.Context, params *DeadLetterGetParams) (DeadLetter, error)

	// DeadLetterIgnore marks a DeadLetterDead dead letter DeadLetterIgnored:
	// DeadLettersRecover never retries it (an explicit DeadLetterRequeue
	// still may). Idempotent. Returns ErrNotFound for an unknown id and
	// ErrVersionConflict for one that is requeued or recovered.
	DeadLetterIgnore(ctx context.Context, params *DeadLetterIgnoreParams) error

	// PerspectiveRetire retires a perspective: its subscriptions are deleted
	// and later registrations of them are ignored, so appends stop creating
	// its work rows; its pending work rows are deleted (streams left with
	// none are released); with DropState its
	// cursors, models and snapshots are deleted too, without it its cursors
	// lose their rewind flag (the late rows the rewind awaited are deleted,
	// and a revival's rebuild applies their events). Safe while instances
	// run: their completions of deleted rows change nothing, and bring no
	// deleted cursor back (an apply in flight may still save its model
	// once; retiring again drops it).
	// Idempotent. Returns ErrInvalidArgument for an empty perspective.
	PerspectiveRetire(ctx context.Context, params *PerspectiveRetireParams) (*RetireResult, error)

	// PerspectiveRevive undoes the retirement of a perspective: its
	// subscriptions may be registered again (the next Worker.Start, or
	// append through a registry that has it, registers them). Reviving a
	// perspective that is not retired is a no-op. The events appended while
	// it was retired have no work rows: a rebuild applies them. A report
	// sent before a retirement with DropState that lands after the revival
	// creates the deleted cursor again, at the report's position.
	PerspectiveRevive(ctx context.Context, params *PerspectiveReviveParams) error

	// PerspectivesRetired lists the retired perspectives, sorted.
	PerspectivesRetired(ctx context.Context) ([]string, error)

	// RebuildRequest stores a request to rebuild params.Perspective, for
	// params.StreamIDs or every stream with events it handles, and returns
	// it, RebuildPending: a running engine instance that runs the
	// perspective claims it and carries it out (see RebuildQueue, whose
	// port Backend.Rebuilds an adapter implementing this one provides
	// too). The stream ids are stored sorted, without duplicates. Returns
	// ErrInvalidArgument for an empty perspective or a nil stream id.
	RebuildRequest(ctx context.Context, params *RebuildRequestParams) (RebuildRequest, error)

	// RebuildGet returns the request params.ID as it stands, progress
	// included, or ErrNotFound for an unknown id.
	RebuildGet(ctx context.Context, params *RebuildGetParams) (RebuildRequest, error)

	// RebuildsList returns the requests filtered by the non-zero fields of
	// params, newest first (by RequestedAt, then id in reverse byte
	// order), at most Limit when positive. Returns ErrInvalidArgument for a
	// negative Limit or an unknown Status.
	RebuildsList(ctx context.Context, params *RebuildsListParams) ([]RebuildRequest, error)

	// RebuildCancel cancels a pending or running request: it becomes
	// RebuildCancelled, FinishedAt Now, and the instance running it is
	// fenced out (its next progress report returns ErrVersionConflict), so
	// it stops; the streams it rebuilt stay rebuilt. Cancelling a
	// cancelled request changes nothing. Returns ErrNotFound for an unknown id and
	// ErrVersionConflict for a request that is done or failed.
	RebuildCancel(ctx context.Context, params *RebuildCancelParams) error

	// PerspectivesStatus returns the state of every perspective the
	// backend knows: those with a subscription, a cursor, a pending work
	// row or a dead letter waiting (DeadLetterDead), and the retired ones,
	// ordered by
	// name (byte order). See PerspectiveStatus for each figure. The
	// figures of one call come from one consistent snapshot; it changes
	// nothing. Its cost grows with the cursors and the pending work rows
	// (one pass over each on PostgreSQL, in a single statement), never
	// with a round trip per stream: it serves an operator's status
	// command or page, not a metric scraped every few seconds (see Stats).
	PerspectivesStatus(ctx context.Context, params *PerspectivesStatusParams) ([]PerspectiveStatus, error)
}

// PerspectivesStatusParams are the inputs of PerspectivesStatus.
type PerspectivesStatusParams struct {
	// Now is the time ages and retry times are measured at: when set,
	// else the backend's own clock.
	Now time.Time
}

// PerspectiveStatus is the state of one perspective across its streams. A
// pair is one (stream, perspective).
type PerspectiveStatus struct {
	Perspective string
	// Retired is set for a retired perspective (see Admin.PerspectiveRetire).
	Retired bool
	// EventTypes are the event types it is subscribed to, sorted; none for
	// a retired perspective, or one known only by its state.
	EventTypes []string
	// Streams counts its cursors: the streams it has applied, or begun to
	// (a rewind's lock creates one too).
	Streams int64
	// CaughtUp counts the cursors whose pair has no pending work row.
	CaughtUp int64
	// PendingStreams counts the pairs with pending work rows, whether or
	// not they have a cursor yet: the streams it is behind on.
	PendingStreams int64
	// Failed counts the cursors that record a failure
	// (CursorFailed): the latest outcome reported for the pair was a failed
	// apply, whose event waits for its retry or was moved to dead letters
	// since. The flag clears with the pair's next completion.
	Failed int64
	// AwaitingRetry counts the pending work rows whose retry time is after
	// Now: events whose apply failed, each holding back the later rows of
	// its pair until then.
	AwaitingRetry int64
	// RewindRequired counts the cursors flagged CursorRewindRequired: pairs
	// waiting for a rewind to apply a late event in order.
	RewindRequired int64
	// Pending and OldestAge are its backlog as Stats.PerspectivesLag
	// reports it: the pending work rows, and how long the oldest has
	// waited at Now (zero when none is pending).
	Pending   int64
	OldestAge time.Duration
	// DeadLetters counts its dead letters waiting for a requeue
	// (DeadLetterDead); requeued, recovered and ignored ones do not count.
	DeadLetters int64
}

// PerspectiveRetireParams are the inputs of PerspectiveRetire.
type PerspectiveRetireParams struct {
	Perspective string
	// DropState deletes the perspective's cursors, models and snapshots
	// too.
	DropState bool
}

// PerspectiveReviveParams are the inputs of PerspectiveRevive.
type PerspectiveReviveParams struct {
	Perspective string
}

// DeadLetterRequeueParams are the inputs of DeadLetterRequeue.
type DeadLetterRequeueParams struct {
	ID uuid.UUID
	// Generation is the deploy generation of the requeue ("" for none).
	Generation string
	Now        time.Time
}

// DeadLettersRequeueParams select the dead letters of DeadLettersRequeue.
type DeadLettersRequeueParams struct {
	// Perspective, when set, keeps the dead letters of that perspective
	// only. Required without IDs.
	Perspective string
	// IDs, when not empty, names the dead letters to requeue.
	IDs []uuid.UUID
	// Since, when set, keeps the dead letters last dead-lettered at or
	// after it.
	Since time.Time
	// Generation is the deploy generation of the requeue ("" for none).
	Generation string
	Now        time.Time
}

// Validate reports the first field every Admin rejects with
// ErrInvalidArgument: a nil id in IDs, or an empty Perspective without IDs.
func (p *DeadLettersRequeueParams) Validate() error {
	if err := checkIDs("DeadLettersRequeueParams.IDs", p.IDs); err != nil {
		return err
	}
	if len(p.IDs) == 0 && p.Perspective == "" {
		return invalidParam("DeadLettersRequeueParams.Perspective", "must not be empty without IDs")
	}
	return nil
}

// DeadLetterGetParams are the inputs of DeadLetterGet.
type DeadLetterGetParams struct {
	ID uuid.UUID
}

// DeadLetterIgnoreParams are the inputs of DeadLetterIgnore.
type DeadLetterIgnoreParams struct {
	ID  uuid.UUID
	Now time.Time
}

// LockReader is implemented by a backend whose rewind locks can be read:
// tests and tools use it, the engine never calls it. The conformance
// suite's rewind cases read the locks through it.
type LockReader interface {
	// StreamLocks returns the unexpired lock holder (see
	// RewindStore.StreamLockAcquire) of each pair of a stream, keyed by
	// perspective.
	StreamLocks(ctx context.Context, params *StreamLocksParams) (map[string]StreamLock, error)
}

// StreamLocksParams are the inputs of StreamLocks.
type StreamLocksParams struct {
	StreamID uuid.UUID
	Now      time.Time
}

// StreamLock is the holder of a (stream, perspective) lock.
type StreamLock struct {
	InstanceID uuid.UUID
	Reason     string
	Expiry     time.Time
}

// Validate reports the field every Admin rejects with ErrInvalidArgument:
// an empty Perspective.
func (p *PerspectiveRetireParams) Validate() error {
	return checkName("PerspectiveRetireParams.Perspective", p.Perspective)
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
