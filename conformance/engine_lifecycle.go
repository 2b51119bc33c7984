package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// runEngineLifecycle runs the lifecycle, rewind, rebuild and security
// scenarios. Those needing an optional port skip when the backend lacks it.
func runEngineLifecycle(t *testing.T, newBackend NewBackendFunc) {
	t.Helper()
	group(t, "EngineLifecycle", map[string]func(t *testing.T){
		"StagesFireOncePerEvent":                  func(t *testing.T) { testStagesOnce(t, newBackend, 1) },
		"StagesFireOncePerEventThreeInstances":    func(t *testing.T) { testStagesOnce(t, newBackend, 3) },
		"CrashBeforePostLifecycleHealedOnRestart": func(t *testing.T) { testLifecycleCrashHealed(t, newBackend) },
		"LateEventRewindsToCleanReplay":           func(t *testing.T) { testLateEventRewind(t, newBackend, 0) },
		"LateEventRewindFromSnapshot":             func(t *testing.T) { testLateEventRewind(t, newBackend, 4) },
		"RewindStartsBeforeEveryLateRowInHand":    func(t *testing.T) { testRewindBeforeEveryLateRow(t, newBackend) },
		"StartupScanLeavesALiveRewindToItsDrain":  func(t *testing.T) { testStartupScanAfterLiveRewind(t, newBackend) },
		"StartupScanLeavesALateRowHeldElsewhere":  func(t *testing.T) { testStartupScanLateHeldElsewhere(t, newBackend) },
		"RebuildMatchesFreshReplay":               func(t *testing.T) { testRebuild(t, newBackend) },
		"SecurityScopePerEventAcrossInstances":    func(t *testing.T) { testSecurityAcrossInstances(t, newBackend) },
	})
}

// stageLog records receptor invocations. onAdd, when set, is called after
// each, so that a test can wait for detached receptors.
type stageLog struct {
	onAdd func()
	mu    sync.Mutex
	calls map[string]int // stage/perspective/eventID
	order map[uuid.UUID][]core.Stage
}

func (l *stageLog) add(stage core.Stage, perspective string, id uuid.UUID) {
	if l.onAdd != nil {
		defer l.onAdd()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls == nil {
		l.calls = map[string]int{}
		l.order = map[uuid.UUID][]core.Stage{}
	}
	l.calls[fmt.Sprintf("%s/%s/%s", stage, perspective, id)]++
	l.order[id] = append(l.order[id], stage)
}

func (l *stageLog) count(stage core.Stage, perspective string, id uuid.UUID) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[fmt.Sprintf("%s/%s/%s", stage, perspective, id)]
}

func (l *stageLog) total(stage core.Stage) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, seq := range l.order {
		for _, s := range seq {
			if s == stage {
				n++
			}
		}
	}
	return n
}

// addStageReceptors registers one receptor per stage for tick events; the
// PostAllPerspectives receptor also checks that every perspective applied
// the event before it fired.
func addStageReceptors(t *testing.T, reg *core.Registry, b ports.Backend, log *stageLog, perspectives []string, violations *atomic.Int64) {
	t.Helper()
	for _, st := range []core.Stage{core.PrePerspective, core.PostPerspective, core.PostAllPerspectives, core.PostLifecycle} {
		mode := core.Inline
		if st == core.PostPerspective {
			mode = core.Detached
		}
		require.NoError(t, core.AddReceptor(reg, st, mode, func(ctx context.Context, _ tick, info core.StageInfo) error {
			if st == core.PostAllPerspectives {
				for _, p := range perspectives {
					m, err := b.Models.ModelLoad(context.WithoutCancel(ctx), &ports.ModelLoadParams{StreamID: info.Event.StreamID, Perspective: p})
					if err != nil || m.LastVersion < info.Event.Version {
						violations.Add(1)
					}
				}
			}
			log.add(st, info.Perspective, info.Event.ID)
			return nil
		}))
	}
}

