package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// runEngineStages runs the scenarios of the promise that nothing is skipped
// silently and no stage fires early, twice or never: late events without
// rewinds, terminal stages of late events, stages across crashes, waits,
// security callbacks, receptor modes, subscriptions and retired
// perspectives.
func runEngineStages(t *testing.T, newBackend NewBackendFunc) {
	t.Helper()
	group(t, "EngineStages", map[string]func(t *testing.T){
		"LateEventDeadLetteredWhileRewindsOff":       func(t *testing.T) { testLateWithoutRewind(t, newBackend, false) },
		"LateEventDeadLetteredWithoutRewindStore":    func(t *testing.T) { testLateWithoutRewind(t, newBackend, true) },
		"TerminalStagesWaitForEveryPerspective":      func(t *testing.T) { testTerminalStagesWait(t, newBackend) },
		"CrashInInlineReceptorRunsTheStageAgain":     func(t *testing.T) { testStageSurvivesCrash(t, newBackend) },
		"RepeatedRewindDoesNotFirePostPerspective":   func(t *testing.T) { testRepeatedRewind(t, newBackend) },
		"WaitLifecycleWhileProcessing":               func(t *testing.T) { testWaitLifecycle(t, newBackend) },
		"SecurityCallbacksOncePerEvent":              func(t *testing.T) { testSecurityOnce(t, newBackend) },
		"BatchCycleCompleteAfterItsStages":           func(t *testing.T) { testBatchCycleAfterStages(t, newBackend) },
		"ImmediateDetachedAfterInlineReceptors":      func(t *testing.T) { testImmediateDetached(t, newBackend) },
		"AppendCarriesItsSubscriptions":              func(t *testing.T) { testAppendSubscribes(t, newBackend) },
		"RetiredPerspectiveGetsNoWork":               func(t *testing.T) { testRetire(t, newBackend) },
		"UnknownPerspectiveLoggedOncePerPerspective": func(t *testing.T) { testUnknownPerspectiveLog(t, newBackend) },
		"LateEventStoredDuringASaveSurvivesACrash":   func(t *testing.T) { testLateDuringSave(t, newBackend) },
		"LateEventLeftByARebuildFiresPrePerspective": func(t *testing.T) { testRebuildFiresPrePerspective(t, newBackend) },
		"StageRecordedAfterATransientFailure":        func(t *testing.T) { testStageCompleteRetried(t, newBackend) },
		"PrePerspectiveClaimedElsewhereIsAwaited":    func(t *testing.T) { testPrePerspectiveAwaited(t, newBackend) },
		"PostPerspectiveOfADeadInstanceTakenOver":    func(t *testing.T) { testPostPerspectiveTakenOver(t, newBackend) },
		"PrePerspectiveOnceThroughLostAcks":          func(t *testing.T) { testPrePerspectiveOnceThroughFailures(t, newBackend) },
	})
}

// waitFor receives from c or fails the scenario when it times out.
func waitFor[T any](t *testing.T, what string, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(scenarioTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// waitLifecycle waits for a worker's lifecycle work.
func waitLifecycle(t *testing.T, w *core.Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), scenarioTimeout)
	defer cancel()
	require.NoError(t, w.WaitLifecycle(ctx))
}

// stopWorker stops a worker started without startWorker.
func stopWorker(t *testing.T, w *core.Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), scenarioTimeout)
	defer cancel()
	require.NoError(t, w.Stop(ctx))
}

// pendingRows returns the pending work rows of streams, as a new instance
// sees them once no other instance holds them (the workers stopped).
func pendingRows(t *testing.T, b ports.Backend, streams ...uuid.UUID) []ports.WorkItem {
	t.Helper()
	in := &instance{id: newID(t), b: b}
	now := time.Now().Add(time.Hour) // past every lease the workers took
	in.heartbeat(t, now)
	// Leave no live instance behind to share the streams with the next call.
	defer func() {
		require.NoError(t, b.Claimer.InstanceDeregister(t.Context(), &ports.InstanceDeregisterParams{InstanceID: in.id}))
	}()
	claimed := in.claimWith(t, ports.WorkClaimParams{Now: now})
	var mine []uuid.UUID
	for _, s := range claimed.StreamIDs {
		if slices.Contains(streams, s) {
			mine = append(mine, s)
		}
	}
	if len(mine) == 0 {
		return nil
	}
	return in.fetch(t, now, mine...).Work
}

// testLateWithoutRewind: with rewinds off (or a backend without a
// RewindStore) a late event is never completed unapplied nor applied out of
// order: it is dead-lettered with reason late, the pair goes on, and a
// requeue once rewinds are on applies it in order.
func testLateWithoutRewind(t *testing.T, newBackend NewBackendFunc, noStore bool) {
	open := newBackend(t)
	b := open(t)
	needAdmin(t, b)
	wb := b
	opts := lifecycleOptions()
	if noStore {
		wb.Rewind, wb.Snapshots = nil, nil
	} else {
		opts.Rewind.Disabled = true
	}
	log := &appliedLog{}
	pr := newProgress()
	opts.Hooks = pr.hooks(core.Hooks{OnDeadLettered: func(ports.DeadLetter) { pr.poke() }})
	reg := newRegistry(t, trailPerspective(t, "alpha", log, nil))
	opts.Logger = testLogger(t)
	w1, err := core.New(wb, reg, &opts)
	require.NoError(t, err)
	require.NoError(t, w1.Start(t.Context()))

	stream := uuid.Must(uuid.NewV7())
	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{1: {N: 1}, 2: {N: 2}, 4: {N: 4}}))
	pr.waitUntil(t, "the first events applied", func() bool { return len(modelVersions(t, b, stream, "alpha")) == 3 })
	late := appendNew(t, b, stream, explicit(t, reg, map[int64]tick{3: {N: 3}}))
	pr.waitUntil(t, "the late event is dead-lettered", func() bool { return len(deadLetters(t, b, "alpha", ports.DeadLetterDead)) == 1 })
	dl := deadLetters(t, b, "alpha", ports.DeadLetterDead)[0]
	require.Equal(t, ports.ReasonLate, dl.Reason)
	require.Equal(t, late.Events[0].ID, dl.EventID)
	require.Equal(t, int64(3), dl.EventVersion)
	require.Contains(t, dl.Error, "rewind")

	_, err = reg.Append(t.Context(), b.Events, stream, 0, tick{N: 5})
	require.NoError(t, err)
	pr.waitUntil(t, "the pair goes on", func() bool { return len(modelVersions(t, b, stream, "alpha")) == 4 })
	require.Equal(t, []int64{1, 2, 4, 5}, modelVersions(t, b, stream, "alpha"))
	require.Zero(t, log.count("alpha", stream, 3), "the late event was not applied out of order")
	stopWorker(t, w1)

	if b.Rewind == nil {
		return // nothing can apply it in order on this backend
	}
	// Rewinds on: the requeued event is applied in order, once.
	o2 := lifecycleOptions()
	o2.Hooks = pr.hooks(core.Hooks{})
	startWorker(t, open(t), newRegistry(t, trailPerspective(t, "alpha", log, nil)), o2)
	require.NoError(t, b.Admin.DeadLetterRequeue(t.Context(), &ports.DeadLetterRequeueParams{ID: dl.ID}))
	pr.waitUntil(t, "the requeued late event is applied by a rewind", func() bool {
		return len(modelVersions(t, b, stream, "alpha")) == 5 && rewindClear(t, b, stream, "alpha")
	})
	require.Equal(t, seq(1, 5), modelVersions(t, b, stream, "alpha"), "the model equals a clean replay")
	require.Equal(t, 1, log.count("alpha", stream, 3))
	pr.waitUntil(t, "the dead letter is recovered", func() bool {
		return len(deadLetters(t, b, "alpha", ports.DeadLetterRecovered)) == 1
	})
}

