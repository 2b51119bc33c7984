package core

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// spyBackend counts the calls the batch tests care about.
type spyBackend struct {
	claims, fetches, completes atomic.Int64
	// beforeFetch and afterFetch, when set before the test drives the
	// worker, see each fetch's number and the rows it returned.
	beforeFetch func(n int64)
	afterFetch  func(rows int)
	// claimed, when set, receives the Now of every claim.
	claimed chan time.Time
	// duringClaim, when set, runs inside every claim.
	duringClaim func()
}

type spyClaimer struct {
	ports.WorkClaimer
	spy *spyBackend
}

func (c spyClaimer) WorkClaim(ctx context.Context, p *ports.WorkClaimParams) (*ports.WorkClaimResult, error) {
	c.spy.claims.Add(1)
	if c.spy.duringClaim != nil {
		c.spy.duringClaim()
	}
	res, err := c.WorkClaimer.WorkClaim(ctx, p)
	if c.spy.claimed != nil {
		c.spy.claimed <- p.Now
	}
	return res, err
}

type spyFetcher struct {
	ports.EventFetcher
	spy *spyBackend
}

func (f spyFetcher) EventsFetchPending(ctx context.Context, p *ports.EventsFetchPendingParams) (*ports.EventsFetchPendingResult, error) {
	n := f.spy.fetches.Add(1)
	if f.spy.beforeFetch != nil {
		f.spy.beforeFetch(n)
	}
	res, err := f.EventFetcher.EventsFetchPending(ctx, p)
	if err == nil && f.spy.afterFetch != nil {
		f.spy.afterFetch(len(res.Work))
	}
	return res, err
}

type spyCursors struct {
	ports.CursorStore
	spy  *spyBackend
	last atomic.Pointer[ports.WorkCompleteParams]
	// hold, when set, holds every WorkComplete until it is closed.
	hold atomic.Pointer[chan struct{}]
}

func (c *spyCursors) WorkComplete(ctx context.Context, p *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	if h := c.hold.Load(); h != nil {
		<-*h
	}
	c.spy.completes.Add(1)
	c.last.Store(p)
	return c.CursorStore.WorkComplete(ctx, p)
}

type batchBundle struct {
	w       *Worker
	spy     *spyBackend
	cursors *spyCursors
	backend ports.Backend
	applied *atomic.Int64
	// gate, when set, holds every apply until it is closed.
	gate *atomic.Pointer[chan struct{}]
	// onApply, when set, runs in every apply before it counts, with the
	// perspective's name and the event.
	onApply *atomic.Pointer[func(ctx context.Context, perspective string, e placed)]
}

// setupBatch builds a worker that is not started: the tests drive its batch
// entry points directly, with its flushers running.
func setupBatch(t *testing.T) *batchBundle {
	t.Helper()
	return setupBatchWith(t, &Options{})
}

// setupBatchWith is setupBatch with the worker's options.
func setupBatchWith(t *testing.T, opts *Options) *batchBundle {
	t.Helper()
	return setupBatchNamed(t, opts, memory.New(memory.Options{}).Backend(), "c")
}

// setupBatchNamed is setupBatchWith on backend b with a perspective of each
// name, every one counting the placed events it applies.
func setupBatchNamed(t *testing.T, opts *Options, b ports.Backend, names ...string) *batchBundle {
	t.Helper()
	spy := &spyBackend{}
	cursors := &spyCursors{CursorStore: b.Cursors, spy: spy}
	b.Claimer = spyClaimer{b.Claimer, spy}
	b.Fetcher = spyFetcher{b.Fetcher, spy}
	b.Cursors = cursors

	applied := &atomic.Int64{}
	gate := &atomic.Pointer[chan struct{}]{}
	onApply := &atomic.Pointer[func(context.Context, string, placed)]{}
	reg := newTestRegistry(t)
	for _, name := range names {
		p := NewPerspective[counter](name)
		MustHandle(p, func(ctx context.Context, m counter, e placed) (counter, error) {
			if g := gate.Load(); g != nil {
				<-*g
			}
			if f := onApply.Load(); f != nil {
				(*f)(ctx, name, e)
			}
			applied.Add(1)
			m.N++
			return m, nil
		})
		require.NoError(t, reg.AddPerspective(p))
	}
	w, err := New(b, reg, opts)
	require.NoError(t, err)
	require.NoError(t, w.completer.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.completer.Stop(context.Background())) })
	require.NoError(t, reg.RegisterSubscriptions(t.Context(), b.Events))
	_, err = b.Claimer.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{InstanceID: w.InstanceID(), StaleThreshold: w.opts.Claims.StaleInstanceThreshold})
	require.NoError(t, err)
	return &batchBundle{w: w, spy: spy, cursors: cursors, backend: b, applied: applied, gate: gate, onApply: onApply}
}

