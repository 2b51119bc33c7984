package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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

// scenarioTimeout bounds every wait of an engine scenario.
const scenarioTimeout = 60 * time.Second

// runEngine runs the engine scenarios: real Workers on the backend under
// test, synchronised through hooks (never sleeps).
func runEngine(t *testing.T, newBackend NewBackendFunc) {
	t.Helper()
	group(t, "Engine", map[string]func(t *testing.T){
		"ExactlyOnceInOrderOneInstance":       func(t *testing.T) { testExactlyOnce(t, newBackend, 1) },
		"ExactlyOnceInOrderThreeInstances":    func(t *testing.T) { testExactlyOnce(t, newBackend, 3) },
		"StaleInstanceLosesItsStreams":        func(t *testing.T) { testStaleInstance(t, newBackend) },
		"PoisonEventDeadLetteredOthersFlow":   func(t *testing.T) { testPoisonEvent(t, newBackend) },
		"ConcurrentAppendsNothingSkipped":     func(t *testing.T) { testConcurrentAppends(t, newBackend) },
		"FailureOfOnePerspectiveKeepsItsWork": func(t *testing.T) { testFailureKeepsOtherPerspectivesWork(t, newBackend) },
		"UndecodableEventDeadLettered":        func(t *testing.T) { testUndecodable(t, newBackend) },
	})
	runEngineLifecycle(t, newBackend)
	runEngineReliability(t, newBackend)
	runEngineStages(t, newBackend)
	runEngineTraces(t, newBackend)
	runEngineRebuilds(t, newBackend)
}

// Events and model of the scenarios.

type tick struct {
	N      int  `json:"n"`
	Poison bool `json:"poison,omitempty"`
}

type tock struct {
	N int `json:"n"`
}

// trail records the versions a perspective applied, in order.
type trail struct {
	Versions []int64 `json:"versions"`
}

const (
	typeTick = "conformance.tick"
	typeTock = "conformance.tock"
)

// appliedLog counts handler invocations per (perspective, stream, version).
type appliedLog struct {
	mu    sync.Mutex
	calls map[string]int
}

func (l *appliedLog) add(p string, s uuid.UUID, v int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls == nil {
		l.calls = map[string]int{}
	}
	l.calls[fmt.Sprintf("%s/%s/%d", p, s, v)]++
}

func (l *appliedLog) count(p string, s uuid.UUID, v int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[fmt.Sprintf("%s/%s/%d", p, s, v)]
}

// trailPerspective builds a perspective that appends every applied version;
// fail, when set, decides per event whether the apply fails.
func trailPerspective(t *testing.T, name string, log *appliedLog, fail func(e ports.Event, tk tick) error) *core.Perspective[trail] {
	t.Helper()
	p := core.NewPerspective[trail](name)
	core.MustHandle(p, func(ctx context.Context, m trail, e tick) (trail, error) {
		ev, ok := core.EventFromContext(ctx)
		if !ok {
			return m, errors.New("no event in context")
		}
		if fail != nil {
			if err := fail(ev, e); err != nil {
				return m, err
			}
		}
		if log != nil {
			log.add(name, ev.StreamID, ev.Version)
		}
		m.Versions = append(m.Versions, ev.Version)
		return m, nil
	})
	core.MustHandle(p, func(ctx context.Context, m trail, _ tock) (trail, error) {
		ev, _ := core.EventFromContext(ctx)
		if log != nil {
			log.add(name, ev.StreamID, ev.Version)
		}
		m.Versions = append(m.Versions, ev.Version)
		return m, nil
	})
	return p
}

func newRegistry(t *testing.T, perspectives ...core.Registrable) *core.Registry {
	t.Helper()
	r := core.NewRegistry()
	require.NoError(t, core.RegisterEvent[tick](r, typeTick))
	require.NoError(t, core.RegisterEvent[tock](r, typeTock))
	for _, p := range perspectives {
		require.NoError(t, r.AddPerspective(p))
	}
	return r
}

