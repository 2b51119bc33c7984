package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/completion"
	"github.com/vantage-go/vantage/ports"
)

// processBatch drains a batch of streams: flush what is buffered, claim and
// fetch the streams' pending events, drain every stream (in parallel, at most
// MaxConcurrentPerspectives at once), flush again.
func (w *Worker) processBatch(ctx context.Context, ids []uuid.UUID) {
	defer w.queue.Done(ids)
	w.cache.EvictExpired()
	w.flushPending(ctx)
	w.recordPoll(true)

	res, seq, err := w.fetch(ctx, ids)
	applied := 0
	if err != nil {
		if ctx.Err() == nil {
			w.log.ErrorContext(ctx, "fetching pending events failed", slog.Int("streams", len(ids)), slog.Any("error", err))
		}
	} else {
		var events []ports.Event
		applied, events = w.drainStreams(ctx, res, seq)
		w.life.afterBatch(ctx, events)
		if len(res.Work) >= w.opts.FetchMaxRows {
			// The fetch was cut at FetchMaxRows: drain these streams again
			// right after this batch instead of at the next claim tick.
			w.queue.Push(ids...)
		}
	}
	w.flushPending(ctx)
	if h := w.opts.Hooks.OnBatchCycleComplete; h != nil {
		h(BatchCycle{Streams: len(ids), Applied: applied})
	}
}

// fetch claims and fetches the pending events of streams. It returns the
// fetch's sequence number, taken before the call: results of a fetch that
// started before a failure of a pair was acknowledged are stale for that
// pair (see staleFetch).
func (w *Worker) fetch(ctx context.Context, ids []uuid.UUID) (*ports.EventsFetchPendingResult, uint64, error) {
	seq := w.fetchSeq.Add(1)
	res, err := w.backend.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
		InstanceID:     w.opts.InstanceID,
		StreamIDs:      ids,
		LeaseDuration:  w.opts.LeaseDuration,
		StaleThreshold: w.opts.StaleInstanceThreshold,
		MaxRows:        w.opts.FetchMaxRows,
		Now:            w.paramNow(),
	})
	return res, seq, err
}

// streamWork is one stream's share of a fetch result.
type streamWork struct {
	events map[uuid.UUID]ports.Event
	work   []ports.WorkItem // ordered by perspective, version
	seq    uint64           // the fetch's sequence number (see Worker.fetchSeq)
}

func splitByStream(res *ports.EventsFetchPendingResult, seq uint64) (map[uuid.UUID]*streamWork, []uuid.UUID) {
	byStream := map[uuid.UUID]*streamWork{}
	var order []uuid.UUID
	get := func(id uuid.UUID) *streamWork {
		sw, ok := byStream[id]
		if !ok {
			sw = &streamWork{events: map[uuid.UUID]ports.Event{}, seq: seq}
			byStream[id] = sw
			order = append(order, id)
		}
		return sw
	}
	for _, e := range res.Events {
		get(e.StreamID).events[e.ID] = e
	}
	for _, wi := range res.Work {
		sw := get(wi.StreamID)
		sw.work = append(sw.work, wi)
	}
	return byStream, order
}

