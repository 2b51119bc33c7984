package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/failure"
	"github.com/vantage-go/vantage/core/internal/modelstore"
	"github.com/vantage-go/vantage/core/internal/monitor"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/core/internal/perspective"
	"github.com/vantage-go/vantage/core/internal/stage"
	"github.com/vantage-go/vantage/core/internal/telemetry"
	"github.com/vantage-go/vantage/ports"
)

// errModelBehindCursor is the error of a pair whose cursor is past its
// stored model: its state was lost, and only a rebuild repairs it.
var errModelBehindCursor = errors.New("model behind its cursor")

// drainPair runs one perspective over one stream's rows (version order)
// on the pair's turn (see pair.Parking.Enter): dedup, dead-letter rows
// whose attempts are used up, load the model (checked against the cursor
// the fetch read), skip events at or below its position, apply the rest,
// save model and cursor every PerspectiveBatchSize events and at the end,
// and buffer the completion (or the failure). The run hands the turn back
// with how it ended, which the pair's state records. It returns what it
// applied, and pair.ErrRunAbandoned when an apply was abandoned: the
// abandonment took the pair over, and the turn is left to it.
func (dr *Drainer) drainPair(ctx context.Context, task *pairTask, sw *streamWork, rows []ports.WorkItem, cursor *ports.Cursor) (pairOutcome, error) {
	turn, ok := dr.parking.Enter(ctx, pair.Key{Stream: sw.id, Perspective: rows[0].Perspective}, sw.seq)
	if !ok {
		return pairOutcome{}, nil
	}
	defer turn.Release()
	o, end, err := dr.runPair(ctx, turn, task, sw, rows, cursor)
	if err != nil {
		return o, err
	}
	turn.End(ctx, end)
	return o, nil
}

