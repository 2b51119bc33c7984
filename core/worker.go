package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"

	"github.com/vantage-go/vantage/core/completion"
	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/claim"
	"github.com/vantage-go/vantage/core/internal/complete"
	"github.com/vantage-go/vantage/core/internal/consume"
	"github.com/vantage-go/vantage/core/internal/dedup"
	"github.com/vantage-go/vantage/core/internal/drain"
	"github.com/vantage-go/vantage/core/internal/failure"
	"github.com/vantage-go/vantage/core/internal/heartbeat"
	"github.com/vantage-go/vantage/core/internal/lease"
	"github.com/vantage-go/vantage/core/internal/modelstore"
	"github.com/vantage-go/vantage/core/internal/monitor"
	"github.com/vantage-go/vantage/core/internal/notify"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/core/internal/queue"
	"github.com/vantage-go/vantage/core/internal/rebuild"
	"github.com/vantage-go/vantage/core/internal/rewind"
	"github.com/vantage-go/vantage/core/internal/stage"
	"github.com/vantage-go/vantage/core/internal/startstop"
	"github.com/vantage-go/vantage/core/internal/telemetry"
	"github.com/vantage-go/vantage/ports"
)

// ErrStopped is the cause of the contexts cancelled by Stop, and the error of
// Start on a Worker that was stopped.
var ErrStopped = startstop.ErrStopped

// Worker materializes perspectives: it heartbeats, claims work per stream,
// drains each stream's pending events in order through the registered
// perspectives and reports completions and failures to the backend.
//
// Construct it with New, then Start it; Stop drains in-flight work, flushes
// completions, deregisters the instance and waits for every goroutine. A
// Worker runs once: after Stop, build a new one. Its methods are safe for
// concurrent use. Its observable instruments (see
// Options.Telemetry.MeterProvider) report from New until Stop: call Stop on
// a Worker you drop, started or not.
type Worker struct {
	*engine

	listener   *notify.Listener
	heartbeat  *heartbeat.Heartbeater
	claims     *claim.Claimer
	claimWakes *claim.Wakes
	consumers  *consume.Consumers
	completer  *complete.Completer
	parking    *pair.Parking
	renewer    *lease.Renewer
	monitor    *monitor.Monitor
	lifecycle  *stage.Lifecycle

	fetcher  *drain.Fetcher
	failures *failure.Failures
	rewind   *rewind.Rewinder
	drain    *drain.Drainer
	rebuilds *rebuild.Queue
	// drainQ and cache are the queue of streams to drain and the
	// processed-event cache the services share.
	drainQ *queue.Queue
	cache  *dedup.Cache

	run runState
}