// fastOptions are scenario options: short intervals so loops turn quickly,
// and an explicit clock, so every call passes its time to the backend and
// scenarios behave alike whatever clock the backend would use on its own.
func fastOptions() core.Options {
	return core.Options{
		Clock: clocktest.NewOffset(),
		Drain: core.DrainOptions{
			PollingInterval:              20 * time.Millisecond,
			NotifyHealthyPollingInterval: 20 * time.Millisecond,
			Batcher:                      core.DrainBatcherOptions{SlidingWindow: 2 * time.Millisecond, MaxWait: 20 * time.Millisecond},
		},
		Claims: core.ClaimOptions{
			Interval:               10 * time.Millisecond,
			NotifyHealthyInterval:  20 * time.Millisecond,
			HeartbeatInterval:      50 * time.Millisecond,
			StaleInstanceThreshold: 5 * time.Second,
		},
		Retries: core.RetryOptions{
			Event:            core.Backoff{Initial: 20 * time.Millisecond, Max: 20 * time.Millisecond},
			CompletionResend: core.Backoff{Initial: 200 * time.Millisecond, Max: time.Second},
		},
	}
}

// progress is a hook-fed signal: every hook call pokes it, and waitUntil
// re-checks its condition on each poke.
type progress struct{ c chan struct{} }

func newProgress() *progress { return &progress{c: make(chan struct{}, 1)} }

func (p *progress) poke() {
	select {
	case p.c <- struct{}{}:
	default:
	}
}

func (p *progress) hooks(h core.Hooks) core.Hooks {
	prevProcessed, prevFlushed, prevCycle := h.OnPerspectiveEventProcessed, h.OnCompletionsFlushed, h.OnBatchCycleComplete
	h.OnPerspectiveEventProcessed = func(e core.PerspectiveEventProcessed) {
		if prevProcessed != nil {
			prevProcessed(e)
		}
		p.poke()
	}
	h.OnCompletionsFlushed = func(c core.CompletionsFlushed) {
		if prevFlushed != nil {
			prevFlushed(c)
		}
		p.poke()
	}
	h.OnBatchCycleComplete = func(b core.BatchCycle) {
		if prevCycle != nil {
			prevCycle(b)
		}
		p.poke()
	}
	return h
}

// waitUntil re-evaluates cond whenever the engine reports progress, until it
// holds or the scenario times out.
func (p *progress) waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(scenarioTimeout)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-p.c:
		case <-deadline.C:
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// testLogger routes warnings and errors to t.Log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func startWorker(t *testing.T, b ports.Backend, reg *core.Registry, opts core.Options) *core.Worker {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	w, err := core.New(b, reg, &opts)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})
	return w
}

// waitForPeers waits until the latest heartbeat of every worker counted all
// of them live, so that none takes live work for its own alone. Heartbeats
// report nothing else to wait on, hence the polling of Health.
func waitForPeers(t *testing.T, workers []*core.Worker) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, w := range workers {
			if liveInstances(t.Context(), w) < len(workers) {
				return false
			}
		}
		return true
	}, scenarioTimeout, 5*time.Millisecond, "every worker's heartbeat counts %d live instances", len(workers))
}

// liveInstances returns the live instances w's latest heartbeat counted, 0
// when unknown.
func liveInstances(ctx context.Context, w *core.Worker) int {
	for _, c := range w.Health(ctx).Checks {
		if c.Name == core.HealthCheckHeartbeat {
			n, _ := c.Values["live_instances"].(int)
			return n
		}
	}
	return 0
}

func appendTicks(t *testing.T, reg *core.Registry, b ports.Backend, stream uuid.UUID, from, n int) {
	t.Helper()
	evs := make([]any, 0, n)
	for i := range n {
		if (from+i)%3 == 2 {
			evs = append(evs, tock{N: from + i})
		} else {
			evs = append(evs, tick{N: from + i})
		}
	}
	_, err := reg.Append(t.Context(), b.Events, stream, 0, evs...)
	require.NoError(t, err)
}

// loadModel returns the stored model of (stream, perspective), or the zero M
// when there is none yet.
func loadModel[M any](t *testing.T, b ports.Backend, stream uuid.UUID, perspective string) M {
	t.Helper()
	var m M
	stored, err := b.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: stream, Perspective: perspective})
	if errors.Is(err, ports.ErrNotFound) {
		return m
	}
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(stored.Data, &m))
	return m
}

