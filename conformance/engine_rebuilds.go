package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// runEngineRebuilds runs the scenarios of rebuild requests, stored through
// ports.Admin and carried out by running workers through
// ports.RebuildQueue, which skip when the backend lacks either port or a
// RewindStore; and those of a rebuild on an instance that does not hold
// the stream, which skip without a RewindStore.
func runEngineRebuilds(t *testing.T, newBackend NewBackendFunc) {
	t.Helper()
	group(t, "EngineRebuilds", map[string]func(t *testing.T){
		"RequestCarriedOutByARunningWorker":     func(t *testing.T) { testRebuildRequest(t, newBackend) },
		"RequestReleasedAtStopAndResumed":       func(t *testing.T) { testRebuildRequestReleasedAtStop(t, newBackend) },
		"RequestTakenOverFromADeadInstance":     func(t *testing.T) { testRebuildRequestTakenOver(t, newBackend) },
		"RequestFailsOnAnEventItCannotReplay":   func(t *testing.T) { testRebuildRequestFails(t, newBackend) },
		"RequestCancelledWhileRunningStops":     func(t *testing.T) { testRebuildRequestCancelled(t, newBackend) },
		"RebuildOnAnotherInstanceThanTheHolder": func(t *testing.T) { testRebuildElsewhere(t, newBackend) },
		"RebuildWhileTheHolderApplies":          func(t *testing.T) { testRebuildDuringApply(t, newBackend) },
		"RebuildOfACursorThatLostItsModel":      func(t *testing.T) { testRebuildCursorWithoutModel(t, newBackend) },
		"DrainRepairsACursorThatLostItsModel":   func(t *testing.T) { testDrainRepairsCursorWithoutModel(t, newBackend) },
		"RebuildWhileCompletionsAreOnTheirWay":  func(t *testing.T) { testRebuildBeforeCompletion(t, newBackend) },
		"RebuildLeavesALateEventToItsRewind":    func(t *testing.T) { testRebuildLeavesLate(t, newBackend) },
	})
}

// A completion sent before a retirement with DropState (its
// acknowledgement lost, say) lands after the perspective was revived: it
// brings the pair's cursor back, without the model that the retirement
// dropped. The drain must not apply the next event over and over against
// a position no model stands for (it replays the pair itself, see
// testDrainRepairsCursorWithoutModel), and the operator's rebuild after
// the revival must rebuild the pair up to its cursor, model or not.
func testRebuildCursorWithoutModel(t *testing.T, newBackend NewBackendFunc) {
	f := setupRebuild(t, newBackend)
	stream := f.streams[0]
	ctx := t.Context()
	f.dropWithStaleCompletion(t, stream)

	var applied atomic.Int64 // applies of the event appended after the revival
	f.factor.Store(2)
	o := f.options()
	logs := &recordLog{}
	o.Logger = slog.New(logs)
	f.onApply = func(ev *ports.Event) {
		if ev.StreamID == stream && ev.Version == 4 {
			applied.Add(1)
		}
	}
	w := f.start(t, o)
	_, err := f.registry(t).Append(ctx, f.b.Events, stream, 0, tick{N: 4})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return applied.Load() > 0 || logs.errorContaining("rebuild") > 0 }, scenarioTimeout, time.Millisecond,
		"the drain tried the new event, or told that the pair needs a rebuild")

	n, err := w.Rebuild(ctx, "scaled", stream)

	require.NoError(t, err, "the rebuild saves against the cursor, model or not")
	require.Equal(t, 1, n, "one stream rebuilt")
	require.Eventually(t, func() bool { return len(f.scaled(t, stream)) == 4 }, scenarioTimeout, time.Millisecond, "the new event applied")
	require.Equal(t, []int64{2, 4, 6, 8}, f.scaled(t, stream), "rebuilt up to the cursor, then the new event")
	require.Less(t, applied.Load(), int64(50), "the drain waited for the rebuild instead of applying in a loop")
}