// drainStreams drains every stream of a fetch result and returns the number
// of (event, perspective) applications and the distinct events applied.
func (w *Worker) drainStreams(ctx context.Context, res *ports.EventsFetchPendingResult, seq uint64) (int, []ports.Event) {
	byStream, order := splitByStream(res, seq)
	cursors := w.cursorsOf(ctx, order)
	var (
		mu      sync.Mutex
		applied int
		events  []ports.Event
	)
	sem := make(chan struct{}, w.opts.MaxConcurrentPerspectives)
	var wg sync.WaitGroup
	for _, id := range order {
		sw := byStream[id]
		if len(sw.work) == 0 {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			n, evs := w.drainStream(ctx, id, sw, cursors)
			mu.Lock()
			applied += n
			events = append(events, evs...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return applied, events
}

// drainStream applies a stream's pending events perspective by perspective,
// refetching while each pass still finds enough work. It returns the number
// of applications and the distinct events applied.
func (w *Worker) drainStream(ctx context.Context, streamID uuid.UUID, sw *streamWork, cursors map[pairKey]ports.Cursor) (int, []ports.Event) {
	total := 0
	seen := map[uuid.UUID]bool{}
	var events []ports.Event
	for iter := 1; ; iter++ {
		n := 0
		for _, group := range groupByPerspective(sw.work) {
			c, ok := cursors[pairKey{stream: streamID, perspective: group[0].Perspective}]
			applied := w.drainPair(ctx, streamID, group, sw, c, ok)
			n += len(applied)
			for _, e := range applied {
				if !seen[e.ID] {
					seen[e.ID] = true
					events = append(events, e)
				}
			}
		}
		total += n
		if n < w.opts.DrainLoopRefetchMinBatch || iter >= w.opts.DrainLoopMaxIterations || ctx.Err() != nil {
			return total, events
		}
		res, seq, err := w.fetch(ctx, []uuid.UUID{streamID})
		if err != nil {
			if ctx.Err() == nil {
				w.log.ErrorContext(ctx, "refetching stream failed", slog.String("stream_id", streamID.String()), slog.Any("error", err))
			}
			return total, events
		}
		byStream, _ := splitByStream(res, seq)
		next, ok := byStream[streamID]
		if !ok || len(next.work) == 0 {
			return total, events
		}
		sw = next
		cursors = w.cursorsOf(ctx, []uuid.UUID{streamID})
	}
}

func groupByPerspective(work []ports.WorkItem) [][]ports.WorkItem {
	sorted := make([]ports.WorkItem, len(work))
	copy(sorted, work)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].Perspective != sorted[j].Perspective {
			return sorted[i].Perspective < sorted[j].Perspective
		}
		return sorted[i].EventVersion < sorted[j].EventVersion
	})
	var groups [][]ports.WorkItem
	for i := 0; i < len(sorted); {
		j := i
		for j < len(sorted) && sorted[j].Perspective == sorted[i].Perspective {
			j++
		}
		groups = append(groups, sorted[i:j])
		i = j
	}
	return groups
}

// parking holds a failed pair back until its failure is acknowledged by the
// backend (which releases the failed row and schedules it) and its retry
// time passed; before the acknowledgement a fetch would still see the row
// leased to us and apply it again without counting an attempt.
type parking struct {
	until time.Time
	acked bool
}

func (w *Worker) parkedUntil(k pairKey) (time.Time, bool) {
	w.parkedMu.Lock()
	defer w.parkedMu.Unlock()
	p, ok := w.parked[k]
	if !ok {
		return time.Time{}, false
	}
	if p.acked && !w.now().Before(p.until) {
		delete(w.parked, k)
		return time.Time{}, false
	}
	return p.until, true
}

func (w *Worker) park(k pairKey, until time.Time) {
	w.parkedMu.Lock()
	defer w.parkedMu.Unlock()
	w.parked[k] = parking{until: until}
}

// parkFor holds a pair back until until (a debounce or a lock retry).
func (w *Worker) parkFor(k pairKey, until time.Time) {
	w.parkedMu.Lock()
	defer w.parkedMu.Unlock()
	w.parked[k] = parking{until: until, acked: true}
}

// staleFetch reports whether a fetch (by its sequence number) started before
// the latest acknowledged failure of the pair.
func (w *Worker) staleFetch(k pairKey, seq uint64) bool {
	w.parkedMu.Lock()
	defer w.parkedMu.Unlock()
	acked, ok := w.failAcked[k]
	if !ok {
		return false
	}
	if seq <= acked {
		return true
	}
	delete(w.failAcked, k) // fresh rows from now on
	return false
}

