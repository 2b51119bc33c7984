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

// runEngineReliability runs the scenarios of the promise that a bad or slow
// event never costs a good one: slow and hung applies, infrastructure
// errors, dead letters in history, requeues and new generations, stale
// model caches.
func runEngineReliability(t *testing.T, newBackend NewBackendFunc) {
	t.Helper()
	group(t, "EngineReliability", map[string]func(t *testing.T){
		"HungApplyHoldsOnlyItsStream":            func(t *testing.T) { testHungApplyIsolated(t, newBackend) },
		"HungApplyIgnoringContextIsAbandoned":    func(t *testing.T) { testHungApplyAbandoned(t, newBackend) },
		"SlowApplyHonouringContextTimesOut":      func(t *testing.T) { testApplyDeadline(t, newBackend) },
		"BackendErrorsCostNoAttempt":             func(t *testing.T) { testBackendErrorsFree(t, newBackend) },
		"DeadLetterSkippedByRewind":              func(t *testing.T) { testDeadLetterSkippedByRewind(t, newBackend) },
		"ExhaustedLateRowLeavesNoRewindWaiting":  func(t *testing.T) { testExhaustedLateRow(t, newBackend) },
		"RewindCountsOnlyEventsNeverApplied":     func(t *testing.T) { testRewindNewAfterTakeover(t, newBackend) },
		"LateEventAppliedByADrainIsNotNewAgain":  func(t *testing.T) { testLateAppliedByDrain(t, newBackend) },
		"LateEventAbandonedInItsRewindIsLeftOut": func(t *testing.T) { testLateAbandonedInRewind(t, newBackend) },
		"RequeueAfterFixAppliesInOrder":          func(t *testing.T) { testRequeueAfterFix(t, newBackend) },
		"NewGenerationRecoversDeadLetters":       func(t *testing.T) { testGenerationRecovery(t, newBackend) },
		"ReplayFailureChargedToItsEvent":         func(t *testing.T) { testReplayFailureCharged(t, newBackend) },
		"ApplyNeverSeesAModelOlderThanTheCursor": func(t *testing.T) { testNoStaleModel(t, newBackend) },
		"InstantReportsRetried":                  func(t *testing.T) { testInstantReportsRetried(t, newBackend) },
	})
}

// behaviour decides what the apply of a tick does; nil applies it.
type behaviour func(ctx context.Context, e ports.Event, tk tick) error

// strictPerspective is trailPerspective with a behaviour and, when stale is
// set, a check that the model handed to each apply ends right before the
// event: in a stream whose every event is applied (none dead-lettered), a
// model that does not is stale, and the check counts it in stale.
func strictPerspective(t *testing.T, name string, do behaviour, stale *atomic.Int64) *core.Perspective[trail] {
	t.Helper()
	check := func(m trail, v int64) {
		last := int64(0)
		if len(m.Versions) > 0 {
			last = m.Versions[len(m.Versions)-1]
		}
		if stale != nil && last != v-1 {
			stale.Add(1)
		}
	}
	p := core.NewPerspective[trail](name)
	core.MustHandle(p, func(ctx context.Context, m trail, e tick) (trail, error) {
		ev, _ := core.EventFromContext(ctx)
		check(m, ev.Version)
		if do != nil {
			if err := do(ctx, ev, e); err != nil {
				return m, err
			}
		}
		m.Versions = append(m.Versions, ev.Version)
		return m, nil
	})
	core.MustHandle(p, func(ctx context.Context, m trail, _ tock) (trail, error) {
		ev, _ := core.EventFromContext(ctx)
		check(m, ev.Version)
		m.Versions = append(m.Versions, ev.Version)
		return m, nil
	})
	return p
}

// explicit encodes ticks at the given versions (a late import when a
// version lies below the stream's head).
func explicit(t *testing.T, reg *core.Registry, ticks map[int64]tick) []ports.NewEvent {
	t.Helper()
	var out []ports.NewEvent
	for v := int64(1); len(out) < len(ticks); v++ {
		tk, ok := ticks[v]
		if !ok {
			continue
		}
		ne, err := reg.Encode(tk)
		require.NoError(t, err)
		ne.Version = v
		out = append(out, ne)
	}
	return out
}

func appendNew(t *testing.T, b ports.Backend, stream uuid.UUID, evs []ports.NewEvent) *ports.EventsAppendResult {
	t.Helper()
	res, err := b.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{StreamID: stream, Events: evs})
	require.NoError(t, err)
	return res
}

// deadLetters lists the dead letters of a perspective in a status ("" for
// any).
func deadLetters(t *testing.T, b ports.Backend, perspective string, status ports.DeadLetterStatus) []ports.DeadLetter {
	t.Helper()
	dls, err := b.DeadLetters.DeadLettersList(t.Context(), &ports.DeadLettersListParams{Perspective: perspective, Status: status})
	require.NoError(t, err)
	return dls
}