// The same state as in testRebuildCursorWithoutModel, repaired by the
// drain itself, with rewinds on: the events below the cursor that no model
// holds, and any event above it whose rows the retirement deleted, would
// otherwise wait for an operator, or be left out of the model for good by
// a rebuild run before the drain went on. The drain replays the stream up
// to its newest pending row, as a rewind does, then goes on.
func testDrainRepairsCursorWithoutModel(t *testing.T, newBackend NewBackendFunc) {
	f := setupRebuild(t, newBackend)
	stream := f.streams[0]
	ctx := t.Context()
	f.dropWithStaleCompletion(t, stream)

	f.factor.Store(2)
	f.start(t, f.options())
	_, err := f.registry(t).Append(ctx, f.b.Events, stream, 0, tick{N: 4})
	require.NoError(t, err)

	require.Eventually(t, func() bool { return len(f.scaled(t, stream)) == 4 }, scenarioTimeout, time.Millisecond, "the pair repaired and the new event applied")
	require.Equal(t, []int64{2, 4, 6, 8}, f.scaled(t, stream), "replayed up to the cursor, then the new event, in order")
	requireNoRewind(t, mustCursor(t, f.b, stream, "scaled"))
}

// dropWithStaleCompletion retires "scaled" with DropState, revives it, and
// lands a completion of stream's pair sent before the retirement: the
// cursor comes back at its old position, without its model.
func (f *rebuildFixture) dropWithStaleCompletion(t *testing.T, stream uuid.UUID) {
	t.Helper()
	ctx := t.Context()
	cur := mustCursor(t, f.b, stream, "scaled")
	_, err := f.b.Admin.PerspectiveRetire(ctx, &ports.PerspectiveRetireParams{Perspective: "scaled", DropState: true})
	require.NoError(t, err)
	require.NoError(t, f.b.Admin.PerspectiveRevive(ctx, &ports.PerspectiveReviveParams{Perspective: "scaled"}))
	_, err = f.b.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{
		InstanceID:  uuid.Must(uuid.NewV7()),
		Completions: []ports.Completion{{StreamID: stream, Perspective: "scaled", LastEventID: cur.LastEventID, LastVersion: cur.LastVersion}},
	})
	require.NoError(t, err)
}

// rebuildFixture is a backend whose streams hold three ticks each, applied
// by the perspective "scaled" at factor 1: each model holds the versions
// times the factor its events were applied at, so a model rebuilt at
// another factor tells which streams were rebuilt.
type rebuildFixture struct {
	open    Opener
	b       ports.Backend
	streams []uuid.UUID // in byte order, the order rebuilds go through them
	factor  atomic.Int64
	// block, when set, makes the apply of streams[1] wait for its context
	// to end, after sending on entered.
	block   atomic.Bool
	entered chan struct{}
	// fail, when set, makes the apply of streams[1] fail.
	fail atomic.Bool
	// requests receives what OnRebuildRequest reports.
	requests chan ports.RebuildRequest
	// onApply, when set before a worker starts, sees every event applied.
	onApply func(ev *ports.Event)
}

