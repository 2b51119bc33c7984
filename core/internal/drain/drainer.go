// Package drain drains batches of streams: it fetches each stream's
// pending events, applies them pair by pair through the perspectives,
// saves model and cursor together and hands the outcomes to the completer.
// A failed apply goes to the failure handling, a pair below its events to
// the rewinder; the lifecycle stages run around the applies.
//
// A batch runs its streams in parallel (MaxConcurrentStreams), a stream its
// perspectives in parallel (MaxPerspectivesPerStream), each pair under its
// gate; a stream is fetched again within its batch while it keeps getting
// events (MaxPasses, RefetchMinEvents).
package drain

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/complete"
	"github.com/vantage-go/vantage/core/internal/consume"
	"github.com/vantage-go/vantage/core/internal/dedup"
	"github.com/vantage-go/vantage/core/internal/failure"
	"github.com/vantage-go/vantage/core/internal/lease"
	"github.com/vantage-go/vantage/core/internal/modelstore"
	"github.com/vantage-go/vantage/core/internal/monitor"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/core/internal/perspective"
	"github.com/vantage-go/vantage/core/internal/queue"
	"github.com/vantage-go/vantage/core/internal/rewind"
	"github.com/vantage-go/vantage/core/internal/stage"
	"github.com/vantage-go/vantage/core/internal/telemetry"
	"github.com/vantage-go/vantage/ports"
)

// Config is what the drainer reads.
type Config struct {
	InstanceID uuid.UUID
	// FetchMaxRows is the row limit of a fetch (0: none).
	FetchMaxRows int
	// MaxConcurrentStreams bounds the streams of a batch drained at once,
	// MaxPerspectivesPerStream the perspectives of a stream, and
	// MaxRowsInFlight the rows fetched and not drained, and applied and
	// not acknowledged, across batches.
	MaxConcurrentStreams     int
	MaxPerspectivesPerStream int
	MaxRowsInFlight          int
	// MaxPasses bounds the fetches of a stream within a batch; a stream is
	// fetched again while its last pass applied at least RefetchMinEvents
	// events.
	MaxPasses        int
	RefetchMinEvents int
	// InfraRetryMax is the wait before a stream whose fetch failed is
	// drained again.
	InfraRetryMax time.Duration
	// StagesRecorded is whether the backend records lifecycle stages (see
	// rewind.Config).
	StagesRecorded bool
	// WriteLimit bounds each write of a table projection, SavePatience the
	// writes of a save shared by several pairs (see
	// modelstore.GroupPatience).
	WriteLimit   modelstore.WriteLimit
	SavePatience time.Duration

	Registry perspective.Registry
	// ApplyContext returns the context an apply of event gets: the event
	// and its security scope.
	ApplyContext func(ctx context.Context, event *ports.Event) (context.Context, error)
	Tracing      telemetry.Tracing
	Metrics      *telemetry.Metrics
	// OnBatchCycleComplete announces a drained batch once its terminal
	// stages ran, and OnEventsProcessed the events a pair's run saved,
	// once their completion is buffered; nil for none.
	OnBatchCycleComplete func(streams, applied int)
	OnEventsProcessed    func(perspective string, stream uuid.UUID, count int, lastVersion int64)
}

// Deps are the services the drainer calls.
type Deps struct {
	Queue     *queue.Queue
	Activity  *consume.Activity
	Fetcher   *Fetcher
	Cache     *dedup.Cache
	Completer *complete.Completer
	Parking   *pair.Parking
	Renewer   *lease.Renewer
	Monitor   *monitor.Monitor
	Lifecycle *stage.Lifecycle
	Store     *modelstore.Store
	Failures  *failure.Failures
	Rewinder  *rewind.Rewinder
}

// Drainer drains batches of streams (see the package doc).
type Drainer struct {
	*base.Env
	cfg       Config
	queue     *queue.Queue
	activity  *consume.Activity
	fetcher   *Fetcher
	cache     *dedup.Cache
	completer *complete.Completer
	parking   *pair.Parking
	renewer   *lease.Renewer
	monitor   *monitor.Monitor
	lifecycle *stage.Lifecycle
	store     *modelstore.Store
	fail      *failure.Failures
	rewind    *rewind.Rewinder
	// rows counts the fetched rows of the streams being drained, across
	// batches (see drainBatch).
	rows *rowsInFlight
}

// New returns a drainer.
func New(env *base.Env, cfg Config, d Deps) *Drainer {
	return &Drainer{
		Env: env, cfg: cfg, queue: d.Queue, activity: d.Activity, fetcher: d.Fetcher, cache: d.Cache, completer: d.Completer,
		parking: d.Parking, renewer: d.Renewer, monitor: d.Monitor, lifecycle: d.Lifecycle, store: d.Store,
		fail: d.Failures, rewind: d.Rewinder, rows: newRowsInFlight(),
	}
}