// modelVersions returns the versions stored in a perspective's model.
func modelVersions(t *testing.T, b ports.Backend, stream uuid.UUID, perspective string) []int64 {
	t.Helper()
	return loadModel[trail](t, b, stream, perspective).Versions
}

func seq(from, to int64) []int64 {
	var out []int64
	for v := from; v <= to; v++ {
		out = append(out, v)
	}
	return out
}

// allCaughtUp reports whether every perspective's model of every stream
// holds exactly the versions 1..n[stream], and every cursor reached it.
func allCaughtUp(t *testing.T, b ports.Backend, streams []uuid.UUID, n map[uuid.UUID]int64, perspectives []string) bool {
	t.Helper()
	for _, s := range streams {
		for _, p := range perspectives {
			if len(modelVersions(t, b, s, p)) < int(n[s]) {
				return false
			}
		}
	}
	cursors, err := b.Cursors.CursorsGet(t.Context(), &ports.CursorsGetParams{StreamIDs: streams})
	require.NoError(t, err)
	wanted := map[string]bool{}
	for _, p := range perspectives {
		wanted[p] = true
	}
	reached := 0
	for _, c := range cursors {
		if wanted[c.Perspective] && c.LastVersion == n[c.StreamID] && c.Status.Has(ports.CursorCompleted) {
			reached++
		}
	}
	return reached == len(streams)*len(perspectives)
}

func requireExactlyOnce(t *testing.T, b ports.Backend, streams []uuid.UUID, n map[uuid.UUID]int64, perspectives []string) {
	t.Helper()
	for _, s := range streams {
		for _, p := range perspectives {
			require.Equal(t, seq(1, n[s]), modelVersions(t, b, s, p), "perspective %s stream %s: every event once, in order", p, s)
		}
	}
}

func testExactlyOnce(t *testing.T, newBackend NewBackendFunc, instances int) {
	open := newBackend(t)
	const streamsN, perStream = 12, 25
	names := []string{"alpha", "beta", "gamma"}
	log := &appliedLog{}
	pr := newProgress()
	var workers []*core.Worker
	var backends []ports.Backend
	for i := range instances {
		b := open(t)
		backends = append(backends, b)
		var ps []core.Registrable
		for _, name := range names {
			ps = append(ps, trailPerspective(t, name, log, nil))
		}
		opts := fastOptions()
		opts.Hooks = pr.hooks(core.Hooks{})
		opts.ServiceName = fmt.Sprintf("conformance-%d", i)
		workers = append(workers, startWorker(t, b, newRegistry(t, ps...), opts))
	}
	appendReg := newRegistry(t)
	streams := make([]uuid.UUID, streamsN)
	n := map[uuid.UUID]int64{}
	for i := range streams {
		streams[i] = uuid.Must(uuid.NewV7())
	}
	// Append in rounds so work arrives while the engines run.
	for round := range 5 {
		for _, s := range streams {
			appendTicks(t, appendReg, backends[round%len(backends)], s, round*5, perStream/5)
			n[s] += perStream / 5
		}
	}
	pr.waitUntil(t, "every perspective applied every event", func() bool { return allCaughtUp(t, backends[0], streams, n, names) })
	requireExactlyOnce(t, backends[0], streams, n, names)
	if instances == 1 {
		// One instance, no crash: the handler itself ran once per event.
		for _, s := range streams {
			for _, p := range names {
				for v := int64(1); v <= n[s]; v++ {
					require.Equal(t, 1, log.count(p, s, v), "handler calls for %s/%s/%d", p, s, v)
				}
			}
		}
	}
	require.Len(t, workers, instances)
}

// killable wraps a backend so a test can cut one instance off, as if its
// process froze: every call fails from then on.
type killable struct {
	dead atomic.Bool
}

var errKilled = errors.New("conformance: instance killed")

func (k *killable) err() error {
	if k.dead.Load() {
		return errKilled
	}
	return nil
}

func (k *killable) wrap(b ports.Backend) ports.Backend {
	w := ports.Backend{
		Claimer:     killClaimer{k, b.Claimer},
		Fetcher:     killFetcher{k, b.Fetcher},
		Cursors:     killCursors{k, b.Cursors},
		Notifier:    b.Notifier,
		DeadLetters: killDeadLetters{k, b.DeadLetters},
		Events:      b.Events,
		Models:      killModels{k, b.Models},
		Rewind:      b.Rewind,
		Snapshots:   b.Snapshots,
	}
	if b.Lifecycle != nil {
		w.Lifecycle = killLifecycle{k, b.Lifecycle}
	}
	return w
}

