package rewind

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/modelstore"
	"github.com/vantage-go/vantage/core/internal/monitor"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/core/internal/perspective"
	"github.com/vantage-go/vantage/ports"
)

type replayResult struct {
	from     int64
	replayed int
	skipped  int // dead-lettered events left out, and a rebuild's late ones
	fresh    []ports.Event
}

// replayRun is the state of one replay: the model being rebuilt and the
// position it reached.
type replayRun struct {
	rw      *Rewinder
	p       perspective.Perspective
	key     pair.Key
	rows    []ports.WorkItem
	held    []uuid.UUID // rows applied before whose completion is on its way
	rebuild bool        // a rebuild's replay: it reports no completion
	stored  ports.StoredModel
	base    *ports.Snapshot // the snapshot the replay started from, if any
	// redelivered are the replayed events of pending rows that a save held
	// before the replay (see neverApplied): not new, but their
	// PostPerspective runs again when a crash interrupted it, as in a drain.
	redelivered []ports.Event
	model       any
	lastID      uuid.UUID
	lastVer     int64
	res         replayResult
}

// replay rebuilds the pair's model from the latest snapshot before trigger
// (0: from the start), through the newest of the pending rows or the stored
// position, leaving out the events dead-lettered for the pair (as their
// drain did), saves it and, for a rewind, completes rows (a rebuild, run by
// any instance, completes nothing: see complete). Each apply runs under the
// apply monitor; abandon takes over an abandoned one (replay then returns
// pair.ErrRunAbandoned). An event that fails to decode or apply stops it with a
// *replayFailure; any other error is the backend's.
func (rw *Rewinder) replay(ctx context.Context, p perspective.Perspective, key pair.Key, trigger int64, rows []ports.WorkItem, held []uuid.UUID, rebuild bool, abandon monitor.AbandonFunc) (replayResult, error) {
	run := &replayRun{rw: rw, p: p, key: key, rows: rows, held: held, rebuild: rebuild}
	if err := run.start(ctx, trigger); err != nil {
		return run.res, err
	}
	toReplay, toFire, err := run.events(ctx)
	if err != nil {
		return run.res, err
	}
	if err := run.apply(ctx, toReplay, toFire, abandon); err != nil {
		return run.res, err
	}
	if err := run.save(ctx, toReplay); err != nil {
		return run.res, err
	}
	run.keepBase(ctx)
	return run.res, run.complete(ctx)
}

// start loads what the replay starts from: the stored model's position and
// epoch (to save against), and the latest snapshot before trigger of that
// epoch when there is one, else the perspective's initial model. A snapshot
// of another epoch copies a model a rewind or a rebuild replaced (an
// instance may store one late, after a rebuild deleted the pair's
// snapshots), so it is passed over. Snapshots at or past the trigger are
// deleted: they no longer describe history.
func (r *replayRun) start(ctx context.Context, trigger int64) error {
	rw := r.rw
	// A rewind reads the store, not the cache: it starts from the truth.
	rw.store.Forget(r.key)
	var err error
	r.stored, err = rw.cfg.Models.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: r.key.Stream, Perspective: r.key.Perspective})
	if err != nil && !errors.Is(err, ports.ErrNotFound) {
		return fmt.Errorf("loading model: %w", err)
	}
	if err := r.fenceAtCursor(ctx); err != nil {
		return err
	}
	if r.model, err = r.p.DecodeModel(nil); err != nil {
		return err
	}
	snaps := rw.cfg.Snapshots
	if snaps == nil || trigger <= 0 || perspective.IsTable(r.p) {
		return nil // a projection replays from the start, after its reset
	}
	snap, err := snaps.SnapshotLatestBefore(ctx, &ports.SnapshotLatestBeforeParams{StreamID: r.key.Stream, Perspective: r.key.Perspective, Version: trigger, Epoch: r.stored.Epoch})
	switch {
	case err == nil:
		if r.model, err = r.p.DecodeModel(snap.Data); err != nil {
			return err
		}
		r.res.from, r.lastID, r.lastVer = snap.Version, snap.EventID, snap.Version
		r.base = &snap
	case !errors.Is(err, ports.ErrNotFound):
		return fmt.Errorf("loading snapshot: %w", err)
	}
	if _, err := snaps.SnapshotsDeleteFrom(ctx, &ports.SnapshotsDeleteFromParams{StreamID: r.key.Stream, Perspective: r.key.Perspective, Version: trigger}); err != nil {
		return fmt.Errorf("deleting stale snapshots: %w", err)
	}
	return nil
}

