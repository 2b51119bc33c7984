package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/completion"
	"github.com/vantage-go/vantage/core/internal/dedup"
	"github.com/vantage-go/vantage/core/internal/flush"
	"github.com/vantage-go/vantage/ports"
)

// ErrStopped is the cause of the contexts cancelled by Stop, and the error of
// Start on a Worker that was stopped.
var ErrStopped = errors.New("vantage: worker stopped")

// deregisterTimeout bounds the graceful deregistration at Stop.
const deregisterTimeout = 5 * time.Second

// backendCallTimeout bounds a backend call made on behalf of several
// callers (a grouped model load or save), detached from any one caller's
// context, and the calls that take leases (see leaseCallContext).
const backendCallTimeout = 30 * time.Second

// leaseCallContext is the context of a call that takes leases or records
// the instance (a claim, a fetch, a heartbeat): detached from ctx's
// cancellation, bounded by backendCallTimeout. A call given up on by the
// caller may still commit on the server; one that committed after Stop's
// deregistration would leave rows leased to an instance that no longer
// exists, holding their pairs back for a whole lease. So Stop lets these
// calls finish before it deregisters.
func leaseCallContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), backendCallTimeout)
}

// A heartbeat aimed at a peer's staleness runs staleMargin after it, and
// never sooner than heartbeatMinDelay after the previous one (see
// heartbeatDelay).
const (
	staleMargin       = 50 * time.Millisecond
	heartbeatMinDelay = 10 * time.Millisecond
)

// Worker materializes perspectives: it heartbeats, claims work per stream,
// drains each stream's pending events in order through the registered
// perspectives and reports completions and failures to the backend.
//
// Construct it with New, then Start it; Stop drains in-flight work, flushes
// completions, deregisters the instance and waits for every goroutine. A
// Worker runs once: after Stop, build a new one. Its methods are safe for
// concurrent use.
type Worker struct {
	backend ports.Backend
	reg     *Registry
	opts    Options
	clock   ports.Clock
	log     *slog.Logger

	cache       *dedup.Cache
	strategy    completion.Strategy
	completions *flush.Flusher[completion.Tracked[ports.Completion]]
	failures    *flush.Flusher[completion.Tracked[ports.Failure]]
	queue       *drainQueue
	gates       *gates
	life        *lifecycle
	models      *modelCache
	batches     *modelBatches // nil unless the model store batches
	rewindSem   chan struct{}

	startupOnce sync.Once
	startupDone chan struct{}

	monitor *applyMonitor
	scopes  *scopeCache
	renewer *renewer
	wakes   *wakes
	faults  *faultLog
	// busy counts the batches being drained: the worker is not idle while
	// one runs, however long it takes.
	busy           atomic.Int64
	abandonedTotal atomic.Int64

	parkedMu sync.Mutex
	parked   map[pairKey]parking
	// failAcked holds, per pair, the fetch sequence number current when its
	// latest failure was acknowledged; fetchSeq numbers fetches.
	failAcked map[pairKey]uint64
	fetchSeq  atomic.Uint64
	// infraBackoff holds the backoff of each pair whose drain meets
	// infrastructure errors (infraPairs counts them); saveEach the pairs
	// saved event by event (saveEachCount counts them).
	infraBackoff  map[pairKey]*backoff.ExponentialBackOff
	infraPairs    atomic.Int32
	saveEach      map[pairKey]bool
	saveEachCount atomic.Int32

	flushMu sync.Mutex // serializes moving strategy items into the flushers

	claimWake     chan struct{}
	notifyWake    chan struct{} // notifications, coalesced to one claim per ClaimInterval
	consumerWakes []chan struct{}
	listening     atomic.Bool
	wakeCount     atomic.Uint64 // notifications received (see wantWindow)
	claimHasMore  atomic.Bool
	// recovering is set when a peer was abandoned (see takeOver); the next
	// claim then sets windowSkip, so the streams it takes over are drained
	// at once instead of waiting in the sliding window.
	recovering atomic.Bool
	windowSkip atomic.Bool
	// fetchWaitHook, for tests, runs when a batch waits for its fetched
	// rows to drain before fetching more (see drainBatch).
	fetchWaitHook func()
	// claimDeferHook, for tests, sees each notification whose claim waits
	// for the claim interval (see claimLoop).
	claimDeferHook func(wait time.Duration)

	idle       atomic.Bool
	emptyPolls atomic.Int64

	// windowHook, when set (tests), is called each time the sliding window
	// took more ids or closed.
	windowHook func(took int, closed bool)

	progressMu sync.Mutex
	progress   chan struct{} // closed and replaced on every acknowledged flush

	mu         sync.Mutex
	started    bool
	cancelRun  context.CancelCauseFunc
	cancelWork context.CancelCauseFunc
	loops      sync.WaitGroup
	workLoops  sync.WaitGroup // loops serving drains: they end with the work context
	// stopMonitor ends the apply monitor once the drains ended.
	stopMonitor context.CancelFunc
	// abandons owns the goroutines that take over abandoned applies.
	abandons sync.WaitGroup
	stopOnce sync.Once
	done     chan struct{}
}