func (w *Worker) parkAcked(k pairKey) {
	w.parkedMu.Lock()
	defer w.parkedMu.Unlock()
	w.failAcked[k] = w.fetchSeq.Load()
	if p, ok := w.parked[k]; ok {
		p.acked = true
		w.parked[k] = p
	}
}

// failureRetryDelay is FailureRetryBase doubled per attempt, capped at
// FailureRetryMax: 60s, 120s, 240s, 300s … with the defaults.
func (w *Worker) failureRetryDelay(attempts int) time.Duration {
	d := w.opts.FailureRetryBase
	for i := 0; i < attempts && d < w.opts.FailureRetryMax; i++ {
		d *= 2
	}
	return min(d, w.opts.FailureRetryMax)
}

// drainPair runs one perspective over one stream's rows (version order)
// under the pair's gate: dedup, dead-letter exhausted rows, load the model,
// skip events at or below its position, apply the rest, save model and
// cursor every PerspectiveBatchSize events and at the end, and buffer the
// completion (or the failure). It returns the number of events applied.
func (w *Worker) drainPair(ctx context.Context, streamID uuid.UUID, rows []ports.WorkItem, sw *streamWork, cursor ports.Cursor, hasCursor bool) []ports.Event {
	events := sw.events
	name := rows[0].Perspective
	key := pairKey{stream: streamID, perspective: name}
	if _, parked := w.parkedUntil(key); parked {
		return nil
	}
	release, err := w.gates.acquire(ctx, key, nil)
	if err != nil {
		return nil
	}
	defer release()
	// Check again: a run that held the gate may just have parked the pair;
	// and rows fetched before its failure was acknowledged are stale (the
	// backend released the failed row since).
	if _, parked := w.parkedUntil(key); parked || w.staleFetch(key, sw.seq) {
		return nil
	}

	// Rows applied by an earlier batch whose completion is not acknowledged
	// yet come back on every fetch: skip them.
	fresh := rows[:0:0]
	var deduped []uuid.UUID
	for _, r := range rows {
		if w.cache.Contains(r.WorkID) {
			deduped = append(deduped, r.WorkID)
			continue
		}
		fresh = append(fresh, r)
	}
	if len(deduped) > 0 && w.opts.Hooks.DedupObserver != nil {
		w.opts.Hooks.DedupObserver.OnEventsDeduped(deduped, name, streamID)
	}
	rows = w.deadLetterExhausted(ctx, fresh)
	if len(rows) == 0 {
		return nil
	}

	p, ok := w.reg.perspective(name)
	if !ok {
		w.fail(ctx, key, rows, nil, uuid.Nil, 0, fmt.Errorf("no perspective named %q is registered in this instance", name))
		return nil
	}
	if hasCursor && cursor.Status.Has(ports.CursorRewindRequired) && w.rewindEnabled() {
		return w.rewindPair(ctx, p, key, rows, cursor, false)
	}
	stored, err := w.loadModel(ctx, key)
	if err != nil && !errors.Is(err, ports.ErrNotFound) {
		if ctx.Err() == nil {
			w.log.ErrorContext(ctx, "loading model failed", slog.String("perspective", name), slog.String("stream_id", streamID.String()), slog.Any("error", err))
		}
		return nil
	}
	model, err := p.decodeModel(stored.Data)
	if err != nil {
		w.fail(ctx, key, rows, nil, stored.LastEventID, stored.LastVersion, err)
		return nil
	}

	run := pairRun{w: w, p: p, key: key, stored: stored, savedVersion: stored.LastVersion, model: model}
	deadline := max(time.Second, w.opts.LeaseDuration-w.opts.LeaseGrace)
	actx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	var toApply []ports.Event
	for _, r := range rows {
		if ev, ok := events[r.EventID]; ok && r.EventVersion > stored.LastVersion {
			toApply = append(toApply, ev)
		}
	}
	w.life.prePerspective(actx, toApply)
	unsavedFrom := -1
	for i, r := range rows {
		if r.EventVersion <= stored.LastVersion {
			// Already reflected in the stored model (a re-delivery after a
			// crash or a lost completion): complete without applying.
			run.done = append(run.done, r.WorkID)
			continue
		}
		ev, ok := events[r.EventID]
		if !ok {
			run.failAt(actx, rows[i:], fmt.Errorf("event %s of work row %s is missing from the fetch", r.EventID, r.WorkID))
			return run.finish(ctx)
		}
		if err := run.apply(actx, r, ev); err != nil {
			if ctx.Err() != nil {
				return run.finish(ctx) // shutting down: the rows stay leased and are re-delivered
			}
			if actx.Err() != nil {
				err = fmt.Errorf("lease deadline exceeded: %w", err)
			}
			run.failAt(actx, rows[i:], err)
			return run.finish(ctx)
		}
		if unsavedFrom < 0 {
			unsavedFrom = i
		}
		if run.unsaved >= w.opts.PerspectiveBatchSize {
			if err := run.save(ctx); err != nil {
				run.saveFailed(ctx, rows[unsavedFrom:], err)
				return run.finish(ctx)
			}
			unsavedFrom = -1
		}
	}
	if run.unsaved > 0 {
		if err := run.save(ctx); err != nil {
			run.saveFailed(ctx, rows[unsavedFrom:], err)
			return run.finish(ctx)
		}
	}
	run.complete(ctx)
	return run.finish(ctx)
}