func lifecycleOptions() core.Options {
	o := fastOptions()
	o.Rewind.Debounce = 10 * time.Millisecond
	o.Rewind.MaxDebounce = 50 * time.Millisecond
	o.Rewind.LockTimeout = 5 * time.Second
	o.Rewind.KeepAlive = time.Second
	return o
}

func testStagesOnce(t *testing.T, newBackend NewBackendFunc, instances int) {
	open := newBackend(t)
	log := &stageLog{}
	var violations atomic.Int64
	pr := newProgress()
	names := []string{"alpha", "beta"}
	var backends []ports.Backend
	var workers []*core.Worker
	var betaFails atomic.Int64
	betaFails.Store(3) // beta fails its first applies: it completes in later batches than alpha
	flakyBeta := func(ports.Event, tick) error {
		if betaFails.Add(-1) >= 0 {
			return errors.New("beta not ready")
		}
		return nil
	}
	for range instances {
		b := open(t)
		backends = append(backends, b)
		reg := newRegistry(t, trailPerspective(t, "alpha", nil, nil), trailPerspective(t, "beta", nil, flakyBeta))
		addStageReceptors(t, reg, b, log, names, &violations)
		o := lifecycleOptions()
		o.Hooks = pr.hooks(core.Hooks{OnLifecycleCompleted: func([]ports.Event) { pr.poke() }})
		workers = append(workers, startWorker(t, b, reg, o))
	}
	appender := newRegistry(t)
	streams := make([]uuid.UUID, 6)
	var ids []uuid.UUID
	for i := range streams {
		streams[i] = uuid.Must(uuid.NewV7())
		res, err := appender.Append(t.Context(), backends[i%len(backends)].Events, streams[i], 0, tick{N: 1}, tick{N: 2}, tick{N: 3})
		require.NoError(t, err)
		for _, e := range res.Events {
			ids = append(ids, e.ID)
		}
	}
	pr.waitUntil(t, "PostLifecycle fired for every event", func() bool { return log.total(core.PostLifecycle) >= len(ids) })
	for _, w := range workers {
		ctx, cancel := context.WithTimeout(t.Context(), scenarioTimeout)
		require.NoError(t, w.WaitLifecycle(ctx))
		cancel()
	}
	require.Zero(t, violations.Load(), "PostAllPerspectives fired before every perspective applied the event")
	for _, id := range ids {
		require.Equal(t, 1, log.count(core.PrePerspective, "", id), "PrePerspective of %s", id)
		for _, p := range names {
			require.Equal(t, 1, log.count(core.PostPerspective, p, id), "PostPerspective of %s by %s", id, p)
		}
		require.Equal(t, 1, log.count(core.PostAllPerspectives, "", id))
		require.Equal(t, 1, log.count(core.PostLifecycle, "", id))
		// Inline stages fire in lifecycle order (detached PostPerspective
		// receptors run in the background and may finish at any time).
		log.mu.Lock()
		var inline []core.Stage
		for _, st := range log.order[id] {
			if st != core.PostPerspective {
				inline = append(inline, st)
			}
		}
		log.mu.Unlock()
		require.Equal(t, []core.Stage{core.PrePerspective, core.PostAllPerspectives, core.PostLifecycle}, inline, "inline stages in order")
	}
}

// failingLifecycle fails PostLifecycle claims, as if the process died right
// before it: perspectives are complete, PostLifecycle never fired.
type failingLifecycle struct {
	ports.LifecycleStore
}

func (f failingLifecycle) LifecycleClaim(ctx context.Context, p *ports.LifecycleClaimParams) ([]uuid.UUID, error) {
	if p.Stage == ports.StagePostLifecycle {
		return nil, errors.New("conformance: crashed before PostLifecycle")
	}
	return f.LifecycleStore.LifecycleClaim(ctx, p)
}

