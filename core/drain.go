package core

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/completion"
	"github.com/vantage-go/vantage/core/internal/dedup"
	"github.com/vantage-go/vantage/ports"
)

// processBatch drains a batch of streams: flush what is buffered, fetch and
// drain the streams (see drainBatch), flush again.
//
// The streams stay in flight, so no other batch takes them, until the
// completions handed to the flusher by then are acknowledged: until then a
// fetch would return the rows just applied again (they are still pending and
// leased to us), only for the dedup cache to skip them. A stream pushed
// meanwhile, by a claim or a notification, is drained again after that.
func (w *Worker) processBatch(ctx context.Context, ids []uuid.UUID) {
	w.cache.EvictExpired()
	w.flushPending(ctx)
	w.recordPoll(true)

	applied, again := w.drainBatch(ctx, ids)
	if len(again) > 0 {
		// A stream still had rows past the fetch limit after its last
		// refetch: drain it again once this batch is settled instead of at
		// the next claim tick.
		w.queue.Push(again...)
	}
	w.flushPending(ctx)
	w.completions.AfterSettled(func() { w.queue.Done(ids) })
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

// drainBatch fetches the pending events of streams and drains every stream
// that has some, at most MaxConcurrentPerspectives at once. A fetch cut at
// FetchMaxRows covers a prefix of the streams in id order; the streams past
// the cut are fetched next, while the drains of the first ones run, until
// every stream was fetched. It returns the number of (event, perspective)
// applications and the streams that still had rows past the limit after
// their last refetch.
func (w *Worker) drainBatch(ctx context.Context, ids []uuid.UUID) (int, []uuid.UUID) {
	var (
		mu      sync.Mutex
		applied int
		events  []ports.Event
		again   []uuid.UUID
		wg      sync.WaitGroup
	)
	collect := w.reg.hasReceptors(PostAllPerspectives, PostLifecycle)
	sem := make(chan struct{}, w.opts.MaxConcurrentPerspectives)
	// inflight counts the rows of fetches some of whose streams are still
	// draining (a fetch's rows share its result's memory). A fetch of the
	// streams past a cut waits until they are fewer than twice FetchMaxRows,
	// so a batch holds about three fetches' worth of rows however long the
	// streams' backlogs are, not MaxConcurrentPerspectives streams' worth
	// (one fetch ahead of the drains was 20% slower in memory catch-ups).
	inflight := 0
	settled := sync.NewCond(&mu)
	for remaining := ids; len(remaining) > 0 && ctx.Err() == nil; {
		if len(remaining) < len(ids) {
			mu.Lock()
			if inflight >= 2*w.opts.FetchMaxRows && w.fetchWaitHook != nil {
				w.fetchWaitHook()
			}
			for inflight >= 2*w.opts.FetchMaxRows {
				settled.Wait()
			}
			mu.Unlock()
			w.flushPending(ctx) // let the drains' completions travel meanwhile
		}
		res, seq, err := w.fetch(ctx, remaining)
		if err != nil {
			if ctx.Err() == nil {
				w.log.ErrorContext(ctx, "fetching pending events failed", slog.Int("streams", len(remaining)), slog.Any("error", err))
			}
			break
		}
		streams := splitByStream(res, seq, w.opts.FetchMaxRows)
		cursors := w.cursorsOf(ctx, streamIDs(streams))
		rows, left := len(res.Work), len(streams)
		if left > 0 {
			mu.Lock()
			inflight += rows
			mu.Unlock()
		}
		for i := range streams {
			sw := &streams[i]
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				n, evs, more := w.drainStream(ctx, sw, cursors, collect)
				mu.Lock()
				applied += n
				events = append(events, evs...)
				if more {
					again = append(again, sw.id)
				}
				if left--; left == 0 {
					inflight -= rows
					settled.Broadcast()
				}
				mu.Unlock()
			})
		}
		remaining = uncovered(remaining, streams)
	}
	wg.Wait()
	w.life.afterBatch(ctx, events)
	return applied, again
}

// uncovered returns the streams of ids a fetch with the given result did not
// reach: none unless the fetch was cut, else those ordered after the stream
// it was cut in (Work is ordered by stream id bytes).
func uncovered(ids []uuid.UUID, streams []streamWork) []uuid.UUID {
	if len(streams) == 0 || !streams[len(streams)-1].cut {
		return nil
	}
	last := streams[len(streams)-1].id
	var out []uuid.UUID
	for _, id := range ids {
		if bytes.Compare(id[:], last[:]) > 0 {
			out = append(out, id)
		}
	}
	return out
}

