package core

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// take queues streams and takes them as a consumer does: they are in flight
// until their drain releases them.
func (bb *batchBundle) take(t *testing.T, ids ...uuid.UUID) []uuid.UUID {
	t.Helper()
	bb.w.drainQ.Push(ids...)
	taken := bb.w.drainQ.Take(len(ids))
	require.ElementsMatch(t, ids, taken)
	return taken
}

// settle waits until the completions handed over so far are acknowledged
// and the releases of streams waiting for them ran.
func (bb *batchBundle) settle(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	bb.w.completer.AfterSettled(func() { close(done) }) // after every release registered before
	require.NoError(t, bb.w.completer.FlushNow(t.Context()))
	recv(t, done, "the completions to settle")
}

// appendOnFirst appends, the first time each event "<n>-first" is applied,
// more events "<n+1>-first", "<n+1>-x" ... (perPass in all) to the stream
// being drained and pushes it, as the claim that sees them would; it stops
// after pass last.
func (bb *batchBundle) appendOnFirst(t *testing.T, stream uuid.UUID, perPass, last int) {
	t.Helper()
	var mu sync.Mutex
	seen := map[int]bool{}
	f := func(ctx context.Context, _ string, e placed) {
		n, err := strconv.Atoi(strings.TrimSuffix(e.ID, "-first"))
		mu.Lock()
		again := seen[n]
		seen[n] = true
		mu.Unlock()
		if err != nil || again || n >= last {
			return
		}
		evs := []any{placed{ID: fmt.Sprintf("%d-first", n+1)}}
		for i := 1; i < perPass; i++ {
			evs = append(evs, placed{ID: fmt.Sprintf("%d-%d", n+1, i)})
		}
		if _, err := bb.w.reg.Append(ctx, bb.backend.Events, stream, 0, evs...); err != nil {
			t.Errorf("appending while draining: %v", err)
		}
		bb.w.drainQ.Push(stream)
	}
	bb.onApply.Store(&f)
}

// batchCycles sets opts' OnBatchCycleComplete hook to send every non-idle
// cycle on the returned channel.
func batchCycles(opts *Options) <-chan BatchCycle {
	cycles := make(chan BatchCycle, 10)
	opts.Hooks.OnBatchCycleComplete = func(c BatchCycle) {
		if c.Streams > 0 {
			cycles <- c
		}
	}
	return cycles
}

// Events appended to a stream while it is drained are applied by the same
// batch: the push of the stream while it was in flight makes the drain
// fetch it again once what it applied is acknowledged, and the push is
// consumed, so the stream is not drained again for nothing.
func TestDrainLoopRefetchesStreamPushedWhileDrained(t *testing.T) {
	t.Parallel()

	opts := &Options{}
	cycles := batchCycles(opts)
	bb := setupBatchWith(t, opts)
	stream := bb.appendStreams(t, 1, placed{ID: "1-first"}, placed{ID: "1-1"})[0]
	bb.appendOnFirst(t, stream, 2, 2)

	bb.w.drain.ProcessBatch(t.Context(), bb.take(t, stream))
	require.Equal(t, BatchCycle{Streams: 1, Applied: 4}, recv(t, cycles, "the batch"), "one batch applied the events appended meanwhile")
	require.Equal(t, int64(2), bb.spy.fetches.Load(), "a fetch and a refetch")
	bb.settle(t)
	require.False(t, bb.w.drainQ.IsInFlight(stream), "released")
	require.Zero(t, bb.w.drainQ.Len(), "the push was consumed by the refetch")
}

// The drain loop stops after Drain.LoopMaxIterations passes, however many
// events keep arriving; the stream, pushed meanwhile, is queued again.
func TestDrainLoopStopsAtMaxIterations(t *testing.T) {
	t.Parallel()

	opts := &Options{Drain: DrainOptions{LoopMaxIterations: 3}}
	cycles := batchCycles(opts)
	bb := setupBatchWith(t, opts)
	stream := bb.appendStreams(t, 1, placed{ID: "1-first"}, placed{ID: "1-1"})[0]
	bb.appendOnFirst(t, stream, 2, 100)

	bb.w.drain.ProcessBatch(t.Context(), bb.take(t, stream))
	require.Equal(t, BatchCycle{Streams: 1, Applied: 6}, recv(t, cycles, "the batch"), "three passes of two events")
	require.Equal(t, int64(3), bb.spy.fetches.Load())
	bb.settle(t)
	require.Equal(t, []uuid.UUID{stream}, bb.w.drainQ.Take(10), "queued again for the events of the last push")
}