// fenceAtCursor moves the position the replay saves against, and replays
// up to, to the pair's cursor when the cursor is past the stored model: the
// save is fenced by the cursor, and a completion that outlived a
// retirement which dropped the pair's state brings the cursor back without
// its model (or past the one an apply in flight saved since). A replay
// from the model's position would be refused forever; from the cursor's,
// it rebuilds every event up to it and repairs the pair.
func (r *replayRun) fenceAtCursor(ctx context.Context) error {
	cs, err := r.rw.cfg.Cursors.CursorsGet(ctx, &ports.CursorsGetParams{StreamIDs: []uuid.UUID{r.key.Stream}, Perspective: r.key.Perspective})
	if err != nil {
		return fmt.Errorf("reading cursor: %w", err)
	}
	if len(cs) == 0 || cs[0].LastVersion < r.stored.LastVersion {
		return nil
	}
	c := cs[0]
	r.stored.LastEventID, r.stored.LastVersion, r.stored.Epoch = c.LastEventID, c.LastVersion, c.Epoch
	return nil
}

// events reads the stream from the replay's start and returns the events to
// replay (those the perspective handles, up to the newest pending row or the
// stored position, dead letters left out) and, among them, the ones never
// applied, whose stages fire (see neverApplied).
func (r *replayRun) events(ctx context.Context) (toReplay, toFire []ports.Event, err error) {
	skip, err := r.rw.deadLetteredEvents(ctx, r.key)
	if err != nil {
		return nil, nil, err
	}
	events, err := r.rw.cfg.Events.EventsReadStream(ctx, &ports.EventsReadStreamParams{StreamID: r.key.Stream, AfterVersion: r.res.from})
	if err != nil {
		return nil, nil, fmt.Errorf("reading stream: %w", err)
	}
	// Read after the stream: a row that is late by then and whose event the
	// replay read is left out with it.
	late, err := r.leaveLateOut(ctx, skip)
	if err != nil {
		return nil, nil, err
	}
	upTo := r.stored.LastVersion
	fresh := make(map[uuid.UUID]bool, len(r.rows))
	for _, row := range r.rows {
		upTo = max(upTo, row.EventVersion)
		fresh[row.EventID] = neverApplied(row, late[row.WorkID], r.stored.LastVersion)
	}
	handles := map[string]bool{}
	for _, t := range r.p.EventTypes() {
		handles[t] = true
	}
	for _, e := range events {
		if e.Version > upTo {
			break
		}
		if !handles[e.Type] {
			continue
		}
		if skip[e.ID] {
			r.res.skipped++
			continue
		}
		toReplay = append(toReplay, e)
		switch isFresh, pending := fresh[e.ID]; {
		case isFresh:
			toFire = append(toFire, e)
		case pending:
			r.redelivered = append(r.redelivered, e)
		}
	}
	return toReplay, toFire, nil
}