// appendStreams appends evs to each of n new streams and returns them.
func (bb *batchBundle) appendStreams(t *testing.T, n int, evs ...any) []uuid.UUID {
	t.Helper()
	streams := make([]uuid.UUID, n)
	for i := range streams {
		streams[i] = uuid.New()
		_, err := bb.w.reg.Append(t.Context(), bb.backend.Events, streams[i], 0, evs...)
		require.NoError(t, err)
	}
	return streams
}

// drainFetched drains every stream of a fetch result and returns the number
// of applications.
func (bb *batchBundle) drainFetched(t *testing.T, res *ports.EventsFetchPendingResult, seq uint64) int {
	t.Helper()
	return bb.w.drain.DrainFetched(t.Context(), res, seq)
}

// An idle tick pushes a pending completion to the backend and
// never claims.
func TestIdleTickRoutesPendingCompletion(t *testing.T) {
	t.Parallel()

	bb := setupBatch(t)
	c := ports.Completion{StreamID: uuid.New(), Perspective: "c", LastEventID: uuid.New(), LastVersion: 1}
	require.NoError(t, bb.w.completer.Strategy().ReportCompletion(t.Context(), c))
	bb.w.completer.Sweep(t.Context()) // what an idle tick runs
	require.NoError(t, bb.w.completer.Flush(t.Context()))
	require.Equal(t, int64(1), bb.spy.completes.Load())
	require.Equal(t, []ports.Completion{c}, bb.cursors.last.Load().Completions)
	require.Zero(t, bb.spy.claims.Load(), "the batch path never claims")
	require.Empty(t, bb.w.completer.Strategy().PendingCompletions(), "acknowledged items are cleared")
}

// A drain stream id with nothing behind it is accepted quietly.
func TestBatchWithEmptyStream(t *testing.T) {
	t.Parallel()

	bb := setupBatch(t)
	bb.w.drain.ProcessBatch(t.Context(), []uuid.UUID{uuid.New()})
	require.Equal(t, int64(1), bb.spy.fetches.Load())
	require.Zero(t, bb.spy.claims.Load())
	require.Zero(t, bb.applied.Load())
}

// A drain stream id with work fetches, applies and completes.
func TestBatchDrainsStream(t *testing.T) {
	t.Parallel()

	bb := setupBatch(t)
	stream := bb.appendStreams(t, 1, placed{ID: "a"}, placed{ID: "b"})[0]
	bb.w.drain.ProcessBatch(t.Context(), []uuid.UUID{stream})
	require.GreaterOrEqual(t, bb.spy.fetches.Load(), int64(1))
	require.Equal(t, int64(2), bb.applied.Load())
	require.NoError(t, bb.w.completer.Flush(t.Context()))
	require.Equal(t, int64(1), bb.spy.completes.Load())

	// A second batch for the same stream sees nothing new: no double apply.
	bb.w.drain.ProcessBatch(t.Context(), []uuid.UUID{stream})
	require.Equal(t, int64(2), bb.applied.Load())
}