// New builds a Worker over backend for the perspectives of registry. It
// validates every option and returns an error naming each invalid field. New
// starts nothing.
func New(backend ports.Backend, registry *Registry, opts *Options) (*Worker, error) {
	if err := backend.Validate(); err != nil {
		return nil, fmt.Errorf("building worker: %w", err)
	}
	if registry == nil {
		return nil, errors.New("building worker: nil registry")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("building worker: %w", err)
	}
	w := &Worker{
		backend:      backend,
		reg:          registry,
		opts:         o,
		clock:        cmp.Or[ports.Clock](o.Clock, ports.SystemClock{}),
		log:          o.Logger.With(slog.String("component", "vantage.worker"), slog.String("instance_id", o.InstanceID.String())),
		queue:        newDrainQueue(),
		gates:        newGates(),
		parked:       map[pairKey]parking{},
		failAcked:    map[pairKey]uint64{},
		infraBackoff: map[pairKey]*backoff.ExponentialBackOff{},
		saveEach:     map[pairKey]bool{},
		claimWake:    make(chan struct{}, 1),
		notifyWake:   make(chan struct{}, 1),
		progress:     make(chan struct{}),
		done:         make(chan struct{}),

		rewindSem:   make(chan struct{}, o.Rewind.MaxConcurrentRewinds),
		startupDone: make(chan struct{}),
	}
	w.life = newLifecycle(w)
	w.monitor = newApplyMonitor(w)
	w.scopes = newScopeCache()
	w.renewer = newRenewer(w)
	w.wakes = newWakes(w)
	w.faults = newFaultLog(w.log, w.clock)
	w.models = newModelCache(o.ModelCacheSize)
	w.batches = newModelBatches(backend.ModelBatch, backendCallTimeout)
	w.idle.Store(true)
	for range o.MaxConcurrentDrainConsumers {
		w.consumerWakes = append(w.consumerWakes, make(chan struct{}, 1))
	}
	w.cache = dedup.New(dedup.Options{Retention: o.LeaseDuration, Clock: w.clock, Observer: o.Hooks.DedupObserver})
	if o.Completion == CompletionInstant {
		w.strategy = completion.NewInstant(instantReporter{w})
	} else {
		w.strategy, err = completion.NewBatched(completion.BatchedOptions{
			BaseTimeout:               o.Retry.RetryTimeout,
			Multiplier:                o.Retry.BackoffMultiplier,
			MaxTimeout:                o.Retry.MaxBackoff,
			DisableExponentialBackoff: o.Retry.DisableExponentialBackoff,
		})
		if err != nil {
			return nil, fmt.Errorf("building worker: %w", err)
		}
	}
	if w.completions, err = newFlusher(w, "completions", w.flushCompletions, w.completionsAcknowledged); err != nil {
		return nil, fmt.Errorf("building worker: %w", err)
	}
	if w.failures, err = newFlusher(w, "failures", w.flushFailures, w.failuresAcknowledged); err != nil {
		return nil, fmt.Errorf("building worker: %w", err)
	}
	return w, nil
}

