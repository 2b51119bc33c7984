package ports

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// WorkClaimer coordinates instances: heartbeats, stale-instance abandonment,
// claiming work per stream, lease renewal and graceful deregistration.
//
// Liveness: an instance is live while its last heartbeat is newer than
// Now - StaleThreshold. Stream affinity: a stream is pinned to at most one
// live instance at a time; claims never take a stream pinned to a live other.
//
// Attempts: a work row's Attempts count the applies of it that failed
// (recorded by CursorStore.WorkFail) and the times it was taken over from a
// dead instance: released by the abandonment of its holder, or leased from
// another instance's expired lease. Leasing an unleased row, re-leasing the
// caller's own rows (its lease expired or not) and renewing leases never
// count, so a live instance that is slow, or whose database was briefly
// unreachable, costs its events nothing.
type WorkClaimer interface {
	// InstanceHeartbeat upserts the caller's instance row and refreshes its
	// heartbeat. Instances whose heartbeat is older than Now-StaleThreshold
	// are abandoned in the same call: their rows are deleted, every lease
	// they hold is released (one attempt more on each released row: a
	// takeover from a dead instance) and their stream pins are cleared, so
	// others can claim the work at once. It returns the abandoned instance
	// ids.
	//
	// Only a caller that was live itself before the call abandons others:
	// one whose previous heartbeat is newer than Now-StaleThreshold. A new
	// instance, or one returning from an outage that silenced every
	// instance (the database was unreachable for longer than the
	// threshold), first re-registers (Rejoined is set and nothing is
	// abandoned), so that peers silenced by the same outage get a heartbeat
	// interval to re-register too, instead of being abandoned with all
	// their work.
	//
	// In the same call it reports NextStaleAt, when the next other instance
	// goes stale if it never heartbeats again: the earliest LastHeartbeatAt +
	// StaleThreshold among the other instances the call left recorded (the
	// live ones, and any whose heartbeat is exactly Now - StaleThreshold: no
	// longer live, not yet abandoned), zero when there is none. Instances a
	// rejoining caller left stale do not count: their deadline passed, and a
	// heartbeat aimed at it would abandon the peers the rejoin waits for.
	// The caller's own heartbeat never counts. It is on the clock of the
	// staleness check (Now when set, else the backend's own), so a
	// heartbeat with a Now after NextStaleAt abandons that instance unless
	// it heartbeats first; callers use it to heartbeat as soon as a peer
	// goes stale rather than at their next interval.
	//
	// Idempotent; safe to call concurrently from many instances, which then
	// abandon a stale instance once between them, without deadlocking
	// whatever the number of survivors.
	InstanceHeartbeat(ctx context.Context, params *InstanceHeartbeatParams) (*InstanceHeartbeatResult, error)

	// InstanceDeregister releases every lease and stream pin of the instance
	// and deletes its row (graceful shutdown). Deregistering an unknown
	// instance is a no-op. The released rows gain no attempt. A claim or
	// fetch of the instance still running on the backend may lease rows
	// after it: call it once those returned.
	InstanceDeregister(ctx context.Context, instanceID uuid.UUID) error

	// InstancesList returns the recorded instances ordered by id.
	InstancesList(ctx context.Context) ([]Instance, error)

	// WorkClaim leases work to the caller and returns the streams it should
	// drain. Returns ErrInstanceNotAlive if the caller has no live heartbeat.
	//
	// A pending row is a candidate when it is unleased or its lease expired,
	// it is not scheduled in the future, its stream is pinned to the caller
	// or (unpinned, or pinned to a dead instance, and the stream's partition
	// modulo the live-instance count equals the caller's rank among live
	// instances ordered by id), and no earlier row (lower version) of the
	// same (stream, perspective) is under another holder's live lease or
	// scheduled in the future (the ordering guard). Candidate streams are
	// selected within the MaxStreams bound below, every candidate row of a
	// selected stream is leased to the caller, and the stream is pinned to
	// the caller. Streams come back smallest backlog first (an adapter may
	// count a backlog only up to a cap and order those past it as equal).
	// A row leased from another instance's expired lease gains an attempt;
	// no other row does (see Attempts above).
	//
	// The result lists every stream the caller can drain now (some
	// perspective's first pending row is under the caller's live lease), at
	// most MaxStreams; the same stream is returned on every call until its
	// rows complete (unless its first rows wait behind a row scheduled in
	// the future, or the result is cut at MaxStreams). New streams are
	// leased only while the result stays
	// within MaxStreams, so no lease ticks on a stream nobody drains.
	// HasMore is true when candidate streams were left out or the result was
	// cut at MaxStreams.
	WorkClaim(ctx context.Context, params *WorkClaimParams) (*WorkClaimResult, error)

	// WorkRenewLeases extends the leases of the listed rows that are pending
	// and still held by the caller (fenced) to Now+LeaseDuration, whether or
	// not their lease expired meanwhile (nobody took them over); attempts do
	// not change. It returns how many it renewed.
	WorkRenewLeases(ctx context.Context, params *WorkRenewLeasesParams) (int, error)
}