// A fetch cut at FetchMaxRows covers a prefix of the batch's streams: the
// batch fetches the rest itself, and a stream cut in the middle refetches
// its remainder once what it applied is acknowledged, so one batch drains
// everything, each event once.
func TestBatchDrainsPastFetchLimit(t *testing.T) {
	t.Parallel()

	bb := setupBatchWith(t, &Options{Drain: DrainOptions{FetchMaxRows: 3}})
	streams := bb.appendStreams(t, 5, placed{ID: "a"}, placed{ID: "b"}, placed{ID: "c"}, placed{ID: "d"})
	bb.w.drain.ProcessBatch(t.Context(), streams)
	require.Equal(t, int64(20), bb.applied.Load())
	require.NoError(t, bb.w.completer.Flush(t.Context()))
	for _, stream := range streams {
		m, err := bb.backend.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: stream, Perspective: "c"})
		require.NoError(t, err)
		require.Equal(t, int64(4), m.LastVersion)
	}

	bb.w.drain.ProcessBatch(t.Context(), streams)
	require.Equal(t, int64(20), bb.applied.Load(), "nothing is applied twice")
}

// A batch whose fetches are cut at FetchMaxRows fetches the streams past the
// cut only once fewer than twice FetchMaxRows fetched rows wait to be
// drained, so the rows it holds do not grow with the streams' backlogs.
func TestBatchBoundsRowsInFlight(t *testing.T) {
	t.Parallel()

	const limit = 3
	bb := setupBatchWith(t, &Options{Drain: DrainOptions{FetchMaxRows: limit}})
	streams := bb.appendStreams(t, 9, placed{ID: "a"}, placed{ID: "b"}, placed{ID: "c"})
	// Applies wait until the batch either waits for drained rows (bounded)
	// or fetches a third time regardless (unbounded); both release them.
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	bb.gate.Store(&gate)
	bb.w.Signals.FetchWait = release
	var fetched, worst atomic.Int64
	bb.spy.afterFetch = func(rows int) { fetched.Add(int64(rows)) }
	bb.spy.beforeFetch = func(n int64) {
		if n > 2 {
			if waiting := fetched.Load() - bb.applied.Load(); waiting > worst.Load() {
				worst.Store(waiting)
			}
			release()
		}
	}

	bb.w.drain.ProcessBatch(t.Context(), streams)
	require.Equal(t, int64(27), bb.applied.Load())
	require.Less(t, worst.Load(), int64(2*limit), "fetched rows waiting to be drained when a later fetch started")
}

// While the backend does not acknowledge completions, a batch stops
// fetching once MaxRowsInFlight applied rows wait for their
// acknowledgement, although its streams' drains ended and let their fetched
// rows go: what waits for the backend does not grow with the backlog.
func TestBatchBoundsUnacknowledgedRows(t *testing.T) {
	t.Parallel()

	const limit, fetchMax = 3, 2
	// One pass per stream: a stream cut at the fetch limit does not wait
	// for its acknowledgement to fetch its rest, so only the bound stops
	// the batch.
	bb := setupBatchWith(t, &Options{Drain: DrainOptions{FetchMaxRows: fetchMax, MaxRowsInFlight: limit, LoopMaxIterations: 1}})
	streams := bb.appendStreams(t, 12, placed{ID: "a"})
	hold := make(chan struct{})
	bb.cursors.hold.Store(&hold)
	var (
		once    sync.Once
		fetched atomic.Int64
		atWait  int64 = -1
	)
	release := func() { once.Do(func() { close(hold) }) }
	bb.w.Signals.AckWait = func() {
		once.Do(func() {
			atWait = fetched.Load()
			close(hold)
		})
	}
	bb.spy.afterFetch = func(rows int) { fetched.Add(int64(rows)) }

	bb.w.drain.ProcessBatch(t.Context(), streams)
	release()
	// When a fetch starts, fewer than limit rows are held by drains and
	// fewer than limit drained rows are unacknowledged; the fetch adds at
	// most fetchMax.
	require.GreaterOrEqual(t, atWait, int64(limit), "the batch waited for acknowledgements before fetching every stream")
	require.LessOrEqual(t, atWait, int64(2*(limit-1)+fetchMax), "rows fetched before the batch waited for acknowledgements")
	require.NoError(t, bb.w.completer.Flush(t.Context()))
	require.Equal(t, int64(len(streams)), bb.applied.Load(), "every event applied once")
}