// setupRebuild appends the events of three streams and has a first worker
// apply them at factor 1, then stops it.
func setupRebuild(t *testing.T, newBackend NewBackendFunc) *rebuildFixture {
	t.Helper()
	f := &rebuildFixture{open: newBackend(t), entered: make(chan struct{}, 1), requests: make(chan ports.RebuildRequest, 1000)}
	f.b = f.open(t)
	if f.b.Rebuilds == nil || f.b.Admin == nil || f.b.Rewind == nil {
		t.Skip("adapter does not implement ports.RebuildQueue, ports.Admin and ports.RewindStore")
	}
	f.factor.Store(1)
	for range 3 {
		f.streams = append(f.streams, uuid.Must(uuid.NewV7()))
	}
	slices.SortFunc(f.streams, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	pr := newProgress()
	o := f.options()
	o.Hooks = pr.hooks(o.Hooks)
	w := f.start(t, o)
	reg := f.registry(t)
	for _, s := range f.streams {
		_, err := reg.Append(t.Context(), f.b.Events, s, 0, tick{N: 1}, tick{N: 2}, tick{N: 3})
		require.NoError(t, err)
	}
	pr.waitUntil(t, "every stream applied", func() bool {
		for _, s := range f.streams {
			if len(f.scaled(t, s)) < 3 {
				return false
			}
		}
		return true
	})
	stop(t, w)
	return f
}

// registry returns a registry with the perspective "scaled".
func (f *rebuildFixture) registry(t *testing.T) *core.Registry {
	t.Helper()
	p := core.NewPerspective[versioned]("scaled")
	core.MustHandle(p, func(ctx context.Context, m versioned, _ tick) (versioned, error) {
		ev, _ := core.EventFromContext(ctx)
		if f.onApply != nil {
			f.onApply(&ev)
		}
		if f.block.Load() && ev.StreamID == f.streams[1] {
			select {
			case f.entered <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return m, ctx.Err()
		}
		if f.fail.Load() && ev.StreamID == f.streams[1] {
			return m, errors.New("boom")
		}
		m.Values = append(m.Values, ev.Version*f.factor.Load())
		return m, nil
	})
	return newRegistry(t, p)
}

// options are the workers' options: requests looked for every 10ms.
func (f *rebuildFixture) options() core.Options {
	o := lifecycleOptions()
	o.Rewind.RebuildPollInterval = 10 * time.Millisecond
	o.Hooks.OnRebuildRequest = func(r ports.RebuildRequest) {
		select {
		case f.requests <- r:
		default:
		}
	}
	return o
}

// start starts a worker of the perspective "scaled" on its own handle.
func (f *rebuildFixture) start(t *testing.T, o core.Options) *core.Worker {
	t.Helper()
	return startWorker(t, f.open(t), f.registry(t), o)
}

// scaled returns the values of the stream's model.
func (f *rebuildFixture) scaled(t *testing.T, stream uuid.UUID) []int64 {
	t.Helper()
	return loadModel[versioned](t, f.b, stream, "scaled").Values
}

// waitRequest waits until a worker reports the request id in status.
func (f *rebuildFixture) waitRequest(t *testing.T, id uuid.UUID, status ports.RebuildStatus) ports.RebuildRequest {
	t.Helper()
	deadline := time.NewTimer(scenarioTimeout)
	defer deadline.Stop()
	for {
		select {
		case r := <-f.requests:
			if r.ID == id && r.Status == status {
				return r
			}
		case <-deadline.C:
			t.Fatalf("timed out waiting for rebuild request %s to be %s; it is %+v", id, status, getRebuild(t, f.b, id))
		}
	}
}

// stop stops w at once.
func stop(t *testing.T, w *core.Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), scenarioTimeout)
	defer cancel()
	require.NoError(t, w.Stop(ctx))
}