// rewindClear reports whether the pair's cursor is completed and carries no
// rewind flag.
func rewindClear(t *testing.T, b ports.Backend, stream uuid.UUID, perspective string) bool {
	t.Helper()
	c, ok := cursorOf(t, b, stream, perspective)
	return ok && c.Status.Has(ports.CursorCompleted) && !c.Status.Has(ports.CursorRewindRequired)
}

func requireRewindStore(t *testing.T, b ports.Backend) {
	t.Helper()
	if b.Rewind == nil {
		t.Skip("adapter does not implement ports.RewindStore")
	}
}

// testHungApplyIsolated: one apply hangs (with no deadline in sight), and
// the other streams of its batch all complete meanwhile.
func testHungApplyIsolated(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	release := make(chan struct{})
	var closeOnce sync.Once
	t.Cleanup(func() { closeOnce.Do(func() { close(release) }) })
	hang := func(_ context.Context, _ ports.Event, tk tick) error {
		if tk.Poison {
			<-release
		}
		return nil
	}
	pr := newProgress()
	reg := newRegistry(t, strictPerspective(t, "alpha", hang, nil), strictPerspective(t, "beta", nil, nil))

	// Everything is stored before the worker starts, so its first claim
	// takes every stream into one batch with the hanging one.
	hung := uuid.Must(uuid.NewV7())
	_, err := reg.Append(t.Context(), b.Events, hung, 0, tick{N: 1, Poison: true}, tick{N: 2})
	require.NoError(t, err)
	streams := make([]uuid.UUID, 20)
	n := map[uuid.UUID]int64{}
	for i := range streams {
		streams[i] = uuid.Must(uuid.NewV7())
		appendTicks(t, reg, b, streams[i], 0, 3)
		n[streams[i]] = 3
	}
	opts := fastOptions()
	opts.Drain.ApplyTimeout = time.Hour
	opts.Hooks = pr.hooks(core.Hooks{})
	w := startWorker(t, b, reg, opts)

	pr.waitUntil(t, "every other stream applied while one apply hangs", func() bool {
		return allCaughtUp(t, b, streams, n, []string{"alpha", "beta"})
	})
	requireExactlyOnce(t, b, streams, n, []string{"alpha", "beta"})
	require.Empty(t, modelVersions(t, b, hung, "alpha"), "the hung apply is still running")
	require.False(t, w.IsIdle(), "a worker with an apply running is not idle")

	closeOnce.Do(func() { close(release) })
	pr.waitUntil(t, "the hung stream completes once its apply returns", func() bool {
		return len(modelVersions(t, b, hung, "alpha")) == 2 && len(modelVersions(t, b, hung, "beta")) == 2
	})
	require.Equal(t, []int64{1, 2}, modelVersions(t, b, hung, "alpha"))
	require.Equal(t, []int64{1, 2}, modelVersions(t, b, hung, "beta"))
}

// testHungApplyAbandoned: an apply that ignores its cancelled context is
// abandoned past its grace, counted and listed; each abandonment costs its
// event one attempt, and when they are used up the event is dead-lettered
// (timed out) and its pair goes on.
func testHungApplyAbandoned(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	release := make(chan struct{})
	var closeOnce sync.Once
	t.Cleanup(func() { closeOnce.Do(func() { close(release) }) })
	returned := make(chan struct{}, 10)
	hang := func(_ context.Context, _ ports.Event, tk tick) error {
		if tk.Poison {
			defer func() { returned <- struct{}{} }()
			<-release // ignores its context
		}
		return nil
	}
	pr := newProgress()
	var abandoned atomic.Int64
	var dead atomic.Int64
	opts := fastOptions()
	opts.Drain.ApplyTimeout = 100 * time.Millisecond
	opts.Drain.ApplyAbandonGrace = 100 * time.Millisecond
	opts.Retries.MaxEventAttempts = 2
	opts.Hooks = pr.hooks(core.Hooks{
		OnApplyAbandoned: func(core.AbandonedApply) { abandoned.Add(1); pr.poke() },
		OnDeadLettered:   func(ports.DeadLetter) { dead.Add(1); pr.poke() },
	})
	reg := newRegistry(t, strictPerspective(t, "alpha", hang, nil))
	w := startWorker(t, b, reg, opts)
	stream := uuid.Must(uuid.NewV7())
	_, err := reg.Append(t.Context(), b.Events, stream, 0, tick{N: 1}, tick{N: 2, Poison: true}, tick{N: 3})
	require.NoError(t, err)

	pr.waitUntil(t, "the hung event is dead-lettered and its pair goes on", func() bool {
		return dead.Load() == 1 && len(modelVersions(t, b, stream, "alpha")) == 2
	})
	require.Equal(t, []int64{1, 3}, modelVersions(t, b, stream, "alpha"))
	require.Equal(t, int64(2), abandoned.Load(), "one abandonment per attempt")
	require.Equal(t, int64(2), w.AbandonedAppliesTotal())
	require.Len(t, w.AbandonedApplies(), 2, "both abandoned applies still run")
	dls := deadLetters(t, b, "alpha", ports.DeadLetterDead)
	require.Len(t, dls, 1)
	require.Equal(t, int64(2), dls[0].EventVersion)
	require.Equal(t, ports.ReasonTimedOut, dls[0].Reason)
	require.Equal(t, 2, dls[0].Attempts)
	require.Contains(t, dls[0].Error, "abandoned")

	closeOnce.Do(func() { close(release) })
	for range 2 {
		select {
		case <-returned:
		case <-time.After(scenarioTimeout):
			t.Fatal("the abandoned applies did not return")
		}
	}
	// The engine forgets an abandoned apply right after it returns.
	require.Eventually(t, func() bool { return len(w.AbandonedApplies()) == 0 }, scenarioTimeout, 5*time.Millisecond)
	require.Equal(t, []int64{1, 3}, modelVersions(t, b, stream, "alpha"), "their late results were discarded")
}