func testLifecycleCrashHealed(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	first := open(t)
	if first.Lifecycle == nil {
		t.Skip("adapter does not implement ports.LifecycleStore")
	}
	crashed := first
	crashed.Lifecycle = failingLifecycle{first.Lifecycle}
	log := &stageLog{}
	var violations atomic.Int64
	pr := newProgress()
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, nil))
	addStageReceptors(t, reg, first, log, []string{"alpha"}, &violations)
	o := lifecycleOptions()
	o.Logger = testLogger(t)
	o.Hooks = pr.hooks(core.Hooks{})
	w1, err := core.New(crashed, reg, &o)
	require.NoError(t, err)
	require.NoError(t, w1.Start(t.Context()))
	stream := uuid.Must(uuid.NewV7())
	res, err := reg.Append(t.Context(), first.Events, stream, 0, tick{N: 1}, tick{N: 2})
	require.NoError(t, err)
	pr.waitUntil(t, "PostAllPerspectives fired on the first instance", func() bool { return log.total(core.PostAllPerspectives) == 2 })
	ctx, cancel := context.WithTimeout(t.Context(), scenarioTimeout)
	require.NoError(t, w1.WaitLifecycle(ctx))
	require.NoError(t, w1.Stop(ctx))
	cancel()
	require.Zero(t, log.total(core.PostLifecycle))

	// A new instance heals the interrupted lifecycles at start-up.
	second := open(t)
	reg2 := newRegistry(t, trailPerspective(t, "alpha", nil, nil))
	addStageReceptors(t, reg2, second, log, []string{"alpha"}, &violations)
	w2 := startWorker(t, second, reg2, lifecycleOptions())
	select {
	case <-w2.StartupScanComplete():
	case <-time.After(scenarioTimeout):
		t.Fatal("startup scan did not complete")
	}
	ctx, cancel = context.WithTimeout(t.Context(), scenarioTimeout)
	defer cancel()
	require.NoError(t, w2.WaitLifecycle(ctx))
	for _, e := range res.Events {
		require.Equal(t, 1, log.count(core.PostLifecycle, "", e.ID), "PostLifecycle healed once")
		require.Equal(t, 1, log.count(core.PostAllPerspectives, "", e.ID), "PostAllPerspectives not fired again")
	}
	stages, err := second.Lifecycle.LifecycleStages(t.Context(), &ports.LifecycleStagesParams{EventIDs: []uuid.UUID{res.Events[0].ID, res.Events[1].ID}})
	require.NoError(t, err)
	for _, e := range res.Events {
		require.NotZero(t, stages[e.ID]&ports.StagePostLifecycle, "durable completion marker written")
	}
}

// testRewindBeforeEveryLateRow: a late row whose flag was cleared (by a
// replay elsewhere that left it to its holder) and raised again by a later
// late row is below the cursor's trigger. The rewind replays from before
// it, not from the snapshot before the trigger: its completion takes every
// late row it holds, and one it never applied would be lost.
func testRewindBeforeEveryLateRow(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	if b.Rewind == nil || b.Snapshots == nil {
		t.Skip("adapter does not implement ports.RewindStore and ports.SnapshotStore")
	}
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, nil))
	o := lifecycleOptions()
	o.Rewind.SnapshotEvery = 2
	o.Drain.PerspectiveBatchSize = 2 // a save, and a snapshot, every two events
	ctx := t.Context()
	encode := func(v int64) ports.NewEvent {
		ne, err := reg.Encode(tick{N: int(v)})
		require.NoError(t, err)
		ne.Version = v
		return ne
	}
	// Versions 1..12 without 3 and 9, applied with snapshots on the way.
	stream := uuid.Must(uuid.NewV7())
	var evs []ports.NewEvent
	for v := int64(1); v <= 12; v++ {
		if v != 3 && v != 9 {
			evs = append(evs, encode(v))
		}
	}
	first := startWorker(t, b, reg, o)
	_, err := b.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, Events: evs})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(modelVersions(t, b, stream, "alpha")) == 10 }, scenarioTimeout, time.Millisecond, "ten events applied")
	require.NoError(t, first.Stop(ctx))

	// Version 3 arrives late and flags the cursor; a rowless completion
	// clears the flag, and version 9, arriving late, raises it again.
	_, err = b.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, Events: []ports.NewEvent{encode(3)}})
	require.NoError(t, err)
	_, err = b.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{InstanceID: uuid.Must(uuid.NewV7()), Completions: []ports.Completion{{StreamID: stream, Perspective: "alpha"}}})
	require.NoError(t, err)
	_, err = b.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, Events: []ports.NewEvent{encode(9)}})
	require.NoError(t, err)
	cur := mustCursor(t, b, stream, "alpha")
	require.Equal(t, int64(9), cur.RewindTriggerVersion, "the trigger is above the late row at 3")

	startWorker(t, b, reg, o)

	require.Eventually(t, func() bool { return len(modelVersions(t, b, stream, "alpha")) == 12 }, scenarioTimeout, time.Millisecond, "both late events applied")
	require.Equal(t, seq(1, 12), modelVersions(t, b, stream, "alpha"), "the model equals a clean replay")
}