// Rows fetched again before their completion is acknowledged are skipped
// by the dedup cache, and the observer hears about it: no event is applied
// twice while its completion is on its way.
func TestDedupSkipsUnacknowledgedRows(t *testing.T) {
	t.Parallel()

	bb := setupBatch(t)
	stream := bb.appendStreams(t, 1, placed{ID: "a"})[0]
	res, seq, err := bb.w.fetcher.Fetch(t.Context(), []uuid.UUID{stream})
	require.NoError(t, err)
	require.Equal(t, 1, bb.drainFetched(t, res, seq))
	// Same rows again (the completion is still only buffered).
	res, seq, err = bb.w.fetcher.Fetch(t.Context(), []uuid.UUID{stream})
	require.NoError(t, err)
	require.Len(t, res.Work, 1, "the row is still pending in the backend")
	require.Zero(t, bb.drainFetched(t, res, seq))
	require.Equal(t, int64(1), bb.applied.Load())
}

// setupFlushWatch builds a worker on a fake clock that never moves, with
// one stream of one event appended, and returns the channel its
// completion flushes are reported on.
func setupFlushWatch(t *testing.T) (*batchBundle, <-chan CompletionsFlushed, uuid.UUID) {
	t.Helper()
	flushed := make(chan CompletionsFlushed, 10)
	bb := setupBatchWith(t, &Options{Clock: clocktest.NewFake(), Hooks: Hooks{
		OnCompletionsFlushed: func(f CompletionsFlushed) { flushed <- f },
	}})
	return bb, flushed, bb.appendStreams(t, 1, placed{ID: "1"})[0]
}

// A stream whose drain ended waits for its completions' acknowledgement
// before it is drained again. When events arrive for it meanwhile, the
// completions are sent at once rather than at the end of the flusher's
// coalescing window, and the stream is queued again as soon as they are
// acknowledged; the clock never moves.
func TestEventsBehindAnAcknowledgementHurryTheFlush(t *testing.T) {
	t.Parallel()

	bb, flushed, stream := setupFlushWatch(t)
	bb.w.drain.ProcessBatch(t.Context(), bb.take(t, stream))
	require.Equal(t, int64(1), bb.applied.Load())
	select {
	case <-flushed:
		t.Fatal("the completion was sent before its window elapsed or anything waited for it")
	default:
	}
	require.True(t, bb.w.drainQ.IsInFlight(stream), "released only once acknowledged")

	bb.w.drainQ.Push(stream) // a notified claim: an event arrived
	recv(t, flushed, "the completion, sent at once")
	released := make(chan struct{})
	bb.w.completer.AfterSettled(func() { close(released) }) // after the stream's own
	recv(t, released, "the stream's release")
	require.Equal(t, []uuid.UUID{stream}, bb.w.drainQ.Take(1), "queued again")
}

// A worker left with nothing to drain sends the completions its last batch
// buffered at once when streams arrive less often than the flusher's
// coalescing window lasts: waiting would gather nothing more. The clock
// never moves, so neither the window nor the idle timeout ends.
func TestIdleWorkerSendsItsCompletionsAtOnce(t *testing.T) {
	t.Parallel()

	bb, flushed, stream := setupFlushWatch(t)
	ctx, cancel := context.WithCancel(t.Context())
	require.NoError(t, bb.w.consumers.Start(ctx, ctx))
	t.Cleanup(func() { cancel(); require.NoError(t, bb.w.consumers.Stop(context.Background())) })

	bb.w.drainQ.Push(stream)
	f := recv(t, flushed, "the completion, sent once the batch ended")
	require.Len(t, f.Completions, 1)
	require.Equal(t, stream, f.Completions[0].StreamID)
	require.Equal(t, int64(1), bb.applied.Load())
}