// newFlusher builds the flusher of one kind of outcome: it hands batches to
// flushFn and reports acknowledged batches to acked.
func newFlusher[T any](w *Worker, name string, flushFn func(context.Context, []completion.Tracked[T]) error, acked func([]completion.Tracked[T])) (*flush.Flusher[completion.Tracked[T]], error) {
	return flush.New(name, flush.Options[completion.Tracked[T]]{
		MaxAttempts: w.opts.Retry.MaxFlushAttempts,
		Clock:       w.clock,
		Logger:      w.log,
		OnFlushed:   acked,
	}, flushFn)
}

// InstanceID returns the id this worker heartbeats and claims under.
func (w *Worker) InstanceID() uuid.UUID { return w.opts.InstanceID }

// IsIdle reports whether the worker is idle (no work for IdleThresholdPolls
// consecutive polls). A new worker is idle.
func (w *Worker) IsIdle() bool { return w.idle.Load() }

// ConsecutiveEmptyPolls returns the number of consecutive polls that found no
// work, shared across consumer loops.
func (w *Worker) ConsecutiveEmptyPolls() int { return int(w.emptyPolls.Load()) }

// RequestImmediatePoll wakes the claim loop and every consumer now instead of
// at their next interval. Safe from any goroutine; redundant calls coalesce.
func (w *Worker) RequestImmediatePoll() { w.wakeAll() }

func (w *Worker) wakeAll() {
	signal(w.claimWake)
	w.wakeConsumers()
}

func (w *Worker) wakeConsumers() {
	for _, c := range w.consumerWakes {
		signal(c)
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// now is the engine's time; paramNow is what it passes to the backend: its
// own time only when the host injected a Clock.
func (w *Worker) now() time.Time { return w.clock.Now() }

func (w *Worker) paramNow() time.Time {
	if w.opts.Clock != nil {
		return w.clock.Now()
	}
	return time.Time{}
}

// Start registers the perspectives' subscriptions and the instance with the
// backend, then launches the heartbeat, claim, listener and consumer loops.
// ctx bounds only this start-up; the loops run until Stop. Start on a running
// worker is a no-op; on a stopped one it returns ErrStopped.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.done:
		return ErrStopped
	default:
	}
	if w.started {
		return nil
	}
	if err := w.reg.RegisterSubscriptions(ctx, w.backend.Events); err != nil {
		return fmt.Errorf("starting worker: %w", err)
	}
	w.warnRetired(ctx)
	beat, err := w.heartbeat(ctx)
	if err != nil {
		return fmt.Errorf("starting worker: %w", err)
	}
	runCtx, cancelRun := context.WithCancelCause(context.WithoutCancel(ctx))
	workCtx, cancelWork := context.WithCancelCause(context.WithoutCancel(ctx))
	w.cancelRun, w.cancelWork = cancelRun, cancelWork

	if err := errors.Join(w.completions.Start(workCtx), w.failures.Start(workCtx)); err != nil {
		cancelRun(err)
		cancelWork(err)
		return fmt.Errorf("starting worker: %w", err)
	}
	w.started = true
	if w.backend.Notifier == nil {
		w.log.InfoContext(ctx, "backend has no notifier; polling only")
	} else if wakes, err := w.backend.Notifier.NotifierListen(runCtx); err != nil {
		w.log.WarnContext(ctx, "notifications unavailable; polling only", slog.Any("error", err))
	} else {
		w.listening.Store(true)
		w.loops.Go(func() { w.listenLoop(runCtx, wakes) })
	}
	w.loops.Go(func() { w.heartbeatLoop(runCtx, beat) })
	w.loops.Go(func() { w.claimLoop(runCtx) })
	w.loops.Go(func() { w.wakes.run(runCtx) })
	w.loops.Go(func() { w.deadLetterRecovery(runCtx) })
	// The monitor and the renewals serve the drains, which run until the
	// work context ends.
	w.workLoops.Go(func() { w.renewer.run(workCtx) })
	// The monitor outlives the drains: when the work context ends (Stop's
	// deadline passed), it still abandons the applies that ignore it, so
	// that the drains, and Stop, end.
	monitorCtx, stopMonitor := context.WithCancel(context.WithoutCancel(ctx))
	w.stopMonitor = stopMonitor
	w.workLoops.Go(func() { w.monitor.run(monitorCtx, workCtx.Done(), &w.abandons) })
	for _, wake := range w.consumerWakes {
		w.loops.Go(func() { w.consumeLoop(runCtx, workCtx, wake) })
	}
	w.loops.Go(func() { w.startupScan(runCtx) })
	w.loops.Go(func() { w.life.reconcileLoop(runCtx) })
	w.loops.Go(func() { w.resubscribeLoop(runCtx) })
	w.log.InfoContext(ctx, "worker started", append(w.identity(), slog.Int("consumers", len(w.consumerWakes)))...)
	return nil
}