func testLateEventRewind(t *testing.T, newBackend NewBackendFunc, snapshotEvery int) {
	open := newBackend(t)
	b := open(t)
	if b.Rewind == nil {
		t.Skip("adapter does not implement ports.RewindStore")
	}
	if snapshotEvery > 0 && b.Snapshots == nil {
		t.Skip("adapter does not implement ports.SnapshotStore")
	}
	pr := newProgress()
	log := &stageLog{onAdd: pr.poke}
	var violations atomic.Int64
	rewinds := make(chan core.RewindInfo, 10)
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, nil))
	addStageReceptors(t, reg, b, log, []string{"alpha"}, &violations)
	o := lifecycleOptions()
	o.Rewind.SnapshotEvery = snapshotEvery
	o.Drain.PerspectiveBatchSize = 2
	o.Hooks = pr.hooks(core.Hooks{OnRewind: func(i core.RewindInfo) { rewinds <- i; pr.poke() }})
	startWorker(t, b, reg, o)

	// Versions 1..12 without 9: the gap is filled later by a late import.
	stream := uuid.Must(uuid.NewV7())
	var evs []ports.NewEvent
	for v := int64(1); v <= 12; v++ {
		if v == 9 {
			continue
		}
		ne, err := reg.Encode(tick{N: int(v)})
		require.NoError(t, err)
		ne.Version = v
		evs = append(evs, ne)
	}
	_, err := b.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{StreamID: stream, Events: evs})
	require.NoError(t, err)
	pr.waitUntil(t, "the first eleven events applied", func() bool { return len(modelVersions(t, b, stream, "alpha")) == 11 })

	late, err := reg.Encode(tick{N: 9})
	require.NoError(t, err)
	late.Version = 9
	res, err := b.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{StreamID: stream, Events: []ports.NewEvent{late}})
	require.NoError(t, err)
	var info core.RewindInfo
	select {
	case info = <-rewinds:
	case <-time.After(scenarioTimeout):
		t.Fatal("no rewind")
	}
	require.Equal(t, int64(9), info.TriggerVersion)
	require.Equal(t, 1, info.New)
	if snapshotEvery > 0 {
		require.Equal(t, int64(8), info.FromVersion, "replay started from the latest snapshot before the trigger")
	} else {
		require.Zero(t, info.FromVersion)
	}
	require.Equal(t, seq(1, 12), modelVersions(t, b, stream, "alpha"), "the model equals a clean replay")
	pr.waitUntil(t, "the cursor completed without the rewind flag", func() bool {
		cs, err := b.Cursors.CursorsGet(t.Context(), &ports.CursorsGetParams{StreamIDs: []uuid.UUID{stream}})
		require.NoError(t, err)
		return len(cs) == 1 && cs[0].Status.Has(ports.CursorCompleted) && !cs[0].Status.Has(ports.CursorRewindRequired)
	})
	pr.waitUntil(t, "the late event's lifecycle completed", func() bool { return log.count(core.PostLifecycle, "", res.Events[0].ID) == 1 })
	all, err := b.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream})
	require.NoError(t, err)
	require.Len(t, all, 12)
	// PostPerspective receptors are Detached: they run in the background,
	// possibly after the late event's lifecycle completed.
	pr.waitUntil(t, "every event's detached PostPerspective receptor", func() bool {
		for _, e := range all {
			if log.count(core.PostPerspective, "alpha", e.ID) == 0 {
				return false
			}
		}
		return true
	})
	for _, e := range all {
		require.Equal(t, 1, log.count(core.PrePerspective, "", e.ID), "PrePerspective of version %d", e.Version)
		require.Equal(t, 1, log.count(core.PostPerspective, "alpha", e.ID), "PostPerspective of version %d", e.Version)
	}
	require.Zero(t, violations.Load())
}