// streamWork is one stream's share of a fetch result. It is drained by one
// goroutine at a time.
type streamWork struct {
	id     uuid.UUID
	events []ports.Event    // ordered by version
	work   []ports.WorkItem // ordered by perspective, version
	seq    uint64           // the fetch's sequence number (see Worker.fetchSeq)
	cut    bool             // the fetch may have stopped inside this stream's rows
	// decoded caches, by index in events, decoded values every perspective
	// may share; nil until the first decode.
	decoded []decodedEvent
}

type decodedEvent struct {
	value any
	err   error
	done  bool
	boxed any // events[i] as an any, for the contexts of its applies
}

// boxed returns events[i] as an any, boxed once for every perspective
// applying it (EventFromContext hands out copies).
func (sw *streamWork) boxed(i int) any {
	d := sw.slot(i)
	if d.boxed == nil {
		d.boxed = sw.events[i]
	}
	return d.boxed
}

// decode returns the decoded value of events[i]. A value of a shareable
// type (see eventType.shareable) is decoded once for all the perspectives
// applying it; others are decoded afresh for each, since a handler may
// mutate what its value refers to.
func (sw *streamWork) decode(reg *Registry, i int) (any, error) {
	if sw.decoded != nil && sw.decoded[i].done {
		return sw.decoded[i].value, sw.decoded[i].err
	}
	v, shareable, err := reg.decode(sw.events[i])
	if shareable {
		d := sw.slot(i)
		d.value, d.err, d.done = v, err, true
	}
	return v, err
}

// slot returns the cache entry of events[i], allocating the cache on first
// use.
func (sw *streamWork) slot(i int) *decodedEvent {
	if sw.decoded == nil {
		sw.decoded = make([]decodedEvent, len(sw.events))
	}
	return &sw.decoded[i]
}

// event returns the index in sw.events of the event of row r, -1 when the
// fetch did not return it. hint is where to look first: rows walked in
// version order find their events at or just after the previous one's.
func (sw *streamWork) event(r ports.WorkItem, hint int) int {
	for i := hint; i < len(sw.events) && i <= hint+1; i++ {
		if sw.events[i].Version == r.EventVersion && sw.events[i].ID == r.EventID {
			return i
		}
	}
	i, ok := slices.BinarySearchFunc(sw.events, r.EventVersion, func(e ports.Event, v int64) int {
		return cmp.Compare(e.Version, v)
	})
	if ok && sw.events[i].ID == r.EventID {
		return i
	}
	for i := range sw.events { // not where the port's ordering puts it
		if sw.events[i].ID == r.EventID {
			return i
		}
	}
	return -1
}

// splitByStream cuts a fetch result into its streams, in stream id order,
// dropping streams without work. The port orders Work by stream,
// perspective and version and Events by stream and version, so each stream's
// share is a sub-slice; a result ordered otherwise is sorted first (copies).
// When the result holds maxRows rows the fetch may have been cut inside its
// last stream, which is marked cut.
func splitByStream(res *ports.EventsFetchPendingResult, seq uint64, maxRows int) []streamWork {
	work, events := res.Work, res.Events
	if !slices.IsSortedFunc(work, compareWork) {
		work = slices.Clone(work)
		slices.SortStableFunc(work, compareWork)
	}
	if !slices.IsSortedFunc(events, compareEvents) {
		events = slices.Clone(events)
		slices.SortStableFunc(events, compareEvents)
	}
	var out []streamWork
	for i, j := 0, 0; i < len(work); {
		id := work[i].StreamID
		end := i + 1
		for end < len(work) && work[end].StreamID == id {
			end++
		}
		for j < len(events) && bytes.Compare(events[j].StreamID[:], id[:]) < 0 {
			j++
		}
		evEnd := j
		for evEnd < len(events) && events[evEnd].StreamID == id {
			evEnd++
		}
		out = append(out, streamWork{id: id, events: events[j:evEnd:evEnd], work: work[i:end:end], seq: seq})
		i, j = end, evEnd
	}
	if maxRows > 0 && len(work) >= maxRows && len(out) > 0 {
		out[len(out)-1].cut = true
	}
	return out
}

func compareWork(a, b ports.WorkItem) int {
	if c := bytes.Compare(a.StreamID[:], b.StreamID[:]); c != 0 {
		return c
	}
	return cmp.Or(strings.Compare(a.Perspective, b.Perspective), cmp.Compare(a.EventVersion, b.EventVersion))
}