// Stop ends the loops, lets in-flight batches finish, flushes every buffered
// completion and failure, deregisters the instance (releasing its leases) and
// waits for all goroutines. If ctx ends first, in-flight applies are cancelled
// and Stop returns ctx.Err(); calling Stop again waits for the rest. Stop on a
// worker that never started is a no-op.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if !started {
		w.stopOnce.Do(func() { close(w.done) })
		return nil
	}
	w.stopOnce.Do(func() { go w.shutdown(ctx) })
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		w.cancelWork(ErrStopped)
		return ctx.Err()
	}
}

func (w *Worker) shutdown(ctx context.Context) {
	defer close(w.done)
	w.cancelRun(ErrStopped)
	w.loops.Wait()
	// The work context stays alive for the drain of buffered completions,
	// unless the caller's Stop deadline passed (then it is cancelled).
	workCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopWatch := context.AfterFunc(ctx, cancel)
	defer stopWatch()
	defer cancel()
	w.finishStartupScan()
	if err := w.life.wait(workCtx); err != nil {
		w.log.ErrorContext(ctx, "waiting for lifecycle receptors at stop", slog.Any("error", err))
	}
	w.flushPending(workCtx)
	if err := w.completions.Close(workCtx); err != nil {
		w.log.ErrorContext(ctx, "draining completions at stop", slog.Any("error", err))
	}
	if err := w.failures.Close(workCtx); err != nil {
		w.log.ErrorContext(ctx, "draining failures at stop", slog.Any("error", err))
	}
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), deregisterTimeout)
	defer dcancel()
	if err := w.backend.Claimer.InstanceDeregister(dctx, &ports.InstanceDeregisterParams{InstanceID: w.opts.InstanceID}); err != nil {
		w.log.ErrorContext(ctx, "deregistering instance", slog.Any("error", err))
	}
	w.cancelWork(ErrStopped)
	w.stopMonitor()
	w.workLoops.Wait()
	w.abandons.Wait()
	w.log.InfoContext(ctx, "worker stopped", w.identity()...)
}

// identity are the log attributes naming this instance.
func (w *Worker) identity() []any {
	attrs := []any{slog.String("service", w.opts.ServiceName), slog.String("host", w.opts.HostName)}
	if w.opts.Generation != "" {
		attrs = append(attrs, slog.String("generation", w.opts.Generation))
	}
	return attrs
}