func testRebuildRequest(t *testing.T, newBackend NewBackendFunc) {
	f := setupRebuild(t, newBackend)
	w := f.start(t, f.options())
	f.factor.Store(10)

	all := requestRebuild(t, f.b, ports.RebuildRequestParams{Perspective: "scaled", RequestedBy: "conformance"})
	done := f.waitRequest(t, all.ID, ports.RebuildDone)

	for _, s := range f.streams {
		require.Equal(t, []int64{10, 20, 30}, f.scaled(t, s), "rebuilt model equals a fresh replay")
	}
	r := getRebuild(t, f.b, all.ID)
	require.Equal(t, ports.RebuildDone, r.Status)
	require.Empty(t, r.Error)
	require.Equal(t, w.InstanceID(), r.InstanceID)
	require.Equal(t, 1, r.Attempt)
	require.Equal(t, ports.RebuildFigures{StreamsTotal: 3, StreamsDone: 3, EventsReplayed: 9, ResumeAfter: f.streams[2]}, r.RebuildFigures)
	require.Equal(t, r.RebuildFigures, done.RebuildFigures, "the hook reports what was recorded")
	require.False(t, r.StartedAt.IsZero())
	require.False(t, r.FinishedAt.Before(r.StartedAt), "finished %s, started %s", r.FinishedAt, r.StartedAt)

	// A request for some streams rebuilds those only.
	f.factor.Store(100)
	one := requestRebuild(t, f.b, ports.RebuildRequestParams{Perspective: "scaled", StreamIDs: []uuid.UUID{f.streams[1]}})
	f.waitRequest(t, one.ID, ports.RebuildDone)
	require.Equal(t, []int64{100, 200, 300}, f.scaled(t, f.streams[1]))
	require.Equal(t, []int64{10, 20, 30}, f.scaled(t, f.streams[0]))
	require.Equal(t, ports.RebuildFigures{StreamsTotal: 1, StreamsDone: 1, EventsReplayed: 3, ResumeAfter: f.streams[1]},
		getRebuild(t, f.b, one.ID).RebuildFigures)

	// A request for a perspective the worker does not run waits.
	other := requestRebuild(t, f.b, ports.RebuildRequestParams{Perspective: "elsewhere"})
	f.factor.Store(1000)
	last := requestRebuild(t, f.b, ports.RebuildRequestParams{Perspective: "scaled", StreamIDs: []uuid.UUID{f.streams[0]}})
	f.waitRequest(t, last.ID, ports.RebuildDone)
	require.Equal(t, ports.RebuildPending, getRebuild(t, f.b, other.ID).Status)
}

func testRebuildRequestReleasedAtStop(t *testing.T, newBackend NewBackendFunc) {
	f := setupRebuild(t, newBackend)
	first := f.start(t, f.options())
	f.factor.Store(10)
	f.block.Store(true)

	r := requestRebuild(t, f.b, ports.RebuildRequestParams{Perspective: "scaled"})
	select {
	case <-f.entered:
	case <-time.After(scenarioTimeout):
		t.Fatal("the rebuild never reached the second stream")
	}
	stop(t, first)

	released := getRebuild(t, f.b, r.ID)
	require.Equal(t, ports.RebuildPending, released.Status, "released at stop")
	require.True(t, released.ClaimExpiry.IsZero(), "no claim stands, got %s", released.ClaimExpiry)
	require.Equal(t, ports.RebuildFigures{StreamsTotal: 3, StreamsDone: 1, EventsReplayed: 3, ResumeAfter: f.streams[0]}, released.RebuildFigures,
		"the stream done is recorded")
	require.Equal(t, []int64{10, 20, 30}, f.scaled(t, f.streams[0]))
	require.Equal(t, []int64{1, 2, 3}, f.scaled(t, f.streams[1]), "the stream in hand keeps its model")

	f.block.Store(false)
	second := f.start(t, f.options())
	done := f.waitRequest(t, r.ID, ports.RebuildDone)

	require.Equal(t, second.InstanceID(), done.InstanceID)
	require.Equal(t, 2, done.Attempt)
	require.Equal(t, ports.RebuildFigures{StreamsTotal: 3, StreamsDone: 3, EventsReplayed: 9, ResumeAfter: f.streams[2]}, done.RebuildFigures)
	for _, s := range f.streams {
		require.Equal(t, []int64{10, 20, 30}, f.scaled(t, s))
	}
}