// appliedBy reports whether every perspective's model of stream holds
// version (for a late event, being below the cursor says nothing).
func appliedBy(b ports.Backend, stream uuid.UUID, version int64, perspectives ...string) bool {
	ctx := context.Background()
	for _, p := range perspectives {
		stored, err := b.Models.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: stream, Perspective: p})
		if err != nil {
			return false
		}
		var m trail
		if json.Unmarshal(stored.Data, &m) != nil || !slices.Contains(m.Versions, version) {
			return false
		}
	}
	return true
}

// testTerminalStagesWait: a late event's PostAllPerspectives and
// PostLifecycle wait for every perspective's rewind, although the event is
// below every cursor at once.
func testTerminalStagesWait(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	requireRewindStore(t, b)
	if b.Lifecycle == nil {
		t.Skip("adapter does not implement ports.LifecycleStore")
	}
	names := []string{"alpha", "beta"}
	pr := newProgress()
	var early atomic.Int64
	fired := map[core.Stage]*atomic.Int64{core.PostAllPerspectives: {}, core.PostLifecycle: {}}
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, nil), trailPerspective(t, "beta", nil, nil))
	for st, n := range fired {
		require.NoError(t, core.AddReceptor(reg, st, core.Inline, func(ctx context.Context, _ tick, info core.StageInfo) error {
			if !appliedBy(b, info.Event.StreamID, info.Event.Version, names...) {
				early.Add(1)
			}
			n.Add(1)
			pr.poke()
			return nil
		}))
	}
	var alphaRewound atomic.Bool
	o := lifecycleOptions()
	o.Hooks = pr.hooks(core.Hooks{
		OnRewind: func(i core.RewindInfo) {
			if i.Perspective == "alpha" {
				alphaRewound.Store(true)
			}
		},
	})
	w := startWorker(t, b, reg, o)
	stream := uuid.Must(uuid.NewV7())
	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{1: {N: 1}, 3: {N: 3}}))
	pr.waitUntil(t, "both perspectives applied the first events", func() bool {
		return fired[core.PostLifecycle].Load() == 2
	})

	// Another instance holds beta's rewind lock: beta's rewind waits.
	holder := &instance{id: newID(t), b: b}
	holder.heartbeat(t, time.Now())
	lock := &ports.StreamLockParams{StreamID: stream, Perspective: "beta", InstanceID: holder.id, Reason: "rewind", Duration: time.Hour, Now: time.Now()}
	held, err := b.Rewind.StreamLockAcquire(t.Context(), lock)
	require.NoError(t, err)
	require.True(t, held)

	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{2: {N: 2}}))
	// A batch or the start-up repair rewinds alpha, then checks the late
	// event's terminal stages in lifecycle work of its own. The wait gives
	// a stage that would fire too early the time to do so; the check of
	// every receptor call at the end catches one that fires later.
	pr.waitUntil(t, "alpha's rewind is done", func() bool {
		return alphaRewound.Load() && rewindClear(t, b, stream, "alpha")
	})
	waitLifecycle(t, w)
	require.Equal(t, []int64{1, 2, 3}, modelVersions(t, b, stream, "alpha"))
	require.Equal(t, []int64{1, 3}, modelVersions(t, b, stream, "beta"))
	require.Equal(t, int64(2), fired[core.PostAllPerspectives].Load(), "PostAllPerspectives of the late event waits for beta")

	lock.Now = time.Now()
	require.NoError(t, b.Rewind.StreamLockRelease(t.Context(), lock))
	pr.waitUntil(t, "the late event's lifecycle completed", func() bool { return fired[core.PostLifecycle].Load() == 3 })
	require.Equal(t, []int64{1, 2, 3}, modelVersions(t, b, stream, "beta"))
	require.Equal(t, int64(3), fired[core.PostAllPerspectives].Load())
	require.Zero(t, early.Load(), "a terminal stage fired before every perspective applied its event")
}

// deliveries records receptor deliveries by delivery key, with who ran
// them.
type deliveries struct {
	mu   sync.Mutex
	keys map[string][]string
}

func (d *deliveries) add(key, who string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.keys == nil {
		d.keys = map[string][]string{}
	}
	d.keys[key] = append(d.keys[key], who)
}

func (d *deliveries) of(key string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.keys[key])
}

// staleClock returns a clock ahead of the wall clock by far more than
// threshold, so an instance using it sees every other instance's heartbeat
// as stale.
func staleClock(threshold time.Duration) *clocktest.Offset {
	c := clocktest.NewOffset()
	c.Jump(10 * threshold)
	return c
}

// testStageSurvivesCrash: an instance dies while an inline receptor of a
// stage runs; the stage is not lost: another instance takes its claim over
// and runs the stage again, with the same delivery key.
func testStageSurvivesCrash(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	first := open(t)
	if first.Lifecycle == nil {
		t.Skip("adapter does not implement ports.LifecycleStore")
	}
	kill := &killable{}
	got := &deliveries{}
	entered := make(chan core.StageInfo, 1)
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	regA := newRegistry(t, trailPerspective(t, "alpha", nil, nil))
	require.NoError(t, core.AddReceptor(regA, core.PostLifecycle, core.Inline, func(_ context.Context, _ tick, info core.StageInfo) error {
		got.add(info.DeliveryKey(), "A")
		select {
		case entered <- info:
		default:
		}
		<-release
		return nil
	}))
	optsA := lifecycleOptions()
	startWorker(t, kill.wrap(first), regA, optsA)
	stream := uuid.Must(uuid.NewV7())
	res, err := regA.Append(t.Context(), first.Events, stream, 0, tick{N: 1})
	require.NoError(t, err)
	info := waitFor(t, "the receptor on instance A", entered)
	require.Equal(t, res.Events[0].ID, info.Event.ID)

	// A dies while its receptor runs; the receptor returns, but A records
	// nothing more.
	kill.dead.Store(true)
	close(release)

	pr := newProgress()
	regB := newRegistry(t, trailPerspective(t, "alpha", nil, nil))
	require.NoError(t, core.AddReceptor(regB, core.PostLifecycle, core.Inline, func(_ context.Context, _ tick, info core.StageInfo) error {
		got.add(info.DeliveryKey(), "B")
		pr.poke()
		return nil
	}))
	optsB := lifecycleOptions()
	optsB.Clock = staleClock(optsB.Claims.StaleInstanceThreshold)
	wB := startWorker(t, open(t), regB, optsB)
	pr.waitUntil(t, "instance B ran the interrupted stage", func() bool { return len(got.of(info.DeliveryKey())) == 2 })
	waitLifecycle(t, wB)
	require.Equal(t, []string{"A", "B"}, got.of(info.DeliveryKey()), "the stage ran again, with the same delivery key")
	stages, err := first.Lifecycle.LifecycleStages(t.Context(), &ports.LifecycleStagesParams{EventIDs: []uuid.UUID{info.Event.ID}})
	require.NoError(t, err)
	require.NotZero(t, stages[info.Event.ID]&ports.StagePostLifecycle, "the stage is recorded completed")
}