// pairRun is the state of one drainPair.
type pairRun struct {
	w            *Worker
	p            perspective
	key          pairKey
	stored       ports.StoredModel
	model        any
	savedVersion int64
	last         ports.Event // last applied event
	unsaved      int
	applied      int
	saved        []uuid.UUID // applied and saved work ids, plus rows already at or below the stored position
	pending      []uuid.UUID // applied, not yet saved
	savedEvents  []ports.Event
	pendingEvts  []ports.Event
	done         []uuid.UUID // rows at or below the stored position
}

func (r *pairRun) apply(ctx context.Context, row ports.WorkItem, ev ports.Event) error {
	decoded, err := r.w.reg.Decode(ev)
	if err != nil {
		return err
	}
	actx, err := r.w.establishSecurity(ctx, ev)
	if err != nil {
		return err
	}
	next, err := r.p.apply(actx, r.model, ev.Type, decoded)
	if err != nil {
		return err
	}
	r.model = next
	r.last = ev
	r.unsaved++
	r.applied++
	r.pending = append(r.pending, row.WorkID)
	r.pendingEvts = append(r.pendingEvts, ev)
	return nil
}

// finish fires PostPerspective for the events whose model is saved and
// returns them.
func (r *pairRun) finish(ctx context.Context) []ports.Event {
	r.w.life.fire(ctx, PostPerspective, r.key.perspective, r.savedEvents)
	return r.savedEvents
}

func (r *pairRun) save(ctx context.Context) error {
	data, err := r.p.encodeModel(r.model)
	if err != nil {
		return err
	}
	err = r.w.saveModel(ctx, &ports.ModelSaveParams{
		StreamID:        r.key.stream,
		Perspective:     r.key.perspective,
		Data:            data,
		LastEventID:     r.last.ID,
		LastVersion:     r.last.Version,
		ExpectedVersion: r.savedVersion,
		Now:             r.w.paramNow(),
	})
	if err != nil {
		return err
	}
	r.w.maybeSnapshot(ctx, r.key, r.savedVersion, r.last, data)
	r.savedVersion = r.last.Version
	r.saved = append(r.saved, r.pending...)
	r.savedEvents = append(r.savedEvents, r.pendingEvts...)
	r.pending = nil
	r.pendingEvts = nil
	r.unsaved = 0
	return nil
}