func testRebuildRequestTakenOver(t *testing.T, newBackend NewBackendFunc) {
	f := setupRebuild(t, newBackend)
	o := f.options()
	// An instance claimed the request an hour ago, rebuilt the first
	// stream, and died.
	r := requestRebuild(t, f.b, ports.RebuildRequestParams{Perspective: "scaled"})
	past := o.Clock.Now().Add(-time.Hour).Truncate(time.Second)
	dead := newID(t)
	res, err := f.b.Rebuilds.RebuildClaim(t.Context(), &ports.RebuildClaimParams{
		InstanceID: dead, Perspectives: []string{"scaled"}, ClaimDuration: time.Minute, Now: past,
	})
	require.NoError(t, err)
	require.True(t, res.Claimed)
	figures := ports.RebuildFigures{StreamsTotal: 3, StreamsDone: 1, EventsReplayed: 3, ResumeAfter: f.streams[0]}
	require.NoError(t, f.b.Rebuilds.RebuildProgress(t.Context(), &ports.RebuildProgressParams{
		ID: r.ID, InstanceID: dead, Attempt: 1, RebuildFigures: figures, ClaimDuration: time.Minute, Now: past,
	}))

	f.factor.Store(10)
	w := f.start(t, o)
	done := f.waitRequest(t, r.ID, ports.RebuildDone)

	require.Equal(t, w.InstanceID(), done.InstanceID)
	require.Equal(t, 2, done.Attempt)
	require.Equal(t, ports.RebuildFigures{StreamsTotal: 3, StreamsDone: 3, EventsReplayed: 9, ResumeAfter: f.streams[2]}, done.RebuildFigures)
	require.Equal(t, []int64{1, 2, 3}, f.scaled(t, f.streams[0]), "done before the takeover: not rebuilt again")
	require.Equal(t, []int64{10, 20, 30}, f.scaled(t, f.streams[1]))
	require.Equal(t, []int64{10, 20, 30}, f.scaled(t, f.streams[2]))
	requireTime(t, past, getRebuild(t, f.b, r.ID).StartedAt, "StartedAt")
}

func testRebuildRequestFails(t *testing.T, newBackend NewBackendFunc) {
	f := setupRebuild(t, newBackend)
	w := f.start(t, f.options())
	f.factor.Store(10)
	f.fail.Store(true)

	r := requestRebuild(t, f.b, ports.RebuildRequestParams{Perspective: "scaled"})
	failed := f.waitRequest(t, r.ID, ports.RebuildFailed)

	require.Contains(t, failed.Error, f.streams[1].String(), "the error names the stream")
	require.Contains(t, failed.Error, "boom")
	stored := getRebuild(t, f.b, r.ID)
	require.Equal(t, failed.Error, stored.Error, "the hook reports what was recorded")
	require.Equal(t, failed.RebuildFigures, stored.RebuildFigures)
	require.Equal(t, ports.RebuildFigures{StreamsTotal: 3, StreamsDone: 1, EventsReplayed: 3, ResumeAfter: f.streams[0]}, failed.RebuildFigures)
	require.Equal(t, []int64{10, 20, 30}, f.scaled(t, f.streams[0]), "rebuilt before the failure")
	require.Equal(t, []int64{1, 2, 3}, f.scaled(t, f.streams[1]), "the failed stream keeps its model")
	require.Equal(t, []int64{1, 2, 3}, f.scaled(t, f.streams[2]), "not reached")

	// The worker goes on with the next request.
	f.fail.Store(false)
	again := requestRebuild(t, f.b, ports.RebuildRequestParams{Perspective: "scaled", StreamIDs: []uuid.UUID{f.streams[1]}})
	require.Equal(t, w.InstanceID(), f.waitRequest(t, again.ID, ports.RebuildDone).InstanceID)
	require.Equal(t, []int64{10, 20, 30}, f.scaled(t, f.streams[1]))
}

func testRebuildRequestCancelled(t *testing.T, newBackend NewBackendFunc) {
	f := setupRebuild(t, newBackend)
	f.start(t, f.options())
	f.factor.Store(10)
	f.block.Store(true)

	r := requestRebuild(t, f.b, ports.RebuildRequestParams{Perspective: "scaled"})
	select {
	case <-f.entered:
	case <-time.After(scenarioTimeout):
		t.Fatal("the rebuild never reached the second stream")
	}
	cancelRebuild(t, f.b, r.ID, time.Time{})

	// The worker learns of it at its next report, stops the request, and
	// carries out the next one.
	f.block.Store(false)
	next := requestRebuild(t, f.b, ports.RebuildRequestParams{Perspective: "scaled", StreamIDs: []uuid.UUID{f.streams[2]}})
	f.waitRequest(t, next.ID, ports.RebuildDone)
	cancelled := getRebuild(t, f.b, r.ID)
	require.Equal(t, ports.RebuildCancelled, cancelled.Status)
	require.Equal(t, []int64{10, 20, 30}, f.scaled(t, f.streams[0]), "rebuilt before the cancellation")
	require.Equal(t, []int64{1, 2, 3}, f.scaled(t, f.streams[1]), "the stream in hand keeps its model")
	require.Equal(t, []int64{10, 20, 30}, f.scaled(t, f.streams[2]), "rebuilt by the next request")
}