// tappedLifecycle calls after once a LifecycleComplete call succeeded.
type tappedLifecycle struct {
	ports.LifecycleStore
	after func(*ports.LifecycleCompleteParams)
}

func (l tappedLifecycle) LifecycleComplete(ctx context.Context, p *ports.LifecycleCompleteParams) error {
	if err := l.LifecycleStore.LifecycleComplete(ctx, p); err != nil {
		return err
	}
	l.after(p)
	return nil
}

// heldCursors holds back the completions of a perspective's rewind until
// released, then fails them as a dead instance's.
type heldCursors struct {
	ports.CursorStore
	armed   *atomic.Bool
	release <-chan struct{}
}

func (c heldCursors) WorkComplete(ctx context.Context, p *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	if c.armed.Load() && slices.ContainsFunc(p.Completions, func(c ports.Completion) bool { return len(c.WorkIDs) > 0 }) {
		select {
		case <-c.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return nil, errKilled
	}
	return c.CursorStore.WorkComplete(ctx, p)
}

// testRepeatedRewind: an instance dies after a rewind saved the model and
// ran PostPerspective of the late event, before the rewind's completion
// reached the backend. The next instance completes the row of the event
// the saved model holds; PostPerspective (and PrePerspective) of the late
// event do not fire again.
func testRepeatedRewind(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	first := open(t)
	requireRewindStore(t, first)
	if first.Lifecycle == nil {
		t.Skip("adapter does not implement ports.LifecycleStore")
	}
	log := &stageLog{}
	pr := newProgress()
	receptors := func(reg *core.Registry) {
		for _, st := range []core.Stage{core.PrePerspective, core.PostPerspective} {
			require.NoError(t, core.AddReceptor(reg, st, core.Inline, func(_ context.Context, _ tick, info core.StageInfo) error {
				log.add(st, info.Perspective, info.Event.ID)
				pr.poke()
				return nil
			}))
		}
	}
	kill := &killable{}
	var armed atomic.Bool
	var lateID atomic.Pointer[uuid.UUID]
	crashed := make(chan struct{})
	var crashOnce sync.Once
	a := first
	a.Cursors = heldCursors{CursorStore: first.Cursors, armed: &armed, release: crashed}
	a.Lifecycle = tappedLifecycle{LifecycleStore: first.Lifecycle, after: func(p *ports.LifecycleCompleteParams) {
		id := lateID.Load()
		if armed.Load() && id != nil && p.Stage == ports.StagePostPerspective && slices.Contains(p.EventIDs, *id) {
			crashOnce.Do(func() { kill.dead.Store(true); close(crashed) })
		}
	}}
	regA := newRegistry(t, trailPerspective(t, "alpha", nil, nil))
	receptors(regA)
	optsA := lifecycleOptions()
	optsA.Retries.Flush.MaxAttempts = 1
	optsA.Hooks = pr.hooks(core.Hooks{})
	startWorker(t, kill.wrap(a), regA, optsA)

	stream := uuid.Must(uuid.NewV7())
	appendNew(t, first, stream, explicit(t, regA, map[int64]tick{1: {N: 1}, 3: {N: 3}}))
	pr.waitUntil(t, "the first events applied and completed", func() bool {
		return len(modelVersions(t, first, stream, "alpha")) == 2 && rewindClear(t, first, stream, "alpha") &&
			mustCursor(t, first, stream, "alpha").LastVersion == 3
	})
	late, err := regA.Encode(tick{N: 2})
	require.NoError(t, err)
	late.ID, late.Version = uuid.Must(uuid.NewV7()), 2
	lateID.Store(&late.ID)
	armed.Store(true)
	appendNew(t, first, stream, []ports.NewEvent{late})
	waitFor(t, "instance A's rewind to run PostPerspective of the late event", crashed)
	require.Equal(t, []int64{1, 2, 3}, modelVersions(t, first, stream, "alpha"), "A saved the rewound model")

	// B takes the stream over and rewinds again.
	rewound := make(chan core.RewindInfo, 4)
	regB := newRegistry(t, trailPerspective(t, "alpha", nil, nil))
	receptors(regB)
	optsB := lifecycleOptions()
	optsB.Clock = staleClock(optsB.Claims.StaleInstanceThreshold)
	optsB.Hooks = pr.hooks(core.Hooks{OnRewind: func(i core.RewindInfo) {
		select {
		case rewound <- i:
		default:
		}
	}})
	wB := startWorker(t, open(t), regB, optsB)
	// A's save took the late flag off the row of the event it holds: B
	// completes the row as applied, and rewinds nothing new (its startup
	// repair may rewind without the row, which applies nothing either).
	pr.waitUntil(t, "B completed the row of the late event", func() bool {
		return len(pendingRows(t, first, stream)) == 0 && rewindClear(t, first, stream, "alpha")
	})
	for {
		select {
		case info := <-rewound:
			require.Zero(t, info.New, "B applied the late event again")
			continue
		default:
		}
		break
	}
	waitLifecycle(t, wB)
	require.Equal(t, []int64{1, 2, 3}, modelVersions(t, first, stream, "alpha"))
	require.Equal(t, 1, log.count(core.PostPerspective, "alpha", late.ID), "PostPerspective of the late event fired once")
	require.Equal(t, 1, log.count(core.PrePerspective, "", late.ID), "PrePerspective of the late event fired once")
}

// testWaitLifecycle: WaitLifecycle may be called at any time, concurrently
// with processing, and waits for the lifecycle work started before it.
func testWaitLifecycle(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	pr := newProgress()
	var started, finished, lifecycles atomic.Int64
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, nil))
	require.NoError(t, core.AddReceptor(reg, core.PostPerspective, core.Detached, func(context.Context, tick, core.StageInfo) error {
		started.Add(1)
		defer finished.Add(1)
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		return nil
	}))
	require.NoError(t, core.AddReceptor(reg, core.PostLifecycle, core.Inline, func(context.Context, tick, core.StageInfo) error {
		lifecycles.Add(1)
		pr.poke()
		return nil
	}))
	o := lifecycleOptions()
	o.Hooks = pr.hooks(core.Hooks{})
	w := startWorker(t, b, reg, o)

	// Wait all along, as an impatient caller would.
	stop := make(chan struct{})
	var waiters sync.WaitGroup
	for range 2 {
		waiters.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond)
				_ = w.WaitLifecycle(ctx)
				cancel()
			}
		})
	}
	const streams, perStream = 4, 5
	for range streams {
		appendTicks(t, reg, b, uuid.Must(uuid.NewV7()), 0, perStream)
	}
	waitFor(t, "a detached receptor", entered)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	err := w.WaitLifecycle(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "WaitLifecycle waits for the receptor running before the call")

	unblock()
	// appendTicks makes every third event a tock, which has no receptors.
	const ticks = streams * (perStream - perStream/3)
	pr.waitUntil(t, "every lifecycle completed", func() bool { return lifecycles.Load() == ticks })
	before := started.Load()
	waitLifecycle(t, w)
	require.GreaterOrEqual(t, finished.Load(), before, "the receptors started before the wait finished")
	close(stop)
	waiters.Wait()
}