// leaveLateOut adds to skip the events of the pair's late rows that the
// replay does not complete: every one for a rebuild, which holds no
// stream; for a rewind, those that are neither among its rows nor held
// (held by another instance, behind a row waiting for its retry, or
// stored since the fetch). The rewind that completes them applies them
// (or, with rewinds off, their rows are dead-lettered); applied here,
// they would be in the model while their rows wait, and that rewind would
// apply them again as new, running their stages after their first apply,
// or the move to dead letters would name an event the model holds. It
// returns the work ids of the pair's late rows.
func (r *replayRun) leaveLateOut(ctx context.Context, skip map[uuid.UUID]bool) (map[uuid.UUID]bool, error) {
	late, err := r.rw.cfg.Rewind.WorkLate(ctx, &ports.WorkLateParams{StreamID: r.key.Stream, Perspective: r.key.Perspective})
	if err != nil {
		return nil, fmt.Errorf("listing late rows: %w", err)
	}
	if len(late) == 0 {
		return nil, nil
	}
	inHand := make(map[uuid.UUID]bool, len(r.rows)+len(r.held))
	for _, row := range r.rows {
		inHand[row.WorkID] = true
	}
	for _, id := range r.held {
		inHand[id] = true
	}
	ids := make(map[uuid.UUID]bool, len(late))
	for _, row := range late {
		ids[row.WorkID] = true
		if !inHand[row.WorkID] {
			skip[row.EventID] = true
		}
	}
	return ids, nil
}

// neverApplied reports whether the event of a pending row was never
// applied by the pair whose stored model is at position: a row above it,
// or a row below it that is still late (stored below the cursor, or found
// straggling there), unless a failed replay stored it for an event the
// model held (ports.WorkItem.Replay). stillLate is whether the backend
// lists the row as late now, read after the model: a row handed over late
// whose flag is off since was applied by a save that took it off (another
// rewind's, or a drain's). Any other row at or below the position is one
// whose event a save already holds: its completion was lost with the
// instance that applied it, or is still on its way.
func neverApplied(row ports.WorkItem, stillLate bool, position int64) bool {
	return !row.Replay && (row.Late && stillLate || row.EventVersion > position)
}

// apply runs the PrePerspective stage of the pending events, and of the
// other events to replay that no perspective applied yet (see
// stage.Lifecycle.FirstApplies), then applies every event to replay in order
// under the apply monitor, taking snapshots on the way.
func (r *replayRun) apply(ctx context.Context, toReplay, toFire []ports.Event, abandon monitor.AbandonFunc) error {
	rw := r.rw
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watch := rw.monitor.Watch(r.key.Stream, r.key.Perspective, cancel, abandon)
	defer watch.Done()
	pre, err := rw.lifecycle.FirstApplies(actx, toReplay, toFire)
	if err != nil {
		return err
	}
	if err := rw.lifecycle.PrePerspective(actx, pre); err != nil {
		return err
	}
	fresh := make(map[uuid.UUID]bool, len(toFire))
	for _, e := range toFire {
		fresh[e.ID] = true
	}
	prevVersion := r.res.from
	for _, e := range toReplay {
		decoded, _, err := rw.cfg.Registry.Decode(e)
		if err != nil {
			return &replayFailure{event: e, cause: err}
		}
		ectx, err := rw.cfg.Scope(actx, e)
		if err != nil {
			return &replayFailure{event: e, cause: err}
		}
		watch.Begin(e.ID, e.Version)
		next, err := r.p.Apply(ectx, r.model, e.Type, decoded)
		switch watch.End() {
		case monitor.AbandonedApply:
			return pair.ErrRunAbandoned
		case monitor.Late:
			err = context.Cause(actx)
		}
		if err != nil {
			return &replayFailure{event: e, cause: err}
		}
		r.model = next
		r.res.replayed++
		r.lastID, r.lastVer = e.ID, e.Version
		if fresh[e.ID] {
			r.res.fresh = append(r.res.fresh, e)
		}
		if err := r.snapshot(ctx, prevVersion, e); err != nil {
			return err
		}
		prevVersion = e.Version
	}
	return nil
}

