package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/dedup"
	"github.com/vantage-go/vantage/ports"
)

// StartupScanMode says whether the startup rewind scan holds the startup
// signal until every interrupted rewind is repaired.
type StartupScanMode int

const (
	// StartupScanBlocking repairs interrupted rewinds before
	// StartupScanComplete is signalled (bounded: 100 polls).
	StartupScanBlocking StartupScanMode = iota
	// StartupScanBackground signals at once and repairs in the background.
	StartupScanBackground
	// StartupScanDisabled skips the scan.
	StartupScanDisabled
)

// Defaults of RewindOptions.
const (
	RewindDebounceDefault          = 5 * time.Second
	RewindMaxDebounceDefault       = 30 * time.Second
	RewindLockTimeoutDefault       = 30 * time.Second
	RewindKeepAliveDefault         = 10 * time.Second
	MaxConcurrentRewindsDefault    = 3
	rewindStartupPolls             = 100
	rebuildPageSize                = 500
	rewindLockRetryDelay           = time.Second
	lockReasonRewind, lockReasonRB = "rewind", "rebuild"
)

// RewindOptions configure rewinds: replaying a (stream, perspective) after
// an event arrived below its cursor.
type RewindOptions struct {
	// Disabled turns rewinds off. A late event (stored below its pair's
	// cursor) is then moved to dead letters with reason "late", never
	// applied out of order nor completed unapplied; requeue it once rewinds
	// are on.
	Disabled bool
	// StartupScan selects the startup scan mode. Defaults to
	// StartupScanBlocking.
	StartupScan StartupScanMode
	// MaxConcurrentRewinds bounds rewinds running at once. Defaults to 3.
	MaxConcurrentRewinds int
	// Debounce is the sliding window after the latest late event before a
	// rewind starts, so a burst of late events causes one rewind. Defaults
	// to 5s.
	Debounce time.Duration
	// MaxDebounce caps the wait from the first late event. Defaults to 30s.
	MaxDebounce time.Duration
	// LockTimeout is how long the rewind lock lasts without renewal.
	// Defaults to 30s.
	LockTimeout time.Duration
	// KeepAlive is how often a running rewind renews its lock. Defaults to
	// 10s; must be below LockTimeout.
	KeepAlive time.Duration
	// SnapshotEvery stores a model snapshot whenever a saved model crosses a
	// multiple of that many stream versions (in normal processing, rewinds
	// and rebuilds), so a rewind replays from the latest snapshot before its
	// trigger instead of from the start. 0 disables snapshots.
	SnapshotEvery int
}

func (o *RewindOptions) withDefaults(errs *[]error) {
	defaultDuration(errs, "Rewind.Debounce", &o.Debounce, RewindDebounceDefault)
	defaultDuration(errs, "Rewind.MaxDebounce", &o.MaxDebounce, RewindMaxDebounceDefault)
	defaultDuration(errs, "Rewind.LockTimeout", &o.LockTimeout, RewindLockTimeoutDefault)
	defaultDuration(errs, "Rewind.KeepAlive", &o.KeepAlive, RewindKeepAliveDefault)
	defaultCount(errs, "Rewind.MaxConcurrentRewinds", &o.MaxConcurrentRewinds, MaxConcurrentRewindsDefault, false)
	if o.SnapshotEvery < 0 {
		*errs = append(*errs, fmt.Errorf("Options.Rewind.SnapshotEvery must not be negative, got %d", o.SnapshotEvery))
	}
	if o.KeepAlive >= o.LockTimeout {
		*errs = append(*errs, fmt.Errorf("Options.Rewind.KeepAlive (%s) must be below Options.Rewind.LockTimeout (%s)", o.KeepAlive, o.LockTimeout))
	}
	if o.Debounce > o.MaxDebounce {
		*errs = append(*errs, fmt.Errorf("Options.Rewind.Debounce (%s) must not exceed Options.Rewind.MaxDebounce (%s)", o.Debounce, o.MaxDebounce))
	}
	if o.StartupScan < StartupScanBlocking || o.StartupScan > StartupScanDisabled {
		*errs = append(*errs, fmt.Errorf("Options.Rewind.StartupScan has unknown value %d", o.StartupScan))
	}
}