// testApplyDeadline: an apply that honours its context is cancelled at its
// deadline; each time counts an attempt, nothing is abandoned.
func testApplyDeadline(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	slow := func(ctx context.Context, _ ports.Event, tk tick) error {
		if tk.Poison {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	pr := newProgress()
	var abandoned, failures atomic.Int64
	opts := fastOptions()
	opts.Drain.ApplyTimeout = 50 * time.Millisecond
	opts.Retries.MaxEventAttempts = 3
	opts.Hooks = pr.hooks(core.Hooks{
		OnApplyAbandoned: func(core.AbandonedApply) { abandoned.Add(1) },
		OnFailure:        func(ports.Failure) { failures.Add(1) },
	})
	reg := newRegistry(t, strictPerspective(t, "alpha", slow, nil))
	startWorker(t, b, reg, opts)
	stream := uuid.Must(uuid.NewV7())
	_, err := reg.Append(t.Context(), b.Events, stream, 0, tick{N: 1, Poison: true}, tick{N: 2})
	require.NoError(t, err)
	pr.waitUntil(t, "the slow event is dead-lettered and its pair goes on", func() bool {
		return len(deadLetters(t, b, "alpha", ports.DeadLetterDead)) == 1 && len(modelVersions(t, b, stream, "alpha")) == 1
	})
	dl := deadLetters(t, b, "alpha", ports.DeadLetterDead)[0]
	require.Equal(t, ports.ReasonTimedOut, dl.Reason)
	require.Equal(t, 3, dl.Attempts, "three applies ran")
	require.Contains(t, dl.Error, "deadline")
	require.Equal(t, int64(2), failures.Load(), "two failures retried before the third dead-lettered the event")
	require.Zero(t, abandoned.Load(), "an apply that returns is never abandoned")
}

// flakyBackend fails chosen calls of a backend a number of times each, with
// errors the adapter could return: transient ones and others.
type flakyBackend struct {
	loads, saves, fetches, completes atomic.Int64 // failures left
	failed                           atomic.Int64
}

func (f *flakyBackend) fail(left *atomic.Int64, what string) error {
	n := left.Add(-1)
	if n < 0 {
		return nil
	}
	f.failed.Add(1)
	if n%2 == 0 {
		return fmt.Errorf("conformance: %s: connection reset: %w", what, ports.ErrTransient)
	}
	return fmt.Errorf("conformance: %s: the server said no", what)
}

func (f *flakyBackend) wrap(b ports.Backend) ports.Backend {
	b.Models = flakyModels{f, b.Models}
	b.ModelBatch = nil // every load and save meets the failures
	b.Fetcher = flakyFetcher{f, b.Fetcher}
	b.Cursors = flakyCursors{f, b.Cursors}
	return b
}

type flakyModels struct {
	f *flakyBackend
	ports.ModelStore
}

func (m flakyModels) ModelLoad(ctx context.Context, params *ports.ModelLoadParams) (ports.StoredModel, error) {
	s, p := params.StreamID, params.Perspective
	if err := m.f.fail(&m.f.loads, "loading model"); err != nil {
		return ports.StoredModel{}, err
	}
	return m.ModelStore.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: s, Perspective: p})
}

func (m flakyModels) ModelSave(ctx context.Context, p *ports.ModelSaveParams) error {
	if err := m.f.fail(&m.f.saves, "saving model"); err != nil {
		return err
	}
	return m.ModelStore.ModelSave(ctx, p)
}

type flakyFetcher struct {
	f *flakyBackend
	ports.EventFetcher
}