// snapshot saves a snapshot of the model after e when the replay crossed a
// multiple of SnapshotEvery since version prev, at the epoch the replay's
// save moves the pair to: it copies the replayed model, not the one the
// pair holds until then.
func (r *replayRun) snapshot(ctx context.Context, prev int64, e ports.Event) error {
	snaps := r.rw.cfg.Snapshots
	if snaps == nil || !r.rw.snapshotDue(prev, e.Version) || perspective.IsTable(r.p) {
		return nil
	}
	data, err := r.p.EncodeModel(r.model)
	if err != nil {
		return &replayFailure{event: e, cause: err}
	}
	if err := snaps.SnapshotSave(ctx, &ports.SnapshotSaveParams{Snapshot: ports.Snapshot{
		StreamID: r.key.Stream, Perspective: r.key.Perspective, Version: e.Version, EventID: e.ID,
		Epoch: r.epoch(), Data: data, CreatedAt: r.rw.Now(),
	}}); err != nil {
		return fmt.Errorf("saving snapshot: %w", err)
	}
	return nil
}

// keepBase stores the snapshot the replay started from again, at the epoch
// its save moved the pair to: the saved model is built on it, so it
// describes that epoch's history too. The replay's own snapshots lie above
// it; without it, the next rewind of an event below them would replay from
// the start. A failure only costs such a longer replay, so it is logged.
func (r *replayRun) keepBase(ctx context.Context) {
	if r.base == nil {
		return
	}
	kept := *r.base
	kept.Epoch = r.epoch()
	r.rw.storeSnapshot(ctx, kept)
}

// epoch returns the epoch the replay's save moves the pair to (see save).
func (r *replayRun) epoch() int64 {
	return r.stored.Epoch + 1
}

// save stores the rebuilt model against the position and epoch it was
// loaded at, moving the pair to the next epoch: the model it replaces, and
// every copy of it (another instance's cached model, an apply in flight
// there), can no longer be saved over it. When the pair moved since the
// load, it returns an error wrapping ports.ErrVersionConflict.
func (r *replayRun) save(ctx context.Context, toReplay []ports.Event) error {
	if p, ok := r.p.(perspective.Table); ok {
		return r.saveProjection(ctx, p, toReplay)
	}
	data, err := r.p.EncodeModel(r.model)
	if err != nil {
		if len(toReplay) > 0 {
			return &replayFailure{event: toReplay[len(toReplay)-1], cause: err}
		}
		return err
	}
	if r.lastVer < r.stored.LastVersion {
		// Nothing the perspective handles up to its position: keep it.
		r.lastID, r.lastVer = r.stored.LastEventID, r.stored.LastVersion
	}
	if err := r.rw.store.Save(ctx, &ports.ModelSaveParams{
		StreamID: r.key.Stream, Perspective: r.key.Perspective, Data: data,
		LastEventID: r.lastID, LastVersion: r.lastVer, ExpectedVersion: r.stored.LastVersion,
		ExpectedEpoch: r.stored.Epoch, Rebase: true, AppliedLate: r.appliedLate(toReplay), Now: r.rw.ParamNow(),
	}); err != nil {
		return fmt.Errorf("saving rewound model: %w", err)
	}
	return nil
}

// appliedLate returns the versions of the late rows whose events the
// replay applied: its save takes their late flag off, so that, should its
// completion be refused (the stream moved to another instance) or still
// be on its way when a rebuild or the next holder reads them, they are
// taken for what they are, rows of events the model holds, never for
// events a rewind has yet to apply.
func (r *replayRun) appliedLate(toReplay []ports.Event) []int64 {
	if r.rebuild {
		return nil
	}
	replayed := make(map[uuid.UUID]bool, len(toReplay))
	for _, e := range toReplay {
		replayed[e.ID] = true
	}
	var out []int64
	for _, row := range r.rows {
		if row.Late && replayed[row.EventID] {
			out = append(out, row.EventVersion)
		}
	}
	return out
}