// heartbeat records the instance's heartbeat. When it abandoned stale
// instances it wakes the claim loop, since their streams are claimable now.
func (w *Worker) heartbeat(ctx context.Context) (*ports.InstanceHeartbeatResult, error) {
	cctx, cancel := leaseCallContext(ctx)
	defer cancel()
	res, err := w.backend.Claimer.InstanceHeartbeat(cctx, &ports.InstanceHeartbeatParams{
		InstanceID:     w.opts.InstanceID,
		ServiceName:    w.opts.ServiceName,
		HostName:       w.opts.HostName,
		ProcessID:      os.Getpid(),
		Metadata:       w.opts.InstanceMetadata,
		StaleThreshold: w.opts.StaleInstanceThreshold,
		Now:            w.paramNow(),
	})
	if err != nil {
		return nil, err
	}
	if len(res.Abandoned) > 0 {
		ids := make([]string, len(res.Abandoned))
		for i, id := range res.Abandoned {
			ids[i] = id.String()
		}
		w.log.InfoContext(ctx, "abandoned stale instances; taking over their work", slog.Any("instances", ids))
		w.takeOver()
	}
	return res, nil
}

// takeOver wakes the claim loop after a peer was abandoned, by this instance
// or another survivor: the peer's streams are claimable now, and the claim
// that takes them skips the sliding window (see recovering).
func (w *Worker) takeOver() {
	w.recovering.Store(true)
	signal(w.claimWake)
}

// heartbeatLoop heartbeats until ctx is done, starting from the result of
// the heartbeat at Start.
func (w *Worker) heartbeatLoop(ctx context.Context, first *ports.InstanceHeartbeatResult) {
	t := w.clock.NewTimer(heartbeatDelay(w.opts.HeartbeatInterval, w.now(), first.NextStaleAt))
	defer t.Stop()
	prev := first.NextStaleAt
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		delay := w.opts.HeartbeatInterval
		if res, err := w.heartbeat(ctx); err != nil {
			if ctx.Err() == nil {
				w.faults.fail(ctx, "heartbeat", err)
			}
		} else {
			w.faults.ok(ctx, "heartbeat")
			if res.Rejoined {
				w.log.WarnContext(ctx, "instance was silent past the stale threshold; re-registered, and stale peers are abandoned at the next heartbeat")
			}
			if len(res.Abandoned) == 0 && peerGone(prev, w.now(), res.NextStaleAt) {
				// Another survivor abandoned the peer first: its streams
				// are ours to share all the same.
				w.takeOver()
			}
			prev = res.NextStaleAt
			delay = heartbeatDelay(w.opts.HeartbeatInterval, w.now(), res.NextStaleAt)
		}
		t.Reset(delay)
	}
}

// peerGone reports whether the peer that was due to go stale at prev (the
// NextStaleAt of the previous heartbeat) is gone by now: prev has passed
// and the new NextStaleAt differs. Then it was abandoned, by this instance
// or by another survivor (or it heartbeat in time, which costs one early
// claim).
func peerGone(prev, now, next time.Time) bool {
	return !prev.IsZero() && !now.Before(prev) && !next.Equal(prev)
}

// heartbeatDelay returns how long after now to heartbeat next: the
// interval, or staleMargin past nextStaleAt (when the next peer goes stale,
// zero for none) if that comes sooner, so a peer that stopped heartbeating is
// abandoned, and its streams claimed, right when it goes stale rather than up
// to an interval later. Never less than heartbeatMinDelay.
//
// nextStaleAt is on the backend's clock, which on PostgreSQL without an
// injected Clock is the database's. When our clock runs ahead of it, a
// heartbeat aimed past nextStaleAt finds the peer not stale yet and reports
// the same deadline, now behind us by at least staleMargin. Waiting as long
// again as we are late then doubles the overshoot with each such heartbeat,
// so a skew costs a few heartbeats, not one every heartbeatMinDelay until it
// is made up.
func heartbeatDelay(interval time.Duration, now, nextStaleAt time.Time) time.Duration {
	if nextStaleAt.IsZero() {
		return interval
	}
	d := nextStaleAt.Sub(now) + staleMargin
	if late := now.Sub(nextStaleAt); late >= staleMargin {
		d = late
	}
	return min(interval, max(d, heartbeatMinDelay))
}

func (w *Worker) notificationsHealthy() bool {
	return w.listening.Load() && w.backend.Notifier != nil && w.backend.Notifier.NotifierHealthy()
}