// holderFixture is a backend with one stream of three ticks, applied by
// the perspective "scaled" on the worker that holds the stream (the
// holder, which claims work), next to a passive worker (the rebuilder,
// which claims none and so never holds the stream). Each model holds the
// versions times the factor they were applied at, so a model tells which
// apply function produced each of its values.
type holderFixture struct {
	open      Opener
	b         ports.Backend
	stream    uuid.UUID
	factor    atomic.Int64
	pr        *progress
	applied   *appliedLog // applies by worker ("holder", "rebuilder") and version
	holder    *core.Worker
	rebuilder *core.Worker
	// hold, when positive, makes the first apply of that version send on
	// entered, then wait for release.
	hold    atomic.Int64
	entered chan struct{}
	release chan struct{}
}

// setupHolder starts the holder with the given model cache size, has it
// apply the stream's three ticks at factor 1, then starts the rebuilder.
func setupHolder(t *testing.T, newBackend NewBackendFunc, modelCacheSize int) *holderFixture {
	t.Helper()
	f := &holderFixture{open: newBackend(t), pr: newProgress(), applied: &appliedLog{}, entered: make(chan struct{}, 1), release: make(chan struct{})}
	f.b = f.open(t)
	if f.b.Rewind == nil {
		t.Skip("adapter does not implement ports.RewindStore")
	}
	f.factor.Store(1)
	f.stream = newID(t)
	o := lifecycleOptions()
	o.Drain.ModelCacheSize = modelCacheSize
	o.Hooks = f.pr.hooks(o.Hooks)
	f.holder = startWorker(t, f.open(t), f.registry(t, "holder"), o)
	f.append(t, 1, 2, 3)
	f.waitApplied(t, 3)
	passive := lifecycleOptions()
	passive.Claims.Disabled = true
	f.rebuilder = startWorker(t, f.open(t), f.registry(t, "rebuilder"), passive)
	return f
}

// registry returns a registry with the perspective "scaled", whose applies
// are logged under worker.
func (f *holderFixture) registry(t *testing.T, worker string) *core.Registry {
	t.Helper()
	p := core.NewPerspective[versioned]("scaled")
	core.MustHandle(p, func(ctx context.Context, m versioned, _ tick) (versioned, error) {
		ev, _ := core.EventFromContext(ctx)
		if ev.Version == f.hold.Load() && f.hold.CompareAndSwap(ev.Version, 0) {
			f.entered <- struct{}{}
			select {
			case <-f.release:
			case <-ctx.Done():
				return m, ctx.Err()
			}
		}
		f.applied.add(worker, ev.StreamID, ev.Version)
		m.Values = append(m.Values, ev.Version*f.factor.Load())
		return m, nil
	})
	return newRegistry(t, p)
}

// append appends a tick to the stream for each n.
func (f *holderFixture) append(t *testing.T, ns ...int) {
	t.Helper()
	ticks := make([]any, len(ns))
	for i, n := range ns {
		ticks[i] = tick{N: n}
	}
	_, err := f.registry(t, "").Append(t.Context(), f.b.Events, f.stream, 0, ticks...)
	require.NoError(t, err)
}

// scaled returns the values of the stream's stored model.
func (f *holderFixture) scaled(t *testing.T) []int64 {
	t.Helper()
	return loadModel[versioned](t, f.b, f.stream, "scaled").Values
}