// testSecurityOnce: the security callbacks run once per event an instance
// processes, however many perspectives, receptors and replays handle it.
func testSecurityOnce(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	pr := newProgress()
	var mu sync.Mutex
	calls := map[uuid.UUID]int{}
	var wrongScope, lifecycles atomic.Int64
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, nil), trailPerspective(t, "beta", nil, nil))
	for _, st := range []core.Stage{core.PrePerspective, core.PostPerspective, core.PostAllPerspectives, core.PostLifecycle} {
		require.NoError(t, core.AddReceptor(reg, st, core.Inline, func(ctx context.Context, _ tick, info core.StageInfo) error {
			if core.TenantID(ctx) != "acme" {
				wrongScope.Add(1)
			}
			if st == core.PostLifecycle {
				lifecycles.Add(1)
				pr.poke()
			}
			return nil
		}))
	}
	o := lifecycleOptions()
	o.Security.Callbacks = []core.SecurityCallback{func(_ context.Context, sc core.SecurityContext, e ports.Event) error {
		mu.Lock()
		calls[e.ID]++
		mu.Unlock()
		return nil
	}}
	o.Hooks = pr.hooks(core.Hooks{})
	w := startWorker(t, b, reg, o)

	scoped := func(evs []ports.NewEvent) []ports.NewEvent {
		for i := range evs {
			evs[i].Metadata.Scope = &ports.Scope{TenantID: "acme", UserID: "u1"}
		}
		return evs
	}
	stream := uuid.Must(uuid.NewV7())
	var ids []uuid.UUID
	res := appendNew(t, b, stream, scoped(explicit(t, reg, map[int64]tick{1: {N: 1}, 3: {N: 3}})))
	for _, e := range res.Events {
		ids = append(ids, e.ID)
	}
	pr.waitUntil(t, "the first lifecycles completed", func() bool { return lifecycles.Load() == 2 })
	if b.Rewind != nil {
		// A late event: both perspectives replay the stream.
		res = appendNew(t, b, stream, scoped(explicit(t, reg, map[int64]tick{2: {N: 2}})))
		ids = append(ids, res.Events[0].ID)
	}
	pr.waitUntil(t, "every lifecycle completed", func() bool { return lifecycles.Load() == int64(len(ids)) })
	waitLifecycle(t, w)
	require.Zero(t, wrongScope.Load(), "every receptor ran under the event's scope")
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		require.Equal(t, 1, calls[id], "security callbacks of event %s", id)
	}
}

// testBatchCycleAfterStages: OnBatchCycleComplete of a batch fires after its
// PostAllPerspectives and PostLifecycle stages ran.
func testBatchCycleAfterStages(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	pr := newProgress()
	var mu sync.Mutex
	var order []string
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
		pr.poke()
	}
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, nil), trailPerspective(t, "beta", nil, nil))
	for _, st := range []core.Stage{core.PostAllPerspectives, core.PostLifecycle} {
		require.NoError(t, core.AddReceptor(reg, st, core.Inline, func(_ context.Context, _ tick, info core.StageInfo) error {
			note(st.String())
			return nil
		}))
	}
	o := lifecycleOptions()
	o.Drain.Consumers = 1
	o.Hooks = pr.hooks(core.Hooks{OnBatchCycleComplete: func(c core.BatchCycle) {
		if c.Applied > 0 {
			note("cycle")
		}
	}})
	startWorker(t, b, reg, o)
	_, err := reg.Append(t.Context(), b.Events, uuid.Must(uuid.NewV7()), 0, tick{N: 1})
	require.NoError(t, err)
	pr.waitUntil(t, "the batch cycle", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(order, "cycle")
	})
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"PostAllPerspectives", "PostLifecycle", "cycle"}, order[:slices.Index(order, "cycle")+1])
}

// testImmediateDetached: ImmediateDetached receptors start after the
// event's inline receptors of their stage returned, once per event, under
// the event's security context.
func testImmediateDetached(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	pr := newProgress()
	var mu sync.Mutex
	inlineDone := map[uuid.UUID]bool{}
	immediate := map[uuid.UUID]int{}
	var outOfOrder, wrongScope atomic.Int64
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, nil))
	require.NoError(t, core.AddReceptor(reg, core.PostAllPerspectives, core.Inline, func(_ context.Context, _ tick, info core.StageInfo) error {
		mu.Lock()
		inlineDone[info.Event.ID] = true
		mu.Unlock()
		return nil
	}))
	require.NoError(t, core.AddReceptor(reg, core.PostAllPerspectives, core.ImmediateDetached, func(ctx context.Context, _ tick, info core.StageInfo) error {
		mu.Lock()
		if !inlineDone[info.Event.ID] {
			outOfOrder.Add(1)
		}
		immediate[info.Event.ID]++
		mu.Unlock()
		if core.TenantID(ctx) != "acme" || info.Mode != core.ImmediateDetached {
			wrongScope.Add(1)
		}
		pr.poke()
		return nil
	}))
	o := lifecycleOptions()
	o.Hooks = pr.hooks(core.Hooks{})
	w := startWorker(t, b, reg, o)
	ctx := core.WithScope(t.Context(), ports.Scope{TenantID: "acme"})
	var ids []uuid.UUID
	for range 3 {
		res, err := reg.Append(ctx, b.Events, uuid.Must(uuid.NewV7()), 0, tick{N: 1}, tick{N: 2})
		require.NoError(t, err)
		for _, e := range res.Events {
			ids = append(ids, e.ID)
		}
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(immediate)
	}
	pr.waitUntil(t, "every immediately detached receptor ran", func() bool { return count() == len(ids) })
	waitLifecycle(t, w)
	require.Zero(t, outOfOrder.Load(), "an immediately detached receptor started before the inline ones returned")
	require.Zero(t, wrongScope.Load())
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		require.Equal(t, 1, immediate[id])
	}
}