// versioned multiplies each applied version by a factor that the test
// changes, as a code change of a perspective would.
type versioned struct {
	Values []int64 `json:"values"`
}

func testRebuild(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	if b.Rewind == nil {
		t.Skip("adapter does not implement ports.RewindStore")
	}
	var factor atomic.Int64
	factor.Store(1)
	p := core.NewPerspective[versioned]("scaled")
	core.MustHandle(p, func(ctx context.Context, m versioned, _ tick) (versioned, error) {
		ev, _ := core.EventFromContext(ctx)
		m.Values = append(m.Values, ev.Version*factor.Load())
		return m, nil
	})
	pr := newProgress()
	reg := newRegistry(t, p, trailPerspective(t, "other", nil, nil))
	o := lifecycleOptions()
	o.Hooks = pr.hooks(core.Hooks{})
	w := startWorker(t, b, reg, o)
	streams := []uuid.UUID{uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())}
	n := map[uuid.UUID]int64{}
	for _, s := range streams {
		_, err := reg.Append(t.Context(), b.Events, s, 0, tick{N: 1}, tick{N: 2}, tick{N: 3})
		require.NoError(t, err)
		n[s] = 3
	}
	scaled := func(s uuid.UUID) []int64 { return loadModel[versioned](t, b, s, "scaled").Values }
	pr.waitUntil(t, "everything applied", func() bool {
		for _, s := range streams {
			if len(scaled(s)) < 3 {
				return false
			}
		}
		return allCaughtUp(t, b, streams, n, []string{"other"})
	})
	factor.Store(10)
	rebuilt, err := w.Rebuild(t.Context(), "scaled")
	require.NoError(t, err)
	require.Equal(t, len(streams), rebuilt)
	for _, s := range streams {
		require.Equal(t, []int64{10, 20, 30}, scaled(s), "rebuilt model equals a fresh replay")
		require.Equal(t, []int64{1, 2, 3}, modelVersions(t, b, s, "other"), "other perspectives untouched")
	}
	// The engine keeps serving while and after rebuilding.
	_, err = reg.Append(t.Context(), b.Events, streams[0], 0, tick{N: 4})
	require.NoError(t, err)
	pr.waitUntil(t, "new events flow after the rebuild", func() bool { return len(scaled(streams[0])) == 4 })
	require.Equal(t, []int64{10, 20, 30, 40}, scaled(streams[0]))
	_, err = w.Rebuild(t.Context(), "nope")
	require.Error(t, err)
}

type scopedTick struct {
	Tenant string `json:"tenant"`
	User   string `json:"user"`
}