// A pass that applied fewer than Drain.LoopRefetchMinBatch events ends the
// drain loop: the stream, pushed meanwhile, waits for the next batch. The
// events are counted once however many perspectives applied them.
func TestDrainLoopNeedsRefetchMinBatch(t *testing.T) {
	t.Parallel()

	opts := &Options{}
	cycles := batchCycles(opts)
	bb := setupBatchNamed(t, opts, memory.New(memory.Options{}).Backend(), "c", "d")
	stream := bb.appendStreams(t, 1, placed{ID: "1-first"})[0]
	bb.appendOnFirst(t, stream, 1, 100)

	bb.w.drain.ProcessBatch(t.Context(), bb.take(t, stream))
	require.Equal(t, BatchCycle{Streams: 1, Applied: 2}, recv(t, cycles, "the batch"), "one event, two perspectives")
	require.Equal(t, int64(1), bb.spy.fetches.Load(), "one event is too few to refetch for")
	bb.settle(t)
	require.Equal(t, []uuid.UUID{stream}, bb.w.drainQ.Take(10), "queued again for the next batch")
}

// The perspectives of a stream are drained in parallel, never more than
// MaxPerspectivesPerStream at once.
func TestStreamPerspectivesDrainInParallel(t *testing.T) {
	t.Parallel()

	bb := setupBatchNamed(t, &Options{Drain: DrainOptions{MaxPerspectivesPerStream: 2}}, memory.New(memory.Options{}).Backend(), "a", "b", "c", "d")
	slotWaits := make(chan struct{}, 10)
	bb.w.Signals.PairSlotWait = func() {
		select {
		case slotWaits <- struct{}{}:
		default:
		}
	}
	var inside, most atomic.Int64
	started := make(chan string, 4)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	f := func(_ context.Context, name string, _ placed) {
		n := inside.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		started <- name
		<-release
		inside.Add(-1)
	}
	bb.onApply.Store(&f)
	stream := bb.appendStreams(t, 1, placed{ID: "a"})[0]

	done := make(chan struct{})
	go func() { defer close(done); bb.w.drain.ProcessBatch(t.Context(), bb.take(t, stream)) }()
	first := []string{recv(t, started, "a first perspective"), recv(t, started, "a second perspective while the first applies")}
	recv(t, slotWaits, "the stream to wait for a free perspective slot")
	require.Equal(t, int64(2), inside.Load(), "two perspectives apply at once")
	once.Do(func() { close(release) })
	rest := []string{recv(t, started, "a third perspective"), recv(t, started, "a fourth perspective")}
	recv(t, done, "the batch")
	require.ElementsMatch(t, []string{"a", "b", "c", "d"}, append(first, rest...))
	require.Equal(t, int64(2), most.Load(), "never more than MaxPerspectivesPerStream at once")
	require.Equal(t, int64(4), bb.applied.Load())
}

// blockingLoads holds the model loads of some perspectives of one stream
// until their channel is closed, reporting each on blocked.
type blockingLoads struct {
	ports.ModelStore
	stream  uuid.UUID
	hold    map[string]chan struct{}
	blocked chan string
}

func (b *blockingLoads) ModelLoad(ctx context.Context, p *ports.ModelLoadParams) (ports.StoredModel, error) {
	if ch, ok := b.hold[p.Perspective]; ok && p.StreamID == b.stream {
		b.blocked <- p.Perspective
		<-ch
	}
	return b.ModelStore.ModelLoad(ctx, p)
}