// testAppendSubscribes: an append through a registry fans out to its
// perspectives even when the store never recorded their subscriptions (no
// worker started, or they were lost).
func testAppendSubscribes(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, nil))
	stream := uuid.Must(uuid.NewV7())
	_, err := reg.Append(t.Context(), b.Events, stream, 0, tick{N: 1}, tock{N: 2})
	require.NoError(t, err)
	rows := pendingRows(t, b, stream)
	require.Equal(t, []int64{1, 2}, versionsOf(ofPerspective(rows, "alpha")), "every event has its work row")
}

// testRetire: a retired perspective gets no more work, even from appends
// and workers that still carry its subscriptions; its pending work and,
// when asked, its state are dropped; a revived one gets new work again.
func testRetire(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	if b.Admin == nil {
		t.Skip("adapter does not implement ports.Admin")
	}
	pr := newProgress()
	// The worker no longer has beta; a producer still carries it.
	producer := newRegistry(t, trailPerspective(t, "alpha", nil, nil), trailPerspective(t, "beta", nil, nil))
	o := lifecycleOptions()
	o.Hooks = pr.hooks(core.Hooks{})
	w := startWorker(t, b, newRegistry(t, trailPerspective(t, "alpha", nil, nil)), o)
	streams := []uuid.UUID{uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())}
	n := map[uuid.UUID]int64{}
	for _, s := range streams {
		_, err := producer.Append(t.Context(), b.Events, s, 0, tick{N: 1}, tick{N: 2}, tick{N: 3})
		require.NoError(t, err)
		n[s] = 3
	}
	pr.waitUntil(t, "alpha applied the events", func() bool { return allCaughtUp(t, b, streams, n, []string{"alpha"}) })
	// The appends registered beta's subscription of tick; tock's is
	// registered as a producer's start would.
	require.NoError(t, producer.RegisterSubscriptions(t.Context(), b.Events))

	res, err := b.Admin.PerspectiveRetire(t.Context(), &ports.PerspectiveRetireParams{Perspective: "beta", DropState: true})
	require.NoError(t, err)
	require.Equal(t, 2, res.Subscriptions, "beta's subscriptions (tick, tock) deleted")
	require.Equal(t, 6, res.Work, "beta's pending rows deleted")
	retired, err := b.Admin.PerspectivesRetired(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{"beta"}, retired)
	_, err = b.Admin.PerspectiveRetire(t.Context(), &ports.PerspectiveRetireParams{Perspective: "beta"})
	require.NoError(t, err, "retiring is idempotent")

	// Appends that carry beta's subscription, and a worker that registers
	// it, create no work for beta.
	for _, s := range streams {
		_, err := producer.Append(t.Context(), b.Events, s, 0, tick{N: 4})
		require.NoError(t, err)
		n[s] = 4
	}
	pr.waitUntil(t, "alpha applied the new events", func() bool { return allCaughtUp(t, b, streams, n, []string{"alpha"}) })
	stopWorker(t, w)
	logs := &recordLog{}
	o2 := o
	o2.Logger = slog.New(logs)
	w2 := startWorker(t, open(t), producer, o2)
	require.Equal(t, 1, logs.mentioning("perspective", "beta"), "a worker that still has beta warns that it is retired")
	for _, s := range streams {
		_, err := producer.Append(t.Context(), b.Events, s, 0, tick{N: 5})
		require.NoError(t, err)
		n[s] = 5
	}
	pr.waitUntil(t, "alpha applied the last events", func() bool { return allCaughtUp(t, b, streams, n, []string{"alpha"}) })
	stopWorker(t, w2)
	require.Empty(t, ofPerspective(pendingRows(t, b, streams...), "beta"), "no work for the retired perspective")
	for _, s := range streams {
		require.Nil(t, modelVersions(t, b, s, "beta"), "beta never applied anything")
		_, ok := cursorOf(t, b, s, "beta")
		require.False(t, ok, "beta's cursors dropped")
	}

	// Revived, beta gets the work of new appends again.
	require.NoError(t, b.Admin.PerspectiveRevive(t.Context(), &ports.PerspectiveReviveParams{Perspective: "beta"}))
	retired, err = b.Admin.PerspectivesRetired(t.Context())
	require.NoError(t, err)
	require.Empty(t, retired)
	_, err = producer.Append(t.Context(), b.Events, streams[0], 0, tick{N: 6})
	require.NoError(t, err)
	require.Equal(t, []int64{6}, versionsOf(ofPerspective(pendingRows(t, b, streams[0]), "beta")))
}

// recordLog is a slog.Handler that keeps the records it is given.
type recordLog struct {
	mu      sync.Mutex
	records []slog.Record
	attrs   []slog.Attr
}

func (h *recordLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.records = append(h.records, r)
	return nil
}

func (h *recordLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	h.mu.Lock()
	defer h.mu.Unlock()
	return &recordLogView{h: h, attrs: attrs}
}

func (h *recordLog) WithGroup(string) slog.Handler { return h }

// recordLogView adds attributes to the records it hands its parent.
type recordLogView struct {
	h     *recordLog
	attrs []slog.Attr
}

func (v *recordLogView) Enabled(context.Context, slog.Level) bool { return true }

func (v *recordLogView) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(v.attrs...)
	return v.h.Handle(ctx, r)
}

func (v *recordLogView) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &recordLogView{h: v.h, attrs: append(slices.Clone(v.attrs), attrs...)}
}

func (v *recordLogView) WithGroup(string) slog.Handler { return v }

// errorContaining counts the records at Error or above whose "error"
// attribute contains text.
func (h *recordLog) errorContaining(text string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.records {
		if r.Level < slog.LevelError {
			continue
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "error" && strings.Contains(a.Value.String(), text) {
				n++
				return false
			}
			return true
		})
	}
	return n
}

// mentioning counts the records at Warn or above with an attribute key
// equal to value.
func (h *recordLog) mentioning(key, value string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.records {
		if r.Level < slog.LevelWarn {
			continue
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key && a.Value.String() == value {
				n++
				return false
			}
			return true
		})
	}
	return n
}

