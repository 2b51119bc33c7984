package enginetest_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// dedupRecorder is a core.DedupObserver that records the work marked in
// flight and the work deduplicated.
type dedupRecorder struct {
	mu       sync.Mutex
	inFlight map[uuid.UUID]bool
	deduped  map[uuid.UUID]int
}

func newDedupRecorder() *dedupRecorder {
	return &dedupRecorder{inFlight: map[uuid.UUID]bool{}, deduped: map[uuid.UUID]int{}}
}

func (r *dedupRecorder) OnEventsMarkedInFlight(ids []uuid.UUID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		r.inFlight[id] = true
	}
}

func (*dedupRecorder) OnRetentionActivated(int)    {}
func (*dedupRecorder) OnEvicted(int)               {}
func (*dedupRecorder) OnEventsRemoved([]uuid.UUID) {}

func (r *dedupRecorder) OnEventsDeduped(ids []uuid.UUID, _ string, _ uuid.UUID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		r.deduped[id]++
	}
}

func (r *dedupRecorder) marked(id uuid.UUID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inFlight[id]
}

// dedupedIDs returns the work ids deduplicated at least once.
func (r *dedupRecorder) dedupedIDs() []uuid.UUID {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]uuid.UUID, 0, len(r.deduped))
	for id := range r.deduped {
		ids = append(ids, id)
	}
	return ids
}

// waitFlushed waits for an acknowledged completion of work through version
// v.
func waitFlushed(t *testing.T, flushed <-chan core.CompletionsFlushed, v int64, what string) {
	t.Helper()
	for {
		for _, c := range waitFor(t, flushed, what).Completions {
			if c.LastVersion == v && len(c.WorkIDs) > 0 {
				return
			}
		}
	}
}

// loadCounter counts model loads.
type loadCounter struct {
	ports.ModelStore
	loads atomic.Int64
}

func (c *loadCounter) ModelLoad(ctx context.Context, params *ports.ModelLoadParams) (ports.StoredModel, error) {
	s, p := params.StreamID, params.Perspective
	c.loads.Add(1)
	return c.ModelStore.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: s, Perspective: p})
}

// refusedCompletions fails every completion that lists work while refusing
// is set, as a database that lost its connections would.
type refusedCompletions struct {
	ports.CursorStore
	refusing atomic.Bool
}

func (c *refusedCompletions) WorkComplete(ctx context.Context, p *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	if c.refusing.Load() {
		return nil, errors.New("connection refused")
	}
	return c.CursorStore.WorkComplete(ctx, p)
}

// redeliveries signals once a fetch returned the work row of a watched
// event for the nth time since the watch began: once the row was
// re-delivered. rows are the work ids of that fetch, every event's.
type redeliveries struct {
	ports.EventFetcher
	mu      sync.Mutex
	watch   uuid.UUID
	n       int
	fetches int
	rows    []uuid.UUID
	again   chan struct{}
}

func newRedeliveries(f ports.EventFetcher) *redeliveries {
	return &redeliveries{EventFetcher: f, again: make(chan struct{})}
}

// watchFor watches the work of event id, to signal its nth fetch from now.
func (r *redeliveries) watchFor(id uuid.UUID, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watch, r.n = id, n
}