func (x flakyFetcher) EventsFetchPending(ctx context.Context, p *ports.EventsFetchPendingParams) (*ports.EventsFetchPendingResult, error) {
	if err := x.f.fail(&x.f.fetches, "fetching"); err != nil {
		return nil, err
	}
	return x.EventFetcher.EventsFetchPending(ctx, p)
}

type flakyCursors struct {
	f *flakyBackend
	ports.CursorStore
}

func (c flakyCursors) WorkComplete(ctx context.Context, p *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	if err := c.f.fail(&c.f.completes, "completing"); err != nil {
		return nil, err
	}
	return c.CursorStore.WorkComplete(ctx, p)
}

// testBackendErrorsFree: backend calls that fail (loads, saves, fetches,
// completions; transient or not) are retried and cost no event an attempt:
// with a single attempt allowed, any attempt charged would dead-letter.
func testBackendErrorsFree(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	flaky := &flakyBackend{}
	flaky.loads.Store(3)
	flaky.saves.Store(4)
	flaky.fetches.Store(3)
	flaky.completes.Store(3)
	pr := newProgress()
	var failures, dead atomic.Int64
	opts := fastOptions()
	opts.Retries.MaxEventAttempts = 1
	opts.Drain.ModelCacheSize = core.Unlimited // every drain loads
	opts.Hooks = pr.hooks(core.Hooks{
		OnFailure:      func(ports.Failure) { failures.Add(1) },
		OnDeadLettered: func(ports.DeadLetter) { dead.Add(1) },
	})
	reg := newRegistry(t, strictPerspective(t, "alpha", nil, nil))
	startWorker(t, flaky.wrap(b), reg, opts)
	streams := make([]uuid.UUID, 4)
	n := map[uuid.UUID]int64{}
	for i := range streams {
		streams[i] = uuid.Must(uuid.NewV7())
		appendTicks(t, reg, b, streams[i], 0, 3)
		n[streams[i]] = 3
	}
	pr.waitUntil(t, "everything applied despite the failing backend", func() bool {
		return allCaughtUp(t, b, streams, n, []string{"alpha"})
	})
	requireExactlyOnce(t, b, streams, n, []string{"alpha"})
	require.Equal(t, int64(13), flaky.failed.Load(), "every injected failure was met")
	require.Zero(t, failures.Load(), "no event failure was recorded")
	require.Zero(t, dead.Load(), "nothing was dead-lettered")
	require.Empty(t, deadLetters(t, b, "alpha", ""))
}

// poisonUnless fails poison ticks until fixed is set.
func poisonUnless(fixed *atomic.Bool) behaviour {
	return func(_ context.Context, _ ports.Event, tk tick) error {
		if tk.Poison && !fixed.Load() {
			return errors.New("poison pill")
		}
		return nil
	}
}

// testDeadLetterSkippedByRewind: a late event rewinds a pair whose history
// holds a dead-lettered event; the replay leaves it out as the drain did,
// the rewind completes, and later events flow.
func testDeadLetterSkippedByRewind(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	requireRewindStore(t, b)
	needAdmin(t, b)
	var fixed atomic.Bool
	pr := newProgress()
	opts := lifecycleOptions()
	opts.Retries.MaxEventAttempts = 1
	opts.Hooks = pr.hooks(core.Hooks{})
	reg := newRegistry(t, strictPerspective(t, "alpha", poisonUnless(&fixed), nil))
	startWorker(t, b, reg, opts)
	stream := uuid.Must(uuid.NewV7())
	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{1: {N: 1}, 2: {N: 2, Poison: true}, 3: {N: 3}, 5: {N: 5}}))
	pr.waitUntil(t, "the poison event is dead-lettered and the rest applied", func() bool {
		return len(modelVersions(t, b, stream, "alpha")) == 3
	})
	require.Equal(t, []int64{1, 3, 5}, modelVersions(t, b, stream, "alpha"))

	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{4: {N: 4}}))
	pr.waitUntil(t, "the late event is applied by a rewind that skips the dead letter", func() bool {
		return len(modelVersions(t, b, stream, "alpha")) == 4 && rewindClear(t, b, stream, "alpha")
	})
	require.Equal(t, []int64{1, 3, 4, 5}, modelVersions(t, b, stream, "alpha"))

	_, err := reg.Append(t.Context(), b.Events, stream, 0, tick{N: 6})
	require.NoError(t, err)
	pr.waitUntil(t, "the pair goes on", func() bool { return len(modelVersions(t, b, stream, "alpha")) == 5 })
	require.Equal(t, []int64{1, 3, 4, 5, 6}, modelVersions(t, b, stream, "alpha"))
	dls := deadLetters(t, b, "alpha", "")
	require.Len(t, dls, 1, "only the poison event is dead-lettered")
	require.Equal(t, int64(2), dls[0].EventVersion)
	require.Equal(t, ports.ReasonFailed, dls[0].Reason)
	require.Equal(t, "poison pill", dls[0].Error)
	require.Equal(t, 1, dls[0].Attempts)
}