// DrainFetched drains the streams of a result Fetch returned (seq is its
// sequence number), as a batch does after its fetch, without releasing
// them, and returns the number of (event, perspective) applications.
func (dr *Drainer) DrainFetched(ctx context.Context, res *ports.EventsFetchPendingResult, seq uint64) int {
	n := 0
	for _, sw := range splitByStream(res, seq, dr.cfg.FetchMaxRows) {
		task := &streamTask{dr: dr, id: sw.id, rows: newRowsInFlight()}
		dr.drainStream(ctx, task, &sw, cursorsByPair(res.Cursors))
		n += task.applied
	}
	return n
}

// ProcessBatch drains a batch of streams: flush what is buffered, fetch and
// drain the streams (see drainBatch), flush again, then start the batch's
// terminal lifecycle stages; OnBatchCycleComplete fires once they ran.
//
// Each stream is released as soon as its own drain ended and the
// completions handed to the flusher by then are acknowledged: until then a
// fetch would return the rows just applied again (they are still pending
// and leased to us), only for the dedup cache to skip them. No stream waits
// for another stream of its batch. A stream pushed meanwhile, by a claim or
// a notification, is fetched again by its own drain (see drainStream), or
// drained again after its release when its drain loop ended.
func (dr *Drainer) ProcessBatch(ctx context.Context, ids []uuid.UUID) {
	ctx, span := dr.cfg.Tracing.StartBatch(ctx, len(ids))
	dr.completer.Sweep(ctx)
	defer dr.activity.BatchStarted()()

	start := dr.Now()
	applied, events := dr.drainBatch(ctx, ids)
	dr.completer.FlushPending(ctx)
	telemetry.EndBatch(span, applied)
	dr.cfg.Metrics.BatchDrained(ctx, len(ids), applied, dr.Now().Sub(start))
	// The cycle is complete once its terminal lifecycle stages ran.
	dr.lifecycle.AfterBatch(ctx, events, func() {
		if h := dr.cfg.OnBatchCycleComplete; h != nil {
			h(len(ids), applied)
		}
	})
}

// drainBatch fetches the pending events of streams and drains every stream
// that has some, at most MaxConcurrentStreams at once. A fetch cut at
// FetchMaxRows covers a prefix of the streams in id order; the streams past
// the cut are fetched next, while the drains of the first ones run, until
// every stream was fetched. It returns the number of (event, perspective)
// applications and, when terminal lifecycle stages have receptors, the
// events applied.
func (dr *Drainer) drainBatch(ctx context.Context, ids []uuid.UUID) (int, []ports.Event) {
	var (
		mu      sync.Mutex
		applied int
		events  []ports.Event
		wg      sync.WaitGroup
	)
	collect := dr.cfg.Registry.HasReceptors(stage.PostAllPerspectives, stage.PostLifecycle)
	sem := make(chan struct{}, dr.cfg.MaxConcurrentStreams)
	// What a worker holds while it catches up is its fetched rows, until
	// their streams' drains end, and the applied rows whose completions
	// wait for the backend's acknowledgement. Both are bounded across
	// batches by MaxRowsInFlight: before each fetch a batch waits until
	// fewer rows than that are fetched and not drained, and fewer are
	// applied and not acknowledged. Without the second bound, drains that
	// end before their completions are acknowledged would let fetches run
	// ahead of the acknowledgements by the whole backlog. A drain never
	// waits on the fetch loop, so both counts fall while it waits. A
	// stream's refetch does not wait (it replaces rows it holds itself) but
	// is counted: it returns the events appended while the stream was
	// drained, or the rest of a stream cut at the fetch limit.
	remaining := ids
	for len(remaining) > 0 && ctx.Err() == nil {
		dr.rows.waitBelow(dr.cfg.MaxRowsInFlight, dr.Signals.OnFetchWait)
		dr.completer.WaitUnackedBelow(ctx, dr.cfg.MaxRowsInFlight)
		res, seq, err := dr.fetcher.Fetch(ctx, remaining)
		if err != nil {
			break
		}
		streams := splitByStream(res, seq, dr.cfg.FetchMaxRows)
		dr.releaseIdle(ctx, remaining, streams)
		cursors := cursorsByPair(res.Cursors)
		now := dr.Now()
		for i := range streams {
			sw := &streams[i]
			dr.renewer.Hold(sw.id, now)
			task := &streamTask{dr: dr, id: sw.id, collect: collect, rows: dr.rows}
			task.refetched(len(sw.work))
			task.onFinish = func(n int, evs []ports.Event) {
				mu.Lock()
				applied += n
				events = append(events, evs...)
				mu.Unlock()
				<-sem
				wg.Done()
			}
			sem <- struct{}{}
			wg.Add(1)
			go task.drain(ctx, sw, cursors)
		}
		remaining = uncovered(remaining, streams)
	}
	// Streams left unfetched (a fetch failed, or we are stopping) are
	// released; a failed fetch retries them after the backoff of the
	// infrastructure's pairs.
	for _, id := range remaining {
		dr.releaseStream(ctx, id, false)
		if ctx.Err() == nil {
			dr.parking.WakeAt(id, dr.Now().Add(dr.cfg.InfraRetryMax))
		}
	}
	wg.Wait()
	return applied, events
}