// InstanceHeartbeatParams are the inputs of InstanceHeartbeat.
type InstanceHeartbeatParams struct {
	InstanceID     uuid.UUID
	ServiceName    string
	HostName       string
	ProcessID      int
	Metadata       map[string]string
	StaleThreshold time.Duration
	Now            time.Time
}

// InstanceHeartbeatResult is the output of InstanceHeartbeat.
type InstanceHeartbeatResult struct {
	// Abandoned lists the stale instances removed by this call.
	Abandoned []uuid.UUID
	// Rejoined is true when the caller was not live before this call (a new
	// instance, or one whose previous heartbeat had gone stale), so the
	// call abandoned nobody.
	Rejoined bool
	// NextStaleAt is when the next of the other remaining instances becomes
	// stale if it never heartbeats again: the earliest LastHeartbeatAt +
	// StaleThreshold among them, on the clock of the staleness check. Zero
	// when no other instance remains.
	NextStaleAt time.Time
}

// WorkClaimParams are the inputs of WorkClaim.
type WorkClaimParams struct {
	InstanceID     uuid.UUID
	MaxStreams     int
	PartitionCount int
	LeaseDuration  time.Duration
	StaleThreshold time.Duration
	Now            time.Time
}

// WorkClaimResult is the output of WorkClaim.
type WorkClaimResult struct {
	StreamIDs []uuid.UUID
	HasMore   bool
}

// WorkRenewLeasesParams are the inputs of WorkRenewLeases.
type WorkRenewLeasesParams struct {
	InstanceID    uuid.UUID
	WorkIDs       []uuid.UUID
	LeaseDuration time.Duration
	Now           time.Time
}

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