// runPair is drainPair on the pair's turn. It returns what the run applied
// and how it ended.
func (dr *Drainer) runPair(ctx context.Context, turn *pair.Turn, task *pairTask, sw *streamWork, rows []ports.WorkItem, cursor *ports.Cursor) (pairOutcome, pair.Ending, error) {
	key := turn.Key
	var (
		position, epoch int64
		flags           ports.Cursor
	)
	if cursor != nil {
		position, epoch, flags = cursor.LastVersion, cursor.Epoch, *cursor
	}
	flagged := dr.rewind.Enabled() && flags.Status.Has(ports.CursorRewindRequired)
	rows, held, err := dr.toApply(ctx, key, rows, position)
	if err != nil {
		return pairOutcome{}, dr.fail.MoveEnding(ctx, key, "moving work to dead letters", err), nil
	}
	// A flagged pair whose rows are all gone now (dead-lettered: their
	// attempts were used up) has nothing left for a rewind to apply, but
	// it would wait for one forever: no row is left to bring it back to a
	// drain. The rewind runs at once, without them, and clears the flag;
	// unless rows of the pair await their acknowledgement, which clears it.
	emptyRewind := len(rows) == 0 && flagged && len(held) == 0
	if len(rows) == 0 && !emptyRewind {
		return pairOutcome{}, pair.Stopped(), nil
	}

	p, ok := dr.cfg.Registry.Lookup(key.Perspective)
	if !ok {
		return pairOutcome{}, pair.UnknownPerspective(len(rows)), nil
	}
	// A late row below the position was never applied: only a rewind
	// applies it in order, whether or not the cursor still carries the flag.
	late := slices.ContainsFunc(rows, func(r ports.WorkItem) bool { return r.Late && r.EventVersion <= position })
	if dr.rewind.Enabled() && (late || flagged) {
		evs, end, err := dr.rewind.RewindPair(ctx, p, turn, rows, held, flags, emptyRewind, func() { task.abandon(0, nil) })
		return dr.newPairOutcome(len(evs), evs, func(i int) int64 { return evs[i].Version }), end, err
	}
	if late {
		if rows, err = dr.fail.DeadLetterLate(ctx, rows, position); err != nil {
			return pairOutcome{}, dr.fail.MoveEnding(ctx, key, "moving late work to dead letters", err), nil
		}
		if len(rows) == 0 {
			return pairOutcome{}, pair.Stopped(), nil
		}
	}
	stored, err := dr.store.Load(ctx, key, position, epoch)
	if err != nil && !errors.Is(err, ports.ErrNotFound) {
		return pairOutcome{}, pair.InfraFailed("loading model", err), nil
	}
	if stored.LastVersion < position {
		// Every save moves the model and the cursor together, and a
		// completion moves the cursor to a position a save reached: a
		// cursor past the model means the model was dropped under it
		// (a perspective retired with its state while a completion was
		// on its way). Applying to the model the store holds would be
		// refused forever. With rewinds, the pair is replayed as a rewind
		// does, from the start up to its newest pending row: the events
		// the cursor passed and those whose rows the retirement deleted
		// are applied in order, before the pending ones. Without, the
		// pair waits for a rebuild.
		if dr.rewind.Enabled() {
			// From the first event: a snapshot may copy the dropped state.
			flags.RewindTriggerVersion = 1
			evs, end, err := dr.rewind.RewindPair(ctx, p, turn, rows, held, flags, true, func() { task.abandon(0, nil) })
			return dr.newPairOutcome(len(evs), evs, func(i int) int64 { return evs[i].Version }), end, err
		}
		return pairOutcome{}, pair.InfraFailed("loading model", fmt.Errorf("%w: the stored model is at version %d, its cursor at %d; rebuild the perspective",
			errModelBehindCursor, stored.LastVersion, position)), nil
	}
	if stored.LastVersion > position && slices.ContainsFunc(rows, func(r ports.WorkItem) bool { return r.Late && r.EventVersion <= stored.LastVersion }) {
		// The model moved past the cursor the fetch read (a save since),
		// and past a late row: that row was never applied, though the
		// run would take it for a re-delivery at or below the model. A
		// drain that reads the cursor as it is now sends it down the late
		// path.
		return pairOutcome{}, pair.Again(), nil
	}
	model, err := p.DecodeModel(stored.Data)
	if err != nil {
		return pairOutcome{}, pair.InfraFailed("decoding the stored model", err), nil
	}

	actx, cancel := context.WithCancelCause(ctx)
	batchSize := turn.BatchSize
	run := &pairRun{
		dr: dr, p: p, key: key, task: task, sw: sw, rows: rows, stored: stored, model: model,
		parent: ctx, actx: actx, cancel: cancel, turn: turn, batchSize: batchSize,
		attrs: dr.cfg.Metrics.Perspective(key.Perspective), traced: telemetry.Recording(ctx),
		// Sized for the usual run, which applies and completes every row,
		// so that they are not grown row by row.
		done:    make([]uuid.UUID, 0, len(rows)),
		unsaved: make([]int, 0, min(len(rows), batchSize)),
		saved:   make([]int, 0, len(rows)),
		held:    dr.completer.StalledAmong(key.Dedup(), held),
	}
	defer func() { run.cancel(nil) }()
	run.watch = dr.monitor.Watch(key.Stream, key.Perspective, cancel, run.abandon)
	defer run.watch.Done()
	if err := dr.prePerspective(actx, sw, rows, stored.LastVersion); err != nil {
		return pairOutcome{}, pair.InfraFailed("running PrePerspective", err), nil
	}
	if err := run.run(ctx); err != nil {
		return pairOutcome{}, pair.Stopped(), err
	}
	n, events := run.finish(ctx)
	return dr.newPairOutcome(n, events, func(i int) int64 { return run.rows[run.saved[i]].EventVersion }), run.end, nil
}

// toApply returns the rows of a pair to apply now, and the ids of the rows
// it skipped because an earlier batch applied them: those come back on
// every fetch until their completion is acknowledged. Rows whose attempts
// are used up go to dead letters, unless they lie at or below position,
// the pair's cursor, and are not late (applied: they complete); when that
// move fails, nothing is applied and its error is returned (see
// failure.Failures.MoveEnding).
func (dr *Drainer) toApply(ctx context.Context, key pair.Key, rows []ports.WorkItem, position int64) (_ []ports.WorkItem, held []uuid.UUID, _ error) {
	fresh, held := dr.fetcher.NotApplied(ctx, key, rows)
	rows, err := dr.fail.DeadLetterExhausted(ctx, fresh, position)
	if err != nil {
		return nil, nil, err
	}
	return rows, held, nil
}