func (w *Worker) rewindEnabled() bool {
	return w.backend.Rewind != nil && !w.opts.Rewind.Disabled
}

// cursorsOf reads the cursors of streams, when rewinds are enabled.
func (w *Worker) cursorsOf(ctx context.Context, streams []uuid.UUID) map[pairKey]ports.Cursor {
	if !w.rewindEnabled() || len(streams) == 0 {
		return nil
	}
	cs, err := w.backend.Cursors.CursorsGet(ctx, &ports.CursorsGetParams{StreamIDs: streams})
	if err != nil {
		if ctx.Err() == nil {
			w.log.ErrorContext(ctx, "reading cursors failed; rewinds wait for the next batch", slog.Any("error", err))
		}
		return nil
	}
	out := make(map[pairKey]ports.Cursor, len(cs))
	for _, c := range cs {
		out[pairKey{stream: c.StreamID, perspective: c.Perspective}] = c
	}
	return out
}

// rewindDue reports whether a flagged cursor's debounce window is over and,
// if not, when it will be.
func (w *Worker) rewindDue(c ports.Cursor) (bool, time.Time) {
	now := w.now()
	o := w.opts.Rewind
	if c.RewindFlaggedAt.IsZero() {
		return true, time.Time{}
	}
	slide := c.RewindFlaggedAt.Add(o.Debounce)
	capAt := c.RewindFirstFlaggedAt.Add(o.MaxDebounce)
	if c.RewindFirstFlaggedAt.IsZero() {
		capAt = slide
	}
	due := slide
	if capAt.Before(due) {
		due = capAt
	}
	return !now.Before(due), due
}

// rewindOwner is what an abandoned apply of a rewind run by a drain hands
// back: the drain's stream task and the pair's gate. Rewinds run outside a
// drain (the startup repair) have none: a late apply there is cancelled
// and, past its grace, logged, but its caller waits for it.
type rewindOwner struct {
	task    *streamTask
	release func()
}

// rewindRetries bounds the replays of one rewind that restart at once
// because a failing event used up its attempts and was dead-lettered.
const rewindRetries = 3