func (w *Worker) listenLoop(ctx context.Context, wakes <-chan ports.Wake) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-wakes:
			if !ok {
				if ctx.Err() == nil {
					w.listening.Store(false)
					w.log.WarnContext(ctx, "notification channel closed; polling only")
				}
				return
			}
			// A reconnect (possibly missed notifications) and a plain
			// notification both mean: poll now.
			w.wakeCount.Add(1)
			signal(w.notifyWake)
			w.wakeConsumers()
		}
	}
}

// notifyClaimSpacing bounds how long a notification waits for its claim
// (see claimLoop) when ClaimInterval is longer.
const notifyClaimSpacing = 250 * time.Millisecond

// claimLoop claims on its cadence, at once while claims report more work,
// and on wakes: at once for RequestImmediatePoll, freed room and abandoned
// peers; for notifications at most once per ClaimInterval (or
// notifyClaimSpacing if shorter), since every instance is woken by every
// append's notification and a claim per append per instance cost more than
// the appends themselves.
func (w *Worker) claimLoop(ctx context.Context) {
	t := w.clock.NewTimer(0)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-w.claimWake:
		case <-w.notifyWake:
			if wait := min(w.opts.ClaimInterval, notifyClaimSpacing) - w.now().Sub(last); !last.IsZero() && wait > 0 {
				resetTimer(t, wait) // claim when the interval is up
				if w.claimDeferHook != nil {
					w.claimDeferHook(wait)
				}
				continue
			}
		}
		last = w.now()
		hasMore := w.claimOnce(ctx)
		interval := w.opts.ClaimInterval
		if w.notificationsHealthy() {
			interval = w.opts.ClaimNotifyHealthyInterval
		}
		if hasMore {
			interval = 0
		}
		resetTimer(t, interval)
	}
}

func (w *Worker) claimOnce(ctx context.Context) bool {
	recovering := w.recovering.Swap(false)
	cctx, cancel := leaseCallContext(ctx)
	defer cancel()
	res, err := w.backend.Claimer.WorkClaim(cctx, &ports.WorkClaimParams{
		InstanceID:     w.opts.InstanceID,
		MaxStreams:     w.opts.MaxStreamsPerBatch,
		PartitionCount: w.opts.PartitionCount,
		LeaseDuration:  w.opts.LeaseDuration,
		StaleThreshold: w.opts.StaleInstanceThreshold,
		Now:            w.paramNow(),
	})
	if err != nil {
		if recovering {
			w.recovering.Store(true) // the next claim takes the streams over
		}
		if ctx.Err() != nil {
			return false
		}
		if errors.Is(err, ports.ErrInstanceNotAlive) {
			// We were abandoned (a pause longer than the stale threshold):
			// heartbeat again and claim afresh.
			w.log.WarnContext(ctx, "instance was considered stale and lost its work; re-registering")
			if _, herr := w.heartbeat(ctx); herr != nil {
				w.faults.fail(ctx, "heartbeat", herr)
			}
			return false
		}
		w.faults.fail(ctx, "claiming work", err)
		return false
	}
	w.faults.ok(ctx, "claiming work")
	if recovering {
		w.windowSkip.Store(true) // before the push, so the consumer taking the ids sees it
	}
	added := w.queue.Push(res.StreamIDs...)
	w.claimHasMore.Store(res.HasMore)
	// Re-poll at once only while claims keep finding new streams. When the
	// backlog is larger than what we hold, the next claim is woken by an
	// acknowledged completion flush, which frees room (no hot loop
	// re-claiming the streams we are already draining).
	return res.HasMore && added > 0
}

func resetTimer(t ports.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C():
		default:
		}
	}
	t.Reset(d)
}

func (w *Worker) idleTimeout() time.Duration {
	if w.notificationsHealthy() {
		return max(w.opts.PollingInterval, w.opts.NotifyHealthyPollingInterval)
	}
	return w.opts.PollingInterval
}