// saveFailed handles a failed save of the rows from unsaved on. A version
// conflict means another applier moved the cursor: what this run saved
// completes, the rest comes back and is skipped. Any other error fails the
// first unsaved row, so it is retried with backoff.
func (r *pairRun) saveFailed(ctx context.Context, unsaved []ports.WorkItem, err error) int {
	r.applied -= len(r.pending)
	r.pending = nil
	r.pendingEvts = nil
	r.unsaved = 0
	if errors.Is(err, ports.ErrVersionConflict) {
		r.w.log.WarnContext(ctx, "model moved under this run; dropping its unsaved part", slog.String("perspective", r.key.perspective), slog.String("stream_id", r.key.stream.String()))
		r.complete(ctx)
		return r.applied
	}
	if ctx.Err() != nil {
		return r.applied
	}
	r.failAt(ctx, unsaved, fmt.Errorf("saving model: %w", err))
	return r.applied
}

// completedIDs returns the rows that may complete: saved ones and those at
// or below the stored position.
func (r *pairRun) completedIDs() []uuid.UUID {
	ids := make([]uuid.UUID, 0, len(r.done)+len(r.saved))
	ids = append(ids, r.done...)
	return append(ids, r.saved...)
}

func (r *pairRun) lastSaved() (uuid.UUID, int64) {
	if r.savedVersion == r.stored.LastVersion {
		return r.stored.LastEventID, r.stored.LastVersion
	}
	return r.last.ID, r.savedVersion
}

func (r *pairRun) complete(ctx context.Context) {
	ids := r.completedIDs()
	if len(ids) == 0 {
		return
	}
	lastID, lastVersion := r.lastSaved()
	c := ports.Completion{StreamID: r.key.stream, Perspective: r.key.perspective, LastEventID: lastID, LastVersion: lastVersion, WorkIDs: ids}
	r.w.cache.AddRange(ids)
	if err := r.w.strategy.ReportCompletion(ctx, c); err != nil && ctx.Err() == nil {
		r.w.log.ErrorContext(ctx, "reporting completion failed; rows are re-delivered after their lease", slog.Any("error", err))
	}
	if r.applied > 0 {
		r.w.signalProgress()
		if h := r.w.opts.Hooks.OnPerspectiveEventProcessed; h != nil {
			h(PerspectiveEventProcessed{Perspective: r.key.perspective, StreamID: r.key.stream, EventCount: r.applied, LastVersion: lastVersion})
		}
	}
}

// failAt saves what was applied before the failing row, then reports the
// failure: applied rows complete, the failing row and the rest are released
// and retried after a backoff; the pair is parked until then.
func (r *pairRun) failAt(ctx context.Context, rest []ports.WorkItem, cause error) {
	if r.unsaved > 0 {
		if err := r.save(context.WithoutCancel(ctx)); err != nil {
			r.w.log.ErrorContext(ctx, "saving model before failure", slog.Any("error", err))
			r.applied -= len(r.pending)
			r.pending = nil
			r.pendingEvts = nil
		}
	}
	if r.applied > 0 {
		r.w.signalProgress()
		if h := r.w.opts.Hooks.OnPerspectiveEventProcessed; h != nil {
			_, v := r.lastSaved()
			h(PerspectiveEventProcessed{Perspective: r.key.perspective, StreamID: r.key.stream, EventCount: r.applied, LastVersion: v})
		}
	}
	lastID, lastVersion := r.lastSaved()
	r.w.fail(context.WithoutCancel(ctx), r.key, rest, r.completedIDs(), lastID, lastVersion, cause)
}