// CursorStore reads cursors and records the outcome of processing.
type CursorStore interface {
	// CursorsGet returns the cursors of the given streams, restricted to one
	// perspective when Perspective is set. Missing cursors are simply absent.
	CursorsGet(ctx context.Context, params *CursorsGetParams) ([]Cursor, error)

	// WorkComplete records completions in one atomic step. For every
	// completion it deletes exactly the listed work rows of that
	// (stream, perspective) that are pending and leased to the caller (in
	// DebugMode it keeps them, marked processed and unleased, invisible to
	// claims); it never touches rows of other perspectives. Then it upserts
	// each cursor from the payload: the position only moves forward, status
	// becomes Completed (Failed and the error are cleared), and
	// the rewind columns are cleared. A completed row that DeadLetterRequeue
	// stored marks its dead letter DeadLetterRecovered. Then, for each
	// cursor, the pending rows of the pair below the position this call
	// reports for it (stragglers) become Late and set RewindRequired with
	// the smallest such event as trigger. Rows below the stored cursor but
	// not below the reported position are rows applied earlier whose
	// completions are still on their way, not stragglers. All deletions of
	// the call happen before any cursor is examined. Finally streams of the
	// call with no pending rows are unpinned. Idempotent: completing missing rows is a
	// no-op and cursor writes are set-to-value.
	WorkComplete(ctx context.Context, params *WorkCompleteParams) (*WorkCompleteResult, error)

	// WorkFail records failures in one atomic step: applied rows complete as
	// in WorkComplete, the cursor advances to LastVersion (when set), gets the
	// Failed flag and the error text; failed rows still held by the caller
	// gain one attempt (an apply of theirs failed), keep the error, lose
	// their lease and are scheduled at RetryAt. A FailedEventID (a replay
	// failed on an event with no pending row of the pair) stores a pending
	// row for that event, unleased, with one attempt, the error and RetryAt
	// (or, when the pair has a pending row for it, adds the attempt to that
	// row as for a failed row, whoever holds it), and flags the cursor
	// RewindRequired when it is past the event, keeping an earlier trigger
	// (such a row is Late). When a failure moves the cursor past pending
	// rows, those become Late and flag the cursor as in WorkComplete.
	// Rewind flags are otherwise left as they are.
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

// Notifier carries wake-up hints. Notifications are best effort: polling is
// the correctness floor.
type Notifier interface {
	// NotifierListen subscribes to wake signals. The returned channel has a
	// buffer of one and coalesces bursts; it is closed once ctx is done.
	NotifierListen(ctx context.Context) (<-chan Wake, error)
	// NotifierPublish wakes every listener of this backend (service).
	NotifierPublish(ctx context.Context) error
	// NotifierHealthy reports whether notifications are currently delivered
	// (the engine relaxes its poll cadence only while true).
	NotifierHealthy() bool
}

// DeadLetterStore keeps the work rows the engine gave up on, with their
// cause, and brings them back: on an operator's request, or once per deploy
// generation for a retry on new code.
//
// A dead letter is DeadLetterDead while it waits; DeadLetterRequeued once
// its work row was stored again; DeadLetterRecovered once that row
// completed; DeadLetterIgnored when an operator gave up on it. A requeued
// row that the engine gives up on again turns its dead letter back to
// DeadLetterDead, with the new cause and generation, so "failed again on
// generation G" reads Generation == RequeueGeneration.
type DeadLetterStore interface {
	// DeadLetterMove atomically deletes a pending work row and records it as
	// a dead letter with status DeadLetterDead. When the row was stored by
	// DeadLetterRequeue, that dead letter is updated instead of a new one
	// recorded: same id, the new cause, attempts, instance, generation and
	// time. Attempts is the row's, or params.Attempts when that is larger;
	// an empty Error keeps the error the row recorded. It reports false,
	// with no error, when the row is already gone (idempotent under retry).
	DeadLetterMove(ctx context.Context, params *DeadLetterMoveParams) (DeadLetter, bool, error)
	// DeadLettersList returns dead letters, oldest first (by the time they
	// were last dead-lettered), filtered by the non-zero fields of params.
	DeadLettersList(ctx context.Context, params *DeadLettersListParams) ([]DeadLetter, error)
	// DeadLetterRequeue stores the dead letter's work row again, pending,
	// unleased, with zero attempts, under its original work id, and marks
	// the dead letter DeadLetterRequeued (counting the requeue and recording
	// params.Generation and the time); listeners are woken. If the pair's
	// cursor is already past the event, the row is Late and the cursor is
	// flagged RewindRequired, so that a rewind applies the event in order;
	// the row is Late too when a pending row of the pair above the event is
	// leased (see WorkItem.Late). Only a
	// DeadLetterDead or DeadLetterIgnored dead letter is requeued: it
	// returns ErrNotFound for an unknown id and ErrVersionConflict for one
	// that is requeued or recovered.
	DeadLetterRequeue(ctx context.Context, params *DeadLetterRequeueParams) error
	// DeadLetterIgnore marks a DeadLetterDead dead letter DeadLetterIgnored:
	// DeadLettersRecover never retries it (an explicit DeadLetterRequeue
	// still may). Idempotent. Returns ErrNotFound for an unknown id and
	// ErrVersionConflict for one that is requeued or recovered.
	DeadLetterIgnore(ctx context.Context, params *DeadLetterIgnoreParams) error
	// DeadLettersRecover requeues, as DeadLetterRequeue would, up to Limit
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
	// InstanceID is the instance that gave up on the row.
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

// DeadLettersListParams filter DeadLettersList.
type DeadLettersListParams struct {
	Perspective string
	StreamID    uuid.UUID
	// Status, when set, keeps the dead letters in that status only.
	Status DeadLetterStatus
	Limit  int
}

// DeadLetterRequeueParams are the inputs of DeadLetterRequeue.
type DeadLetterRequeueParams struct {
	ID uuid.UUID
	// Generation is the deploy generation of the requeue ("" for none).
	Generation string
	Now        time.Time
}

// DeadLetterIgnoreParams are the inputs of DeadLetterIgnore.
type DeadLetterIgnoreParams struct {
	ID  uuid.UUID
	Now time.Time
}

// DeadLettersRecoverParams are the inputs of DeadLettersRecover.
type DeadLettersRecoverParams struct {
	// Generation is the caller's deploy generation. Required.
	Generation string
	// Limit bounds the dead letters requeued by one call. Must be positive.
	Limit int
	Now   time.Time
}

// EventStore appends events and fans them out to perspectives.
type EventStore interface {
	// EventsAppend stores events in a stream and, atomically with them, one
	// pending unleased work row per perspective subscribed to each event's
	// type; after commit it publishes a wake notification.
	//
	// ExpectedVersion 0 skips the concurrency check, ExpectNoStream requires
	// an empty stream, and a positive value must equal the stream's current
	// version; otherwise ErrVersionConflict. Events without an explicit
	// Version get consecutive versions after the stream head; an explicit
	// version that is taken is ErrVersionConflict. A stored event below a
	// perspective's cursor flags that cursor RewindRequired and stores its
	// row Late; so does, without the flag, an event below a leased pending
	// row of the pair (see WorkItem.Late).
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
	// Subscriptions of a retired perspective (see AdminStore) are ignored.
	SubscriptionsRegister(ctx context.Context, subscriptions []Subscription) error
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
// that is not a JSON document. Adapters call it before they store anything.
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
		}
	}
	return nil
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

// ModelStore keeps each perspective's model per stream together with its
// cursor position, so a re-delivered event can never be applied twice to a
// stored model.
type ModelStore interface {
	// ModelLoad returns the stored model, or ErrNotFound.
	ModelLoad(ctx context.Context, streamID uuid.UUID, perspective string) (StoredModel, error)
	// ModelSave stores the model and moves the cursor to LastEventID and
	// LastVersion in one atomic step (creating the cursor with status
	// Processing when missing). ExpectedVersion is the cursor version the
	// caller loaded (0 for none); if the stored position differs it returns
	// ErrVersionConflict and stores nothing.
	ModelSave(ctx context.Context, params *ModelSaveParams) error
}

// ModelBatchStore is an optional extension of ModelStore: it loads and
// saves the models of many pairs in one round trip. When the Models port
// also implements it, the engine groups the loads and the saves of the pairs
// it drains concurrently into calls of these methods (one commit for many
// saves instead of one each).
type ModelBatchStore interface {
	// ModelLoadMany returns the stored models of the given pairs, in no
	// particular order; pairs without a stored model are absent from the
	// result. Duplicate pairs are returned once.
	ModelLoadMany(ctx context.Context, pairs []Pair) ([]StoredModel, error)
	// ModelSaveMany saves each entry exactly as ModelSave would, in order:
	// the result holds one error per entry (nil when saved; wrapping
	// ErrVersionConflict or ErrInvalidArgument when that entry stored
	// nothing, which does not affect the others). The successful saves are
	// committed together. A call error means nothing was stored.
	ModelSaveMany(ctx context.Context, params []*ModelSaveParams) ([]error, error)
}

// Pair names a perspective of a stream.
type Pair struct {
	StreamID    uuid.UUID
	Perspective string
}

// ModelSaveParams are the inputs of ModelSave.
type ModelSaveParams struct {
	StreamID        uuid.UUID
	Perspective     string
	Data            []byte
	LastEventID     uuid.UUID
	LastVersion     int64
	ExpectedVersion int64
	Now             time.Time
}

// AdminStore is the optional port of operator actions that change what the
// engine does. The engine never calls it; operator tools do.
type AdminStore interface {
	// PerspectiveRetire retires a perspective: its subscriptions are deleted
	// and later registrations of them are ignored, so appends stop creating
	// its work rows; its pending work rows are deleted; with DropState its
	// cursors, models and snapshots are deleted too. Safe while instances
	// run: their completions of deleted rows change nothing (an apply in
	// flight may still save its model once; retiring again drops it).
	// Idempotent. Returns ErrInvalidArgument for an empty perspective.
	PerspectiveRetire(ctx context.Context, params *PerspectiveRetireParams) (*RetireResult, error)
	// PerspectiveRevive undoes the retirement of a perspective: its
	// subscriptions may be registered again (the next Worker.Start, or
	// append through a registry that has it, registers them). Reviving a
	// perspective that is not retired is a no-op.
	PerspectiveRevive(ctx context.Context, perspective string) error
	// PerspectivesRetired lists the retired perspectives, sorted.
	PerspectivesRetired(ctx context.Context) ([]string, error)
}

// PerspectiveRetireParams are the inputs of PerspectiveRetire.
type PerspectiveRetireParams struct {
	Perspective string
	// DropState deletes the perspective's cursors, models and snapshots
	// too.
	DropState bool
}

// Backend bundles the ports one engine instance needs. Adapters return one
// from their Backend method. Lifecycle, Rewind, Snapshots and Admin are
// optional: the engine degrades gracefully without them (see their docs).
type Backend struct {
	Claimer     WorkClaimer
	Fetcher     EventFetcher
	Cursors     CursorStore
	Notifier    Notifier
	DeadLetters DeadLetterStore
	Events      EventStore
	Models      ModelStore
	Lifecycle   LifecycleStore
	Rewind      RewindStore
	Snapshots   SnapshotStore
	Admin       AdminStore
}

// Validate reports, by name, every port that is missing.
func (b Backend) Validate() error {
	var errs []error
	check := func(name string, missing bool) {
		if missing {
			errs = append(errs, fmt.Errorf("ports.Backend.%s is nil", name))
		}
	}
	check("Claimer", b.Claimer == nil)
	check("Fetcher", b.Fetcher == nil)
	check("Cursors", b.Cursors == nil)
	check("Notifier", b.Notifier == nil)
	check("DeadLetters", b.DeadLetters == nil)
	check("Events", b.Events == nil)
	check("Models", b.Models == nil)
	return errors.Join(errs...)
}