// consumeLoop waits for any of: stream ids in the drain queue, a wake
// (notification or RequestImmediatePoll), or the idle timeout; then it drains
// a sliding-window batch or runs an idle tick.
func (w *Worker) consumeLoop(runCtx, workCtx context.Context, wake chan struct{}) {
	t := w.clock.NewTimer(w.idleTimeout())
	defer t.Stop()
	var lastWakes uint64
	for {
		ids := w.queue.Take(w.opts.DrainBatcher.MaxSize)
		if len(ids) == 0 {
			timedOut := false
			resetTimer(t, w.idleTimeout())
			select {
			case <-runCtx.Done():
				return
			case <-w.queue.signal:
			case <-wake:
			case <-t.C():
				timedOut = true
			}
			ids = w.queue.Take(w.opts.DrainBatcher.MaxSize)
			if len(ids) == 0 {
				w.idleTick(workCtx, timedOut)
				continue
			}
		}
		if w.wantWindow(len(ids), &lastWakes) {
			ids = w.collectWindow(runCtx, ids)
		}
		w.processBatch(workCtx, ids)
		if runCtx.Err() != nil {
			return
		}
	}
}

// wantWindow reports whether a consumer holding n ids should extend them
// into a sliding window. The window coalesces bursts of live appends, so it
// is skipped where no burst can be coming: when n reached MaxSize; while the
// claim loop reports a backlog larger than what this instance holds (the ids
// came in bulk from a claim); for streams taken over from an abandoned
// instance (they have waited a stale threshold already); and, while
// notifications are healthy, when no notification arrived since this
// consumer's last batch (a backlog being worked through or a periodic claim:
// nothing to wait for). lastWakes is the consumer's notification count at
// its last batch; wantWindow updates it.
func (w *Worker) wantWindow(n int, lastWakes *uint64) bool {
	wakes := w.wakeCount.Load()
	live := wakes != *lastWakes || !w.notificationsHealthy()
	*lastWakes = wakes
	return n < w.opts.DrainBatcher.MaxSize && !w.claimHasMore.Load() && !w.windowSkip.Swap(false) && live
}

// collectWindow extends a batch while drain signals keep arriving: it waits
// up to SlidingWindow after the latest arrival, at most MaxWait after the
// first, for at most MaxSize ids.
func (w *Worker) collectWindow(ctx context.Context, ids []uuid.UUID) []uuid.UUID {
	first := w.now()
	last := first
	defer func() {
		if w.windowHook != nil {
			w.windowHook(0, true)
		}
	}()
	for len(ids) < w.opts.DrainBatcher.MaxSize {
		now := w.now()
		remaining := min(w.opts.DrainBatcher.SlidingWindow-now.Sub(last), w.opts.DrainBatcher.MaxWait-now.Sub(first))
		if remaining <= 0 {
			return ids
		}
		t := w.clock.NewTimer(remaining)
		select {
		case <-ctx.Done():
			t.Stop()
			return ids
		case <-t.C():
			return ids
		case <-w.queue.signal:
			t.Stop()
			if more := w.queue.Take(w.opts.DrainBatcher.MaxSize - len(ids)); len(more) > 0 {
				ids = append(ids, more...)
				last = w.now()
				if w.windowHook != nil {
					w.windowHook(len(more), false)
				}
				if w.windowSkip.Swap(false) {
					return ids // taken over from an abandoned instance: drain now
				}
			}
		}
	}
	return ids
}

// idleTick flushes buffered completions and records an empty poll when the
// idle timeout expired.
func (w *Worker) idleTick(ctx context.Context, timedOut bool) {
	w.cache.EvictExpired()
	w.flushPending(ctx)
	if timedOut {
		w.recordPoll(false)
	}
	if h := w.opts.Hooks.OnBatchCycleComplete; h != nil {
		h(BatchCycle{})
	}
}