// testExhaustedLateRow: a late row whose attempts a takeover used up is
// dead-lettered before any rewind replayed it; the pair's cursor does not
// go on waiting for a rewind: the rewind runs, without it, and clears the
// flag.
func testExhaustedLateRow(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	requireRewindStore(t, b)
	pr := newProgress()
	opts := lifecycleOptions()
	opts.Retries.MaxEventAttempts = 1
	// The startup scan would repair the pair; a running drain must too.
	opts.Rewind.StartupScan = core.StartupScanDisabled
	opts.Hooks = pr.hooks(core.Hooks{})
	reg := newRegistry(t, strictPerspective(t, "alpha", nil, nil))
	first := startWorker(t, open(t), reg, opts)
	stream := newID(t)
	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{1: {N: 1}, 3: {N: 3}}))
	pr.waitUntil(t, "both events applied", func() bool {
		return len(modelVersions(t, b, stream, "alpha")) == 2 && rewindClear(t, b, stream, "alpha")
	})
	stop(t, first)

	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{2: {N: 2}}))
	require.True(t, mustCursor(t, b, stream, "alpha").Status.Has(ports.CursorRewindRequired))
	// An instance that is not live takes the late row, so the next holder
	// charges it the takeover: its only attempt.
	gone := &instance{id: newID(t), b: open(t)}
	require.Equal(t, []int64{2}, versionsOf(ofPerspective(gone.fetch(t, opts.Clock.Now(), stream).Work, "alpha")))

	startWorker(t, open(t), reg, opts)
	pr.waitUntil(t, "the late row is dead-lettered and the rewind flag cleared", func() bool {
		return len(deadLetters(t, b, "alpha", ports.DeadLetterDead)) == 1 && rewindClear(t, b, stream, "alpha")
	})
	require.Equal(t, []int64{1, 3}, modelVersions(t, b, stream, "alpha"))
	dls := deadLetters(t, b, "alpha", ports.DeadLetterDead)
	require.Equal(t, int64(2), dls[0].EventVersion)
	require.Equal(t, ports.ReasonMaxAttemptsExceeded, dls[0].Reason)
}

// testRewindNewAfterTakeover: an instance applied and saved events, then
// died before completing their rows, and a late event arrived below them.
// The instance that takes the stream over rewinds the pair: its report
// counts as new only the late event, not the events the saved model held
// before the rewind began.
func testRewindNewAfterTakeover(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	requireRewindStore(t, b)
	rewinds := make(chan core.RewindInfo, 10)
	pr := newProgress()
	opts := lifecycleOptions()
	opts.Rewind.StartupScan = core.StartupScanDisabled
	opts.Hooks = pr.hooks(core.Hooks{OnRewind: func(i core.RewindInfo) { rewinds <- i; pr.poke() }})
	reg := newRegistry(t, strictPerspective(t, "alpha", nil, nil))
	subscribe(t, b, typeTick, "alpha")
	stream := newID(t)
	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{1: {N: 1}, 3: {N: 3}, 4: {N: 4}}))

	// An instance applies the three events, saves the model and dies
	// before its completion is sent.
	gone := &instance{id: newID(t), b: open(t)}
	rows := ofPerspective(gone.fetch(t, opts.Clock.Now(), stream).Work, "alpha")
	require.Equal(t, []int64{1, 3, 4}, versionsOf(rows))
	require.NoError(t, gone.b.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
		StreamID: stream, Perspective: "alpha", Data: []byte(`{"versions":[1,3,4]}`),
		LastEventID: rows[2].EventID, LastVersion: 4, Now: opts.Clock.Now(),
	}))
	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{2: {N: 2}}))

	startWorker(t, open(t), reg, opts)
	pr.waitUntil(t, "the late event is rewound in", func() bool {
		return len(modelVersions(t, b, stream, "alpha")) == 4 && rewindClear(t, b, stream, "alpha")
	})
	require.Equal(t, []int64{1, 2, 3, 4}, modelVersions(t, b, stream, "alpha"))
	info := <-rewinds
	require.Equal(t, 4, info.Replayed)
	require.Equal(t, 1, info.New, "only the late event was never applied")
}