// prePerspective runs the PrePerspective stage for the rows' events past
// the stored position, when any receptor listens.
func (dr *Drainer) prePerspective(ctx context.Context, sw *streamWork, rows []ports.WorkItem, position int64) error {
	if !dr.cfg.Registry.HasReceptors(stage.PrePerspective) {
		return nil
	}
	var events []ports.Event
	for _, r := range rows {
		if i := sw.event(r, 0); i >= 0 && r.EventVersion > position {
			events = append(events, sw.events[i])
		}
	}
	return dr.lifecycle.PrePerspective(ctx, events)
}

// pairRun is the state of one drainPair. Its rows are in version order and
// processed front to back.
type pairRun struct {
	dr     *Drainer
	p      perspective.Perspective
	key    pair.Key
	task   *pairTask
	sw     *streamWork
	rows   []ports.WorkItem
	stored ports.StoredModel
	model  any
	parent context.Context
	actx   context.Context // the applies' context, cancelled at a deadline
	cancel context.CancelCauseFunc
	watch  *monitor.Watch
	turn   *pair.Turn // the run's hold on the pair
	// end is how the run ended, for the pair's state (see pair.Turn.End).
	end pair.Ending
	// attrs are the perspective's metric attributes; traced is whether
	// the batch's span records, so that the applies' spans are started.
	attrs  *telemetry.PerspectiveAttrs
	traced bool
	// batchSize is how many applied events a save may cover.
	batchSize int

	last      *ports.Event // last applied event
	lastSaved *ports.Event // last saved event, nil until a save
	// done are the rows that complete: those at or below the stored
	// position and those applied and saved. unsaved are applied rows not
	// saved yet, saved the rows this run applied and saved (indexes in
	// rows).
	done    []uuid.UUID
	unsaved []int
	saved   []int
	// redelivered are the rows at or below the stored position (indexes in
	// rows): applied and saved before, their completion lost (a crash).
	redelivered []int
	// evs are the events of the first evsOf saved rows (see eventsSaved);
	// posted counts those whose PostPerspective ran (see postPerspective);
	// redeliveredPosted tells whether the re-delivered rows' did.
	evs               []ports.Event
	evsOf             int
	posted            int
	redeliveredPosted bool
	// held are the rows the processed-event cache passed over (applied
	// and saved by earlier runs of this instance) whose report failed and
	// waits to be sent again. The run's first report lists them as applied
	// (see applied).
	held []uuid.UUID
}

// run applies the rows. It returns pair.ErrRunAbandoned when an apply was
// abandoned; every other outcome (completion, failure, retry) is recorded
// on the run and reported by it.
func (r *pairRun) run(ctx context.Context) error {
	ei := 0
	for i, row := range r.rows {
		if row.EventVersion <= r.stored.LastVersion {
			// Already reflected in the stored model (a re-delivery after a
			// crash or a lost completion): complete without applying. Rows
			// are in version order, so these are a prefix.
			r.done = append(r.done, row.WorkID)
			r.redelivered = append(r.redelivered, i)
			continue
		}
		if ei = r.sw.event(row, ei); ei < 0 {
			r.stop(ctx)
			r.end = pair.InfraFailed("fetching events", fmt.Errorf("event %s (version %d) of work row %s is missing from the fetch", row.EventID, row.EventVersion, row.WorkID))
			return nil
		}
		err := r.apply(ei)
		if errors.Is(err, pair.ErrRunAbandoned) {
			return err
		}
		if err != nil {
			if ctx.Err() != nil {
				r.stop(ctx) // shutting down: the rows stay leased and are re-delivered
				return nil
			}
			if !r.failAt(ctx, i, err) {
				return nil
			}
			// Dead-lettered: the pair goes on with the next event, under a
			// fresh context if a deadline cancelled this one.
			if r.actx.Err() != nil {
				r.cancel(nil)
				r.actx, r.cancel = context.WithCancelCause(r.parent)
				r.watch.SetCancel(r.cancel)
			}
			continue
		}
		r.unsaved = append(r.unsaved, i)
		if len(r.unsaved) >= r.batchSize && !r.save(ctx) {
			return nil
		}
	}
	if len(r.unsaved) > 0 && !r.save(ctx) {
		return nil
	}
	r.complete(ctx)
	r.end = pair.Done()
	return nil
}