type killLifecycle struct {
	k *killable
	ports.LifecycleStore
}

func (l killLifecycle) LifecycleClaim(ctx context.Context, p *ports.LifecycleClaimParams) ([]uuid.UUID, error) {
	if err := l.k.err(); err != nil {
		return nil, err
	}
	return l.LifecycleStore.LifecycleClaim(ctx, p)
}

func (l killLifecycle) LifecycleComplete(ctx context.Context, p *ports.LifecycleCompleteParams) error {
	if err := l.k.err(); err != nil {
		return err
	}
	return l.LifecycleStore.LifecycleComplete(ctx, p)
}

type killClaimer struct {
	k *killable
	ports.WorkClaimer
}

func (c killClaimer) InstanceHeartbeat(ctx context.Context, p *ports.InstanceHeartbeatParams) (*ports.InstanceHeartbeatResult, error) {
	if err := c.k.err(); err != nil {
		return nil, err
	}
	return c.WorkClaimer.InstanceHeartbeat(ctx, p)
}

func (c killClaimer) InstanceDeregister(ctx context.Context, params *ports.InstanceDeregisterParams) error {
	id := params.InstanceID
	if err := c.k.err(); err != nil {
		return err
	}
	return c.WorkClaimer.InstanceDeregister(ctx, &ports.InstanceDeregisterParams{InstanceID: id})
}

func (c killClaimer) WorkClaim(ctx context.Context, p *ports.WorkClaimParams) (*ports.WorkClaimResult, error) {
	if err := c.k.err(); err != nil {
		return nil, err
	}
	return c.WorkClaimer.WorkClaim(ctx, p)
}

func (c killClaimer) WorkRenewLeases(ctx context.Context, p *ports.WorkRenewLeasesParams) (int, error) {
	if err := c.k.err(); err != nil {
		return 0, err
	}
	return c.WorkClaimer.WorkRenewLeases(ctx, p)
}

type killFetcher struct {
	k *killable
	ports.EventFetcher
}

func (f killFetcher) EventsFetchPending(ctx context.Context, p *ports.EventsFetchPendingParams) (*ports.EventsFetchPendingResult, error) {
	if err := f.k.err(); err != nil {
		return nil, err
	}
	return f.EventFetcher.EventsFetchPending(ctx, p)
}

type killCursors struct {
	k *killable
	ports.CursorStore
}

func (c killCursors) WorkComplete(ctx context.Context, p *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	if err := c.k.err(); err != nil {
		return nil, err
	}
	return c.CursorStore.WorkComplete(ctx, p)
}

func (c killCursors) WorkFail(ctx context.Context, p *ports.WorkFailParams) error {
	if err := c.k.err(); err != nil {
		return err
	}
	return c.CursorStore.WorkFail(ctx, p)
}

type killDeadLetters struct {
	k *killable
	ports.DeadLetterStore
}

func (d killDeadLetters) DeadLetterMove(ctx context.Context, p *ports.DeadLetterMoveParams) (*ports.DeadLetterMoveResult, error) {
	if err := d.k.err(); err != nil {
		return nil, err
	}
	return d.DeadLetterStore.DeadLetterMove(ctx, p)
}

type killModels struct {
	k *killable
	ports.ModelStore
}

func (m killModels) ModelLoad(ctx context.Context, params *ports.ModelLoadParams) (ports.StoredModel, error) {
	s, p := params.StreamID, params.Perspective
	if err := m.k.err(); err != nil {
		return ports.StoredModel{}, err
	}
	return m.ModelStore.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: s, Perspective: p})
}

func (m killModels) ModelSave(ctx context.Context, p *ports.ModelSaveParams) error {
	if err := m.k.err(); err != nil {
		return err
	}
	return m.ModelStore.ModelSave(ctx, p)
}