// An apply that hangs, ignoring its context, holds neither the other
// perspectives of its stream nor other streams; once it is abandoned, its
// stream is released only when its other perspectives ended too.
func TestHungApplyHoldsOnlyItsPair(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	b := memory.New(memory.Options{Clock: clock}).Backend()
	hung, other := uuid.New(), uuid.New()
	loads := &blockingLoads{ModelStore: b.Models, stream: hung, blocked: make(chan string, 2),
		hold: map[string]chan struct{}{"b": make(chan struct{}), "c": make(chan struct{})}}
	b.Models, b.ModelBatch = loads, nil
	processed := make(chan pair.Key, 10)
	abandoned := make(chan AbandonedApply, 1)
	opts := &Options{
		Clock: clock, Drain: DrainOptions{ApplyTimeout: time.Minute, ApplyAbandonGrace: 10 * time.Second, MaxPerspectivesPerStream: 3},
		Hooks: Hooks{
			OnPerspectiveEventProcessed: func(e PerspectiveEventProcessed) {
				processed <- pair.Key{Stream: e.StreamID, Perspective: e.Perspective}
			},
			OnApplyAbandoned: func(a AbandonedApply) { abandoned <- a },
		},
	}
	bb := setupBatchNamed(t, opts, b, "a", "b", "c")
	hang := make(chan struct{})
	started := make(chan struct{}, 1)
	f := func(ctx context.Context, name string, _ placed) {
		if ev, _ := EventFromContext(ctx); ev.StreamID == hung && name == "a" {
			started <- struct{}{}
			<-hang // ignores its context
		}
	}
	bb.onApply.Store(&f)
	for _, s := range []uuid.UUID{hung, other} {
		_, err := bb.w.reg.Append(t.Context(), b.Events, s, 0, placed{ID: "x"})
		require.NoError(t, err)
	}
	bb.w.monitor.Start(t.Context(), nil)
	t.Cleanup(func() {
		close(hang)
		for _, ch := range loads.hold {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
		require.NoError(t, bb.w.monitor.Stop(context.Background()))
		bb.w.monitor.WaitAbandons()
	})

	done := make(chan struct{})
	go func() { defer close(done); bb.w.drain.ProcessBatch(t.Context(), bb.take(t, hung, other)) }()
	recv(t, started, "the apply that hangs")
	require.ElementsMatch(t, []string{"b", "c"}, []string{recv(t, loads.blocked, "another perspective"), recv(t, loads.blocked, "another perspective")},
		"the other perspectives of the stream drain while one apply hangs")
	close(loads.hold["b"])
	want := map[pair.Key]bool{{Stream: hung, Perspective: "b"}: true, {Stream: other, Perspective: "a"}: true, {Stream: other, Perspective: "b"}: true, {Stream: other, Perspective: "c"}: true}
	for len(want) > 0 {
		k := recv(t, processed, "the other pairs")
		require.True(t, want[k], "unexpected %v", k)
		delete(want, k)
	}

	clock.Advance(time.Minute + 10*time.Second)
	require.Equal(t, "a", recv(t, abandoned, "the abandonment").Perspective)
	bb.w.monitor.WaitAbandons() // the abandonment handed its pair back
	bb.settle(t)
	require.True(t, bb.w.drainQ.IsInFlight(hung), "not released while a perspective still drains")
	require.True(t, bb.w.renewer.Renewing(hung), "its leases are still renewed")
	select {
	case <-done:
		t.Fatal("the batch ended while a pair still drains")
	default:
	}

	close(loads.hold["c"])
	require.Equal(t, pair.Key{Stream: hung, Perspective: "c"}, recv(t, processed, "the last pair"))
	recv(t, done, "the batch, once every pair ended or was abandoned")
	bb.settle(t)
	require.False(t, bb.w.drainQ.IsInFlight(hung), "released")
	require.False(t, bb.w.renewer.Renewing(hung))
}

// PrePerspective still runs once per event and before any perspective
// applies it, though the perspectives of the stream drain in parallel: a
// perspective that finds the stage running waits for it.
func TestPrePerspectiveRunsBeforeParallelApplies(t *testing.T) {
	t.Parallel()

	bb := setupBatchNamed(t, &Options{}, memory.New(memory.Options{}).Backend(), "a", "b")
	waiting := make(chan struct{}, 1)
	bb.w.Signals.PrePerspectiveWait = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	var fired atomic.Int64
	var ran atomic.Bool
	require.NoError(t, AddReceptor(bb.w.reg, PrePerspective, Inline, func(context.Context, placed, StageInfo) error {
		fired.Add(1)
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Error("the other perspective did not wait for PrePerspective")
		}
		ran.Store(true)
		return nil
	}))
	f := func(_ context.Context, name string, _ placed) {
		if !ran.Load() {
			t.Errorf("%s applied the event before its PrePerspective stage ran", name)
		}
	}
	bb.onApply.Store(&f)
	stream := bb.appendStreams(t, 1, placed{ID: "a"})[0]

	bb.w.drain.ProcessBatch(t.Context(), bb.take(t, stream))
	require.Equal(t, int64(2), bb.applied.Load())
	require.Equal(t, int64(1), fired.Load(), "once per event")
}