// testLateAppliedByDrain: a late event stored below the rows an instance
// had handed out, but above its pair's cursor, is applied by the next
// drain as any other; that drain saves the model and its instance dies
// before the completion reaches the backend. The instance that takes the
// stream over finds the event in the saved model: it completes the row as
// applied, and neither applies the event again nor counts it as new in a
// rewind.
func testLateAppliedByDrain(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	requireRewindStore(t, b)
	stream := newID(t)
	reg := newRegistry(t)
	subscribe(t, b, typeTick, "alpha")
	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{1: {N: 1}, 3: {N: 3}}))

	// An instance takes the rows out and dies: the event stored below them
	// is late, though the pair's cursor is not past it.
	gone := &instance{id: newID(t), b: open(t)}
	require.Equal(t, []int64{1, 3}, versionsOf(ofPerspective(gone.fetch(t, time.Now(), stream).Work, "alpha")))
	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{2: {N: 2}}))
	late := ofPerspective(pendingRows(t, b, stream), "alpha")
	require.Equal(t, []int64{1, 2, 3}, versionsOf(late))
	require.True(t, late[1].Late, "the event stored below the rows handed out is late")

	// A drains the three events, saves the model and dies before its
	// completion reaches the backend.
	log := &appliedLog{}
	pr := newProgress()
	kill := &killable{}
	a := open(t)
	a.Cursors = dyingCursors{CursorStore: a.Cursors, k: kill}
	optsA := lifecycleOptions()
	optsA.Rewind.StartupScan = core.StartupScanDisabled
	optsA.Retries.Flush.MaxAttempts = 1
	optsA.Hooks = pr.hooks(core.Hooks{})
	startWorker(t, kill.wrap(a), newRegistry(t, trailPerspective(t, "alpha", log, nil)), optsA)
	pr.waitUntil(t, "A saved the three events and died", func() bool {
		return kill.dead.Load() && len(modelVersions(t, b, stream, "alpha")) == 3
	})
	require.Equal(t, []int64{1, 2, 3}, modelVersions(t, b, stream, "alpha"))
	require.Len(t, pendingRows(t, b, stream), 3, "A's completion never landed")

	// B takes the stream over.
	rewound := make(chan core.RewindInfo, 4)
	optsB := lifecycleOptions()
	optsB.Clock = staleClock(optsB.Claims.StaleInstanceThreshold)
	optsB.Hooks = pr.hooks(core.Hooks{OnRewind: func(i core.RewindInfo) {
		select {
		case rewound <- i:
		default:
		}
	}})
	startWorker(t, open(t), newRegistry(t, trailPerspective(t, "alpha", log, nil)), optsB)
	pr.waitUntil(t, "B completed the rows", func() bool {
		return len(pendingRows(t, b, stream)) == 0 && rewindClear(t, b, stream, "alpha")
	})
	for {
		select {
		case info := <-rewound:
			require.Zero(t, info.New, "B counted an event the saved model held as new")
			continue
		default:
		}
		break
	}
	require.Equal(t, []int64{1, 2, 3}, modelVersions(t, b, stream, "alpha"))
	for v := int64(1); v <= 3; v++ {
		require.Equal(t, 1, log.count("alpha", stream, v), "version %d applied once", v)
	}
}

// dyingCursors kills its instance at the first completion of rows, which
// fails: the instance dies between a save and its completion.
type dyingCursors struct {
	ports.CursorStore
	k *killable
}

func (c dyingCursors) WorkComplete(ctx context.Context, p *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	if slices.ContainsFunc(p.Completions, func(c ports.Completion) bool { return len(c.WorkIDs) > 0 }) {
		c.k.dead.Store(true)
	}
	if err := c.k.err(); err != nil {
		return nil, err
	}
	return c.CursorStore.WorkComplete(ctx, p)
}

// testLateAbandonedInRewind: the rewind a late event triggers abandons its
// hung apply, which uses up its only attempt: it is dead-lettered, and the
// pair, which has no row left to bring it back to a drain, does not go on
// waiting for a rewind: the rewind runs again without it and clears the
// flag.
func testLateAbandonedInRewind(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	requireRewindStore(t, b)
	release := make(chan struct{})
	var closeOnce sync.Once
	hang := func(_ context.Context, _ ports.Event, tk tick) error {
		if tk.Poison {
			<-release // ignores its context
		}
		return nil
	}
	pr := newProgress()
	opts := lifecycleOptions()
	opts.Drain.ApplyTimeout = 100 * time.Millisecond
	opts.Drain.ApplyAbandonGrace = 100 * time.Millisecond
	opts.Retries.MaxEventAttempts = 1
	// The drain's rewind must meet the late event, not a startup scan that
	// runs late.
	opts.Rewind.StartupScan = core.StartupScanDisabled
	opts.Hooks = pr.hooks(core.Hooks{OnDeadLettered: func(ports.DeadLetter) { pr.poke() }})
	reg := newRegistry(t, strictPerspective(t, "alpha", hang, nil))
	startWorker(t, b, reg, opts)
	t.Cleanup(func() { closeOnce.Do(func() { close(release) }) }) // before the worker stops
	stream := newID(t)
	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{1: {N: 1}, 3: {N: 3}}))
	pr.waitUntil(t, "both events applied", func() bool {
		return len(modelVersions(t, b, stream, "alpha")) == 2 && rewindClear(t, b, stream, "alpha")
	})

	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{2: {N: 2, Poison: true}}))
	pr.waitUntil(t, "the hung late event is dead-lettered and the rewind flag cleared", func() bool {
		return len(deadLetters(t, b, "alpha", ports.DeadLetterDead)) == 1 && rewindClear(t, b, stream, "alpha")
	})
	closeOnce.Do(func() { close(release) })
	require.Equal(t, []int64{1, 3}, modelVersions(t, b, stream, "alpha"))
	dls := deadLetters(t, b, "alpha", ports.DeadLetterDead)
	require.Equal(t, int64(2), dls[0].EventVersion)
	require.Equal(t, ports.ReasonTimedOut, dls[0].Reason)
}