func testStaleInstance(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	names := []string{"alpha", "beta"}
	pr := newProgress()
	kill := &killable{}
	var victimApplied atomic.Int64
	opts := fastOptions()
	opts.Claims.StaleInstanceThreshold = time.Second
	opts.Retries.Flush.MaxAttempts = 1

	var (
		backends []ports.Backend
		workers  []*core.Worker
	)
	for i := range 3 {
		b := open(t)
		backends = append(backends, b)
		o := opts
		h := core.Hooks{}
		if i == 2 {
			b = kill.wrap(b)
			h.OnPerspectiveEventProcessed = func(e core.PerspectiveEventProcessed) { victimApplied.Add(int64(e.EventCount)) }
		}
		o.Hooks = pr.hooks(h)
		workers = append(workers, startWorker(t, b, newRegistry(t, trailPerspective(t, "alpha", nil, nil), trailPerspective(t, "beta", nil, nil)), o))
	}
	// An instance that found itself alone drains the streams a
	// notification names without claiming them, until its next heartbeat
	// finds the others: the work is shared from then on.
	waitForPeers(t, workers)
	reg := newRegistry(t)
	streams := make([]uuid.UUID, 30)
	n := map[uuid.UUID]int64{}
	for i := range streams {
		streams[i] = uuid.Must(uuid.NewV7())
		appendTicks(t, reg, backends[0], streams[i], 0, 4)
		n[streams[i]] = 4
	}
	pr.waitUntil(t, "the victim instance applied some events", func() bool { return victimApplied.Load() > 0 })
	kill.dead.Store(true)
	// More work for every stream, including those leased to the dead
	// instance: it must flow once the survivors abandon it.
	for _, s := range streams {
		appendTicks(t, reg, backends[0], s, 4, 3)
		n[s] += 3
	}
	pr.waitUntil(t, "the survivors applied everything", func() bool { return allCaughtUp(t, backends[0], streams, n, names) })
	requireExactlyOnce(t, backends[0], streams, n, names)
	if _, ok := instances(t, backends[0]); ok {
		// The survivors may finish before the dead instance's heartbeat is
		// stale, when it held none of the streams: it is abandoned then.
		pr.waitUntil(t, "the dead instance was abandoned", func() bool {
			list, _ := instances(t, backends[0])
			return len(list) == 2
		})
	}
}

func testPoisonEvent(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	pr := newProgress()
	var deadLettered atomic.Int64
	var failures atomic.Int64
	poisonFail := func(_ ports.Event, tk tick) error {
		if tk.Poison {
			return errors.New("poison pill")
		}
		return nil
	}
	opts := fastOptions()
	opts.Retries.MaxEventAttempts = 3
	opts.Hooks = pr.hooks(core.Hooks{
		OnDeadLettered: func(ports.DeadLetter) { deadLettered.Add(1) },
		OnFailure:      func(ports.Failure) { failures.Add(1) },
	})
	reg := newRegistry(t, trailPerspective(t, "fragile", nil, poisonFail), trailPerspective(t, "sturdy", nil, nil))
	startWorker(t, b, reg, opts)

	poisoned := uuid.Must(uuid.NewV7())
	healthy := uuid.Must(uuid.NewV7())
	_, err := reg.Append(t.Context(), b.Events, poisoned, 0, tick{N: 1}, tick{N: 2, Poison: true}, tick{N: 3})
	require.NoError(t, err)
	_, err = reg.Append(t.Context(), b.Events, healthy, 0, tick{N: 1}, tick{N: 2}, tick{N: 3})
	require.NoError(t, err)

	// The poisoned pair holds back only itself: the other stream and the
	// other perspective of the same stream complete.
	pr.waitUntil(t, "other pairs applied", func() bool {
		return len(modelVersions(t, b, healthy, "fragile")) == 3 && len(modelVersions(t, b, poisoned, "sturdy")) == 3
	})
	pr.waitUntil(t, "the poison event is dead-lettered and its pair continues", func() bool {
		return deadLettered.Load() == 1 && len(modelVersions(t, b, poisoned, "fragile")) == 2
	})
	require.Equal(t, []int64{1, 3}, modelVersions(t, b, poisoned, "fragile"))
	require.Equal(t, int64(2), failures.Load(), "two failures were retried; the third used up the attempts")
	dls, err := b.DeadLetters.DeadLettersList(t.Context(), &ports.DeadLettersListParams{Perspective: "fragile"})
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, poisoned, dls[0].StreamID)
	require.Equal(t, int64(2), dls[0].EventVersion)
	require.Equal(t, 3, dls[0].Attempts, "attempts equal the applies that ran")
	require.Equal(t, ports.ReasonFailed, dls[0].Reason)
	require.Equal(t, "poison pill", dls[0].Error, "the apply's own error is kept")
	require.Equal(t, ports.DeadLetterDead, dls[0].Status)
}