// rewindPair replays a (stream, perspective) whose cursor has
// RewindRequired, under the cooperative rewind lock: from the latest
// snapshot before the trigger (or from the start), every event the
// perspective handles up to the newest pending row, except the events
// dead-lettered for the pair, then saves the model and completes the
// pending rows (which clears the flag). Only events that were never applied
// (the pending rows) fire handlers. A replayed event that fails is charged
// its attempt; when that dead-letters it the replay starts over without
// it, so the pair goes on. The caller holds the pair's gate. It returns the
// new events applied, and errPairAbandoned when an apply was abandoned.
func (w *Worker) rewindPair(ctx context.Context, p perspective, key pairKey, rows []ports.WorkItem, cursor ports.Cursor, force bool, owner *rewindOwner) ([]ports.Event, error) {
	if !force {
		if due, at := w.rewindDue(cursor); !due {
			w.parkFor(key, at)
			return nil, nil
		}
	}
	select {
	case w.rewindSem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil
	}
	freeSem := sync.OnceFunc(func() { <-w.rewindSem })
	defer freeSem()
	unlock, ok := w.lockPair(ctx, key, lockReasonRewind)
	if !ok {
		w.parkFor(key, w.now().Add(rewindLockRetryDelay))
		return nil, nil
	}
	unlock = sync.OnceFunc(unlock)
	defer unlock()

	start := w.now()
	trigger := cursor.RewindTriggerVersion
	if trigger == 0 && len(rows) > 0 {
		trigger = rows[0].EventVersion
	}
	for try := 1; ; try++ {
		abandon := func(info AbandonedApply, _ bool) { w.noteAbandoned(ctx, info) }
		if owner != nil {
			pending := rows
			abandon = func(info AbandonedApply, late bool) {
				actx := context.WithoutCancel(ctx)
				w.noteAbandoned(actx, info)
				if late {
					w.replayFailed(actx, key, pending, info.EventID, info.Version, fmt.Errorf("%w (after %s)", errApplyAbandoned, info.Elapsed))
				}
				unlock()
				freeSem()
				owner.release()
				owner.task.abandon(actx, 0, nil)
			}
		}
		res, err := w.replay(ctx, p, key, trigger, rows, abandon)
		if errors.Is(err, errPairAbandoned) {
			return nil, err
		}
		if err == nil {
			w.infraRecovered(key)
			w.log.InfoContext(ctx, "rewound perspective", append(pairAttrs(key.stream, key.perspective),
				slog.Int64("trigger_version", trigger), slog.Int64("from_version", res.from), slog.Int("replayed", res.replayed),
				slog.Int("skipped", res.skipped), slog.Int("new", len(res.fresh)))...)
			if h := w.opts.Hooks.OnRewind; h != nil {
				h(RewindInfo{StreamID: key.stream, Perspective: key.perspective, FromVersion: res.from, TriggerVersion: trigger, Replayed: res.replayed, New: len(res.fresh), Duration: w.now().Sub(start)})
			}
			return res.fresh, nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		var rf *replayFailure
		if !errors.As(err, &rf) {
			w.infraFailed(ctx, key, "rewinding", err)
			return nil, nil
		}
		if !w.replayFailed(ctx, key, rows, rf.event.ID, rf.event.Version, rf.cause) || try >= rewindRetries {
			return nil, nil
		}
		// The event was dead-lettered: replay again, without it.
		rows = slices.DeleteFunc(slices.Clone(rows), func(r ports.WorkItem) bool { return r.EventID == rf.event.ID })
	}
}

// replayFailed charges a failed replay of an event to that event: to its
// pending row when it has one (the failure may dead-letter it), else to a
// row the backend stores for it (it was applied and completed long ago).
// It reports true when the event was dead-lettered, so a replay without it
// may go on at once.
func (w *Worker) replayFailed(ctx context.Context, key pairKey, rows []ports.WorkItem, eventID uuid.UUID, version int64, cause error) bool {
	if i := slices.IndexFunc(rows, func(r ports.WorkItem) bool { return r.EventID == eventID }); i >= 0 {
		switch w.eventFailed(ctx, key, rows[i], cause) {
		case failureDeadLettered:
			return true
		case failureInfra:
			return false
		}
		w.reportFailure(ctx, key, rows[i], nil, uuid.Nil, 0, cause)
		return false
	}
	w.failed(ctx, key, ports.Failure{
		StreamID:           key.stream,
		Perspective:        key.perspective,
		FailedEventID:      eventID,
		FailedEventVersion: version,
		Error:              cause.Error(),
		RetryAt:            w.now().Add(w.failureRetryDelay(1)),
	}, version, 1, cause)
	return false
}

// replayFailure is a replay that stopped because an event failed to decode
// or apply.
type replayFailure struct {
	event ports.Event
	cause error
}

func (e *replayFailure) Error() string {
	return fmt.Sprintf("replaying version %d: %v", e.event.Version, e.cause)
}

func (e *replayFailure) Unwrap() error { return e.cause }

// lockPair takes the pair's cooperative lock and keeps it alive until the
// returned release is called.
func (w *Worker) lockPair(ctx context.Context, key pairKey, reason string) (func(), bool) {
	o := w.opts.Rewind
	params := &ports.StreamLockParams{StreamID: key.stream, Perspective: key.perspective, InstanceID: w.opts.InstanceID, Reason: reason, Duration: o.LockTimeout, Now: w.paramNow()}
	ok, err := w.backend.Rewind.StreamLockAcquire(ctx, params)
	if err != nil || !ok {
		if err != nil && ctx.Err() == nil {
			w.log.ErrorContext(ctx, "acquiring stream lock", slog.Any("error", err))
		}
		return nil, false
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := w.clock.NewTimer(o.KeepAlive)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C():
			}
			p := *params
			p.Now = w.paramNow()
			if ok, err := w.backend.Rewind.StreamLockAcquire(ctx, &p); err != nil || !ok {
				w.log.WarnContext(ctx, "renewing stream lock failed", slog.Bool("held", ok), slog.Any("error", err))
			}
			t.Reset(o.KeepAlive)
		}
	}()
	return func() {
		close(stop)
		<-done
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deregisterTimeout)
		defer cancel()
		if err := w.backend.Rewind.StreamLockRelease(rctx, params); err != nil {
			w.log.WarnContext(ctx, "releasing stream lock", slog.Any("error", err))
		}
	}, true
}