// A late row handed to the drain with a cursor that the pair's model has
// passed since (the fetch read the cursor before a save moved it) was never
// applied, although its version is at or below the model's: the drain must
// not complete it as a re-delivery of an applied event. It leaves the row
// to a drain that reads the cursor as it is, which rewinds the pair.
func TestLateRowBelowAModelPastTheFetchedCursor(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	b := memory.New(memory.Options{Clock: clock}).Backend()
	bb := setupBatchNamed(t, &Options{Clock: clock}, b, "c")
	stream := uuid.New()
	appendAt := func(versions ...int64) []ports.NewEvent { return appendPlaced(t, b, stream, versions...) }
	fetch := func() *ports.EventsFetchPendingResult { return fetchStream(t, b, bb.w.InstanceID(), stream, 100) }
	appendAt(1, 3)
	bb.w.drain.ProcessBatch(t.Context(), bb.take(t, stream))
	bb.settle(t)
	require.Equal(t, int64(2), bb.applied.Load())
	appendAt(2) // late: below the cursor at 3

	res := fetch()
	require.Equal(t, []int64{2}, versions(res.Work))
	require.True(t, res.Work[0].Late)
	stale := slices.Clone(res.Cursors)
	for i := range stale {
		stale[i].LastVersion, stale[i].Status = 1, ports.CursorCompleted // as read before the save of version 3
		stale[i].RewindTriggerEventID, stale[i].RewindTriggerVersion = uuid.Nil, 0
	}
	res.Cursors = stale
	bb.drainFetched(t, res, bb.w.parking.NextFetch())
	bb.settle(t)

	again := fetch()
	require.Equal(t, []int64{2}, versions(again.Work), "the late row is still pending")
	clock.Advance(RewindDebounceDefault) // the rewind's debounce
	bb.drainFetched(t, again, bb.w.parking.NextFetch())
	bb.settle(t)
	stored, err := b.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: stream, Perspective: "c"})
	require.NoError(t, err)
	var m counter
	require.NoError(t, json.Unmarshal(stored.Data, &m))
	require.Equal(t, 3, m.N, "the rewind applied every event, the late one included")
}

// appendPlaced appends "placed" events at versions to stream and returns
// them.
func appendPlaced(t *testing.T, b ports.Backend, stream uuid.UUID, versions ...int64) []ports.NewEvent {
	t.Helper()
	var evs []ports.NewEvent
	for _, v := range versions {
		evs = append(evs, ports.NewEvent{ID: uuid.New(), Type: "placed", Version: v, Data: []byte(`{"id":"x"}`)})
	}
	_, err := b.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{StreamID: stream, Events: evs})
	require.NoError(t, err)
	return evs
}

// fetchStream fetches up to limit pending rows of stream for instance.
func fetchStream(t *testing.T, b ports.Backend, instance, stream uuid.UUID, limit int) *ports.EventsFetchPendingResult {
	t.Helper()
	res, err := b.Fetcher.EventsFetchPending(t.Context(), &ports.EventsFetchPendingParams{
		InstanceID: instance, StreamIDs: []uuid.UUID{stream}, MaxRows: limit, LeaseDuration: time.Minute, StaleThreshold: time.Minute,
	})
	require.NoError(t, err)
	return res
}

// versions returns the event versions of rows.
func versions(rows []ports.WorkItem) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.EventVersion
	}
	return out
}