// fail reports a failure of rows[0] (and releases the rows after it).
func (w *Worker) fail(ctx context.Context, key pairKey, rows []ports.WorkItem, applied []uuid.UUID, lastID uuid.UUID, lastVersion int64, cause error) {
	attempts := rows[0].Attempts
	retryAt := w.now().Add(w.failureRetryDelay(attempts))
	// Only the failing row is released and scheduled; the rows after it stay
	// leased to us behind the ordering guard and gain no attempts.
	failed := []uuid.UUID{rows[0].WorkID}
	f := ports.Failure{
		StreamID:       key.stream,
		Perspective:    key.perspective,
		LastEventID:    lastID,
		LastVersion:    lastVersion,
		AppliedWorkIDs: applied,
		FailedWorkIDs:  failed,
		Error:          cause.Error(),
		RetryAt:        retryAt,
	}
	if len(applied) > 0 {
		w.cache.AddRange(applied)
	}
	w.park(key, retryAt)
	w.log.WarnContext(ctx, "perspective failed on event; will retry",
		slog.String("perspective", key.perspective), slog.String("stream_id", key.stream.String()),
		slog.Int64("version", rows[0].EventVersion), slog.Int("attempts", attempts), slog.Time("retry_at", retryAt), slog.Any("error", cause))
	if err := w.strategy.ReportFailure(ctx, f); err != nil && ctx.Err() == nil {
		w.log.ErrorContext(ctx, "reporting failure failed; rows are re-delivered after their lease", slog.Any("error", err))
	}
	if h := w.opts.Hooks.OnFailure; h != nil {
		h(f)
	}
}

// deadLetterExhausted moves rows whose attempts exceed
// MaxPerspectiveEventAttempts to dead letters (before paying for decoding
// and applying) and returns the others. A row whose move fails stays.
func (w *Worker) deadLetterExhausted(ctx context.Context, rows []ports.WorkItem) []ports.WorkItem {
	maxAttempts := w.opts.MaxPerspectiveEventAttempts
	if maxAttempts == Unlimited {
		return rows
	}
	keep := rows[:0:0]
	for _, r := range rows {
		if r.Attempts <= maxAttempts {
			keep = append(keep, r)
			continue
		}
		dl, moved, err := w.backend.DeadLetters.DeadLetterMove(ctx, &ports.DeadLetterMoveParams{
			WorkID:     r.WorkID,
			InstanceID: w.opts.InstanceID,
			Reason:     ports.ReasonMaxAttemptsExceeded,
			Error:      fmt.Sprintf("perspective %q gave up on event %s (stream %s, version %d) after %d attempts (max %d)", r.Perspective, r.EventID, r.StreamID, r.EventVersion, r.Attempts, maxAttempts),
			Now:        w.paramNow(),
		})
		if err != nil {
			if ctx.Err() == nil {
				w.log.ErrorContext(ctx, "moving work row to dead letters failed; applying it instead", slog.Any("error", err))
			}
			keep = append(keep, r)
			continue
		}
		if moved {
			w.log.WarnContext(ctx, "work row dead-lettered", slog.String("perspective", r.Perspective), slog.String("stream_id", r.StreamID.String()), slog.Int64("version", r.EventVersion), slog.Int("attempts", r.Attempts))
			if h := w.opts.Hooks.OnDeadLettered; h != nil {
				h(dl)
			}
		}
	}
	return keep
}

// flushPending moves buffered completions and failures into the flushers
// (re-queueing unacknowledged ones whose timeout passed).
func (w *Worker) flushPending(ctx context.Context) {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	now := w.now()
	// Unacknowledged items are re-sent only once the flushers settled
	// everything they were given: an item still queued or being flushed
	// (a slow round trip, retries in place) is not lost, only late.
	if !w.completions.Busy() && !w.failures.Busy() {
		w.strategy.ResetStale(now)
	}
	cs := w.strategy.PendingCompletions()
	fs := w.strategy.PendingFailures()
	if len(cs) == 0 && len(fs) == 0 {
		return
	}
	ids := make([]uuid.UUID, 0, len(cs)+len(fs))
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	for _, f := range fs {
		ids = append(ids, f.ID)
	}
	w.strategy.MarkSent(ids, now)
	if len(cs) > 0 {
		if err := w.completions.Add(ctx, cs...); err != nil && ctx.Err() == nil {
			w.log.ErrorContext(ctx, "queueing completions failed; they are re-sent", slog.Any("error", err))
		}
	}
	if len(fs) > 0 {
		if err := w.failures.Add(ctx, fs...); err != nil && ctx.Err() == nil {
			w.log.ErrorContext(ctx, "queueing failures failed; they are re-sent", slog.Any("error", err))
		}
	}
}