// waitApplied waits until the stored model reflects n events.
func (f *holderFixture) waitApplied(t *testing.T, n int) {
	t.Helper()
	f.pr.waitUntil(t, fmt.Sprintf("%d events applied", n), func() bool { return len(f.scaled(t)) >= n })
}

// rebuild rebuilds the stream on the rebuilder at factor.
func (f *holderFixture) rebuild(t *testing.T, factor int64) {
	t.Helper()
	f.factor.Store(factor)
	rebuilt, err := f.rebuilder.Rebuild(t.Context(), "scaled", f.stream)
	require.NoError(t, err)
	require.Equal(t, 1, rebuilt)
	require.Equal(t, []int64{factor, 2 * factor, 3 * factor}, f.scaled(t), "rebuilt model equals a fresh replay")
}

// A rebuild on an instance that does not hold the stream: the holder, whose
// model cache holds the model it saved before the rebuild, applies the next
// event to the rebuilt model, not to the one it cached.
func testRebuildElsewhere(t *testing.T, newBackend NewBackendFunc) {
	f := setupHolder(t, newBackend, core.ModelCacheSizeDefault)
	f.rebuild(t, 10)

	f.append(t, 4)
	f.waitApplied(t, 4)
	require.Equal(t, []int64{10, 20, 30, 40}, f.scaled(t), "every event reflects the rebuilt apply function")
	require.Equal(t, 1, f.applied.count("holder", f.stream, 4), "the holder applied the event once, to the rebuilt model")
	require.Zero(t, f.applied.count("rebuilder", f.stream, 4), "the rebuilder holds no stream")
}

// A rebuild on another instance while the holder applies an event to the
// model it loaded before the rebuild (the model cache off, so nothing but
// the save's check stands in the way): the holder's save is refused, and it
// applies the event again to the rebuilt model.
func testRebuildDuringApply(t *testing.T, newBackend NewBackendFunc) {
	f := setupHolder(t, newBackend, core.Unlimited)
	f.hold.Store(4)
	f.append(t, 4)
	select {
	case <-f.entered:
	case <-time.After(scenarioTimeout):
		t.Fatal("the holder never applied the fourth event")
	}
	f.rebuild(t, 10)
	close(f.release)

	f.waitApplied(t, 4)
	require.Equal(t, []int64{10, 20, 30, 40}, f.scaled(t), "the event in flight is applied again, to the rebuilt model")
	require.Equal(t, 2, f.applied.count("holder", f.stream, 4), "applied to the model loaded before the rebuild, refused, applied again")
	f.append(t, 5)
	f.waitApplied(t, 5)
	require.Equal(t, []int64{10, 20, 30, 40, 50}, f.scaled(t), "every event reflects the rebuilt apply function")
	require.Zero(t, f.applied.count("rebuilder", f.stream, 4)+f.applied.count("rebuilder", f.stream, 5), "the rebuilder holds no stream")
}