// apply applies sw.events[i], the event of the next row, under the apply
// monitor and in a span of its own. It returns pair.ErrRunAbandoned when the
// apply was abandoned.
func (r *pairRun) apply(i int) error {
	if !r.traced {
		return r.applyIn(r.actx, i)
	}
	ctx, span := r.dr.cfg.Tracing.StartApply(r.actx, r.key.Perspective, &r.sw.events[i])
	err := r.applyIn(ctx, i)
	telemetry.EndApply(span, err)
	return err
}

// applyIn is apply under ctx, the applies' context with the apply's span.
func (r *pairRun) applyIn(ctx context.Context, i int) error {
	ev := &r.sw.events[i]
	decoded, err := r.sw.decode(r.dr.cfg.Registry, i)
	if err != nil {
		return err
	}
	actx, err := r.dr.cfg.ApplyContext(ctx, ev)
	if err != nil {
		return err
	}
	started := r.watch.Begin(ev.ID, ev.Version)
	measured := r.dr.cfg.Metrics.SampleApply(r.attrs, started)
	next, err := r.p.Apply(actx, r.model, ev.Type, decoded)
	if measured {
		// ctx holds the apply's span for an exemplar, without the layers
		// the apply's own context adds.
		r.dr.cfg.Metrics.ApplyTook(ctx, r.attrs, started)
	}
	switch r.watch.End() {
	case monitor.AbandonedApply:
		return pair.ErrRunAbandoned
	case monitor.Late:
		return context.Cause(r.actx)
	}
	if err != nil {
		return err
	}
	r.model = next
	r.last = ev
	return nil
}

// save saves the model and cursor after the unsaved rows. It reports false
// when the run must stop (the failure or the retry is recorded).
func (r *pairRun) save(ctx context.Context) bool {
	if tp, ok := r.p.(perspective.Table); ok {
		return r.saveProjection(ctx, tp)
	}
	data, err := r.p.EncodeModel(r.model)
	if err != nil {
		return r.saveRefused(ctx, err)
	}
	_, savedVersion := r.position()
	params := &ports.ModelSaveParams{
		StreamID:        r.key.Stream,
		Perspective:     r.key.Perspective,
		Data:            data,
		LastEventID:     r.last.ID,
		LastVersion:     r.last.Version,
		ExpectedVersion: savedVersion,
		ExpectedEpoch:   r.stored.Epoch,
		AppliedLate:     r.appliedLate(),
		InstanceID:      r.dr.cfg.InstanceID,
		Now:             r.dr.ParamNow(),
	}
	err = r.dr.store.Save(ctx, params)
	switch {
	case err == nil:
	case errors.Is(err, ports.ErrLeaseLost):
		r.lost(ctx, err)
		return false
	case errors.Is(err, ports.ErrVersionConflict):
		r.moved(ctx, "model moved under this run; dropping its unsaved part", savedVersion, err)
		return false
	case errors.Is(err, ports.ErrInvalidArgument):
		return r.saveRefused(ctx, err)
	default:
		if ctx.Err() == nil {
			r.stop(ctx)
			r.end = pair.InfraFailed("saving model", err)
		}
		return false
	}
	r.dr.rewind.MaybeSnapshot(ctx, r.key, savedVersion, *r.last, params.Epoch(), data)
	r.lastSaved = r.last
	for _, i := range r.unsaved {
		r.done = append(r.done, r.rows[i].WorkID)
	}
	r.saved = append(r.saved, r.unsaved...)
	r.unsaved = r.unsaved[:0]
	return true
}