func testSecurityAcrossInstances(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	pr := newProgress()
	var mismatches, applied atomic.Int64
	var backends []ports.Backend
	const streams, perStream = 12, 6
	for range 2 {
		b := open(t)
		backends = append(backends, b)
		reg := newRegistry(t)
		require.NoError(t, core.RegisterEvent[scopedTick](reg, "conformance.scoped_tick"))
		p := core.NewPerspective[trail]("scoped")
		core.MustHandle(p, func(ctx context.Context, m trail, e scopedTick) (trail, error) {
			if core.TenantID(ctx) != e.Tenant || core.UserID(ctx) != e.User {
				mismatches.Add(1)
			}
			ev, _ := core.EventFromContext(ctx)
			m.Versions = append(m.Versions, ev.Version)
			return m, nil
		})
		require.NoError(t, reg.AddPerspective(p))
		o := fastOptions()
		o.Hooks = pr.hooks(core.Hooks{OnPerspectiveEventProcessed: func(e core.PerspectiveEventProcessed) { applied.Add(int64(e.EventCount)) }})
		startWorker(t, b, reg, o)
	}
	reg := newRegistry(t)
	require.NoError(t, core.RegisterEvent[scopedTick](reg, "conformance.scoped_tick"))
	for s := range streams {
		stream := uuid.Must(uuid.NewV7())
		for i := range perStream {
			e := scopedTick{Tenant: fmt.Sprintf("t%d", (s+i)%3), User: fmt.Sprintf("u%d-%d", s, i)}
			ctx := core.WithScope(t.Context(), ports.Scope{TenantID: e.Tenant, UserID: e.User})
			_, err := reg.Append(ctx, backends[s%2].Events, stream, 0, e)
			require.NoError(t, err)
		}
	}
	pr.waitUntil(t, "every event applied", func() bool { return applied.Load() >= streams*perStream })
	require.Zero(t, mismatches.Load(), "no handler saw another event's identity")
}

// pausedScan calls pause after each query of flagged cursors, with the
// query's number (from 1), before the caller sees its result.
type pausedScan struct {
	ports.RewindStore
	calls *atomic.Int32
	pause func(call int32)
}

func (s pausedScan) CursorsRewindRequired(ctx context.Context, p *ports.CursorsRewindRequiredParams) ([]ports.Cursor, error) {
	cs, err := s.RewindStore.CursorsRewindRequired(ctx, p)
	s.pause(s.calls.Add(1))
	return cs, err
}

// slowAcks holds back every completion of work rows until released.
type slowAcks struct {
	ports.CursorStore
	release <-chan struct{}
}