func (r *redeliveries) EventsFetchPending(ctx context.Context, p *ports.EventsFetchPendingParams) (*ports.EventsFetchPendingResult, error) {
	res, err := r.EventFetcher.EventsFetchPending(ctx, p)
	if err != nil {
		return res, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watch != uuid.Nil && slices.ContainsFunc(res.Work, func(w ports.WorkItem) bool { return w.EventID == r.watch }) {
		if r.fetches++; r.fetches == r.n {
			for _, w := range res.Work {
				r.rows = append(r.rows, w.WorkID)
			}
			close(r.again)
		}
	}
	return res, nil
}

// deduplicatedAfter returns a channel that receives a value once a batch
// cycle that drained streams completed after the re-delivery with every
// re-delivered row deduplicated: the cycle of the batch that drained them
// does. A cycle that merely ends after the re-delivery's fetch is not
// enough: another consumer's batch, the one that released the stream
// before its own cycle ended, may be it. A re-delivery the cache missed
// never signals.
func deduplicatedAfter(opts *core.Options, r *redeliveries, observer *dedupRecorder) <-chan struct{} {
	done := make(chan struct{}, 1)
	opts.Hooks.OnBatchCycleComplete = func(c core.BatchCycle) {
		select {
		case <-r.again:
		default:
			return
		}
		r.mu.Lock()
		rows := r.rows
		r.mu.Unlock()
		deduped := observer.dedupedIDs()
		for _, id := range rows {
			if !slices.Contains(deduped, id) {
				return
			}
		}
		if c.Streams > 0 {
			select {
			case done <- struct{}{}:
			default:
			}
		}
	}
	return done
}

// Work re-delivered while its completion has not been acknowledged is
// skipped by the processed-event cache, on the engine path: the observer
// hears of it, and (without a model cache) the re-delivery costs no model
// load. Bypassing the cache costs a second load.
func TestRedeliveredUnacknowledgedWorkIsDeduplicated(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	models := &loadCounter{ModelStore: b.Models}
	cursors := &refusedCompletions{CursorStore: b.Cursors}
	fetches := newRedeliveries(b.Fetcher)
	b.Models, b.Cursors, b.Fetcher = models, cursors, fetches
	b.ModelBatch = nil // every load goes through loadCounter
	cursors.refusing.Store(true)
	observer := newDedupRecorder()
	var applies atomic.Int64
	reg := registryWith(t, func(_ context.Context, m total, e added) (total, error) {
		applies.Add(1)
		m.Sum += e.N
		return m, nil
	})
	opts := quietOptions(t)
	opts.Drain.ModelCacheSize = core.Unlimited // no model cache: every drain of the pair loads its model
	opts.Claims.LeaseDuration = time.Second    // the unacknowledged rows come back soon
	opts.Retries.Flush.MaxAttempts = 1
	opts.Retries.CompletionResend = core.Backoff{Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond}
	opts.Hooks.DedupObserver = observer
	drained := deduplicatedAfter(&opts, fetches, observer)
	flushed := make(chan core.CompletionsFlushed, 10)
	opts.Hooks.OnCompletionsFlushed = func(c core.CompletionsFlushed) { flushed <- c }

	stream := uuid.New()
	res := appendAdded(t, reg, b, stream, 1, 2)
	fetches.watchFor(res.Events[1].ID, 2) // the delivery, then a re-delivery
	startWorker(t, b, reg, opts)
	waitFor(t, drained, "the re-delivered rows to be drained and deduplicated")

	require.Equal(t, int64(1), models.loads.Load(), "the re-delivery cost no model load")
	ids := observer.dedupedIDs()
	require.Len(t, ids, 2, "the observer heard of both deduplicated rows")
	for _, id := range ids {
		require.True(t, observer.marked(id), "deduplicated work %s was marked in flight when applied", id)
	}
	require.Equal(t, int64(2), applies.Load(), "no event applied twice")

	cursors.refusing.Store(false)
	waitFor(t, flushed, "the completion once the backend answers")
	require.Equal(t, 3, loadTotal(t, b, stream).Sum)
	require.Equal(t, int64(2), applies.Load())
}

// A late event applied by a rewind whose completion is not acknowledged
// yet is re-delivered still flagged late and below the cursor: only the
// processed-event cache tells that the rewind applied it, so the re-delivery
// must not start a second rewind, which would apply it again.
func TestRewoundWorkRedeliveredIsNotReplayed(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	cursors := &refusedCompletions{CursorStore: b.Cursors}
	fetches := newRedeliveries(b.Fetcher)
	b.Cursors, b.Fetcher = cursors, fetches
	observer := newDedupRecorder()
	var mu sync.Mutex
	applied := map[int64]int{}
	reg := registryWith(t, func(ctx context.Context, m total, e added) (total, error) {
		ev, _ := core.EventFromContext(ctx)
		mu.Lock()
		applied[ev.Version]++
		mu.Unlock()
		m.Sum += e.N
		m.Seen = append(m.Seen, ev.Version)
		return m, nil
	})
	opts := rewindOptions(t)
	opts.Claims.LeaseDuration = time.Second
	opts.Retries.Flush.MaxAttempts = 1
	opts.Retries.CompletionResend = core.Backoff{Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond}
	opts.Hooks.DedupObserver = observer
	rewinds := make(chan core.RewindInfo, 10)
	var late atomic.Pointer[ports.Event]
	opts.Hooks.OnRewind = func(i core.RewindInfo) {
		// The rewind applied the late event and reports its completion
		// next: the first fetch from now is a re-delivery.
		fetches.watchFor(late.Load().ID, 1)
		rewinds <- i
	}
	drained := deduplicatedAfter(&opts, fetches, observer)

	flushed := make(chan core.CompletionsFlushed, 100)
	opts.Hooks.OnCompletionsFlushed = func(c core.CompletionsFlushed) { flushed <- c }
	w := startWorker(t, b, reg, opts)
	// The drain, not the startup scan, is to meet the late event.
	waitFor(t, w.StartupScanComplete(), "the startup scan")

	stream := uuid.New()
	appendAt(t, reg, b, stream, 1, 3)
	waitFlushed(t, flushed, 3, "the first completions")
	cursors.refusing.Store(true)
	ne, err := reg.Encode(added{N: 2})
	require.NoError(t, err)
	ne.ID, ne.Version = uuid.Must(uuid.NewV7()), 2
	late.Store(&ports.Event{ID: ne.ID})
	_, err = b.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{StreamID: stream, Events: []ports.NewEvent{ne}})
	require.NoError(t, err)

	info := waitFor(t, rewinds, "the rewind of the late event")
	require.Equal(t, 1, info.New)
	waitFor(t, drained, "the re-delivered late row to be drained and deduplicated")

	mu.Lock()
	require.Equal(t, 1, applied[2], "the late event was applied once")
	mu.Unlock()
	require.Len(t, observer.dedupedIDs(), 1, "the re-delivery was deduplicated")
	select {
	case i := <-rewinds:
		t.Fatalf("a second rewind ran: %+v", i)
	default:
	}

	cursors.refusing.Store(false)
	// The rewind's completion names the late row it lists: the save moved
	// the cursor to 3.
	waitFlushed(t, flushed, 2, "the rewind's completion once the backend answers")
	require.Equal(t, []int64{1, 2, 3}, loadTotal(t, b, stream).Seen)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, applied[2])
}