type replayResult struct {
	from     int64
	replayed int
	skipped  int // dead-lettered events left out
	fresh    []ports.Event
}

// replay rebuilds the pair's model from the latest snapshot before trigger
// (0: from the start), through the newest of the pending rows or the stored
// position, leaving out the events dead-lettered for the pair (as their
// drain did), saves it and completes rows. Each apply runs under the apply
// monitor; abandon takes over an abandoned one (replay then returns
// errPairAbandoned). An event that fails to decode or apply stops it with a
// *replayFailure; any other error is the backend's.
func (w *Worker) replay(ctx context.Context, p perspective, key pairKey, trigger int64, rows []ports.WorkItem, abandon abandonFunc) (replayResult, error) {
	var res replayResult
	// A rewind reads the store, not the cache: it starts from the truth.
	w.models.drop(key)
	stored, err := w.backend.Models.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: key.stream, Perspective: key.perspective})
	if err != nil && !errors.Is(err, ports.ErrNotFound) {
		return res, fmt.Errorf("loading model: %w", err)
	}
	model, err := p.decodeModel(nil)
	if err != nil {
		return res, err
	}
	lastID, lastVersion := uuid.Nil, int64(0)
	snaps := w.backend.Snapshots
	if snaps != nil && trigger > 0 {
		snap, err := snaps.SnapshotLatestBefore(ctx, &ports.SnapshotLatestBeforeParams{StreamID: key.stream, Perspective: key.perspective, Version: trigger})
		switch {
		case err == nil:
			if model, err = p.decodeModel(snap.Data); err != nil {
				return res, err
			}
			res.from, lastID, lastVersion = snap.Version, snap.EventID, snap.Version
		case !errors.Is(err, ports.ErrNotFound):
			return res, fmt.Errorf("loading snapshot: %w", err)
		}
		// Snapshots at or past the trigger no longer describe history.
		if _, err := snaps.SnapshotsDeleteFrom(ctx, &ports.SnapshotsDeleteFromParams{StreamID: key.stream, Perspective: key.perspective, Version: trigger}); err != nil {
			return res, fmt.Errorf("deleting stale snapshots: %w", err)
		}
	}
	skip, err := w.deadLetteredEvents(ctx, key)
	if err != nil {
		return res, err
	}
	upTo := stored.LastVersion
	pending := make(map[uuid.UUID]bool, len(rows))
	for _, r := range rows {
		upTo = max(upTo, r.EventVersion)
		pending[r.EventID] = true
	}
	events, err := w.backend.Fetcher.EventsReadStream(ctx, &ports.EventsReadStreamParams{StreamID: key.stream, AfterVersion: res.from})
	if err != nil {
		return res, fmt.Errorf("reading stream: %w", err)
	}
	handles := map[string]bool{}
	for _, t := range p.eventTypes() {
		handles[t] = true
	}
	var toReplay, toFire []ports.Event
	for _, e := range events {
		if e.Version > upTo {
			break
		}
		if !handles[e.Type] {
			continue
		}
		if skip[e.ID] {
			res.skipped++
			continue
		}
		toReplay = append(toReplay, e)
		if pending[e.ID] {
			toFire = append(toFire, e)
		}
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watch := w.monitor.watch(key, cancel, abandon)
	defer watch.done()
	if err := w.life.prePerspective(actx, toFire); err != nil {
		return res, err
	}
	prevVersion := res.from
	for _, e := range toReplay {
		decoded, err := w.reg.Decode(e)
		if err != nil {
			return res, &replayFailure{event: e, cause: err}
		}
		ectx, err := w.establishSecurity(actx, e)
		if err != nil {
			return res, &replayFailure{event: e, cause: err}
		}
		watch.begin(e.ID, e.Version)
		next, err := p.apply(ectx, model, e.Type, decoded)
		switch watch.end() {
		case applyAbandoned:
			return res, errPairAbandoned
		case applyLate:
			err = context.Cause(actx)
		}
		if err != nil {
			return res, &replayFailure{event: e, cause: err}
		}
		model = next
		res.replayed++
		lastID, lastVersion = e.ID, e.Version
		if pending[e.ID] {
			res.fresh = append(res.fresh, e)
		}
		if snaps != nil && w.snapshotDue(prevVersion, e.Version) {
			data, err := p.encodeModel(model)
			if err != nil {
				return res, &replayFailure{event: e, cause: err}
			}
			if err := snaps.SnapshotSave(ctx, &ports.SnapshotSaveParams{Snapshot: ports.Snapshot{StreamID: key.stream, Perspective: key.perspective, Version: e.Version, EventID: e.ID, Data: data, CreatedAt: w.now()}}); err != nil {
				return res, fmt.Errorf("saving snapshot: %w", err)
			}
		}
		prevVersion = e.Version
	}
	data, err := p.encodeModel(model)
	if err != nil {
		if len(toReplay) > 0 {
			return res, &replayFailure{event: toReplay[len(toReplay)-1], cause: err}
		}
		return res, err
	}
	if lastVersion < stored.LastVersion {
		// Nothing the perspective handles up to its position: keep it.
		lastID, lastVersion = stored.LastEventID, stored.LastVersion
	}
	if err := w.saveModel(ctx, &ports.ModelSaveParams{
		StreamID: key.stream, Perspective: key.perspective, Data: data,
		LastEventID: lastID, LastVersion: lastVersion, ExpectedVersion: stored.LastVersion, Now: w.paramNow(),
	}); err != nil {
		return res, fmt.Errorf("saving rewound model: %w", err)
	}
	ids := make([]uuid.UUID, 0, len(rows))
	for _, r := range rows {
		if r.EventVersion <= lastVersion {
			ids = append(ids, r.WorkID)
		}
	}
	// Replayed rows must not be suppressed by the dedup cache later.
	w.cache.RemoveRange(ids)
	w.cache.AddRange(ids)
	c := ports.Completion{StreamID: key.stream, Perspective: key.perspective, LastEventID: lastID, LastVersion: lastVersion, WorkIDs: ids}
	if err := w.strategy.ReportCompletion(ctx, c); err != nil && ctx.Err() == nil {
		w.log.ErrorContext(ctx, "reporting rewind completion failed", slog.Any("error", err))
	}
	if len(ids) == 0 {
		// Nothing pending: clear the flag directly.
		if _, err := w.backend.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{InstanceID: w.opts.InstanceID, Completions: []ports.Completion{c}, DebugMode: w.opts.DebugMode, Now: w.paramNow()}); err != nil {
			return res, fmt.Errorf("clearing the rewind flag: %w", err)
		}
	}
	w.life.postPerspective(ctx, key.perspective, res.fresh)
	w.signalProgress()
	return res, nil
}