// appliedLate returns the versions of the late rows among the unsaved ones:
// rows stored below the rows handed out before, but above the cursor,
// which the run applied as any other. The save takes their late flag off,
// so that, should their completion be lost or refused, the next holder
// completes them as events the saved model holds rather than rewinding the
// pair and applying them again as new, and a rebuild does not leave them
// out as events awaiting their rewind.
func (r *pairRun) appliedLate() []int64 {
	var out []int64
	for _, i := range r.unsaved {
		if r.rows[i].Late {
			out = append(out, r.rows[i].EventVersion)
		}
	}
	return out
}

// moved handles a save refused because the pair moved under the run:
// another applier moved the cursor, or a rewind or a rebuild (here or on
// another instance) replaced the model the run started from. Nothing is
// charged: what this run saved completes, and the pair is drained again at
// once (its rows stay leased to this instance, and nothing else would wake
// it), loading the model the store holds, on which the rest is skipped or
// applied again.
func (r *pairRun) moved(ctx context.Context, msg string, expected int64, err error) {
	r.dr.Log.WarnContext(ctx, msg, append(pair.Attrs(r.key.Stream, r.key.Perspective),
		slog.Int64("expected_version", expected), slog.Int64("expected_epoch", r.stored.Epoch), slog.Any("error", err))...)
	r.unsaved = nil
	r.complete(ctx)
	r.end = pair.Again()
}

// lost handles a save refused because the stream is another instance's
// now, or was released: its new holder applies the pair, and may have
// dead-lettered an event this run applied, so the unsaved part is dropped,
// what this run saved before completes, and the pair is left to the
// holder. Nothing is charged, as when a move to dead letters is refused.
func (r *pairRun) lost(ctx context.Context, err error) {
	r.dr.fail.LeaseLost(ctx, r.key, err)
	r.stop(ctx)
}

// saveRefused handles a model that cannot be stored (it does not encode, or
// the store rejects it as invalid): the apply of one of the unsaved events
// produced it. With one unsaved event that event failed; with more, the
// pair is saved event by event from its next drain on, which finds the
// event, and nothing is charged now.
func (r *pairRun) saveRefused(ctx context.Context, err error) bool {
	if len(r.unsaved) == 1 {
		i := r.unsaved[0]
		r.unsaved = nil
		r.failAt(ctx, i, fmt.Errorf("storing the model after version %d: %w", r.rows[i].EventVersion, err))
		return false
	}
	r.unsaved = nil
	r.stop(ctx)
	r.end = pair.SaveEach()
	r.dr.Log.WarnContext(ctx, "the model of a batch of events cannot be stored; saving event by event to find the cause",
		append(pair.Attrs(r.key.Stream, r.key.Perspective), slog.Any("error", err))...)
	return false
}

// finish returns the number of events the run saved and, when the stream
// collects them or PostPerspective listens, the events.
func (r *pairRun) finish(ctx context.Context) (int, []ports.Event) {
	n := len(r.saved)
	r.dr.cfg.Metrics.PairRan(ctx, r.key.Perspective, n, len(r.redelivered))
	if n == 0 || !r.dr.cfg.Registry.HasReceptors(stage.PostPerspective) && !r.task.stream.collect {
		return n, nil
	}
	return n, r.eventsSaved()
}

// eventsSaved returns the events of the rows the run saved, extending the
// list it keeps as the run saves more: the reports' PostPerspective and
// finish read it, and each saved row is looked up once.
func (r *pairRun) eventsSaved() []ports.Event {
	r.evs = append(r.evs, r.savedEvents(r.saved[r.evsOf:])...)
	r.evsOf = len(r.saved)
	return r.evs
}

// savedEvents returns the events of the rows at indexes, in order.
func (r *pairRun) savedEvents(indexes []int) []ports.Event {
	events := make([]ports.Event, 0, len(indexes))
	ei := 0
	for _, i := range indexes {
		if j := r.sw.event(r.rows[i], ei); j >= 0 { // found when applied
			events, ei = append(events, r.sw.events[j]), j
		}
	}
	return events
}