// runState is a Worker's own state between Start and Stop.
type runState struct {
	mu         sync.Mutex
	started    bool
	cancelRun  context.CancelCauseFunc
	cancelWork context.CancelCauseFunc
	services   *startstop.List
	loops      sync.WaitGroup // the housekeeping loops
	stopOnce   sync.Once
	done       chan struct{}
	// running and stopping are set once Start succeeded and once Stop
	// began on a started worker, for Health, which must not wait for mu:
	// Start holds it through its calls to the backend.
	running  atomic.Bool
	stopping atomic.Bool
	// gauges registers the callback of the observable instruments, from
	// New until Stop.
	gauges metric.Registration
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
	if err := checkProjections(backend, registry); err != nil {
		return nil, fmt.Errorf("building worker: %w", err)
	}
	clock := cmp.Or[ports.Clock](o.Clock, ports.SystemClock{})
	// Every line names the instance; each part of the engine adds its
	// component once (the backend's notifier its own), never on top of
	// another's.
	instanceLog := o.Logger.With(slog.String("instance_id", o.InstanceID.String()))
	log := instanceLog.With(slog.String("component", "vantage.worker"))
	e := &engine{
		backend: backend,
		reg:     registry,
		opts:    o,
		Env:     base.NewEnv(clock, o.Clock != nil, log),
		tracing: telemetry.NewTracing(o.Telemetry.TracerProvider),
	}
	e.stats = newStatsCache(e)
	e.metrics = telemetry.NewMetrics(telemetry.MetricsConfig{
		Provider: o.Telemetry.MeterProvider, Clock: clock, Log: log, ApplyEvery: o.Telemetry.ApplyDurationInterval,
		Lag: backend.Stats != nil, Perspectives: registry.Perspectives(),
	})
	w := &Worker{engine: e, run: runState{done: make(chan struct{})}}
	cache := dedup.New(dedup.Options{Retention: o.Claims.LeaseDuration, Clock: clock, Observer: o.Hooks.DedupObserver})
	arrivals := consume.NewArrivals(o.Drain.Batcher.MaxWait)
	drainQ := queue.New(queue.Hooks{
		Arrived: func() { arrivals.Arrived(e.Now()) },
		// Events wait behind a stream's acknowledgement: the completer,
		// built below, sends what it holds.
		Waiting: func() { w.completer.SendHeld() },
	})
	act := consume.NewActivity(o.Drain.IdleThresholdPolls, o.Hooks.OnWorkProcessingStarted, o.Hooks.OnWorkProcessingIdle)
	w.parking = pair.NewParking(e.Env, pair.Config{
		InfraRetry: o.Retries.Infra.internal(0), BatchSize: o.Drain.PerspectiveBatchSize,
		SavePatience: e.savePatience(), OnBackendError: e.metrics.BackendError,
	}, drainQ)
	w.renewer = lease.New(e.Env, lease.Config{
		Claimer: backend.Claimer, InstanceID: o.InstanceID, LeaseDuration: o.Claims.LeaseDuration,
		OnRenewed: o.Hooks.OnLeasesRenewed,
	})
	w.monitor = monitor.New(e.Env, monitor.Config{
		Timeout: o.Drain.ApplyTimeout, Grace: o.Drain.ApplyAbandonGrace,
		OnAbandoned: func(ctx context.Context, info monitor.Abandoned) { e.noteAbandoned(ctx, AbandonedApply(info)) },
	})
	w.heartbeat = heartbeat.New(e.Env, heartbeat.Config{
		Claimer:        backend.Claimer,
		InstanceID:     o.InstanceID,
		ServiceName:    o.ServiceName,
		HostName:       o.HostName,
		Metadata:       o.InstanceMetadata,
		Interval:       o.Claims.HeartbeatInterval,
		StaleThreshold: o.Claims.StaleInstanceThreshold,
		Passive:        o.Claims.Disabled,
		OnStall:        e.metrics.ClaimStalled,
	})
	// Notifications wake the claim loop and the consumers through these,
	// made before the services that ring them.
	claimWakes := claim.NewWakes()
	var onFlushed func([]ports.Completion, []ports.Failure)
	if h := o.Hooks.OnCompletionsFlushed; h != nil {
		onFlushed = func(cs []ports.Completion, fs []ports.Failure) { h(CompletionsFlushed{Completions: cs, Failures: fs}) }
	}
	if w.completer, err = complete.New(e.Env, cache, complete.Config{
		Cursors:        backend.Cursors,
		InstanceID:     o.InstanceID,
		DebugMode:      o.DebugMode,
		Strategy:       o.Completion,
		Resend:         completion.BatchedOptions{BaseTimeout: o.Retries.CompletionResend.Initial, Multiplier: o.Retries.CompletionResend.Multiplier, MaxTimeout: o.Retries.CompletionResend.Max},
		FlushAttempts:  o.Retries.Flush.MaxAttempts,
		FlushRetry:     o.Retries.Flush.internal(0),
		Metrics:        e.metrics,
		OnAcknowledged: onFlushed,
		OnFailureAcked: w.parking.ParkAcked,
		OnGivenUp:      w.parking.ReportGivenUp,
		OnLanded:       w.parking.ReportLanded,
		OnCompleted: func() {
			if drainQ.Backlog() {
				claimWakes.Now() // room was freed for more of the backlog
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("building worker: %w", err)
	}
	consumerWakes := make([]chan struct{}, o.Drain.Consumers)
	for i := range consumerWakes {
		consumerWakes[i] = make(chan struct{}, 1)
	}
	w.listener = notify.New(e.Env, notify.Config{Notifier: backend.Notifier, BackendLog: instanceLog, OnWake: func(wake ports.Wake) {
		if len(wake.Streams) > 0 && !wake.Reconnected && w.heartbeat.Alone() {
			// The streams with new events are named, and every one is
			// this instance's: its fetch leases them, and a claim would
			// only cost a round trip on each event's way.
			drainQ.Push(wake.Streams...)
		} else {
			// A reconnect (possibly missed notifications) and a
			// notification that names no stream, or streams that may be
			// another instance's, mean: claim now.
			claimWakes.Notified()
		}
		for _, c := range consumerWakes {
			base.Signal(c)
		}
	}})
	w.claims = claim.New(e.Env, claim.Config{
		Claimer:               backend.Claimer,
		InstanceID:            o.InstanceID,
		MaxStreams:            o.Claims.MaxStreamsPerBatch,
		PartitionCount:        o.Claims.PartitionCount,
		LeaseDuration:         o.Claims.LeaseDuration,
		StaleThreshold:        o.Claims.StaleInstanceThreshold,
		Interval:              o.Claims.Interval,
		NotifyHealthyInterval: o.Claims.NotifyHealthyInterval,
		OnClaimed:             e.metrics.Claimed,
	}, claimWakes, drainQ, w.heartbeat, w.listener)
	w.claimWakes = claimWakes
	scopes := newScopeCache(o.Security)
	store := modelstore.New(modelstore.Config{
		Models: backend.Models, Batch: backend.ModelBatch, Tx: backend.ModelTx,
		CacheSize: o.Drain.ModelCacheSize, Clock: e.Clock,
		CallTimeout: base.BackendCallTimeout, ApplyTimeout: o.Drain.ApplyTimeout,
		// A write is cancelled at ApplyTimeout, and one that ignores its
		// cancellation gets ApplyAbandonGrace more, as an apply does, before
		// its transaction may be ended under it; an instance frozen in the
		// middle of a save then holds its stream no longer than that.
		TxIdleTimeout: o.Drain.ApplyTimeout + o.Drain.ApplyAbandonGrace,
	})
	w.lifecycle = stage.New(e.Env, stage.Config{
		Lifecycle:      backend.Lifecycle,
		Cursors:        backend.Cursors,
		InstanceID:     o.InstanceID,
		StaleThreshold: o.Claims.StaleInstanceThreshold,
		Registry:       stageRegistry{registry},
		Scope:          scopes.establish,
		Completer:      w.completer,
		Telemetry:      telemetry.Stages{Tracing: e.tracing, Metrics: e.metrics},
		OnCompleted:    o.Hooks.OnLifecycleCompleted,
	})
	fetcher := drain.NewFetcher(e.Env, drain.FetchConfig{
		Fetcher: backend.Fetcher, InstanceID: o.InstanceID, LeaseDuration: o.Claims.LeaseDuration,
		StaleThreshold: o.Claims.StaleInstanceThreshold, MaxRows: o.Drain.FetchMaxRows, Metrics: e.metrics,
		OnDeduped: dedupedHook(o.Hooks.DedupObserver),
	}, w.parking, cache)
	w.failures = failure.New(e.Env, failure.Config{
		DeadLetters: backend.DeadLetters, InstanceID: o.InstanceID, Generation: o.Generation,
		MaxAttempts: o.Retries.MaxEventAttempts, Retry: o.Retries.Event.internal(0), Metrics: e.metrics,
		OnDeadLettered: o.Hooks.OnDeadLettered, OnFailure: o.Hooks.OnFailure,
	}, w.completer, cache)
	var onRewind func(rewind.Info)
	if h := o.Hooks.OnRewind; h != nil {
		onRewind = func(info rewind.Info) { h(RewindInfo(info)) }
	}
	w.rewind = rewind.New(e.Env, rewind.Config{
		Rewind: backend.Rewind, Cursors: backend.Cursors, Models: backend.Models, Snapshots: backend.Snapshots,
		Events: backend.Fetcher, DeadLetters: backend.DeadLetters, StagesRecorded: backend.Lifecycle != nil,
		InstanceID: o.InstanceID, DebugMode: o.DebugMode,
		Disabled: o.Rewind.Disabled, StartupScan: rewind.ScanMode(o.Rewind.StartupScan), MaxConcurrent: o.Rewind.MaxConcurrentRewinds,
		Debounce: o.Rewind.Debounce, MaxDebounce: o.Rewind.MaxDebounce, LockTimeout: o.Rewind.LockTimeout, KeepAlive: o.Rewind.KeepAlive,
		SnapshotEvery: o.Rewind.SnapshotEvery, PollInterval: o.Drain.PollingInterval, WriteLimit: e.writeLimit(),
		Registry: engineRegistry{registry}, Scope: scopes.establish, Tracing: e.tracing, Metrics: e.metrics,
		OnRewind: onRewind, OnStartupScanComplete: o.Hooks.OnStartupScanComplete,
	}, rewind.Deps{
		Parking: w.parking, Lifecycle: w.lifecycle, Monitor: w.monitor, Completer: w.completer,
		Cache: cache, Store: store, Failures: w.failures, Pending: fetcher,
	})
	var onBatch func(streams, applied int)
	if h := o.Hooks.OnBatchCycleComplete; h != nil {
		onBatch = func(streams, applied int) { h(BatchCycle{Streams: streams, Applied: applied}) }
	}
	var onProcessed func(string, uuid.UUID, int, int64)
	if h := o.Hooks.OnPerspectiveEventProcessed; h != nil {
		onProcessed = func(p string, stream uuid.UUID, n int, last int64) {
			h(PerspectiveEventProcessed{Perspective: p, StreamID: stream, EventCount: n, LastVersion: last})
		}
	}
	w.drain = drain.New(e.Env, drain.Config{
		InstanceID: o.InstanceID, FetchMaxRows: o.Drain.FetchMaxRows,
		MaxConcurrentStreams: o.Drain.MaxConcurrentStreams, MaxPerspectivesPerStream: o.Drain.MaxPerspectivesPerStream, MaxRowsInFlight: o.Drain.MaxRowsInFlight,
		MaxPasses: o.Drain.LoopMaxIterations, RefetchMinEvents: o.Drain.LoopRefetchMinBatch, InfraRetryMax: o.Retries.Infra.Max,
		StagesRecorded: backend.Lifecycle != nil, WriteLimit: e.writeLimit(), SavePatience: e.savePatience(),
		Registry: engineRegistry{registry}, ApplyContext: scopes.applyContext, Tracing: e.tracing, Metrics: e.metrics,
		OnBatchCycleComplete: onBatch, OnEventsProcessed: onProcessed,
	}, drain.Deps{
		Queue: drainQ, Activity: act, Fetcher: fetcher, Cache: cache, Completer: w.completer, Parking: w.parking,
		Renewer: w.renewer, Monitor: w.monitor, Lifecycle: w.lifecycle, Store: store, Failures: w.failures, Rewinder: w.rewind,
	})
	w.fetcher, w.drainQ, w.cache = fetcher, drainQ, cache
	rebuilds := backend.Rebuilds
	if backend.Rewind == nil {
		rebuilds = nil // a rebuild replays under the rewind's lock
	}
	w.rebuilds = rebuild.New(e.Env, rebuild.Config{
		Rebuilds: rebuilds, InstanceID: o.InstanceID, PollInterval: o.Rewind.RebuildPollInterval,
		LockTimeout: o.Rewind.LockTimeout, KeepAlive: o.Rewind.KeepAlive,
		Perspectives: registry.Perspectives, Rebuilder: w.rewind.Rebuilder(), OnRequest: o.Hooks.OnRebuildRequest,
	})
	var onIdleTick func()
	if h := o.Hooks.OnBatchCycleComplete; h != nil {
		onIdleTick = func() { h(BatchCycle{}) }
	}
	w.consumers = consume.New(e.Env, consume.Config{
		PollingInterval:              o.Drain.PollingInterval,
		NotifyHealthyPollingInterval: o.Drain.NotifyHealthyPollingInterval,
		MaxSize:                      o.Drain.Batcher.MaxSize,
		SlidingWindow:                o.Drain.Batcher.SlidingWindow,
		MaxWait:                      o.Drain.Batcher.MaxWait,
		Coalesce:                     w.completer.Coalesce(),
		OnIdleTick:                   onIdleTick,
	}, consume.Funcs{Drain: w.drain.ProcessBatch, Tick: w.completer.Sweep, SendHeld: w.completer.SendHeld},
		drainQ, w.listener, consumerWakes, arrivals, act)
	w.run.gauges = w.observeGauges()
	return w, nil
}

// InstanceID returns the id this worker heartbeats and claims under.
func (w *Worker) InstanceID() uuid.UUID { return w.opts.InstanceID }

// IsIdle reports whether the worker is idle (no work for
// Options.Drain.IdleThresholdPolls consecutive polls). A new worker is
// idle.
func (w *Worker) IsIdle() bool { return w.consumers.Activity().Idle() }

// ConsecutiveEmptyPolls returns the number of consecutive polls that found no
// work, shared across consumer loops.
func (w *Worker) ConsecutiveEmptyPolls() int { return w.consumers.Activity().EmptyPolls() }

// RequestImmediatePoll wakes the claim loop and every consumer now instead of
// at their next interval; with Options.Claims.Disabled it wakes the consumers
// only. Safe from any goroutine; redundant calls coalesce.
func (w *Worker) RequestImmediatePoll() {
	w.claimWakes.Now()
	w.consumers.WakeAll()
}

// Start registers the perspectives' subscriptions and the instance with the
// backend, then launches the heartbeat, claim (unless
// Options.Claims.Disabled), listener and consumer loops, and the
// housekeeping loops (dead-letter recovery, the startup rewind scan,
// lifecycle reconciliation, rebuild requests, and the indexes the
// perspectives declare, built in the background: see Perspective.Index).
// ctx bounds only this start-up; the loops run until Stop. Start on a running
// worker is a no-op; on a stopped one it returns ErrStopped.
func (w *Worker) Start(ctx context.Context) error {
	w.run.mu.Lock()
	defer w.run.mu.Unlock()
	select {
	case <-w.run.done:
		return ErrStopped
	default:
	}
	if w.run.started {
		return nil
	}
	if err := checkProjections(w.backend, w.reg); err != nil {
		return fmt.Errorf("starting worker: %w", err)
	}
	if err := w.reg.RegisterSubscriptions(ctx, w.backend.Events); err != nil {
		return fmt.Errorf("starting worker: %w", err)
	}
	w.warnRetired(ctx)
	if err := w.heartbeat.Register(ctx); err != nil {
		return fmt.Errorf("starting worker: %w", err)
	}
	// Every loop runs under runCtx, which Stop ends first; the drains'
	// work (and the flushers serving it) under workCtx, which Stop ends
	// once in-flight batches finished and their outcomes were sent.
	runCtx, cancelRun := context.WithCancelCause(telemetry.WithoutSpan(context.WithoutCancel(ctx)))
	workCtx, cancelWork := context.WithCancelCause(telemetry.WithoutSpan(context.WithoutCancel(ctx)))
	services := w.services(runCtx, workCtx, cancelWork)
	if err := services.Start(ctx); err != nil {
		cancelRun(err)
		cancelWork(err)
		return fmt.Errorf("starting worker: %w", err)
	}
	w.run.cancelRun, w.run.cancelWork, w.run.services = cancelRun, cancelWork, services
	w.run.started = true
	w.run.running.Store(true)
	attrs := append(w.identity(), slog.Int("consumers", w.opts.Drain.Consumers))
	if w.opts.Claims.Disabled {
		attrs = append(attrs, slog.Bool("claims_disabled", true))
	}
	w.Log.InfoContext(ctx, "worker started", attrs...)
	return nil
}

// Stop ends the loops, lets in-flight batches finish, releases the rebuild
// request it is carrying out (another instance resumes it), runs the
// lifecycle stages already queued (whichever part of the worker queued
// them), flushes every buffered completion and failure, deregisters the
// instance (releasing its leases) and waits for all goroutines. If ctx ends
// first, in-flight applies and queued stages are cancelled and Stop returns
// ctx.Err(); calling Stop again waits for the rest. Stop on a worker that
// never started is a no-op.
func (w *Worker) Stop(ctx context.Context) error {
	w.run.mu.Lock()
	started := w.run.started
	w.run.mu.Unlock()
	if !started {
		w.run.stopOnce.Do(func() {
			w.metrics.Unobserve(w.run.gauges)
			close(w.run.done)
		})
		return nil
	}
	w.run.stopping.Store(true)
	w.run.stopOnce.Do(func() { go w.shutdown(ctx) })
	select {
	case <-w.run.done:
		return nil
	case <-ctx.Done():
		w.run.cancelWork(ErrStopped)
		return ctx.Err()
	}
}

func (w *Worker) shutdown(ctx context.Context) {
	defer close(w.run.done)
	// Every loop is told to end at once; the list then stops the services
	// in reverse order of their start, each waiting for its goroutines
	// (see services).
	w.run.cancelRun(ErrStopped)
	if err := w.run.services.Stop(ctx); err != nil {
		w.Log.ErrorContext(ctx, "stopping the worker", slog.Any("error", err))
	}
	w.metrics.Unobserve(w.run.gauges)
	w.Log.InfoContext(ctx, "worker stopped", w.identity()...)
}

// services returns the services of a run, in the order they start; Stop
// stops them in reverse. Loops run under runCtx, drain work, the flushers
// and the heartbeat under workCtx, which cancelWork ends. Each service
// relies on those started before it: the consumers' drains on the
// lifecycle, the completer, the heartbeat (while the instance drains, or
// may still save and report, it holds its streams, and no peer may take
// them over as it would a dead instance's), the lease renewals and the
// apply monitor. So Stop ends the claims and the consumers (their batches
// in flight finish), runs the lifecycle stages already queued, sends the
// buffered outcomes, stops the heartbeat and deregisters, and only then
// ends the drains' work. The waits for goroutines ignore Stop's deadline
// (a second Stop waits for the rest); the stages and the outcomes are
// given up when it passes.
func (w *Worker) services(runCtx, workCtx context.Context, cancelWork context.CancelCauseFunc) *startstop.List {
	// waiting stops a service and waits for its goroutines, whatever
	// becomes of Stop's context.
	waiting := func(s interface{ Stop(context.Context) error }) func(context.Context) error {
		return func(ctx context.Context) error { return s.Stop(context.WithoutCancel(ctx)) }
	}
	list := []startstop.Service{
		startstop.Func{
			Name: "apply monitor",
			// It outlives the drains (see monitor.Monitor.Start).
			OnStart: func(ctx context.Context) error {
				w.monitor.Start(context.WithoutCancel(ctx), workCtx.Done())
				return nil
			},
			OnStop: func(ctx context.Context) error {
				err := w.monitor.Stop(context.WithoutCancel(ctx))
				w.monitor.WaitAbandons()
				return err
			},
		},
		startstop.Func{Name: "lease renewals", OnStart: func(context.Context) error { return w.renewer.Start(workCtx) }, OnStop: waiting(w.renewer)},
		startstop.Func{Name: "drain work", OnStop: func(context.Context) error {
			cancelWork(ErrStopped)
			return nil
		}},
		startstop.Func{
			Name:    "heartbeat",
			OnStart: func(context.Context) error { return w.heartbeat.Start(workCtx) },
			OnStop: func(ctx context.Context) error {
				return errors.Join(w.heartbeat.Stop(context.WithoutCancel(ctx)), w.deregister(ctx))
			},
		},
		// The outcomes are sent until Stop's deadline.
		startstop.Func{Name: "completer", OnStart: func(context.Context) error { return w.completer.Start(workCtx) }, OnStop: w.completer.Stop},
		startstop.Func{
			Name: "lifecycle",
			// Stages once queued run under the work context, whoever
			// queued them: Stop waits for them, until its deadline, once
			// the loops and the consumers ended.
			OnStart: func(context.Context) error {
				w.lifecycle.Start(workCtx)
				return nil
			},
			OnStop: func(ctx context.Context) error {
				w.rewind.FinishStartupScan()
				return w.lifecycle.Wait(ctx)
			},
		},
		startstop.Func{Name: "parking", OnStart: func(context.Context) error { return w.parking.Start(runCtx) }, OnStop: waiting(w.parking)},
		startstop.Func{
			Name: "maintenance loops",
			OnStart: func(context.Context) error {
				w.run.loops.Go(func() { w.deadLetterRecovery(runCtx) })
				w.run.loops.Go(func() { w.rewind.StartupScan(runCtx) })
				w.run.loops.Go(func() { w.lifecycle.ReconcileLoop(runCtx) })
				w.run.loops.Go(func() { w.resubscribeLoop(runCtx) })
				w.run.loops.Go(func() { w.rebuilds.Run(runCtx) })
				w.run.loops.Go(func() { w.ensureIndexesLoop(runCtx) })
				return nil
			},
			OnStop: func(context.Context) error {
				w.run.loops.Wait()
				return nil
			},
		},
		startstop.Func{Name: "consumers", OnStart: func(context.Context) error { return w.consumers.Start(runCtx, workCtx) }, OnStop: waiting(w.consumers)},
	}
	if !w.opts.Claims.Disabled {
		list = append(list, startstop.Func{
			Name:    "claims",
			OnStart: func(context.Context) error { return w.claims.Start(runCtx) },
			OnStop: func(ctx context.Context) error {
				err := w.claims.Stop(context.WithoutCancel(ctx))
				w.heartbeat.Watch().Disarm() // a claim loop that ended is not stalled
				return err
			},
		})
	}
	// Without notifications the engine polls: the listener's Start does
	// not fail.
	list = append(list, startstop.Func{Name: "notifications", OnStart: func(context.Context) error { return w.listener.Start(runCtx) }, OnStop: waiting(w.listener)})
	return startstop.NewList(list...)
}

// deregister removes the instance from the backend, releasing its leases,
// within deregisterTimeout, whatever becomes of ctx.
func (w *Worker) deregister(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deregisterTimeout)
	defer cancel()
	if err := w.backend.Claimer.InstanceDeregister(dctx, &ports.InstanceDeregisterParams{InstanceID: w.opts.InstanceID}); err != nil {
		return fmt.Errorf("deregistering instance: %w", err)
	}
	return nil
}

// Rebuild replays one perspective from scratch for the given streams (every
// stream with events it handles when none is given) while the worker keeps
// serving everything else. Each stream is rebuilt under its pair's gate and
// rebuild lock; handlers do not fire (nothing is new). It needs a backend
// with a RewindStore. To have a running worker rebuild a perspective
// without calling it in-process (an operator's tool, say), store a request
// with ports.Admin.RebuildRequest instead (see
// Options.Rewind.RebuildPollInterval).
func (w *Worker) Rebuild(ctx context.Context, perspectiveName string, streams ...uuid.UUID) (int, error) {
	return w.rewind.Rebuild(ctx, perspectiveName, streams)
}

// StartupScanComplete returns a channel closed once the startup
// reconciliation of interrupted lifecycles and the rewind scan finished (in
// StartupScanBackground mode: once the scan started).
func (w *Worker) StartupScanComplete() <-chan struct{} { return w.rewind.StartupDone() }

// WaitLifecycle blocks until the lifecycle work started so far (the latest
// batch's PostAllPerspectives/PostLifecycle task and every detached
// receptor) finished, or ctx ends.
func (w *Worker) WaitLifecycle(ctx context.Context) error { return w.lifecycle.Wait(ctx) }

// WaitForStream blocks until every named perspective (every registered one
// when none is named) has applied the events of the stream up to version that
// it handles, so a caller can read its own writes. An event stored below a
// perspective's position (a late event) is waited for until its rewind
// applied it; without rewinds it is never applied (it goes to dead letters)
// and not waited for. It returns ctx.Err() if ctx ends first.
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
		progressed := w.completer.Progressed()
		ok, err := w.caughtUp(ctx, streamID, targets, perspectives)
		if err != nil || ok {
			return err
		}
		t := w.Clock.NewTimer(w.opts.Drain.PollingInterval)
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
	// An event stored below a perspective's position (a late event) flags
	// its cursor until a rewind applied it or it was given up on: the
	// model's version alone does not tell.
	cursors, err := w.backend.Cursors.CursorsGet(ctx, &ports.CursorsGetParams{StreamIDs: []uuid.UUID{streamID}})
	if err != nil {
		return false, fmt.Errorf("waiting for stream %s: %w", streamID, err)
	}
	late := map[string]int64{}
	for _, c := range cursors {
		// Without rewinds a late event is never applied (it is moved to
		// dead letters): the model is final as it is.
		if w.rewind.Enabled() && c.Status.Has(ports.CursorRewindRequired) {
			late[c.Perspective] = c.RewindTriggerVersion
		}
	}
	for _, p := range perspectives {
		target, ok := targets[p]
		if !ok {
			continue
		}
		if v, ok := late[p]; ok && v <= target {
			return false, nil
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