// rowsInFlight counts the fetched rows the streams being drained hold,
// across batches (see drainBatch).
type rowsInFlight struct {
	mu      sync.Mutex
	settled sync.Cond // on mu; broadcast when rows were let go
	n       int
}

func newRowsInFlight() *rowsInFlight {
	r := &rowsInFlight{}
	r.settled.L = &r.mu
	return r
}

// add counts n more rows, or lets -n go.
func (r *rowsInFlight) add(n int) {
	r.mu.Lock()
	r.n += n
	r.mu.Unlock()
	if n < 0 {
		r.settled.Broadcast()
	}
}

// waitBelow waits until fewer than limit rows are held, calling waiting
// first when it has to wait.
func (r *rowsInFlight) waitBelow(limit int, waiting func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n >= limit {
		waiting()
	}
	for r.n >= limit {
		r.settled.Wait()
	}
}

// releaseIdle releases the streams a fetch covered that came back without
// work: their rows are held elsewhere, parked behind a retry time, or gone.
func (dr *Drainer) releaseIdle(ctx context.Context, requested []uuid.UUID, streams []streamWork) {
	if len(streams) == len(requested) {
		return
	}
	withWork := make(map[uuid.UUID]bool, len(streams))
	for i := range streams {
		withWork[streams[i].id] = true
	}
	beyond := map[uuid.UUID]bool{}
	for _, id := range uncovered(requested, streams) {
		beyond[id] = true
	}
	for _, id := range requested {
		if !withWork[id] && !beyond[id] {
			dr.releaseStream(ctx, id, false)
		}
	}
}

// releaseStream ends this instance's drain of a stream: once the
// completions buffered so far are acknowledged, the stream may be drained
// again (at once when more is set, or when it was pushed meanwhile), and
// the leases of its fetched rows are no longer renewed.
func (dr *Drainer) releaseStream(ctx context.Context, id uuid.UUID, more bool) {
	if more {
		dr.queue.Push(id) // in flight: queued again once done
	}
	dr.completer.FlushPending(ctx)
	if dr.queue.Settle(id) && !more {
		// Events arrived meanwhile: they wait for the acknowledgement, so
		// it should not wait for the flusher's coalescing window.
		dr.completer.SendHeld()
	}
	dr.completer.AfterSettled(func() {
		dr.renewer.Drop(id)
		dr.queue.Done([]uuid.UUID{id})
	})
}

func cursorsByPair(cs []ports.Cursor) map[pair.Key]*ports.Cursor {
	if len(cs) == 0 {
		return nil
	}
	out := make(map[pair.Key]*ports.Cursor, len(cs))
	for i := range cs {
		out[pair.Key{Stream: cs[i].StreamID, Perspective: cs[i].Perspective}] = &cs[i]
	}
	return out
}

// streamTask is the drain of one stream within a batch. It ends once its
// drain returned: every pair of its last pass ended or was abandoned (see
// drainPass).
type streamTask struct {
	dr       *Drainer
	id       uuid.UUID
	collect  bool // keep the events applied, for the terminal stages
	onFinish func(applied int, events []ports.Event)

	rows *rowsInFlight // the drainer's, counting the rows the task holds

	// Used by the drain's goroutine alone: its pairs report to it.
	applied int
	events  []ports.Event
	seen    map[uuid.UUID]bool
	more    bool
	held    int // rows of the latest refetch
}

// refetched counts the rows of a fetch of the stream, which replace those
// of its previous one.
func (t *streamTask) refetched(n int) {
	t.rows.add(n - t.held)
	t.held = n
}

// add records what a pair's run applied: the events, for the terminal
// stages, once each, in the order of the pairs and of their events.
func (t *streamTask) add(n int, events []ports.Event) {
	t.applied += n
	if !t.collect {
		return
	}
	if t.seen == nil {
		t.seen = map[uuid.UUID]bool{}
	}
	for _, e := range events {
		if !t.seen[e.ID] {
			t.seen[e.ID] = true
			t.events = append(t.events, e)
		}
	}
}

// drain drains the stream, then releases it and reports what it applied.
func (t *streamTask) drain(ctx context.Context, sw *streamWork, cursors map[pair.Key]*ports.Cursor) {
	t.dr.drainStream(ctx, t, sw, cursors)
	t.dr.releaseStream(ctx, t.id, t.more)
	t.rows.add(-t.held)
	t.onFinish(t.applied, t.events)
}