// postPerspective runs PostPerspective for the events the run saved since
// its last call and, the first time, for the re-delivered ones whose
// durable record says a crash interrupted it (the claim passes over
// completed ones). Every report of the run calls it first, and the report
// goes only when it returns true: the stage is recorded done before the
// rows are, so a report that lands first, its instance dying before the
// stage ran, cannot leave it to no one (no row would come back to run it
// again). It returns false when ctx ended while the stage's claim kept
// failing: the report is dropped, and the rows come back to the drain that
// leases them next, which runs the stage.
func (r *pairRun) postPerspective(ctx context.Context) bool {
	if !r.dr.cfg.Registry.HasReceptors(stage.PostPerspective) {
		return true
	}
	saved := r.eventsSaved()
	events := slices.Clone(saved[r.posted:])
	redelivered := !r.redeliveredPosted && r.dr.cfg.StagesRecorded
	if redelivered {
		for _, i := range r.redelivered {
			if ei := r.sw.event(r.rows[i], 0); ei >= 0 {
				events = append(events, r.sw.events[ei])
			}
		}
	}
	if r.dr.lifecycle.PostPerspective(ctx, r.key.Perspective, events) != nil {
		return false
	}
	r.posted = len(saved)
	r.redeliveredPosted = r.redeliveredPosted || redelivered
	return true
}

// position returns the position the completed rows move the cursor to: the
// last saved event, or the stored position when the run saved nothing.
func (r *pairRun) position() (uuid.UUID, int64) {
	if r.lastSaved == nil {
		return r.stored.LastEventID, r.stored.LastVersion
	}
	return r.lastSaved.ID, r.lastSaved.Version
}

// reportPosition returns the position a report of the run names: the
// position it reached (see position) or, when every row it was handed lies
// below that, the last of them. Such a run holds re-deliveries only
// (events a save holds, whose completion was lost), and the fetch left the
// pair's later rows for the next one: named past them, the report would
// not list them, and the backend would take them for stragglers never
// applied (late rows, a rewind, or with rewinds off dead letters, for
// events the model holds). The cursor is at the position already: the
// save that reached it moved it.
func (r *pairRun) reportPosition() (uuid.UUID, int64) {
	id, version := r.position()
	return pair.ReportPosition(id, version, r.rows)
}

// stop ends the run without a failure: what was saved completes, the
// unsaved rest comes back after a retry (the rows stay leased).
func (r *pairRun) stop(ctx context.Context) {
	r.unsaved = nil
	r.complete(ctx)
}

// complete reports the completion of the done rows.
func (r *pairRun) complete(ctx context.Context) {
	if len(r.done) == 0 {
		return
	}
	if !r.postPerspective(ctx) {
		r.done = nil
		return
	}
	lastID, lastVersion := r.reportPosition()
	ids := r.applied()
	c := ports.Completion{StreamID: r.key.Stream, Perspective: r.key.Perspective, LastEventID: lastID, LastVersion: lastVersion, WorkIDs: ids}
	r.dr.cache.AddRange(r.key.Dedup(), ids)
	r.dr.completer.ReportCompletion(ctx, c)
	r.done = nil
	r.announceSaved(lastVersion)
}

// applied returns the rows a report of the run lists as applied: the done
// rows and, in its first report, the held ones. The report's position is
// at or past the held rows' events, which its model holds; unlisted, the
// report, landing before theirs (theirs failed and waits for its resend),
// would take them for stragglers never applied: late rows, a rewind of
// the pair, and, should this instance die before theirs lands, their
// events applied again as new by the next holder. Listed, they complete
// with it.
func (r *pairRun) applied() []uuid.UUID {
	ids := r.done
	if len(r.held) > 0 {
		ids = append(ids, r.held...)
		r.held = nil
	}
	return ids
}