func compareEvents(a, b ports.Event) int {
	if c := bytes.Compare(a.StreamID[:], b.StreamID[:]); c != 0 {
		return c
	}
	return cmp.Compare(a.Version, b.Version)
}

func streamIDs(streams []streamWork) []uuid.UUID {
	ids := make([]uuid.UUID, len(streams))
	for i := range streams {
		ids[i] = streams[i].id
	}
	return ids
}

// drainStream applies a stream's pending events perspective by perspective.
// When the fetch may have been cut inside the stream it refetches the rest,
// once what it applied is acknowledged (else the refetch would return it
// again), while each pass still applies enough. It returns the number of
// applications, the distinct events applied when collect is set, and
// whether rows past the fetch limit may be left.
func (w *Worker) drainStream(ctx context.Context, sw *streamWork, cursors map[pairKey]ports.Cursor, collect bool) (int, []ports.Event, bool) {
	total := 0
	var (
		seen   map[uuid.UUID]bool
		events []ports.Event
	)
	if collect {
		seen = map[uuid.UUID]bool{}
	}
	for iter := 1; ; iter++ {
		n := 0
		for _, group := range groupByPerspective(sw.work) {
			c, ok := cursors[pairKey{stream: sw.id, perspective: group[0].Perspective}]
			k, applied := w.drainPair(ctx, sw, group, c, ok, collect)
			n += k
			if !collect {
				continue
			}
			for _, e := range applied {
				if !seen[e.ID] {
					seen[e.ID] = true
					events = append(events, e)
				}
			}
		}
		total += n
		if !sw.cut {
			return total, events, false
		}
		if n < w.opts.DrainLoopRefetchMinBatch || iter >= w.opts.DrainLoopMaxIterations || ctx.Err() != nil {
			return total, events, ctx.Err() == nil
		}
		w.flushPending(ctx)
		if err := w.completions.Flush(ctx); err != nil && ctx.Err() != nil {
			return total, events, false
		}
		res, seq, err := w.fetch(ctx, []uuid.UUID{sw.id})
		if err != nil {
			if ctx.Err() == nil {
				w.log.ErrorContext(ctx, "refetching stream failed", slog.String("stream_id", sw.id.String()), slog.Any("error", err))
			}
			return total, events, false
		}
		next := splitByStream(res, seq, w.opts.FetchMaxRows)
		if len(next) == 0 || next[0].id != sw.id {
			return total, events, false
		}
		sw = &next[0]
		cursors = w.cursorsOf(ctx, []uuid.UUID{sw.id})
	}
}

// groupByPerspective splits a stream's work into its perspectives' rows. The
// rows are ordered by perspective and version (see splitByStream), so each
// group is a sub-slice.
func groupByPerspective(work []ports.WorkItem) [][]ports.WorkItem {
	var groups [][]ports.WorkItem
	for i := 0; i < len(work); {
		j := i + 1
		for j < len(work) && work[j].Perspective == work[i].Perspective {
			j++
		}
		groups = append(groups, work[i:j:j])
		i = j
	}
	return groups
}

func workID(r *ports.WorkItem) uuid.UUID { return r.WorkID }

// parking holds a failed pair back until its failure is acknowledged by the
// backend (which releases the failed row and schedules it) and its retry
// time passed; before the acknowledgement a fetch would still see the row
// leased to us and apply it again without counting an attempt.
type parking struct {
	until time.Time
	acked bool
}