// complete runs the PostPerspective stage of the pending events and
// reports the replayed rows complete (clearing the pair's rewind flag). A
// rebuild reports nothing: it saved the model at the position it had, so
// there is nothing to move; the rows pending at or below that position
// are the holder's, applied and saved with their completion on its way
// (the rebuilt model holds their events too), and a completion of the
// rebuild's would take them for stragglers never applied. A rewind flag
// is left to the holder's rewind.
func (r *replayRun) complete(ctx context.Context) error {
	rw := r.rw
	if r.rebuild {
		rw.completer.SignalProgress()
		return nil
	}
	// The stage is recorded done before the rows are: a completion that
	// landed first, this instance dying before the stage ran, would leave
	// no row to run it again. A claim that fails holds the report back, as
	// a drain's does; when ctx ends first, nothing is reported, and the
	// pair's rewind runs again.
	fired := r.res.fresh
	if len(r.redelivered) > 0 && rw.cfg.StagesRecorded {
		fired = append(slices.Clone(fired), r.redelivered...)
	}
	if err := rw.lifecycle.PostPerspective(ctx, r.key.Perspective, fired); err != nil {
		return fmt.Errorf("running PostPerspective: %w", err)
	}
	ids := make([]uuid.UUID, 0, len(r.rows)+len(r.held))
	var listed []ports.WorkItem
	for _, row := range r.rows {
		if row.EventVersion <= r.lastVer {
			ids = append(ids, row.WorkID)
			listed = append(listed, row)
		}
	}
	// Replayed rows must not be suppressed by the dedup cache later.
	rw.cache.RemoveRange(r.key.Dedup(), ids)
	rw.cache.AddRange(r.key.Dedup(), ids)
	// The held rows are applied (their save is at or below the position
	// the replay started from): listed, the completion takes none of them
	// for a straggler, and deletes them if its own is lost. They stay out
	// of the dedup cache: they may be another instance's, or left by one
	// that died, and a drain of this instance that leases them must see
	// them to complete them.
	ids = append(ids, r.held...)
	if len(ids) > 0 {
		// Named no further than the rows listed (see pair.ReportPosition):
		// the save moved the cursor to the replay's position, and the rows
		// pending between the two, which the fetch left for the next one,
		// are re-deliveries of events the model holds, not stragglers.
		lastID, lastVer := pair.ReportPosition(r.lastID, r.lastVer, listed)
		rw.completer.ReportCompletion(ctx, ports.Completion{StreamID: r.key.Stream, Perspective: r.key.Perspective, LastEventID: lastID, LastVersion: lastVer, WorkIDs: ids})
	} else {
		// Nothing pending here: clear the flag directly. The save moved
		// the cursor already; a completion that named the position would
		// take the rows pending below it for stragglers, and those this
		// instance does not hold are rows whose events the saved model
		// holds (their late flag taken off by a rewind's save) or late
		// rows that stay late whatever the flag.
		clear := ports.Completion{StreamID: r.key.Stream, Perspective: r.key.Perspective}
		if _, err := rw.cfg.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{InstanceID: rw.cfg.InstanceID, Completions: []ports.Completion{clear}, DebugMode: rw.cfg.DebugMode, Now: rw.ParamNow()}); err != nil {
			return fmt.Errorf("clearing the rewind flag: %w", err)
		}
	}
	rw.completer.SignalProgress()
	return nil
}

// deadLetteredEvents returns the events of a pair that are dead-lettered
// (waiting or ignored): a replay leaves them out, as their drain did. A
// requeued one is pending again and is replayed.
func (rw *Rewinder) deadLetteredEvents(ctx context.Context, key pair.Key) (map[uuid.UUID]bool, error) {
	dls, err := rw.cfg.DeadLetters.DeadLettersList(ctx, &ports.DeadLettersListParams{StreamID: key.Stream, Perspective: key.Perspective})
	if err != nil {
		return nil, fmt.Errorf("listing dead letters: %w", err)
	}
	skip := map[uuid.UUID]bool{}
	for _, dl := range dls {
		if dl.Status == ports.DeadLetterDead || dl.Status == ports.DeadLetterIgnored {
			skip[dl.EventID] = true
		}
	}
	return skip, nil
}