// announceSaved signals progress and fires OnPerspectiveEventProcessed when
// the run saved events, lastVersion being the position it reached.
func (r *pairRun) announceSaved(lastVersion int64) {
	n := len(r.saved)
	if n == 0 {
		return
	}
	r.dr.completer.SignalProgress()
	if h := r.dr.cfg.OnEventsProcessed; h != nil {
		h(r.key.Perspective, r.key.Stream, n, lastVersion)
	}
}

// failAt records that the apply of rows[i] failed with cause, after saving
// what was applied before it. It reports true when the row was
// dead-lettered and the run goes on with the next row; false when the run
// must stop (the failure is reported and the pair held back until its
// retry, an infrastructure error is being retried, or the stream is
// another instance's now).
func (r *pairRun) failAt(ctx context.Context, i int, cause error) bool {
	if len(r.unsaved) > 0 && !r.save(ctx) {
		return false // the save's own failure is recorded
	}
	outcome, end := r.dr.fail.EventFailed(ctx, r.key, r.rows[i], cause)
	switch outcome {
	case failure.DeadLettered:
		return true
	case failure.Stop:
		r.stop(ctx)
		r.end = end
		return false
	}
	if !r.postPerspective(ctx) {
		// Stopping: nothing is charged, and the rows come back.
		r.done = nil
		return false
	}
	lastID, lastVersion := r.reportPosition()
	r.announceSaved(lastVersion)
	r.end = r.dr.fail.ReportFailure(ctx, r.key, r.rows[i], r.applied(), lastID, lastVersion, cause)
	r.done = nil
	return false
}

// abandon takes over a run whose apply the monitor abandoned, on a
// goroutine of its own while the apply goes on: the event counts a failed
// attempt (or is dead-lettered) unless the worker is stopping, what the run
// saved before completes, the pair's gate is released and the pair ends, so
// the pair is retried and neither its stream (once its other pairs ended)
// nor any other stream waits. The run's goroutine, once the apply returns,
// touches nothing.
func (r *pairRun) abandon(info monitor.Abandoned, late bool) {
	ctx := context.WithoutCancel(r.actx)
	dr := r.dr
	dr.monitor.NoteAbandoned(ctx, info)
	i := len(r.rows) - 1
	for j, row := range r.rows {
		if row.EventID == info.EventID {
			i = j
			break
		}
	}
	// The model the apply holds may be changing under it: nothing unsaved
	// is saved; those rows come back.
	r.unsaved = nil
	outcome, end := failure.Stop, pair.Stopped() // stopping: nothing is charged
	cause := fmt.Errorf("%w (after %s)", monitor.ErrAbandoned, info.Elapsed)
	if late {
		outcome, end = dr.fail.EventFailed(ctx, r.key, r.rows[i], cause)
	}
	switch {
	case outcome != failure.Retry:
		r.complete(ctx)
	case r.postPerspective(ctx):
		lastID, lastVersion := r.reportPosition()
		r.announceSaved(lastVersion)
		end = dr.fail.ReportFailure(ctx, r.key, r.rows[i], r.applied(), lastID, lastVersion, cause)
		r.done = nil
	default:
		r.done = nil // the worker stopped before the stage ran: the rows come back
	}
	n, events := r.finish(ctx)
	r.turn.End(ctx, end)
	r.task.abandon(n, events)
}