// testRequeueAfterFix: a dead-lettered event requeued after its handler was
// fixed is applied in order (the model equals a clean replay), and its dead
// letter is marked recovered.
func testRequeueAfterFix(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	requireRewindStore(t, b)
	needAdmin(t, b)
	var fixed atomic.Bool
	pr := newProgress()
	opts := lifecycleOptions()
	opts.Retries.MaxEventAttempts = 1
	opts.Hooks = pr.hooks(core.Hooks{})
	reg := newRegistry(t, strictPerspective(t, "alpha", poisonUnless(&fixed), nil))
	startWorker(t, b, reg, opts)
	stream := uuid.Must(uuid.NewV7())
	_, err := reg.Append(t.Context(), b.Events, stream, 0, tick{N: 1}, tick{N: 2, Poison: true}, tick{N: 3})
	require.NoError(t, err)
	pr.waitUntil(t, "the poison event is dead-lettered", func() bool {
		return len(modelVersions(t, b, stream, "alpha")) == 2
	})
	dls := deadLetters(t, b, "alpha", ports.DeadLetterDead)
	require.Len(t, dls, 1)

	fixed.Store(true)
	require.NoError(t, b.Admin.DeadLetterRequeue(t.Context(), &ports.DeadLetterRequeueParams{ID: dls[0].ID}))
	pr.waitUntil(t, "the requeued event is applied in order", func() bool {
		return len(modelVersions(t, b, stream, "alpha")) == 3 && rewindClear(t, b, stream, "alpha")
	})
	require.Equal(t, []int64{1, 2, 3}, modelVersions(t, b, stream, "alpha"), "the model equals a clean replay")
	pr.waitUntil(t, "the dead letter is recovered", func() bool {
		return len(deadLetters(t, b, "alpha", ports.DeadLetterRecovered)) == 1
	})
	require.Empty(t, deadLetters(t, b, "alpha", ports.DeadLetterDead))

	_, err = reg.Append(t.Context(), b.Events, stream, 0, tick{N: 4})
	require.NoError(t, err)
	pr.waitUntil(t, "the pair goes on", func() bool { return len(modelVersions(t, b, stream, "alpha")) == 4 })
}

// testGenerationRecovery: dead letters of an old generation are requeued by
// an instance of a new one, and recover when the new code applies them.
func testGenerationRecovery(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	requireRewindStore(t, b)
	pr := newProgress()
	var fixed atomic.Bool
	opts := lifecycleOptions()
	opts.Retries.MaxEventAttempts = 1
	opts.Generation = "v1"
	opts.Hooks = pr.hooks(core.Hooks{})
	reg := newRegistry(t, strictPerspective(t, "alpha", poisonUnless(&fixed), nil))
	w1, err := core.New(b, reg, &opts)
	require.NoError(t, err)
	require.NoError(t, w1.Start(t.Context()))
	stream := uuid.Must(uuid.NewV7())
	_, err = reg.Append(t.Context(), b.Events, stream, 0, tick{N: 1}, tick{N: 2, Poison: true}, tick{N: 3})
	require.NoError(t, err)
	pr.waitUntil(t, "the poison event is dead-lettered on v1", func() bool {
		return len(modelVersions(t, b, stream, "alpha")) == 2
	})
	dls := deadLetters(t, b, "alpha", ports.DeadLetterDead)
	require.Len(t, dls, 1)
	require.Equal(t, "v1", dls[0].Generation)
	ctx, cancel := context.WithTimeout(t.Context(), scenarioTimeout)
	defer cancel()
	require.NoError(t, w1.Stop(ctx))

	// The deploy with the fix: generation v2.
	fixed.Store(true)
	var requeued atomic.Int64
	o2 := lifecycleOptions()
	o2.Generation = "v2"
	o2.DeadLetterRecovery.Interval = 20 * time.Millisecond
	o2.Hooks = pr.hooks(core.Hooks{OnDeadLettersRequeued: func(dls []ports.DeadLetter) { requeued.Add(int64(len(dls))) }})
	startWorker(t, open(t), newRegistry(t, strictPerspective(t, "alpha", poisonUnless(&fixed), nil)), o2)
	pr.waitUntil(t, "the new generation recovered the dead letter", func() bool {
		return len(deadLetters(t, b, "alpha", ports.DeadLetterRecovered)) == 1 && len(modelVersions(t, b, stream, "alpha")) == 3
	})
	require.Equal(t, []int64{1, 2, 3}, modelVersions(t, b, stream, "alpha"))
	require.Equal(t, int64(1), requeued.Load())
	dl := deadLetters(t, b, "alpha", ports.DeadLetterRecovered)[0]
	require.Equal(t, "v2", dl.RequeueGeneration)
	require.Equal(t, 1, dl.Requeues)
}