// testUnknownPerspectiveLog: work for a perspective the instance does not
// know waits, and is logged once per perspective and interval, not once
// per event.
func testUnknownPerspectiveLog(t *testing.T, newBackend NewBackendFunc) {
	start := time.Now()
	b := newBackend(t)(t)
	pr := newProgress()
	logs := &recordLog{}
	producer := newRegistry(t, trailPerspective(t, "alpha", nil, nil), trailPerspective(t, "gone", nil, nil))
	o := lifecycleOptions()
	o.Logger = slog.New(logs)
	o.Hooks = pr.hooks(core.Hooks{})
	w := startWorker(t, b, newRegistry(t, trailPerspective(t, "alpha", nil, nil)), o)
	var streams []uuid.UUID
	n := map[uuid.UUID]int64{}
	for range 5 {
		s := uuid.Must(uuid.NewV7())
		streams = append(streams, s)
		for v := range 4 {
			_, err := producer.Append(t.Context(), b.Events, s, 0, tick{N: v})
			require.NoError(t, err)
		}
		n[s] = 4
	}
	pr.waitUntil(t, "alpha applied every event", func() bool { return allCaughtUp(t, b, streams, n, []string{"alpha"}) })
	stopWorker(t, w)
	// One line, and at most one more per minute the scenario ran.
	lines := logs.mentioning("perspective", "gone")
	require.GreaterOrEqual(t, lines, 1, "the unknown perspective is logged")
	require.LessOrEqual(t, lines, 1+int(time.Since(start)/time.Minute), "not once per event")
	require.Len(t, ofPerspective(pendingRows(t, b, streams...), "gone"), 20, "its work waits")
}

// hookedSaves calls before ahead of every ModelSave and after once it
// succeeded.
type hookedSaves struct {
	ports.ModelStore
	before, after func(*ports.ModelSaveParams)
}

func (m hookedSaves) ModelSave(ctx context.Context, p *ports.ModelSaveParams) error {
	m.before(p)
	if err := m.ModelStore.ModelSave(ctx, p); err != nil {
		return err
	}
	m.after(p)
	return nil
}

// testLateDuringSave: a late event stored while an instance applies the
// events above it, after their fetch and before their save, and the
// instance dies once the save moved the cursor past the late event, before
// the completion that would have found it straggling. The next instance
// must apply it (by a rewind), not take it for an event applied before.
func testLateDuringSave(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	first := open(t)
	requireRewindStore(t, first)
	log := &appliedLog{}
	kill := &killable{}
	stream := uuid.Must(uuid.NewV7())
	var armed atomic.Bool
	var once sync.Once
	regA := newRegistry(t, trailPerspective(t, "alpha", log, nil))
	late := explicit(t, regA, map[int64]tick{3: {N: 3}})
	a := first
	a.Models = hookedSaves{
		ModelStore: first.Models,
		before: func(p *ports.ModelSaveParams) {
			if armed.Load() && p.LastVersion == 4 {
				once.Do(func() { appendNew(t, first, stream, late) })
			}
		},
		after: func(p *ports.ModelSaveParams) {
			if armed.Load() && p.LastVersion == 4 {
				kill.dead.Store(true) // the completion of version 4 never lands
			}
		},
	}
	pr := newProgress()
	var completed atomic.Int64
	optsA := lifecycleOptions()
	optsA.Retries.Flush.MaxAttempts = 1
	optsA.Hooks = pr.hooks(core.Hooks{OnCompletionsFlushed: func(f core.CompletionsFlushed) {
		for _, c := range f.Completions {
			if len(c.WorkIDs) > 0 {
				completed.Store(max(completed.Load(), c.LastVersion))
			}
		}
		pr.poke()
	}})
	startWorker(t, kill.wrap(a), regA, optsA)
	appendNew(t, first, stream, explicit(t, regA, map[int64]tick{1: {N: 1}, 2: {N: 2}}))
	pr.waitUntil(t, "the first events applied and completed", func() bool { return completed.Load() == 2 })
	armed.Store(true)
	appendNew(t, first, stream, explicit(t, regA, map[int64]tick{4: {N: 4}}))
	pr.waitUntil(t, "instance A saved version 4 and died", func() bool { return kill.dead.Load() })
	require.Equal(t, []int64{1, 2, 4}, modelVersions(t, first, stream, "alpha"))

	optsB := lifecycleOptions()
	optsB.Clock = staleClock(optsB.Claims.StaleInstanceThreshold)
	optsB.Hooks = pr.hooks(core.Hooks{})
	startWorker(t, open(t), newRegistry(t, trailPerspective(t, "alpha", log, nil)), optsB)
	pr.waitUntil(t, "instance B applied the late event", func() bool {
		return slices.Equal(modelVersions(t, first, stream, "alpha"), seq(1, 4)) && rewindClear(t, first, stream, "alpha")
	})
	require.Equal(t, 1, log.count("alpha", stream, 3), "the late event was applied once")
}

// testRebuildFiresPrePerspective: a rebuild replays every event up to its
// pair's position but leaves out a late event stored below it that no
// perspective applied yet: its rewind applies it later, after its
// PrePerspective fired, once, and not again for the events applied before.
func testRebuildFiresPrePerspective(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	requireRewindStore(t, b)
	if b.Lifecycle == nil {
		t.Skip("adapter does not implement ports.LifecycleStore")
	}
	log := &stageLog{}
	var early atomic.Int64 // applies of an event whose PrePerspective had not fired
	pr := newProgress()
	registry := func() *core.Registry {
		reg := newRegistry(t, trailPerspective(t, "alpha", nil, func(e ports.Event, _ tick) error {
			if log.count(core.PrePerspective, "", e.ID) == 0 {
				early.Add(1)
			}
			return nil
		}))
		require.NoError(t, core.AddReceptor(reg, core.PrePerspective, core.Inline, func(_ context.Context, _ tick, info core.StageInfo) error {
			log.add(core.PrePerspective, "", info.Event.ID)
			pr.poke()
			return nil
		}))
		return reg
	}
	o := lifecycleOptions()
	o.Hooks = pr.hooks(core.Hooks{})
	reg := registry()
	w := startWorker(t, open(t), reg, o)
	stream := uuid.Must(uuid.NewV7())
	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{1: {N: 1}, 3: {N: 3}}))
	pr.waitUntil(t, "the first events applied and completed", func() bool {
		return len(modelVersions(t, b, stream, "alpha")) == 2 && mustCursor(t, b, stream, "alpha").LastVersion == 3
	})
	stopWorker(t, w)

	// A late event while no worker runs: the rebuild leaves it to its
	// rewind.
	late, err := reg.Encode(tick{N: 2})
	require.NoError(t, err)
	late.ID, late.Version = uuid.Must(uuid.NewV7()), 2
	appendNew(t, b, stream, []ports.NewEvent{late})
	rebuilder, err := core.New(open(t), registry(), &o)
	require.NoError(t, err)
	_, err = rebuilder.Rebuild(t.Context(), "alpha", stream)
	require.NoError(t, err)
	require.Equal(t, []int64{1, 3}, modelVersions(t, b, stream, "alpha"), "the rebuild left the late event out")
	require.Zero(t, log.count(core.PrePerspective, "", late.ID), "nothing applied the late event yet")

	startWorker(t, open(t), reg, o)
	pr.waitUntil(t, "the rewind applied the late event", func() bool {
		return slices.Equal(modelVersions(t, b, stream, "alpha"), []int64{1, 2, 3})
	})
	require.Zero(t, early.Load(), "no event applied before its PrePerspective fired")
	require.Equal(t, 1, log.count(core.PrePerspective, "", late.ID), "PrePerspective of the late event fired once")
	require.Equal(t, 3, log.total(core.PrePerspective), "PrePerspective of the events applied before did not fire again")
}