// A rebuild on another instance while the holder's completion of the rows
// it applied and saved is still on its way: the rebuilt model holds their
// events, so the rebuild flags none of them as a straggler (with rewinds
// off, a late row is dead-lettered), and the holder's completion, when it
// arrives, completes them.
func testRebuildBeforeCompletion(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	if b.Rewind == nil {
		t.Skip("adapter does not implement ports.RewindStore")
	}
	p := core.NewPerspective[versioned]("scaled")
	core.MustHandle(p, func(ctx context.Context, m versioned, _ tick) (versioned, error) {
		ev, _ := core.EventFromContext(ctx)
		m.Values = append(m.Values, ev.Version*10)
		return m, nil
	})
	reg := newRegistry(t, p)
	o := lifecycleOptions()
	o.Claims.Disabled = true
	rebuilder := startWorker(t, open(t), reg, o)
	clock := o.Clock
	stream := newID(t)
	_, err := reg.Append(t.Context(), b.Events, stream, 0, tick{N: 1}, tick{N: 2}, tick{N: 3})
	require.NoError(t, err)

	// The holder applies the three events and saves the model; its
	// completion has not been sent yet.
	holder := &instance{id: newID(t), b: open(t)}
	holder.heartbeat(t, clock.Now())
	rows := ofStream(ofPerspective(holder.fetch(t, clock.Now(), stream).Work, "scaled"), stream)
	require.Equal(t, []int64{1, 2, 3}, versionsOf(rows))
	last := rows[2]
	require.NoError(t, holder.b.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
		StreamID: stream, Perspective: "scaled", Data: []byte(`{"values":[1,2,3]}`),
		LastEventID: last.EventID, LastVersion: 3, Now: clock.Now(),
	}))

	rebuilt, err := rebuilder.Rebuild(t.Context(), "scaled", stream)
	require.NoError(t, err)
	require.Equal(t, 1, rebuilt)
	require.Equal(t, []int64{10, 20, 30}, loadModel[versioned](t, b, stream, "scaled").Values)
	requireNoRewind(t, mustCursor(t, b, stream, "scaled"))
	again := ofStream(ofPerspective(holder.fetch(t, clock.Now(), stream).Work, "scaled"), stream)
	require.Equal(t, []int64{1, 2, 3}, versionsOf(again), "the holder's rows wait for its completion")
	require.Equal(t, []bool{false, false, false}, lateOf(again), "the rebuilt model holds their events: none is late")

	res := holder.complete(t, clock.Now(), ports.Completion{StreamID: stream, Perspective: "scaled", LastEventID: last.EventID, LastVersion: 3, WorkIDs: workIDs(rows)})
	require.Equal(t, 3, res.Completed)
	require.Zero(t, res.RewindsFlagged)
	requireNoRewind(t, mustCursor(t, b, stream, "scaled"))
}

// A rebuild of a pair with a late event pending below its cursor leaves
// that event out, as the rewind the late row waits for has not applied it
// yet: the rewind then applies it once, in order, as new (with rewinds
// off, its row is dead-lettered while the model does not hold it).
func testRebuildLeavesLate(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	requireRewindStore(t, b)
	log := &appliedLog{}
	rewinds := make(chan core.RewindInfo, 10)
	pr := newProgress()
	opts := lifecycleOptions()
	opts.Hooks = pr.hooks(core.Hooks{OnRewind: func(i core.RewindInfo) {
		if !i.Rebuild {
			rewinds <- i
		}
		pr.poke()
	}})
	reg := newRegistry(t, trailPerspective(t, "alpha", log, nil))
	first := startWorker(t, open(t), reg, opts)
	stream := newID(t)
	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{1: {N: 1}, 2: {N: 2}, 4: {N: 4}}))
	pr.waitUntil(t, "the first events applied", func() bool { return len(modelVersions(t, b, stream, "alpha")) == 3 })
	stop(t, first)
	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{3: {N: 3}}))

	passive := lifecycleOptions()
	passive.Claims.Disabled = true
	passive.Rewind.StartupScan = core.StartupScanDisabled // the rewind is the next worker's
	rebuilder := startWorker(t, open(t), reg, passive)
	rebuilt, err := rebuilder.Rebuild(t.Context(), "alpha", stream)
	require.NoError(t, err)
	require.Equal(t, 1, rebuilt)
	require.Equal(t, []int64{1, 2, 4}, modelVersions(t, b, stream, "alpha"), "the late event waits for its rewind")
	require.Zero(t, log.count("alpha", stream, 3))

	startWorker(t, open(t), reg, opts)
	pr.waitUntil(t, "the late event is rewound in", func() bool {
		return len(modelVersions(t, b, stream, "alpha")) == 4 && rewindClear(t, b, stream, "alpha")
	})
	require.Equal(t, seq(1, 4), modelVersions(t, b, stream, "alpha"))
	require.Equal(t, 1, log.count("alpha", stream, 3), "the late event is applied once, by its rewind")
	require.Equal(t, 1, waitFor(t, "the rewind", rewinds).New)
}