// testReplayFailureCharged: a replay that fails on an old event charges that
// event, not the late event that caused the rewind; once its attempts are
// used up it is dead-lettered and the rewind completes without it.
func testReplayFailureCharged(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	requireRewindStore(t, b)
	var broken atomic.Bool
	breaks := func(_ context.Context, e ports.Event, _ tick) error {
		if e.Version == 2 && broken.Load() {
			return errors.New("version 2 no longer applies")
		}
		return nil
	}
	pr := newProgress()
	opts := lifecycleOptions()
	opts.Retries.MaxEventAttempts = 2
	opts.Hooks = pr.hooks(core.Hooks{})
	reg := newRegistry(t, strictPerspective(t, "alpha", breaks, nil))
	startWorker(t, b, reg, opts)
	stream := uuid.Must(uuid.NewV7())
	appendNew(t, b, stream, explicit(t, reg, map[int64]tick{1: {N: 1}, 2: {N: 2}, 3: {N: 3}, 5: {N: 5}}))
	pr.waitUntil(t, "the first events applied", func() bool { return len(modelVersions(t, b, stream, "alpha")) == 4 })

	broken.Store(true)
	late := appendNew(t, b, stream, explicit(t, reg, map[int64]tick{4: {N: 4}}))
	pr.waitUntil(t, "the rewind completes without the event that fails", func() bool {
		return len(deadLetters(t, b, "alpha", ports.DeadLetterDead)) == 1 && rewindClear(t, b, stream, "alpha")
	})
	require.Equal(t, []int64{1, 3, 4, 5}, modelVersions(t, b, stream, "alpha"))
	dl := deadLetters(t, b, "alpha", ports.DeadLetterDead)[0]
	require.Equal(t, int64(2), dl.EventVersion, "the failure was charged to the event that failed")
	require.Equal(t, 2, dl.Attempts)
	require.Equal(t, "version 2 no longer applies", dl.Error)
	require.NotEqual(t, late.Events[0].ID, dl.EventID)
}

// testNoStaleModel: an instance that cached a pair's model while it owned
// it, lost it to another instance that applied more, and got it back, never
// applies on its stale cached model.
func testNoStaleModel(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	pr := newProgress()
	var stale atomic.Int64
	kill := &killable{}
	opts := fastOptions()
	opts.Claims.StaleInstanceThreshold = time.Second
	opts.Claims.HeartbeatInterval = 100 * time.Millisecond
	opts.Retries.Flush.MaxAttempts = 1
	opts.Hooks = pr.hooks(core.Hooks{})
	first := open(t)
	a := kill.wrap(first)
	regA := newRegistry(t, strictPerspective(t, "alpha", nil, &stale))
	startWorker(t, a, regA, opts)
	stream := uuid.Must(uuid.NewV7())
	appendTicks(t, regA, first, stream, 0, 3)
	pr.waitUntil(t, "instance A applied the first events", func() bool { return len(modelVersions(t, first, stream, "alpha")) == 3 })

	// A freezes; B takes the stream over, applies more, and stops.
	kill.dead.Store(true)
	second := open(t)
	optsB := opts
	wb, err := core.New(second, newRegistry(t, strictPerspective(t, "alpha", nil, &stale)), func() *core.Options { o := optsB; o.Logger = testLogger(t); return &o }())
	require.NoError(t, err)
	require.NoError(t, wb.Start(t.Context()))
	appendTicks(t, regA, second, stream, 3, 3)
	pr.waitUntil(t, "instance B applied the next events", func() bool { return len(modelVersions(t, second, stream, "alpha")) == 6 })
	ctx, cancel := context.WithTimeout(t.Context(), scenarioTimeout)
	defer cancel()
	require.NoError(t, wb.Stop(ctx))

	// A comes back, with the model it cached at version 3.
	kill.dead.Store(false)
	appendTicks(t, regA, first, stream, 6, 1)
	pr.waitUntil(t, "instance A applied the last event", func() bool { return len(modelVersions(t, first, stream, "alpha")) == 7 })
	require.Equal(t, seq(1, 7), modelVersions(t, first, stream, "alpha"))
	require.Zero(t, stale.Load(), "no apply saw a model older than the cursor")
}