// MaybeSnapshot stores a snapshot when a save moved the model across a
// multiple of SnapshotEvery stream versions, with the epoch the model was
// saved at: should a rewind or a rebuild replace the model before the
// snapshot is stored, the replay passes it over. A failed snapshot only
// costs a longer replay later, so it is logged, not returned.
func (rw *Rewinder) MaybeSnapshot(ctx context.Context, key pair.Key, from int64, last ports.Event, epoch int64, data []byte) {
	if rw.cfg.Snapshots == nil || !rw.snapshotDue(from, last.Version) {
		return
	}
	rw.storeSnapshot(ctx, ports.Snapshot{
		StreamID: key.Stream, Perspective: key.Perspective, Version: last.Version, EventID: last.ID,
		Epoch: epoch, Data: data, CreatedAt: rw.Now(),
	})
}

// storeSnapshot saves s, logging a failure: a missing snapshot only costs
// a longer replay later.
func (rw *Rewinder) storeSnapshot(ctx context.Context, s ports.Snapshot) {
	if err := rw.cfg.Snapshots.SnapshotSave(ctx, &ports.SnapshotSaveParams{Snapshot: s}); err != nil {
		if ctx.Err() == nil {
			rw.Faults.Fail(ctx, "saving snapshots", err, pair.Attrs(s.StreamID, s.Perspective)...)
		}
		return
	}
	rw.Faults.OK(ctx, "saving snapshots")
}

// snapshotDue reports whether a model moving from version from to version
// to crossed a multiple of SnapshotEvery.
func (rw *Rewinder) snapshotDue(from, to int64) bool {
	every := int64(rw.cfg.SnapshotEvery)
	return every > 0 && to/every > from/every
}

// saveProjection is replayRun.save for a table projection: one transaction
// moves the cursor, resets the stream's rows and runs the writes of every
// replayed event, so the tables end as a clean replay leaves them or
// unchanged. A failed write is a *replayFailure of its event. A failed
// reset is one too, of the earliest pending event (the late one that
// triggered a rewind), or of the first replayed event for a rebuild: the
// projection's code failed, not the backend, so it must not be retried
// forever; the event is retried, then dead-lettered, with the reset's
// error. A write or reset the backend failed (modelstore.BackendFailedWrite) is the
// backend's error, charged to no event. The save goes alone, never shared
// with those of other pairs: its writes are the reset and every event of
// the stream, whose time grows with the stream, so no patience fit for a
// drain's save applies to them (see modelstore.GroupPatience).
func (r *replayRun) saveProjection(ctx context.Context, p perspective.Table, toReplay []ports.Event) error {
	pending := r.model.(perspective.Writes)
	if r.lastVer < r.stored.LastVersion {
		r.lastID, r.lastVer = r.stored.LastEventID, r.stored.LastVersion
	}
	err := r.rw.store.SaveTx(ctx, true, &ports.ModelSaveTxParams{
		Apply: p.Writes(pending, r.key.Stream, true, r.rw.cfg.WriteLimit),
		Save: ports.ModelSaveParams{
			StreamID: r.key.Stream, Perspective: r.key.Perspective, Data: perspective.TableData,
			LastEventID: r.lastID, LastVersion: r.lastVer, ExpectedVersion: r.stored.LastVersion,
			ExpectedEpoch: r.stored.Epoch, Rebase: true, AppliedLate: r.appliedLate(toReplay), Now: r.rw.ParamNow(),
		},
	})
	var wf *modelstore.WriteFailure
	if errors.As(err, &wf) && wf.Key == r.key && !modelstore.BackendFailedWrite(err) {
		switch {
		case wf.Index >= 0 && wf.Index < len(toReplay):
			return &replayFailure{event: toReplay[wf.Index], cause: wf.Cause}
		case wf.Index < 0 && len(r.rows) > 0:
			first := slices.MinFunc(r.rows, func(a, b ports.WorkItem) int { return cmp.Compare(a.EventVersion, b.EventVersion) })
			return &replayFailure{event: ports.Event{ID: first.EventID, StreamID: first.StreamID, Version: first.EventVersion}, cause: wf.Cause}
		case wf.Index < 0 && len(toReplay) > 0:
			return &replayFailure{event: toReplay[0], cause: wf.Cause}
		}
	}
	if err != nil {
		return fmt.Errorf("saving rewound projection: %w", err)
	}
	return nil
}