// testStageCompleteRetried: recording a stage completed fails once with a
// transient error, before it reaches the backend. The record is retried:
// every stage fires once, PostLifecycle included (it waits for a recorded
// PostAllPerspectives), and every stage is recorded completed.
func testStageCompleteRetried(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	if b.Lifecycle == nil {
		t.Skip("adapter does not implement ports.LifecycleStore")
	}
	log := &stageLog{}
	var violations atomic.Int64
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, nil))
	addStageReceptors(t, reg, b, log, []string{"alpha"}, &violations)
	failing := map[ports.LifecycleStage]*atomic.Bool{}
	for _, st := range []ports.LifecycleStage{ports.StagePrePerspective, ports.StagePostPerspective, ports.StagePostAllPerspectives, ports.StagePostLifecycle} {
		failing[st] = &atomic.Bool{}
		failing[st].Store(true)
	}
	a := b
	a.Lifecycle = flakyLifecycle{LifecycleStore: b.Lifecycle, failing: failing}
	w := startWorker(t, a, reg, lifecycleOptions())
	stream := uuid.Must(uuid.NewV7())
	res, err := reg.Append(t.Context(), b.Events, stream, 0, tick{N: 1})
	require.NoError(t, err)
	id := res.Events[0].ID
	require.Eventually(t, func() bool { return log.count(core.PostLifecycle, "", id) > 0 }, scenarioTimeout, 5*time.Millisecond,
		"PostLifecycle fired although recording PostAllPerspectives failed once")
	waitLifecycle(t, w)
	for _, st := range []struct {
		stage       core.Stage
		perspective string
	}{{core.PrePerspective, ""}, {core.PostPerspective, "alpha"}, {core.PostAllPerspectives, ""}, {core.PostLifecycle, ""}} {
		require.Equal(t, 1, log.count(st.stage, st.perspective, id), "%s fired once", st.stage)
	}
	for st, f := range failing {
		require.False(t, f.Load(), "recording stage %d failed once", st)
	}
	stages, err := b.Lifecycle.LifecycleStages(t.Context(), &ports.LifecycleStagesParams{EventIDs: []uuid.UUID{id}})
	require.NoError(t, err)
	require.Equal(t, ports.StagePrePerspective|ports.StagePostAllPerspectives|ports.StagePostLifecycle, stages[id], "every stage recorded completed")
	require.Zero(t, violations.Load())
}

// flakyLifecycle fails the first LifecycleComplete of each stage in failing
// with a transient error, before it reaches the backend.
type flakyLifecycle struct {
	ports.LifecycleStore
	failing map[ports.LifecycleStage]*atomic.Bool
}

func (l flakyLifecycle) LifecycleComplete(ctx context.Context, p *ports.LifecycleCompleteParams) error {
	if f := l.failing[p.Stage]; f != nil && f.CompareAndSwap(true, false) {
		return fmt.Errorf("recording stage %d: connection reset: %w", p.Stage, ports.ErrTransient)
	}
	return l.LifecycleStore.LifecycleComplete(ctx, p)
}

// testPrePerspectiveAwaited: another live instance claimed the
// PrePerspective stage of an event (it drained the stream before, and is
// slow or crashed running the stage). The instance that drains the stream
// now applies nothing until that stage is recorded completed, and does not
// run it again.
func testPrePerspectiveAwaited(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	if b.Lifecycle == nil {
		t.Skip("adapter does not implement ports.LifecycleStore")
	}
	// The other instance is live but passive: it holds no stream.
	other := &instance{id: newID(t), b: b}
	other.heartbeatAs(t, time.Now(), true)
	var completed, early atomic.Bool
	log := &stageLog{}
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, func(ports.Event, tick) error {
		if !completed.Load() {
			early.Store(true)
		}
		return nil
	}))
	require.NoError(t, core.AddReceptor(reg, core.PrePerspective, core.Inline, func(_ context.Context, _ tick, info core.StageInfo) error {
		log.add(core.PrePerspective, "", info.Event.ID)
		return nil
	}))
	stream := uuid.Must(uuid.NewV7())
	ne, err := reg.Encode(tick{N: 1})
	require.NoError(t, err)
	ne.ID = uuid.Must(uuid.NewV7())
	won, err := b.Lifecycle.LifecycleClaim(t.Context(), &ports.LifecycleClaimParams{
		EventIDs: []uuid.UUID{ne.ID}, Stage: ports.StagePrePerspective, InstanceID: other.id, StaleThreshold: staleThreshold, Now: time.Now(),
	})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{ne.ID}, won)

	claims := make(chan struct{}, 100)
	a := b
	a.Lifecycle = countedClaims{LifecycleStore: b.Lifecycle, stage: ports.StagePrePerspective, claims: claims}
	pr := newProgress()
	o := lifecycleOptions()
	o.Hooks = pr.hooks(core.Hooks{})
	startWorker(t, a, reg, o)
	appendNew(t, b, stream, []ports.NewEvent{ne})
	waitFor(t, "a claim of the stage", claims)
	waitFor(t, "a second claim of the stage: the instance waits", claims)
	require.Nil(t, modelVersions(t, b, stream, "alpha"), "nothing applied while the stage is claimed elsewhere")

	completed.Store(true)
	require.NoError(t, b.Lifecycle.LifecycleComplete(t.Context(), &ports.LifecycleCompleteParams{
		EventIDs: []uuid.UUID{ne.ID}, Stage: ports.StagePrePerspective, InstanceID: other.id, Now: time.Now(),
	}))
	pr.waitUntil(t, "the event applied", func() bool { return len(modelVersions(t, b, stream, "alpha")) == 1 })
	require.False(t, early.Load(), "the event was applied after its PrePerspective completed")
	require.Zero(t, log.count(core.PrePerspective, "", ne.ID), "the stage ran on the other instance only")
}

// countedClaims sends on claims after each LifecycleClaim of stage.
type countedClaims struct {
	ports.LifecycleStore
	stage  ports.LifecycleStage
	claims chan<- struct{}
}

func (l countedClaims) LifecycleClaim(ctx context.Context, p *ports.LifecycleClaimParams) ([]uuid.UUID, error) {
	won, err := l.LifecycleStore.LifecycleClaim(ctx, p)
	if p.Stage == l.stage {
		select {
		case l.claims <- struct{}{}:
		default:
		}
	}
	return won, err
}