func (w *Worker) recordPoll(hasWork bool) {
	if hasWork {
		w.emptyPolls.Store(0)
		if w.idle.CompareAndSwap(true, false) {
			if h := w.opts.Hooks.OnWorkProcessingStarted; h != nil {
				h()
			}
		}
		return
	}
	n := w.emptyPolls.Add(1)
	// A batch still draining (a slow apply, say) keeps the worker busy
	// however many polls other consumers find empty.
	if n >= int64(w.opts.IdleThresholdPolls) && w.busy.Load() == 0 && w.idle.CompareAndSwap(false, true) {
		if h := w.opts.Hooks.OnWorkProcessingIdle; h != nil {
			h()
		}
	}
}

// WaitForStream blocks until every named perspective (every registered one
// when none is named) has applied the events of the stream up to version that
// it handles, so a caller can read its own writes. It returns ctx.Err() if
// ctx ends first.
func (w *Worker) WaitForStream(ctx context.Context, streamID uuid.UUID, version int64, perspectives ...string) error {
	if len(perspectives) == 0 {
		perspectives = w.reg.Perspectives()
	}
	events, err := w.backend.Fetcher.EventsReadStream(ctx, &ports.EventsReadStreamParams{StreamID: streamID})
	if err != nil {
		return fmt.Errorf("waiting for stream %s: %w", streamID, err)
	}
	// Each perspective must reach the last event at or below version that
	// it handles; one that handles none of them has nothing to wait for.
	subscribers := w.reg.subscribers()
	targets := map[string]int64{}
	for _, e := range events {
		if e.Version > version {
			break
		}
		for _, p := range subscribers[e.Type] {
			targets[p] = e.Version
		}
	}
	for {
		w.progressMu.Lock()
		progressed := w.progress
		w.progressMu.Unlock()
		ok, err := w.caughtUp(ctx, streamID, targets, perspectives)
		if err != nil || ok {
			return err
		}
		t := w.clock.NewTimer(w.opts.PollingInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-progressed:
		case <-t.C():
		}
		t.Stop()
	}
}

func (w *Worker) caughtUp(ctx context.Context, streamID uuid.UUID, targets map[string]int64, perspectives []string) (bool, error) {
	for _, p := range perspectives {
		target, ok := targets[p]
		if !ok {
			continue
		}
		m, err := w.backend.Models.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: streamID, Perspective: p})
		if errors.Is(err, ports.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("waiting for stream %s: %w", streamID, err)
		}
		if m.LastVersion < target {
			return false, nil
		}
	}
	return true, nil
}

func (w *Worker) signalProgress() {
	w.progressMu.Lock()
	close(w.progress)
	w.progress = make(chan struct{})
	w.progressMu.Unlock()
}

// warnRetired warns about the perspectives of the registry that are retired
// in the backend: they get no work, which an operator may not expect of a
// perspective still in the code.
func (w *Worker) warnRetired(ctx context.Context) {
	if w.backend.Admin == nil {
		return
	}
	retired, err := w.backend.Admin.PerspectivesRetired(ctx)
	if err != nil {
		w.log.WarnContext(ctx, "listing retired perspectives", slog.Any("error", err))
		return
	}
	for _, name := range retired {
		if _, ok := w.reg.perspective(name); ok {
			w.log.WarnContext(ctx, "perspective is retired in the backend; it gets no work until revived",
				slog.String("perspective", name))
		}
	}
}

// resubscribeEvery is how often a worker registers its subscriptions again.
const resubscribeEvery = time.Minute

// resubscribeLoop registers the registry's subscriptions again now and
// then. Appends through a Registry carry their subscriptions; this heals
// the store for producers that append by other means, should its
// subscriptions have been lost (a schema dropped and recreated while
// instances ran). Retired perspectives stay retired.
func (w *Worker) resubscribeLoop(ctx context.Context) {
	every(ctx, w.clock, resubscribeEvery, func() {
		if err := w.reg.RegisterSubscriptions(ctx, w.backend.Events); err != nil {
			if ctx.Err() == nil {
				w.faults.fail(ctx, "registering subscriptions", err)
			}
			return
		}
		w.faults.ok(ctx, "registering subscriptions")
	})
}