// Rows whose attempts were used up by a takeover, although their events
// were applied and saved before the holder died (its completion lost with
// it), are re-deliveries: the drain completes them, never dead-letters
// them.
func TestExhaustedRowsAtOrBelowTheModelComplete(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	b := memory.New(memory.Options{Clock: clock}).Backend()
	var deadLettered atomic.Int64
	opts := &Options{Clock: clock, Retries: RetryOptions{MaxEventAttempts: 1}, Hooks: Hooks{
		OnDeadLettered: func(ports.DeadLetter) { deadLettered.Add(1) },
	}}
	bb := setupBatchNamed(t, opts, b, "c")
	stream := bb.appendStreams(t, 1, placed{ID: "a"}, placed{ID: "b"})[0]
	fetch := func(instance uuid.UUID) *ports.EventsFetchPendingResult {
		t.Helper()
		res, err := b.Fetcher.EventsFetchPending(t.Context(), &ports.EventsFetchPendingParams{
			InstanceID: instance, StreamIDs: []uuid.UUID{stream}, MaxRows: 100, LeaseDuration: time.Minute, StaleThreshold: time.Minute,
		})
		require.NoError(t, err)
		return res
	}
	// Another instance applies both events and saves the model, then dies
	// before its completion.
	dead := uuid.New()
	_, err := b.Claimer.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{InstanceID: dead, StaleThreshold: time.Minute})
	require.NoError(t, err)
	held := fetch(dead)
	require.Len(t, held.Work, 2)
	require.NoError(t, b.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
		StreamID: stream, Perspective: "c", Data: []byte(`{"n":2}`),
		LastEventID: held.Work[1].EventID, LastVersion: held.Work[1].EventVersion,
	}))
	clock.Advance(2 * time.Minute)
	_, err = b.Claimer.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{InstanceID: bb.w.InstanceID(), StaleThreshold: time.Minute})
	require.NoError(t, err)

	res := fetch(bb.w.InstanceID())
	require.Equal(t, []int{1, 1}, []int{res.Work[0].Attempts, res.Work[1].Attempts}, "the takeover charged the rows handed out to the dead instance")
	bb.drainFetched(t, res, bb.w.parking.NextFetch())
	bb.settle(t)

	require.Zero(t, deadLettered.Load(), "applied events are not dead-lettered")
	require.Zero(t, bb.applied.Load(), "nor applied again")
	require.Empty(t, fetch(bb.w.InstanceID()).Work, "they completed")
}

// A rewind handed late rows that were read before another rewind applied
// their events (its save took the flag off; its completion may still be on
// its way) replays them, but they are not new: counted as new, the pair's
// RewindInfo.New and its stages would tell of events applied before.
func TestRewindWithLateRowsAnotherRewindAppliedSince(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	b := memory.New(memory.Options{Clock: clock}).Backend()
	var news []int
	opts := &Options{Clock: clock, Hooks: Hooks{OnRewind: func(info RewindInfo) { news = append(news, info.New) }}}
	bb := setupBatchNamed(t, opts, b, "c")
	stream := uuid.New()
	appendAt := func(versions ...int64) []ports.NewEvent { return appendPlaced(t, b, stream, versions...) }
	appendAt(1, 3)
	bb.w.drain.ProcessBatch(t.Context(), bb.take(t, stream))
	bb.settle(t)
	appendAt(2) // late: below the cursor at 3

	res := fetchStream(t, b, bb.w.InstanceID(), stream, 100)
	require.Equal(t, []int64{2}, versions(res.Work))
	require.True(t, res.Work[0].Late)
	stale := slices.Clone(res.Work)
	clock.Advance(RewindDebounceDefault)
	bb.drainFetched(t, res, bb.w.parking.NextFetch())
	bb.settle(t)
	require.Equal(t, []int{1}, news, "the first rewind applied the late event")

	key := pair.Key{Stream: stream, Perspective: "c"}
	p, ok := bb.w.reg.lookup("c")
	require.True(t, ok)
	cs, err := b.Cursors.CursorsGet(t.Context(), &ports.CursorsGetParams{StreamIDs: []uuid.UUID{stream}, Perspective: "c"})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	turn, err := bb.w.parking.Take(t.Context(), key)
	require.NoError(t, err)
	fresh, _, err := bb.w.rewind.RewindPair(t.Context(), p, turn, stale, nil, cs[0], true, nil)
	turn.Release()
	require.NoError(t, err)
	require.Empty(t, fresh, "the late event was applied by the first rewind")
	require.Equal(t, []int{1, 0}, news)

	stored, err := b.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: stream, Perspective: "c"})
	require.NoError(t, err)
	var m counter
	require.NoError(t, json.Unmarshal(stored.Data, &m))
	require.Equal(t, 3, m.N, "each event once in the model")
}