// testPostPerspectiveTakenOver: an instance claimed the PostPerspective
// stage of an event and died before recording it (its rows were not
// completed either, so the event is delivered again). The instance that
// applies the event now waits for that claim while the dead instance still
// counts as live, takes it over once it is stale, and runs the stage: it
// is not passed over for good.
func testPostPerspectiveTakenOver(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	if b.Lifecycle == nil {
		t.Skip("adapter does not implement ports.LifecycleStore")
	}
	other := &instance{id: newID(t), b: b}
	other.heartbeatAs(t, time.Now(), true)
	log := &stageLog{}
	pr := newProgress()
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, nil))
	require.NoError(t, core.AddReceptor(reg, core.PostPerspective, core.Inline, func(_ context.Context, _ tick, info core.StageInfo) error {
		log.add(core.PostPerspective, info.Perspective, info.Event.ID)
		pr.poke()
		return nil
	}))
	stream := uuid.Must(uuid.NewV7())
	ne, err := reg.Encode(tick{N: 1})
	require.NoError(t, err)
	ne.ID = uuid.Must(uuid.NewV7())
	won, err := b.Lifecycle.LifecycleClaim(t.Context(), &ports.LifecycleClaimParams{
		EventIDs: []uuid.UUID{ne.ID}, Stage: ports.StagePostPerspective, Perspective: "alpha", InstanceID: other.id,
		StaleThreshold: staleThreshold, Now: time.Now(),
	})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{ne.ID}, won)

	claims := make(chan struct{}, 100)
	a := b
	a.Lifecycle = countedClaims{LifecycleStore: b.Lifecycle, stage: ports.StagePostPerspective, claims: claims}
	o := lifecycleOptions()
	clock := clocktest.NewOffset()
	o.Clock = clock
	o.Hooks = pr.hooks(core.Hooks{})
	startWorker(t, a, reg, o)
	appendNew(t, b, stream, []ports.NewEvent{ne})
	waitFor(t, "a claim of the stage", claims)
	waitFor(t, "a second claim of the stage: the instance waits", claims)
	require.Zero(t, log.count(core.PostPerspective, "alpha", ne.ID), "the stage claimed by a live instance is not run here")

	// The other instance's heartbeat goes stale.
	clock.Jump(10 * o.Claims.StaleInstanceThreshold)
	pr.waitUntil(t, "the stage taken over", func() bool { return log.count(core.PostPerspective, "alpha", ne.ID) > 0 })
	require.Equal(t, 1, log.count(core.PostPerspective, "alpha", ne.ID), "the stage ran once")
	require.Equal(t, []int64{1}, modelVersions(t, b, stream, "alpha"))
}

// testPrePerspectiveOnceThroughFailures: the backend of the only instance
// fails transiently around PrePerspective: its claim and its record are
// taken although their calls fail (their acknowledgements lost), and the
// model loads of the stream's drains fail after the stage ran, so that
// the pairs are retried. The stage fires once per event all the same, and
// every perspective applies the events.
func testPrePerspectiveOnceThroughFailures(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	if b.Lifecycle == nil {
		t.Skip("adapter does not implement ports.LifecycleStore")
	}
	log := &stageLog{}
	var violations atomic.Int64
	names := []string{"alpha", "beta"}
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, nil), trailPerspective(t, "beta", nil, nil))
	addStageReceptors(t, reg, b, log, names, &violations)
	var fired atomic.Bool
	log.onAdd = func() { fired.Store(true) }
	lossy := &lossyLifecycle{LifecycleStore: b.Lifecycle, stage: ports.StagePrePerspective}
	lossy.claims.Store(2)
	lossy.completes.Store(2)
	loads := &failedLoads{after: &fired}
	loads.left.Store(4)
	a := b
	a.Lifecycle = lossy
	a.Models = failingLoads{ModelStore: b.Models, loads: loads}
	if b.ModelBatch != nil {
		a.ModelBatch = failingBatchLoads{ModelBatchStore: b.ModelBatch, loads: loads}
	}
	w := startWorker(t, a, reg, lifecycleOptions())
	stream := uuid.Must(uuid.NewV7())
	res, err := reg.Append(t.Context(), b.Events, stream, 0, tick{N: 1}, tick{N: 2})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return len(modelVersions(t, b, stream, "alpha")) == 2 && len(modelVersions(t, b, stream, "beta")) == 2
	}, scenarioTimeout, 5*time.Millisecond, "every perspective applied the events")
	waitLifecycle(t, w)
	require.LessOrEqual(t, loads.left.Load(), int64(0), "every model load meant to fail failed")
	for _, e := range res.Events {
		require.Equal(t, 1, log.count(core.PrePerspective, "", e.ID), "PrePerspective of v%d fired once", e.Version)
	}
	require.Zero(t, violations.Load())
}

// lossyLifecycle takes the first claims and records of stage it is asked
// for (as many as claims and completes say) and then fails them with a
// transient error, as a connection lost before the acknowledgement does.
type lossyLifecycle struct {
	ports.LifecycleStore
	stage             ports.LifecycleStage
	claims, completes atomic.Int64
}

func (l *lossyLifecycle) LifecycleClaim(ctx context.Context, p *ports.LifecycleClaimParams) ([]uuid.UUID, error) {
	won, err := l.LifecycleStore.LifecycleClaim(ctx, p)
	if err == nil && p.Stage == l.stage && l.claims.Add(-1) >= 0 {
		return nil, fmt.Errorf("claiming stage %d: connection reset: %w", p.Stage, ports.ErrTransient)
	}
	return won, err
}

func (l *lossyLifecycle) LifecycleComplete(ctx context.Context, p *ports.LifecycleCompleteParams) error {
	err := l.LifecycleStore.LifecycleComplete(ctx, p)
	if err == nil && p.Stage == l.stage && l.completes.Add(-1) >= 0 {
		return fmt.Errorf("recording stage %d: connection reset: %w", p.Stage, ports.ErrTransient)
	}
	return err
}

// failedLoads counts down the model loads to fail once after is set.
type failedLoads struct {
	after *atomic.Bool
	left  atomic.Int64
}

func (f *failedLoads) fail() error {
	if f.after.Load() && f.left.Add(-1) >= 0 {
		return fmt.Errorf("loading models: connection refused: %w", ports.ErrTransient)
	}
	return nil
}

// failingLoads and failingBatchLoads fail the model loads loads says.
type failingLoads struct {
	ports.ModelStore
	loads *failedLoads
}

func (m failingLoads) ModelLoad(ctx context.Context, p *ports.ModelLoadParams) (ports.StoredModel, error) {
	if err := m.loads.fail(); err != nil {
		return ports.StoredModel{}, err
	}
	return m.ModelStore.ModelLoad(ctx, p)
}

type failingBatchLoads struct {
	ports.ModelBatchStore
	loads *failedLoads
}

func (m failingBatchLoads) ModelLoadMany(ctx context.Context, p *ports.ModelLoadManyParams) ([]ports.StoredModel, error) {
	if err := m.loads.fail(); err != nil {
		return nil, err
	}
	return m.ModelBatchStore.ModelLoadMany(ctx, p)
}