// saveProjection is save for a table projection: the cursor moves and the
// unsaved events' writes run in one transaction. When the write of one
// event fails, the transaction rolls back, the events before it are saved
// again without it, and the failure is charged to that event (failAt); if
// it was dead-lettered, the events after it stay unsaved and the run goes
// on. A write the backend failed (modelstore.BackendFailedWrite) is charged to no
// event: the pair is retried after the infrastructure backoff, as after
// any failed save. The save is shared with those of other pairs (see
// modelstore.GroupPatience) unless the pair is saved alone or one of the unsaved
// events was tried before; writes cut at the patience of a shared save are
// charged to no event either: the pair is drained again at once and saved
// alone. It reports false when the run must stop.
func (r *pairRun) saveProjection(ctx context.Context, p perspective.Table) bool {
	pending := r.model.(perspective.Writes)
	_, savedVersion := r.position()
	// The position after the unsaved events: r.last may be past them when
	// a failed write left only those before it to save.
	last := r.last
	if ei := r.sw.event(r.rows[r.unsaved[len(r.unsaved)-1]], 0); ei >= 0 {
		last = &r.sw.events[ei]
	}
	apply := p.Writes(pending, r.key.Stream, false, r.dr.cfg.WriteLimit)
	// An event that failed before (or whose instance died) may be the one
	// whose writes hang: it is saved alone, not shared.
	alone := r.turn.SaveAlone || slices.ContainsFunc(r.unsaved, func(i int) bool { return r.rows[i].Attempts > 0 })
	var took time.Duration // how long the writes of a save alone ran
	if alone {
		writes := apply
		apply = func(ctx context.Context, tx ports.Tx) error {
			start := r.dr.Now()
			defer func() { took = r.dr.Now().Sub(start) }()
			return writes(ctx, tx)
		}
	}
	err := r.dr.store.SaveTx(ctx, alone, &ports.ModelSaveTxParams{
		Apply: apply,
		Save: ports.ModelSaveParams{
			StreamID:        r.key.Stream,
			Perspective:     r.key.Perspective,
			Data:            perspective.TableData,
			LastEventID:     last.ID,
			LastVersion:     last.Version,
			ExpectedVersion: savedVersion,
			ExpectedEpoch:   r.stored.Epoch,
			AppliedLate:     r.appliedLate(),
			InstanceID:      r.dr.cfg.InstanceID,
			Now:             r.dr.ParamNow(),
		},
	})
	var wf *modelstore.WriteFailure
	switch {
	case err == nil:
		if alone {
			r.turn.SavedAlone(took)
		}
	case errors.Is(err, ports.ErrLeaseLost):
		r.unsaved, r.model = nil, perspective.Writes(nil)
		r.lost(ctx, err)
		return false
	case errors.As(err, &wf) && wf.Key == r.key && errors.Is(err, modelstore.ErrGroupPatience):
		r.stop(ctx)
		r.end = pair.SaveAlone()
		r.dr.Log.WarnContext(ctx, "a table projection's writes ran past the patience of the save they shared with other pairs; saving the pair alone",
			append(pair.Attrs(r.key.Stream, r.key.Perspective), slog.Duration("patience", r.dr.cfg.SavePatience), slog.Any("error", err))...)
		return false
	case errors.As(err, &wf) && wf.Key == r.key && wf.Index >= 0 && wf.Index < len(r.unsaved) && !modelstore.BackendFailedWrite(err):
		k := wf.Index
		failed, after := r.unsaved[k], slices.Clone(r.unsaved[k+1:])
		r.unsaved, r.model = r.unsaved[:k], pending[:k:k]
		if !r.failAt(ctx, failed, wf.Cause) {
			return false
		}
		// Dead-lettered: the events after it are saved without it.
		r.unsaved, r.model = append(r.unsaved, after...), slices.Clone(pending[k+1:])
		return len(r.unsaved) == 0 || r.save(ctx)
	case errors.Is(err, ports.ErrInvalidArgument):
		return r.saveRefused(ctx, err)
	case errors.Is(err, ports.ErrVersionConflict):
		r.dr.Log.WarnContext(ctx, "projection moved under this run; dropping its unsaved part",
			append(pair.Attrs(r.key.Stream, r.key.Perspective), slog.Int64("expected_version", savedVersion), slog.Any("error", err))...)
		r.unsaved, r.model = nil, perspective.Writes(nil)
		r.complete(ctx)
		r.end = pair.Again() // see pairRun.moved
		return false
	default:
		if ctx.Err() == nil {
			r.stop(ctx)
			r.end = pair.InfraFailed("saving projection", err)
		}
		return false
	}
	r.lastSaved = last
	for _, i := range r.unsaved {
		r.done = append(r.done, r.rows[i].WorkID)
	}
	r.saved = append(r.saved, r.unsaved...)
	r.unsaved = r.unsaved[:0]
	r.model = perspective.Writes(nil)
	return true
}