func testConcurrentAppends(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	pr := newProgress()
	opts := fastOptions()
	opts.Hooks = pr.hooks(core.Hooks{})
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, nil))
	startWorker(t, b, reg, opts)
	streams := []uuid.UUID{uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())}
	const writers, perWriter = 6, 10
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			for j := range perWriter {
				s := streams[(i+j)%len(streams)]
				_, err := reg.Append(context.WithoutCancel(t.Context()), b.Events, s, 0, tick{N: j})
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	n := map[uuid.UUID]int64{}
	for _, s := range streams {
		evs, err := b.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: s})
		require.NoError(t, err)
		n[s] = int64(len(evs))
		for i, e := range evs {
			require.Equal(t, int64(i+1), e.Version, "versions are contiguous")
		}
	}
	pr.waitUntil(t, "every appended event applied", func() bool { return allCaughtUp(t, b, streams, n, []string{"alpha"}) })
	requireExactlyOnce(t, b, streams, n, []string{"alpha"})
}

func testFailureKeepsOtherPerspectivesWork(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	pr := newProgress()
	var failsLeft atomic.Int64
	failsLeft.Store(2)
	flaky := func(ports.Event, tick) error {
		if failsLeft.Add(-1) >= 0 {
			return errors.New("transient")
		}
		return nil
	}
	opts := fastOptions()
	opts.Hooks = pr.hooks(core.Hooks{})
	reg := newRegistry(t, trailPerspective(t, "a_steady", nil, nil), trailPerspective(t, "b_flaky", nil, flaky))
	startWorker(t, b, reg, opts)
	s := uuid.Must(uuid.NewV7())
	_, err := reg.Append(t.Context(), b.Events, s, 0, tick{N: 1})
	require.NoError(t, err)
	n := map[uuid.UUID]int64{s: 1}
	pr.waitUntil(t, "both perspectives applied the event", func() bool {
		return allCaughtUp(t, b, []uuid.UUID{s}, n, []string{"a_steady", "b_flaky"})
	})
	require.Equal(t, []int64{1}, modelVersions(t, b, s, "b_flaky"), "the flaky perspective's work survived the steady one's completion")
	require.Equal(t, []int64{1}, modelVersions(t, b, s, "a_steady"))
}

func testUndecodable(t *testing.T, newBackend NewBackendFunc) {
	open := newBackend(t)
	b := open(t)
	pr := newProgress()
	var deadLettered atomic.Int64
	opts := fastOptions()
	opts.Retries.MaxEventAttempts = 1
	opts.Hooks = pr.hooks(core.Hooks{OnDeadLettered: func(ports.DeadLetter) { deadLettered.Add(1) }})
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, nil))
	startWorker(t, b, reg, opts)
	s := uuid.Must(uuid.NewV7())
	// A payload that does not decode into tick, between two good events.
	_, err := b.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{StreamID: s, Events: []ports.NewEvent{
		{Type: typeTick, Data: []byte(`{"n":1}`)},
		{Type: typeTick, Data: []byte(`{"n":"not a number"}`)},
		{Type: typeTick, Data: []byte(`{"n":3}`)},
	}})
	require.NoError(t, err)
	pr.waitUntil(t, "the bad event is dead-lettered and the rest applied", func() bool {
		return deadLettered.Load() == 1 && len(modelVersions(t, b, s, "alpha")) == 2
	})
	require.Equal(t, []int64{1, 3}, modelVersions(t, b, s, "alpha"))
	dls, err := b.DeadLetters.DeadLettersList(t.Context(), &ports.DeadLettersListParams{Perspective: "alpha"})
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, ports.ReasonUndecodable, dls[0].Reason)
	require.Contains(t, dls[0].Error, "decoding", "the decode error is kept")
	require.Equal(t, 1, dls[0].Attempts)
}