func (w *Worker) flushCompletions(ctx context.Context, batch []completion.Tracked[ports.Completion]) error {
	items := make([]ports.Completion, len(batch))
	for i, t := range batch {
		items[i] = t.Item
	}
	_, err := w.backend.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{
		InstanceID:  w.opts.InstanceID,
		Completions: items,
		DebugMode:   w.opts.DebugMode,
		Now:         w.paramNow(),
	})
	return err
}

func (w *Worker) flushFailures(ctx context.Context, batch []completion.Tracked[ports.Failure]) error {
	items := make([]ports.Failure, len(batch))
	for i, t := range batch {
		items[i] = t.Item
	}
	return w.backend.Cursors.WorkFail(ctx, &ports.WorkFailParams{
		InstanceID: w.opts.InstanceID,
		Failures:   items,
		DebugMode:  w.opts.DebugMode,
		Now:        w.paramNow(),
	})
}

func (w *Worker) completionsAcknowledged(batch []completion.Tracked[ports.Completion]) {
	items, ids := untrack(batch)
	var workIDs []uuid.UUID
	for _, c := range items {
		workIDs = append(workIDs, c.WorkIDs...)
	}
	w.acknowledge(ids, workIDs)
	if w.claimHasMore.Load() {
		signal(w.claimWake) // room was freed for more of the backlog
	}
	if h := w.opts.Hooks.OnCompletionsFlushed; h != nil {
		h(CompletionsFlushed{Completions: items})
	}
}

func (w *Worker) failuresAcknowledged(batch []completion.Tracked[ports.Failure]) {
	items, ids := untrack(batch)
	var workIDs []uuid.UUID
	for _, f := range items {
		workIDs = append(workIDs, f.AppliedWorkIDs...)
		w.parkAcked(pairKey{stream: f.StreamID, perspective: f.Perspective})
	}
	w.acknowledge(ids, workIDs)
	if h := w.opts.Hooks.OnCompletionsFlushed; h != nil {
		h(CompletionsFlushed{Failures: items})
	}
}

// acknowledge settles acknowledged items by identity and starts the dedup
// retention of their work rows.
func (w *Worker) acknowledge(trackingIDs, workIDs []uuid.UUID) {
	w.strategy.MarkAcknowledged(trackingIDs)
	w.strategy.ClearAcknowledged()
	w.cache.ActivateRetentionFor(workIDs)
	w.signalProgress()
}

func untrack[T any](batch []completion.Tracked[T]) ([]T, []uuid.UUID) {
	items := make([]T, len(batch))
	ids := make([]uuid.UUID, len(batch))
	for i, t := range batch {
		items[i], ids[i] = t.Item, t.ID
	}
	return items, ids
}

func track[T any](items []T) []completion.Tracked[T] {
	tracked := make([]completion.Tracked[T], len(items))
	for i, it := range items {
		tracked[i] = completion.Tracked[T]{Item: it}
	}
	return tracked
}

// instantReporter is the Reporter of the Instant strategy: one backend call
// per completion or failure.
type instantReporter struct{ w *Worker }

func (r instantReporter) Complete(ctx context.Context, items []ports.Completion) error {
	tracked := track(items)
	if err := r.w.flushCompletions(ctx, tracked); err != nil {
		return err
	}
	r.w.completionsAcknowledged(tracked)
	return nil
}

func (r instantReporter) Fail(ctx context.Context, items []ports.Failure) error {
	tracked := track(items)
	if err := r.w.flushFailures(ctx, tracked); err != nil {
		return err
	}
	r.w.failuresAcknowledged(tracked)
	return nil
}