// deadLetteredEvents returns the events of a pair that are dead-lettered
// (waiting or ignored): a replay leaves them out, as their drain did. A
// requeued one is pending again and is replayed.
func (w *Worker) deadLetteredEvents(ctx context.Context, key pairKey) (map[uuid.UUID]bool, error) {
	dls, err := w.backend.DeadLetters.DeadLettersList(ctx, &ports.DeadLettersListParams{StreamID: key.stream, Perspective: key.perspective})
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

// noteAbandoned logs, counts and announces an abandoned apply.
func (w *Worker) noteAbandoned(ctx context.Context, info AbandonedApply) {
	w.abandonedTotal.Add(1)
	w.log.ErrorContext(ctx, "apply abandoned: it ran past its deadline and ignored its cancelled context; its pair is retried while it runs on",
		append(pairAttrs(info.StreamID, info.Perspective), slog.String("event_id", info.EventID.String()), slog.Int64("version", info.Version),
			slog.Duration("elapsed", info.Elapsed), slog.Duration("apply_timeout", w.opts.ApplyTimeout))...)
	if h := w.opts.Hooks.OnApplyAbandoned; h != nil {
		h(info)
	}
}

// startupScan reconciles interrupted lifecycles and repairs interrupted
// rewinds, then closes the startup signal.
func (w *Worker) startupScan(ctx context.Context) {
	defer w.finishStartupScan()
	w.life.reconcile(ctx)
	if !w.rewindEnabled() || w.opts.Rewind.StartupScan == StartupScanDisabled {
		return
	}
	if w.opts.Rewind.StartupScan == StartupScanBackground {
		w.finishStartupScan()
	}
	// Pairs whose pending rows are leased elsewhere are left to their
	// holder: rewinding them here would only re-flag them.
	skip := map[pairKey]bool{}
	for range rewindStartupPolls {
		cursors, err := w.backend.Rewind.CursorsRewindRequired(ctx, &ports.CursorsRewindRequiredParams{Limit: 1000})
		if err != nil {
			if ctx.Err() == nil {
				w.log.ErrorContext(ctx, "startup rewind scan", slog.Any("error", err))
			}
			return
		}
		var todo []ports.Cursor
		for _, c := range cursors {
			if !skip[pairKey{stream: c.StreamID, perspective: c.Perspective}] {
				todo = append(todo, c)
			}
		}
		if len(todo) == 0 {
			return
		}
		w.log.InfoContext(ctx, "repairing interrupted rewinds", slog.Int("cursors", len(todo)))
		for _, c := range todo {
			if ctx.Err() != nil {
				return
			}
			key := pairKey{stream: c.StreamID, perspective: c.Perspective}
			if !w.repairRewind(ctx, key, c) {
				skip[key] = true
			}
		}
		t := w.clock.NewTimer(w.opts.PollingInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// repairRewind rewinds a flagged pair now, with its pending rows when this
// instance can lease them. It reports false when the pair stays flagged
// because its rows are held elsewhere (or it is unknown here).
func (w *Worker) repairRewind(ctx context.Context, key pairKey, c ports.Cursor) bool {
	p, ok := w.reg.perspective(key.perspective)
	if !ok {
		return false
	}
	release, err := w.gates.acquire(ctx, key, nil)
	if err != nil {
		return false
	}
	defer release()
	res, _, err := w.fetch(ctx, []uuid.UUID{key.stream})
	if err != nil {
		return false
	}
	var rows []ports.WorkItem
	for _, r := range res.Work {
		if r.Perspective == key.perspective {
			rows = append(rows, r)
		}
	}
	rows, _ = dedup.Partition(w.cache, rows, workID)
	rows, err = w.deadLetterExhausted(ctx, rows)
	if err != nil {
		w.infraFailed(ctx, key, "moving work to dead letters", err)
		return true
	}
	fresh, _ := w.rewindPair(ctx, p, key, rows, c, true, nil)
	w.life.afterBatch(ctx, fresh, nil)
	// Flush now, so the next poll sees the flag cleared.
	w.flushPending(ctx)
	if err := w.completions.Flush(ctx); err != nil && ctx.Err() == nil {
		w.log.WarnContext(ctx, "flushing the repaired rewind", slog.Any("error", err))
	}
	if len(rows) > 0 {
		return true
	}
	after := w.cursorsOf(ctx, []uuid.UUID{key.stream})
	return !after[key].Status.Has(ports.CursorRewindRequired)
}

// maybeSnapshot stores a snapshot when a save moved the model across a
// multiple of SnapshotEvery stream versions. A failed snapshot only costs a
// longer replay later, so it is logged, not returned.
func (w *Worker) maybeSnapshot(ctx context.Context, key pairKey, from int64, last ports.Event, data []byte) {
	if w.backend.Snapshots == nil || !w.snapshotDue(from, last.Version) {
		return
	}
	err := w.backend.Snapshots.SnapshotSave(ctx, &ports.SnapshotSaveParams{Snapshot: ports.Snapshot{StreamID: key.stream, Perspective: key.perspective, Version: last.Version, EventID: last.ID, Data: data, CreatedAt: w.now()}})
	if err != nil && ctx.Err() == nil {
		w.log.WarnContext(ctx, "saving snapshot failed", slog.Any("error", err))
	}
}

// snapshotDue reports whether a model moving from version from to version
// to crossed a multiple of SnapshotEvery.
func (w *Worker) snapshotDue(from, to int64) bool {
	every := int64(w.opts.Rewind.SnapshotEvery)
	return every > 0 && to/every > from/every
}

func (w *Worker) finishStartupScan() {
	w.startupOnce.Do(func() {
		close(w.startupDone)
		if h := w.opts.Hooks.OnStartupScanComplete; h != nil {
			h()
		}
	})
}

// StartupScanComplete returns a channel closed once the startup
// reconciliation of interrupted lifecycles and the rewind scan finished (in
// StartupScanBackground mode: once the scan started).
func (w *Worker) StartupScanComplete() <-chan struct{} { return w.startupDone }

// WaitLifecycle blocks until the lifecycle work started so far (the latest
// batch's PostAllPerspectives/PostLifecycle task and every detached
// receptor) finished, or ctx ends.
func (w *Worker) WaitLifecycle(ctx context.Context) error { return w.life.wait(ctx) }

// Rebuild replays one perspective from scratch for the given streams (every
// stream with events it handles when none is given) while the worker keeps
// serving everything else. Each stream is rebuilt under its pair's gate and
// rebuild lock; handlers do not fire (nothing is new). It needs a backend
// with a RewindStore.
func (w *Worker) Rebuild(ctx context.Context, perspectiveName string, streams ...uuid.UUID) (int, error) {
	if w.backend.Rewind == nil {
		return 0, errors.New("rebuilding: the backend has no RewindStore")
	}
	p, ok := w.reg.perspective(perspectiveName)
	if !ok {
		return 0, fmt.Errorf("rebuilding: no perspective named %q", perspectiveName)
	}
	rebuilt := 0
	rebuild := func(stream uuid.UUID) error {
		key := pairKey{stream: stream, perspective: perspectiveName}
		release, err := w.gates.acquire(ctx, key, nil)
		if err != nil {
			return err
		}
		defer release()
		unlock, ok := w.lockPair(ctx, key, lockReasonRB)
		if !ok {
			return fmt.Errorf("rebuilding stream %s: its lock is held by another instance", stream)
		}
		defer unlock()
		start := w.now()
		if w.backend.Snapshots != nil {
			if _, err := w.backend.Snapshots.SnapshotsDeleteFrom(ctx, &ports.SnapshotsDeleteFromParams{StreamID: stream, Perspective: perspectiveName, Version: 0}); err != nil {
				return fmt.Errorf("rebuilding stream %s: %w", stream, err)
			}
		}
		res, err := w.replay(ctx, p, key, 0, nil, func(info AbandonedApply, _ bool) { w.noteAbandoned(ctx, info) })
		if err != nil {
			return fmt.Errorf("rebuilding stream %s: %w", stream, err)
		}
		rebuilt++
		if h := w.opts.Hooks.OnRewind; h != nil {
			h(RewindInfo{StreamID: stream, Perspective: perspectiveName, Replayed: res.replayed, Duration: w.now().Sub(start), Rebuild: true})
		}
		return nil
	}
	rebuildAll := func(streams []uuid.UUID) error {
		for _, s := range streams {
			if err := rebuild(s); err != nil {
				return err
			}
		}
		return nil
	}
	if len(streams) > 0 {
		err := rebuildAll(streams)
		return rebuilt, err
	}
	types := p.eventTypes()
	for after := uuid.Nil; ; {
		page, err := w.backend.Rewind.StreamsWithEventTypes(ctx, &ports.StreamsWithEventTypesParams{EventTypes: types, After: after, Limit: rebuildPageSize})
		if err != nil {
			return rebuilt, fmt.Errorf("rebuilding: listing streams: %w", err)
		}
		if err := rebuildAll(page); err != nil || len(page) < rebuildPageSize {
			return rebuilt, err
		}
		after = page[len(page)-1]
	}
}