func (c slowAcks) WorkComplete(ctx context.Context, p *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	if slices.ContainsFunc(p.Completions, func(c ports.Completion) bool { return len(c.WorkIDs) > 0 }) {
		select {
		case <-c.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return c.CursorStore.WorkComplete(ctx, p)
}

// testStartupScanAfterLiveRewind: a drain rewinds a late event while the
// startup scan of its instance still runs. The scan finds the pair flagged,
// first while the rewind's completion (which clears the flag) is not
// acknowledged yet, then with the flag cleared after its query read it. It
// leaves the pair to the drain both times: the late event is replayed by
// one rewind only.
func testStartupScanAfterLiveRewind(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	requireRewindStore(t, b)
	log := &appliedLog{}
	pr := newProgress()
	o1 := lifecycleOptions()
	o1.Hooks = pr.hooks(core.Hooks{})
	w1 := startWorker(t, b, newRegistry(t, trailPerspective(t, "alpha", log, nil)), o1)
	stream := uuid.Must(uuid.NewV7())
	reg := newRegistry(t, trailPerspective(t, "alpha", log, nil))
	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{1: {N: 1}, 2: {N: 2}, 4: {N: 4}}))
	pr.waitUntil(t, "the first events applied and completed", func() bool {
		return len(modelVersions(t, b, stream, "alpha")) == 3 && mustCursor(t, b, stream, "alpha").LastVersion == 4
	})
	stopWorker(t, w1)
	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{3: {N: 3}}))
	require.False(t, rewindClear(t, b, stream, "alpha"), "the late event flags the pair")

	// The scan's first query waits for the drain's rewind; its second one
	// reports when it read the flag and waits until the flag is cleared.
	scanGo, resume, acked := make(chan struct{}), make(chan struct{}), make(chan struct{})
	second := make(chan struct{})
	rewinds := make(chan core.RewindInfo, 10)
	wb := open(t)
	wb.Rewind = pausedScan{RewindStore: wb.Rewind, calls: new(atomic.Int32), pause: func(call int32) {
		switch call {
		case 1:
			<-scanGo
		case 2:
			close(second)
			<-resume
		}
	}}
	wb.Cursors = slowAcks{CursorStore: wb.Cursors, release: acked}
	o2 := lifecycleOptions()
	o2.Hooks = pr.hooks(core.Hooks{OnRewind: func(i core.RewindInfo) { rewinds <- i }})
	w2 := startWorker(t, wb, newRegistry(t, trailPerspective(t, "alpha", log, nil)), o2)
	start, ack, cont := sync.OnceFunc(func() { close(scanGo) }), sync.OnceFunc(func() { close(acked) }), sync.OnceFunc(func() { close(resume) })
	t.Cleanup(func() { start(); ack(); cont() }) // before the worker's stop, which waits for them
	first := waitFor(t, "the drain's rewind", rewinds)
	require.Equal(t, 1, first.New, "the drain's rewind applies the late event")

	start()
	select {
	case <-second:
	case i := <-rewinds:
		t.Fatalf("the scan rewound the pair before its completion was acknowledged (trigger %d, %d new)", i.TriggerVersion, i.New)
	case <-time.After(scenarioTimeout):
		t.Fatal("timed out waiting for the scan's second query")
	}
	require.False(t, rewindClear(t, b, stream, "alpha"), "the second query read the flag")
	ack()
	pr.waitUntil(t, "the rewind's completion clears the flag", func() bool { return rewindClear(t, b, stream, "alpha") })
	cont()
	select {
	case <-w2.StartupScanComplete():
	case <-time.After(scenarioTimeout):
		t.Fatal("startup scan did not complete")
	}
	require.Empty(t, rewinds, "no other rewind")
	require.Equal(t, seq(1, 4), modelVersions(t, b, stream, "alpha"))
	require.Equal(t, 1, log.count("alpha", stream, 3), "the late event was replayed once")
}

// testStartupScanLateHeldElsewhere: the startup scan finds a pair flagged
// for a late event whose row another live instance holds. It cannot
// complete that row, so its replay leaves the late event out: the rewind
// of the holder applies it, once, as new.
func testStartupScanLateHeldElsewhere(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	requireRewindStore(t, b)
	log := &appliedLog{}
	pr := newProgress()
	o1 := lifecycleOptions()
	o1.Hooks = pr.hooks(core.Hooks{})
	reg := newRegistry(t, trailPerspective(t, "alpha", log, nil))
	w1 := startWorker(t, open(t), reg, o1)
	stream := newID(t)
	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{1: {N: 1}, 3: {N: 3}}))
	pr.waitUntil(t, "the first events applied and completed", func() bool {
		return len(modelVersions(t, b, stream, "alpha")) == 2 && rewindClear(t, b, stream, "alpha")
	})
	stopWorker(t, w1)
	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{2: {N: 2}}))
	holder := &instance{id: newID(t), b: open(t)}
	holder.heartbeat(t, o1.Clock.Now())
	require.Equal(t, []int64{2}, versionsOf(ofPerspective(holder.fetch(t, o1.Clock.Now(), stream).Work, "alpha")))

	o2 := lifecycleOptions()
	o2.Hooks = pr.hooks(core.Hooks{})
	w2 := startWorker(t, open(t), reg, o2)
	select {
	case <-w2.StartupScanComplete():
	case <-time.After(scenarioTimeout):
		t.Fatal("the startup scan never completed")
	}
	require.Equal(t, []int64{1, 3}, modelVersions(t, b, stream, "alpha"), "the late event waits for its holder's rewind")
	require.Zero(t, log.count("alpha", stream, 2))
	require.Equal(t, []int64{2}, versionsOf(ofPerspective(holder.fetch(t, o1.Clock.Now(), stream).Work, "alpha")), "its row waits")
}