// isParked reports whether the pair is held back, forgetting a parking that
// is over.
func (w *Worker) isParked(k pairKey) bool {
	w.parkedMu.Lock()
	defer w.parkedMu.Unlock()
	p, ok := w.parked[k]
	if !ok {
		return false
	}
	if p.acked && !w.now().Before(p.until) {
		delete(w.parked, k)
		return false
	}
	return true
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
// completion (or the failure). It returns the number of events applied and,
// when collect is set, those events.
func (w *Worker) drainPair(ctx context.Context, sw *streamWork, rows []ports.WorkItem, cursor ports.Cursor, hasCursor, collect bool) (int, []ports.Event) {
	streamID := sw.id
	name := rows[0].Perspective
	key := pairKey{stream: streamID, perspective: name}
	if w.isParked(key) {
		return 0, nil
	}
	release, err := w.gates.acquire(ctx, key, nil)
	if err != nil {
		return 0, nil
	}
	defer release()
	// Check again: a run that held the gate may just have parked the pair;
	// and rows fetched before its failure was acknowledged are stale (the
	// backend released the failed row since).
	if w.isParked(key) || w.staleFetch(key, sw.seq) {
		return 0, nil
	}

	// Rows applied by an earlier batch whose completion is not acknowledged
	// yet come back on every fetch: skip them.
	fresh, deduped := dedup.Partition(w.cache, rows, workID)
	if len(deduped) > 0 && w.opts.Hooks.DedupObserver != nil {
		w.opts.Hooks.DedupObserver.OnEventsDeduped(deduped, name, streamID)
	}
	rows = w.deadLetterExhausted(ctx, fresh)
	if len(rows) == 0 {
		return 0, nil
	}

	p, ok := w.reg.perspective(name)
	if !ok {
		w.fail(ctx, key, rows, nil, uuid.Nil, 0, fmt.Errorf("no perspective named %q is registered in this instance", name))
		return 0, nil
	}
	if hasCursor && cursor.Status.Has(ports.CursorRewindRequired) && w.rewindEnabled() {
		evs := w.rewindPair(ctx, p, key, rows, cursor, false)
		return len(evs), evs
	}
	stored, err := w.loadModel(ctx, key)
	if err != nil && !errors.Is(err, ports.ErrNotFound) {
		if ctx.Err() == nil {
			w.log.ErrorContext(ctx, "loading model failed", slog.String("perspective", name), slog.String("stream_id", streamID.String()), slog.Any("error", err))
		}
		return 0, nil
	}
	model, err := p.decodeModel(stored.Data)
	if err != nil {
		w.fail(ctx, key, rows, nil, stored.LastEventID, stored.LastVersion, err)
		return 0, nil
	}

	run := pairRun{w: w, p: p, key: key, sw: sw, rows: rows, stored: stored, model: model, collect: collect}
	deadline := w.opts.ApplyTimeout
	actx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	if w.reg.hasReceptors(PrePerspective) {
		var toApply []ports.Event
		for _, r := range rows {
			if i := sw.event(r, 0); i >= 0 && r.EventVersion > stored.LastVersion {
				toApply = append(toApply, sw.events[i])
			}
		}
		w.life.prePerspective(actx, toApply)
	}
	ei := 0
	for i, r := range rows {
		if r.EventVersion <= stored.LastVersion {
			// Already reflected in the stored model (a re-delivery after a
			// crash or a lost completion): complete without applying. Rows
			// are in version order, so these are a prefix.
			run.done, run.saved, run.applied = i+1, i+1, i+1
			continue
		}
		if ei = sw.event(r, ei); ei < 0 {
			run.failAt(actx, i, fmt.Errorf("event %s of work row %s is missing from the fetch", r.EventID, r.WorkID))
			return run.finish(ctx)
		}
		if err := run.apply(actx, ei); err != nil {
			if ctx.Err() != nil {
				return run.finish(ctx) // shutting down: the rows stay leased and are re-delivered
			}
			if actx.Err() != nil {
				err = fmt.Errorf("lease deadline exceeded: %w", err)
			}
			run.failAt(actx, i, err)
			return run.finish(ctx)
		}
		if run.unsaved() >= w.opts.PerspectiveBatchSize {
			if err := run.save(ctx); err != nil {
				run.saveFailed(ctx, err)
				return run.finish(ctx)
			}
		}
	}
	if run.unsaved() > 0 {
		if err := run.save(ctx); err != nil {
			run.saveFailed(ctx, err)
			return run.finish(ctx)
		}
	}
	run.complete(ctx)
	return run.finish(ctx)
}

// pairRun is the state of one drainPair. Its rows are in version order and
// processed front to back, so its progress is three marks: rows[:done] are
// at or below the stored position, rows[done:saved] are applied and saved,
// rows[saved:applied] are applied and not saved yet.
type pairRun struct {
	w         *Worker
	p         perspective
	key       pairKey
	sw        *streamWork
	rows      []ports.WorkItem
	collect   bool // finish returns the events applied
	stored    ports.StoredModel
	model     any
	last      *ports.Event // last applied event
	lastSaved *ports.Event // last saved event, nil until a save
	done      int
	saved     int
	applied   int
}

// unsaved returns the number of applied rows not saved yet.
func (r *pairRun) unsaved() int { return r.applied - r.saved }

// savedCount returns the number of rows this run applied and saved.
func (r *pairRun) savedCount() int { return r.saved - r.done }

// apply applies sw.events[i], the event of rows[r.applied].
func (r *pairRun) apply(ctx context.Context, i int) error {
	ev := &r.sw.events[i]
	decoded, err := r.sw.decode(r.w.reg, i)
	if err != nil {
		return err
	}
	actx, err := r.w.applyContext(ctx, r.sw, i)
	if err != nil {
		return err
	}
	next, err := r.p.apply(actx, r.model, ev.Type, decoded)
	if err != nil {
		return err
	}
	r.model = next
	r.last = ev
	r.applied++
	return nil
}

// applyContext returns the context an apply function gets for sw.events[i], as
// establishSecurity builds it. The common case, no SecurityProvider and no
// scope on the event, takes one allocation instead of a chain of
// context.WithValue.
func (w *Worker) applyContext(ctx context.Context, sw *streamWork, i int) (context.Context, error) {
	if w.opts.Security.Provider != nil || sw.events[i].Metadata.Scope != nil {
		return w.establishSecurity(ctx, sw.events[i])
	}
	return &unscopedEventContext{Context: ctx, event: sw.boxed(i)}, nil
}

// unscopedEventContext carries the event being applied and no scope or
// security context: both read as absent, whatever the parent holds (see
// establishSecurity).
type unscopedEventContext struct {
	context.Context
	event any // a ports.Event, boxed once
}

func (c *unscopedEventContext) Value(key any) any {
	switch key.(type) {
	case eventKey:
		return c.event
	case scopeKey, securityKey:
		return nil
	}
	return c.Context.Value(key)
}

// finish fires PostPerspective for the events whose model is saved and
// returns their number and, when the run collects them, the events.
func (r *pairRun) finish(ctx context.Context) (int, []ports.Event) {
	n := r.savedCount()
	if n == 0 {
		return 0, nil
	}
	fire := r.w.reg.hasReceptors(PostPerspective)
	if !fire && !r.collect {
		return n, nil
	}
	events := make([]ports.Event, 0, n)
	ei := 0
	for _, row := range r.rows[r.done:r.saved] {
		ei = r.sw.event(row, ei) // found when applied
		events = append(events, r.sw.events[ei])
	}
	if fire {
		r.w.life.fire(ctx, PostPerspective, r.key.perspective, events)
	}
	return n, events
}

func (r *pairRun) save(ctx context.Context) error {
	data, err := r.p.encodeModel(r.model)
	if err != nil {
		return err
	}
	_, savedVersion := r.position()
	err = r.w.saveModel(ctx, &ports.ModelSaveParams{
		StreamID:        r.key.stream,
		Perspective:     r.key.perspective,
		Data:            data,
		LastEventID:     r.last.ID,
		LastVersion:     r.last.Version,
		ExpectedVersion: savedVersion,
		Now:             r.w.paramNow(),
	})
	if err != nil {
		return err
	}
	r.w.maybeSnapshot(ctx, r.key, savedVersion, *r.last, data)
	r.lastSaved = r.last
	r.saved = r.applied
	return nil
}

// dropUnsaved forgets the applied rows not saved yet: they are neither
// completed nor failed, and come back after their lease.
func (r *pairRun) dropUnsaved() { r.applied = r.saved }

// saveFailed handles a failed save of the unsaved rows. A version conflict
// means another applier moved the cursor: what this run saved completes,
// the rest comes back and is skipped. Any other error fails the first
// unsaved row, so it is retried with backoff.
func (r *pairRun) saveFailed(ctx context.Context, err error) {
	r.dropUnsaved()
	if errors.Is(err, ports.ErrVersionConflict) {
		r.w.log.WarnContext(ctx, "model moved under this run; dropping its unsaved part", slog.String("perspective", r.key.perspective), slog.String("stream_id", r.key.stream.String()))
		r.complete(ctx)
		return
	}
	if ctx.Err() != nil {
		return
	}
	r.failAt(ctx, r.saved, fmt.Errorf("saving model: %w", err))
}

// completedIDs returns the rows that may complete: saved ones and those at
// or below the stored position.
func (r *pairRun) completedIDs() []uuid.UUID {
	ids := make([]uuid.UUID, r.saved)
	for i, row := range r.rows[:r.saved] {
		ids[i] = row.WorkID
	}
	return ids
}

// position returns the position the completed rows move the cursor to: the
// last saved event, or the stored position when the run saved nothing.
func (r *pairRun) position() (uuid.UUID, int64) {
	if r.lastSaved == nil {
		return r.stored.LastEventID, r.stored.LastVersion
	}
	return r.lastSaved.ID, r.lastSaved.Version
}

func (r *pairRun) complete(ctx context.Context) {
	if r.saved == 0 {
		return
	}
	ids := r.completedIDs()
	lastID, lastVersion := r.position()
	c := ports.Completion{StreamID: r.key.stream, Perspective: r.key.perspective, LastEventID: lastID, LastVersion: lastVersion, WorkIDs: ids}
	r.w.cache.AddRange(ids)
	if err := r.w.strategy.ReportCompletion(ctx, c); err != nil && ctx.Err() == nil {
		r.w.log.ErrorContext(ctx, "reporting completion failed; rows are re-delivered after their lease", slog.Any("error", err))
	}
	r.announceSaved(lastVersion)
}

// announceSaved signals progress and fires OnPerspectiveEventProcessed when
// the run saved events, lastVersion being the position it reached.
func (r *pairRun) announceSaved(lastVersion int64) {
	n := r.savedCount()
	if n == 0 {
		return
	}
	r.w.signalProgress()
	if h := r.w.opts.Hooks.OnPerspectiveEventProcessed; h != nil {
		h(PerspectiveEventProcessed{Perspective: r.key.perspective, StreamID: r.key.stream, EventCount: n, LastVersion: lastVersion})
	}
}

// failAt saves what was applied before rows[i], the failing row, then
// reports the failure: applied rows complete, the failing row and the rest
// are released and retried after a backoff; the pair is parked until then.
func (r *pairRun) failAt(ctx context.Context, i int, cause error) {
	if r.unsaved() > 0 {
		if err := r.save(context.WithoutCancel(ctx)); err != nil {
			r.w.log.ErrorContext(ctx, "saving model before failure", slog.Any("error", err))
			r.dropUnsaved()
		}
	}
	lastID, lastVersion := r.position()
	r.announceSaved(lastVersion)
	r.w.fail(context.WithoutCancel(ctx), r.key, r.rows[i:], r.completedIDs(), lastID, lastVersion, cause)
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
	if maxAttempts == Unlimited || !slices.ContainsFunc(rows, func(r ports.WorkItem) bool { return r.Attempts > maxAttempts }) {
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
	items := itemsOf(batch)
	_, err := w.backend.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{
		InstanceID:  w.opts.InstanceID,
		Completions: items,
		DebugMode:   w.opts.DebugMode,
		Now:         w.paramNow(),
	})
	return err
}

func (w *Worker) flushFailures(ctx context.Context, batch []completion.Tracked[ports.Failure]) error {
	items := itemsOf(batch)
	return w.backend.Cursors.WorkFail(ctx, &ports.WorkFailParams{
		InstanceID: w.opts.InstanceID,
		Failures:   items,
		DebugMode:  w.opts.DebugMode,
		Now:        w.paramNow(),
	})
}

func (w *Worker) completionsAcknowledged(batch []completion.Tracked[ports.Completion]) {
	n := 0
	for _, t := range batch {
		n += len(t.Item.WorkIDs)
	}
	workIDs := make([]uuid.UUID, 0, n)
	for _, t := range batch {
		workIDs = append(workIDs, t.Item.WorkIDs...)
	}
	// One ActivateRetentionFor for the batch: one hold of the dedup lock
	// the drains contend for, not one per completion.
	w.acknowledge(trackingIDs(batch), workIDs)
	if w.claimHasMore.Load() {
		signal(w.claimWake) // room was freed for more of the backlog
	}
	if h := w.opts.Hooks.OnCompletionsFlushed; h != nil {
		h(CompletionsFlushed{Completions: itemsOf(batch)})
	}
}

func (w *Worker) failuresAcknowledged(batch []completion.Tracked[ports.Failure]) {
	var workIDs []uuid.UUID
	for _, t := range batch {
		f := t.Item
		workIDs = append(workIDs, f.AppliedWorkIDs...)
		w.parkAcked(pairKey{stream: f.StreamID, perspective: f.Perspective})
	}
	w.acknowledge(trackingIDs(batch), workIDs)
	if h := w.opts.Hooks.OnCompletionsFlushed; h != nil {
		h(CompletionsFlushed{Failures: itemsOf(batch)})
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

func itemsOf[T any](batch []completion.Tracked[T]) []T {
	items := make([]T, len(batch))
	for i, t := range batch {
		items[i] = t.Item
	}
	return items
}

func trackingIDs[T any](batch []completion.Tracked[T]) []uuid.UUID {
	ids := make([]uuid.UUID, len(batch))
	for i, t := range batch {
		ids[i] = t.ID
	}
	return ids
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