// A run of re-deliveries only (rows whose events a save holds, their
// completion lost) reports the position of the last row it holds, not the
// model's: the fetch hands a pair's rows over from the first, and the rows
// it left for the next fetch lie between the two. Reported at the model's
// position, the report would not list them and the backend would take
// them for stragglers never applied: late rows and a rewind, or with
// rewinds off dead letters, for events the model holds.
func TestRedeliveriesCompleteUpToTheRowsInHand(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	b := memory.New(memory.Options{Clock: clock}).Backend()
	bb := setupBatchNamed(t, &Options{Clock: clock}, b, "c")
	stream := bb.appendStreams(t, 1, placed{ID: "a"}, placed{ID: "b"}, placed{ID: "c"})[0]
	evs, err := b.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream})
	require.NoError(t, err)
	require.Len(t, evs, 3)
	// The model of all three, saved by an instance whose completion was lost.
	require.NoError(t, b.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
		StreamID: stream, Perspective: "c", Data: []byte(`{"n":3}`), LastEventID: evs[2].ID, LastVersion: 3,
	}))
	fetch := func(limit int) *ports.EventsFetchPendingResult {
		return fetchStream(t, b, bb.w.InstanceID(), stream, limit)
	}

	first := fetch(1)
	require.Equal(t, []int64{1}, versions(first.Work))
	bb.drainFetched(t, first, bb.w.parking.NextFetch())
	bb.settle(t)
	late, err := b.Rewind.WorkLate(t.Context(), &ports.WorkLateParams{StreamID: stream, Perspective: "c"})
	require.NoError(t, err)
	require.Empty(t, versions(late), "the rows left for the next fetch are not stragglers")

	rest := fetch(10)
	require.Equal(t, []int64{2, 3}, versions(rest.Work))
	require.Len(t, rest.Cursors, 1)
	require.False(t, rest.Cursors[0].Status.Has(ports.CursorRewindRequired))
	bb.drainFetched(t, rest, bb.w.parking.NextFetch())
	bb.settle(t)
	require.Empty(t, fetch(10).Work)
	require.Zero(t, bb.applied.Load(), "every event was in the model")
}

// A rewind's completion, like a drain's, names no position past the rows
// it was handed: the rows the fetch left for the next one, below the
// model's position (their completion lost), are not stragglers.
func TestRewindCompletesUpToTheRowsInHand(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	b := memory.New(memory.Options{Clock: clock}).Backend()
	var rewinds []RewindInfo
	opts := &Options{Clock: clock, Hooks: Hooks{OnRewind: func(info RewindInfo) { rewinds = append(rewinds, info) }}}
	bb := setupBatchNamed(t, opts, b, "c")
	stream := uuid.New()
	appendAt := func(versions ...int64) []ports.NewEvent { return appendPlaced(t, b, stream, versions...) }
	evs := appendAt(1, 3, 4, 5)
	// The model of all four, saved by an instance whose completion was lost.
	require.NoError(t, b.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
		StreamID: stream, Perspective: "c", Data: []byte(`{"n":4}`), LastEventID: evs[3].ID, LastVersion: 5,
	}))
	appendAt(2) // late: below the cursor at 5
	fetch := func(limit int) *ports.EventsFetchPendingResult {
		return fetchStream(t, b, bb.w.InstanceID(), stream, limit)
	}

	first := fetch(2)
	require.Equal(t, []int64{1, 2}, versions(first.Work))
	clock.Advance(RewindDebounceDefault)
	bb.drainFetched(t, first, bb.w.parking.NextFetch())
	bb.settle(t)
	require.Len(t, rewinds, 1)
	require.Equal(t, 1, rewinds[0].New, "the late event")
	late, err := b.Rewind.WorkLate(t.Context(), &ports.WorkLateParams{StreamID: stream, Perspective: "c"})
	require.NoError(t, err)
	require.Empty(t, versions(late), "the rows left for the next fetch are not stragglers")

	rest := fetch(10)
	require.Equal(t, []int64{3, 4, 5}, versions(rest.Work))
	require.False(t, rest.Cursors[0].Status.Has(ports.CursorRewindRequired))
	bb.drainFetched(t, rest, bb.w.parking.NextFetch())
	bb.settle(t)
	require.Empty(t, fetch(10).Work)
	require.Len(t, rewinds, 1, "one rewind")
}
