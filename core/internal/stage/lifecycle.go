package stage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/complete"
	"github.com/vantage-go/vantage/core/internal/faultlog"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/core/internal/retry"
	"github.com/vantage-go/vantage/ports"
)

// A Lifecycle runs receptors and keeps the stage records.
//
// A durable stage runs in three steps: it is claimed in the backend (so that
// no other instance runs it meanwhile, and a claim of an instance that died
// is taken over), its receptors run, and it is recorded completed. Within
// the process, a stage of an event being run is not claimed again (the
// backend hands the caller its own claims back). Without a LifecycleStore
// the stages are guarded in memory only, at most once per process.
type Lifecycle struct {
	*base.Env
	cfg   Config
	tasks tasks // detached receptors and batch tasks

	// memGuard is the in-process stage guard used when the backend has no
	// LifecycleStore.
	memMu    sync.Mutex
	memGuard map[stageKey]struct{}

	// running holds the stages this process claimed and has not completed,
	// each with a channel closed once it is released.
	runMu   sync.Mutex
	running map[stageKey]chan struct{}

	// streams serializes the PrePerspective stages of each stream (keyed
	// by stream alone), which its perspectives ask for in parallel.
	streams *pair.Gates

	taskMu   sync.Mutex
	lastTask chan struct{} // closed when the latest batch task finished
	// work is the lifetime of the stages once queued (see taskContext):
	// the Worker's work context, which Stop ends only once it waited for
	// lifecycle work, or when its deadline passed. Nil until start. It
	// carries no values: a stage keeps those of its caller's context.
	work context.Context //nolint:containedctx // a lifetime, set by start, read by every stage queued after
}

// stageKey names one durable stage of one event (of one perspective, for
// PostPerspective).
type stageKey struct {
	event       uuid.UUID
	stage       ports.LifecycleStage
	perspective string
}

// Config is what a Lifecycle reads.
type Config struct {
	// Lifecycle keeps the stage records; nil guards stages in memory, at
	// most once per process.
	Lifecycle ports.LifecycleStore
	// Cursors tells, without Lifecycle, which perspectives applied an
	// event.
	Cursors        ports.CursorStore
	InstanceID     uuid.UUID
	StaleThreshold time.Duration
	Registry       Registry
	// Scope returns the context receptors of e run under (its security
	// context).
	Scope func(ctx context.Context, e ports.Event) (context.Context, error)
	// Completer is waited for before the terminal stages: an event is
	// applied once its work rows are gone, not merely saved.
	Completer *complete.Completer
	Telemetry Telemetry
	// OnCompleted is called with the events whose PostLifecycle this
	// instance ran; nil for none.
	OnCompleted func([]ports.Event)
}

// New returns a Lifecycle.
func New(env *base.Env, cfg Config) *Lifecycle {
	done := make(chan struct{})
	close(done)
	return &Lifecycle{Env: env, cfg: cfg, memGuard: map[stageKey]struct{}{}, running: map[stageKey]chan struct{}{}, streams: pair.NewGates(), lastTask: done}
}

// Start sets work, the context whose end, and only that, ends the stages
// queued from then on, whatever their callers' contexts (see
// taskContext). Stages queued before start run under their caller's
// context.
func (l *Lifecycle) Start(work context.Context) {
	l.taskMu.Lock()
	defer l.taskMu.Unlock()
	l.work = work
}

// taskContext returns the context a stage queued under ctx runs under:
// ctx's values (its trace, say) without its cancellation, ended with the
// lifecycle's work context instead. A stage once queued (its events saved,
// or their completions reported) must not be dropped because its caller's
// context ended: Stop ends the loops' context, the startup scan's among
// them, before it waits for lifecycle work, and nothing else would run
// the stage in this process. The returned cancel releases the context.
func (l *Lifecycle) taskContext(ctx context.Context) (context.Context, context.CancelFunc) {
	l.taskMu.Lock()
	work := l.work
	l.taskMu.Unlock()
	if work == nil {
		return context.WithCancel(ctx)
	}
	tctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(work, func() { cancel(context.Cause(work)) })
	return tctx, func() {
		stop()
		cancel(nil)
	}
}

// memGuardLimit bounds the in-process guard; the oldest half is dropped when
// it is reached (events that old are long complete).
const memGuardLimit = 200_000

// durableStage maps a stage to its durable record.
func durableStage(s Stage) ports.LifecycleStage {
	switch s {
	case PrePerspective:
		return ports.StagePrePerspective
	case PostPerspective:
		return ports.StagePostPerspective
	case PostAllPerspectives:
		return ports.StagePostAllPerspectives
	}
	return ports.StagePostLifecycle
}

// claim returns the events for which this caller runs stage now, and the
// keys to pass to complete. perspective is set for PostPerspective only.
func (l *Lifecycle) claim(ctx context.Context, events []ports.Event, stage Stage, perspective string) ([]ports.Event, []stageKey, error) {
	if len(events) == 0 {
		return nil, nil, nil
	}
	durable := durableStage(stage)
	store := l.cfg.Lifecycle
	if store == nil {
		return l.claimInMemory(events, durable, perspective), nil, nil
	}
	// Leave out the stages this process runs already: the backend would
	// hand its own claims back.
	l.runMu.Lock()
	var (
		keys []stageKey
		ids  []uuid.UUID
		byID = make(map[uuid.UUID]ports.Event, len(events))
	)
	for _, e := range events {
		k := stageKey{event: e.ID, stage: durable, perspective: perspective}
		if _, busy := l.running[k]; busy {
			continue
		}
		if _, dup := byID[e.ID]; dup {
			continue
		}
		l.running[k] = make(chan struct{})
		keys = append(keys, k)
		ids = append(ids, e.ID)
		byID[e.ID] = e
	}
	l.runMu.Unlock()
	if len(ids) == 0 {
		return nil, nil, nil
	}
	won, err := store.LifecycleClaim(ctx, &ports.LifecycleClaimParams{
		EventIDs: ids, Stage: durable, Perspective: perspective, InstanceID: l.cfg.InstanceID,
		StaleThreshold: l.cfg.StaleThreshold, Now: l.ParamNow(),
	})
	if err != nil {
		l.release(keys)
		return nil, nil, fmt.Errorf("claiming %s: %w", stageName(stage, perspective), err)
	}
	wonSet := make(map[uuid.UUID]bool, len(won))
	for _, id := range won {
		wonSet[id] = true
	}
	out := events[:0:0]
	var claimed, lost []stageKey
	for _, k := range keys {
		if wonSet[k.event] {
			out = append(out, byID[k.event])
			claimed = append(claimed, k)
		} else {
			lost = append(lost, k)
		}
	}
	l.release(lost)
	return out, claimed, nil
}

func (l *Lifecycle) claimInMemory(events []ports.Event, durable ports.LifecycleStage, perspective string) []ports.Event {
	l.memMu.Lock()
	defer l.memMu.Unlock()
	if len(l.memGuard) >= memGuardLimit {
		n := 0
		for k := range l.memGuard {
			delete(l.memGuard, k)
			if n++; n >= memGuardLimit/2 {
				break
			}
		}
	}
	out := events[:0:0]
	for _, e := range events {
		k := stageKey{event: e.ID, stage: durable, perspective: perspective}
		if _, done := l.memGuard[k]; !done {
			l.memGuard[k] = struct{}{}
			out = append(out, e)
		}
	}
	return out
}

// complete records the claimed stages done. A transient failure is
// retried with the claim's backoff until the record lands or the
// lifecycle's work ends (see taskContext), whatever becomes of ctx: the
// stage ran, and a claim left open would be taken up and the stage run
// again (or, for a terminal stage, PostLifecycle would wait for the
// reconciliation). Any other failure is logged: the stages stay claimed
// and run again once the claim is taken over (at least once).
func (l *Lifecycle) complete(ctx context.Context, keys []stageKey) {
	if len(keys) == 0 {
		return
	}
	defer l.release(keys)
	k0 := keys[0]
	ids := make([]uuid.UUID, len(keys))
	for i, k := range keys {
		ids[i] = k.event
	}
	tctx, cancel := l.taskContext(ctx)
	defer cancel()
	b := retry.Backoff{Initial: stageClaimBackoff, Max: stageClaimBackoff << stageClaimRetries, Multiplier: 2}
	for try := 0; ; try++ {
		err := l.cfg.Lifecycle.LifecycleComplete(tctx, &ports.LifecycleCompleteParams{
			EventIDs: ids, Stage: k0.stage, Perspective: k0.perspective, InstanceID: l.cfg.InstanceID, Now: l.ParamNow(),
		})
		if err == nil {
			l.Faults.OK(ctx, "recording lifecycle stages")
			return
		}
		if tctx.Err() != nil {
			return
		}
		l.Faults.Fail(ctx, "recording lifecycle stages", err, slog.Int("events", len(ids)))
		if !errors.Is(err, ports.ErrTransient) {
			return
		}
		t := l.Clock.NewTimer(b.Delay(try))
		select {
		case <-tctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

func (l *Lifecycle) release(keys []stageKey) {
	if len(keys) == 0 {
		return
	}
	l.runMu.Lock()
	for _, k := range keys {
		if done, ok := l.running[k]; ok {
			close(done)
			delete(l.running, k)
		}
	}
	l.runMu.Unlock()
}

// claimFailed logs a failed claim of stage, once in a while when it keeps
// failing.
func (l *Lifecycle) claimFailed(ctx context.Context, stage Stage, err error) {
	if ctx.Err() == nil {
		l.Faults.Fail(ctx, "claiming lifecycle stages", err, slog.String("stage", stage.String()))
	}
}

func stageName(stage Stage, perspective string) string {
	if perspective != "" {
		return stage.String() + " of " + perspective
	}
	return stage.String()
}

// run claims stage for events, runs its receptors and records it done. It
// returns the events it ran the stage for, and the claim's error, which the
// caller handles.
func (l *Lifecycle) run(ctx context.Context, stage Stage, perspective string, events []ports.Event) ([]ports.Event, error) {
	ctx, end := l.cfg.Telemetry.StartStage(ctx, stage, perspective, events)
	won, keys, err := l.claim(ctx, events, stage, perspective)
	l.cfg.Telemetry.StageRan(ctx, stage, len(won), err)
	if err != nil {
		end(0, err)
		return nil, err
	}
	l.Faults.OK(ctx, "claiming lifecycle stages")
	l.fire(ctx, stage, perspective, won)
	l.complete(ctx, keys)
	end(len(won), nil)
	return won, nil
}

// The backoff of a stage's claim or record that failed with a transient
// error: from stageClaimBackoff, doubling up to stageClaimBackoff <<
// stageClaimRetries.
const (
	stageClaimRetries = 5
	stageClaimBackoff = 100 * time.Millisecond
)

// retried runs stage for events (runAwaited when await is set; run
// otherwise, which leaves the events whose stage another claim holds to
// it), retrying a claim that failed with ports.ErrTransient with a
// doubling backoff on the worker's clock until it goes through: the first
// try under ctx, the retries under retries (ctx itself, or a context that
// ends sooner). It returns nil once the stage ran or was given up on (any
// other error, logged), and the cause of the end of the context the stage
// last waited under otherwise.
func (l *Lifecycle) retried(ctx, retries context.Context, stage Stage, perspective string, events []ports.Event, await bool) error {
	b := retry.Backoff{Initial: stageClaimBackoff, Max: stageClaimBackoff << stageClaimRetries, Multiplier: 2}
	for try := 0; ; try++ {
		var err error
		if await {
			err = l.runAwaited(ctx, stage, perspective, events)
		} else {
			_, err = l.run(ctx, stage, perspective, events)
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		l.claimFailed(ctx, stage, err)
		if !errors.Is(err, ports.ErrTransient) {
			// Once per stage and faultlog.SummaryEvery.
			name := stageName(stage, perspective)
			l.Faults.Recur(ctx, faultlog.Recurrence{
				Key: "giving up on " + name, Every: faultlog.SummaryEvery, Level: slog.LevelError, CountKey: "events", Op: "claiming lifecycle stages",
				Msg: "giving up on a lifecycle stage; its receptors do not run for these events",
			}, len(events), slog.String("stage", name), slog.Any("error", err))
			return nil
		}
		t := l.Clock.NewTimer(b.Delay(try))
		select {
		case <-retries.Done():
			t.Stop()
			return context.Cause(retries)
		case <-t.C():
		}
		ctx = retries
	}
}

// fire runs the receptors of stage for each event: detached ones started
// first, inline ones awaited in order, then the immediately detached ones
// started. Each event runs under its own security context. Errors, and
// panics turned into errors, are logged, never returned: a receptor cannot
// block perspectives.
func (l *Lifecycle) fire(ctx context.Context, stage Stage, perspective string, events []ports.Event) {
	for _, e := range events {
		receptors := l.cfg.Registry.Receptors(stage, e.Type)
		if len(receptors) == 0 {
			continue
		}
		decoded, err := l.cfg.Registry.Decode(e)
		if err != nil {
			l.Log.ErrorContext(ctx, "decoding event for receptors", slog.String("stage", stage.String()), slog.Any("error", err))
			continue
		}
		rctx, err := l.cfg.Scope(ctx, e)
		if err != nil {
			l.Log.ErrorContext(ctx, "establishing the security context of receptors", slog.String("stage", stage.String()),
				slog.String("event_id", e.ID.String()), slog.Any("error", err))
			continue
		}
		for _, mode := range []Mode{Detached, Inline, ImmediateDetached} {
			for _, rc := range receptors {
				if rc.Mode != mode {
					continue
				}
				info := Info{Stage: stage, Mode: rc.Mode, Event: e, Perspective: perspective, Receptor: rc.Index}
				if mode == Inline {
					if err := l.callReceptor(rctx, rc, decoded, info); err != nil {
						l.cfg.Telemetry.ReceptorFailed(ctx, stage, rc.Index, true, err)
						l.Log.ErrorContext(ctx, "inline receptor failed", slog.String("stage", stage.String()), slog.String("event_id", e.ID.String()), slog.Any("error", err))
					}
					continue
				}
				dctx := context.WithoutCancel(rctx)
				l.tasks.Go(func() {
					if err := l.callReceptor(dctx, rc, decoded, info); err != nil {
						l.cfg.Telemetry.ReceptorFailed(dctx, stage, rc.Index, false, err)
						l.Log.ErrorContext(dctx, "detached receptor failed", slog.String("stage", stage.String()), slog.String("mode", mode.String()),
							slog.String("event_id", e.ID.String()), slog.Any("error", err))
					}
				})
			}
		}
	}
}

// callReceptor runs rc, turning a panic into an error.
func (l *Lifecycle) callReceptor(ctx context.Context, rc Receptor, decoded any, info Info) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("receptor panicked: %v", r)
		}
	}()
	return rc.Call(ctx, decoded, info)
}

// PrePerspective runs PrePerspective for events of one stream about to be
// applied. The perspectives of a stream, drained in parallel, each ask for
// the stage of the events they apply: one runs it while the others wait,
// then finds it done, so that it runs once per event and before any
// perspective applies the event. A stage another instance claimed is
// waited for in the same way (see runAwaited). A failed claim is returned: the caller
// applies nothing and retries the pair later, as for any backend error, so
// the stage still runs first (another perspective may run it meanwhile).
func (l *Lifecycle) PrePerspective(ctx context.Context, events []ports.Event) error {
	if !l.cfg.Registry.HasReceptors(PrePerspective) || len(events) == 0 {
		return nil
	}
	release, err := l.streams.Acquire(ctx, pair.Key{Stream: events[0].StreamID}, l.Signals.OnPrePerspectiveWait)
	if err != nil {
		return err
	}
	defer release()
	err = l.runAwaited(ctx, PrePerspective, "", events)
	if err != nil && l.cfg.Lifecycle != nil {
		// The claim may have been recorded although the call failed (its
		// acknowledgement lost, or ctx ended as it ran). Another instance
		// that drains the stream next waits for that claim while this
		// instance is live, and this one may never drain the stream again:
		// the claim is settled in the background, where the stage runs if
		// it is this instance's (the drain's own retry then finds it done).
		tctx, cancel := l.taskContext(ctx)
		l.tasks.Go(func() {
			defer cancel()
			_ = l.retried(tctx, tctx, PrePerspective, "", events, false)
		})
	}
	return err
}

// runAwaited is run, which then waits for the events whose stage another
// claim holds (another instance that drained the stream before, or one
// that crashed running it and is not stale yet; another run of this
// process) until the stage is recorded completed, or until the claim is
// taken over (its instance stale) and the stage runs here, or ctx ends
// (its cause is returned). So the stage has run, here or elsewhere, when
// it returns nil. perspective is set for PostPerspective only.
func (l *Lifecycle) runAwaited(ctx context.Context, stage Stage, perspective string, events []ports.Event) error {
	store := l.cfg.Lifecycle
	b := retry.Backoff{Initial: stageClaimBackoff, Max: stageClaimBackoff << stageClaimRetries, Multiplier: 2}
	durable := durableStage(stage)
	pending := events
	for try := 0; ; try++ {
		// A run of this process is waited for until it ends: the claim
		// would pass over its events.
		if err := l.awaitRuns(ctx, durable, perspective, pending); err != nil {
			return err
		}
		won, err := l.run(ctx, stage, perspective, pending)
		if err != nil || store == nil || len(won) == len(pending) {
			return err
		}
		ran := make(map[uuid.UUID]bool, len(won))
		for _, e := range won {
			ran[e.ID] = true
		}
		ids := make([]uuid.UUID, 0, len(pending)-len(won))
		for _, e := range pending {
			if !ran[e.ID] {
				ids = append(ids, e.ID)
			}
		}
		done, err := store.LifecycleStages(ctx, &ports.LifecycleStagesParams{EventIDs: ids, Perspective: perspective})
		if err != nil {
			return fmt.Errorf("reading lifecycle stages: %w", err)
		}
		held := pending[:0:0]
		for _, e := range pending {
			if !ran[e.ID] && done[e.ID]&durable == 0 {
				held = append(held, e)
				ran[e.ID] = true // once, when listed twice
			}
		}
		if len(held) == 0 {
			return nil
		}
		pending = held
		if l.runsAny(durable, perspective, pending) {
			try--
			continue
		}
		t := l.Clock.NewTimer(b.Delay(try))
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C():
		}
	}
}

// awaitRuns waits until no run of this process holds the stage of events,
// or ctx ends (its cause is returned).
func (l *Lifecycle) awaitRuns(ctx context.Context, durable ports.LifecycleStage, perspective string, events []ports.Event) error {
	for {
		var busy chan struct{}
		l.runMu.Lock()
		for _, e := range events {
			if done, ok := l.running[stageKey{event: e.ID, stage: durable, perspective: perspective}]; ok {
				busy = done
				break
			}
		}
		l.runMu.Unlock()
		if busy == nil {
			return nil
		}
		select {
		case <-busy:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// runsAny reports whether a run of this process holds the stage of any of
// events.
func (l *Lifecycle) runsAny(durable ports.LifecycleStage, perspective string, events []ports.Event) bool {
	l.runMu.Lock()
	defer l.runMu.Unlock()
	for _, e := range events {
		if _, ok := l.running[stageKey{event: e.ID, stage: durable, perspective: perspective}]; ok {
			return true
		}
	}
	return false
}

// FirstApplies returns the events a replay applies for the first time
// anywhere, for their PrePerspective stage: fresh (its pending rows), and
// those of replayed that not every perspective applied yet. A replay goes
// up to its pair's position, so it also applies events below it that no
// drain did: a late event whose row it did not fetch (stored since, or
// leased elsewhere), an event its perspective passed over while retired
// that the others have not applied yet. The claim passes over those whose
// stage completed (another perspective applied them); the events every
// perspective applied are left out, so that a rebuild never fires the
// stage for history (events applied before a receptor was added).
func (l *Lifecycle) FirstApplies(ctx context.Context, replayed, fresh []ports.Event) ([]ports.Event, error) {
	if !l.cfg.Registry.HasReceptors(PrePerspective) || l.cfg.Lifecycle == nil || len(replayed) == len(fresh) {
		return fresh, nil
	}
	known := make(map[uuid.UUID]bool, len(fresh))
	for _, e := range fresh {
		known[e.ID] = true
	}
	var rest []ports.Event
	for _, e := range replayed {
		if !known[e.ID] {
			rest = append(rest, e)
		}
	}
	if len(rest) == 0 {
		return fresh, nil
	}
	ready, err := l.ready(ctx, rest)
	if err != nil {
		return nil, fmt.Errorf("checking which replayed events every perspective applied: %w", err)
	}
	applied := make(map[uuid.UUID]bool, len(ready))
	for _, e := range ready {
		applied[e.ID] = true
	}
	out := slices.Clone(fresh)
	for _, e := range rest {
		if !applied[e.ID] {
			out = append(out, e)
		}
	}
	// In stream order, as the stage fires for a drain's batch.
	slices.SortFunc(out, func(a, b ports.Event) int { return cmp.Compare(a.Version, b.Version) })
	return out, nil
}

// PostPerspective runs PostPerspective for events a perspective saved, or
// found saved (a re-delivery: the stage a crash interrupted runs again),
// before their rows are reported. It returns nil when the report may go:
// the stage ran, here or on another instance, or was given up on (an
// error no retry mends, logged). The stage is recorded done before the
// rows are: a report that landed first would complete them, and should
// the instance die before the stage ran, no row would come back to run
// it. So a claim that fails (an outage) holds the report back and is
// retried until it goes through, however long it takes: the report could
// not land either. The first try runs whatever becomes of ctx, until the
// lifecycle's work ends (see taskContext), so that a drain that stops
// still reports what it saved; the retries end with ctx too, and then its
// cause is returned: the caller drops the report, the rows stay leased
// and come back, and the drain that leases them next runs the stage.
func (l *Lifecycle) PostPerspective(ctx context.Context, perspective string, events []ports.Event) error {
	if !l.cfg.Registry.HasReceptors(PostPerspective) || len(events) == 0 {
		return nil
	}
	tctx, cancel := l.taskContext(ctx)
	defer cancel()
	retries, cancelRetries := context.WithCancelCause(tctx)
	defer cancelRetries(nil)
	stop := context.AfterFunc(ctx, func() { cancelRetries(context.Cause(ctx)) })
	defer stop()
	return l.retried(tctx, retries, PostPerspective, perspective, events, true)
}

// AfterBatch starts the batch's PostAllPerspectives/PostLifecycle task,
// ordered after the previous batch's task, and calls then when the task is
// done (at once when there is none). The task starts once the completions
// reported so far are acknowledged: an event is applied for the terminal
// stages once its work rows are gone, not merely saved. It runs until it
// is done or the lifecycle's work ends, whatever becomes of ctx (see
// taskContext), so Stop's wait for lifecycle work waits for it.
func (l *Lifecycle) AfterBatch(ctx context.Context, events []ports.Event, then func()) {
	if len(events) == 0 || !l.cfg.Registry.HasReceptors(PostAllPerspectives, PostLifecycle) {
		if then != nil {
			then()
		}
		return
	}
	tctx, cancel := l.taskContext(ctx)
	l.cfg.Completer.FlushPending(tctx)
	settled := make(chan struct{})
	l.cfg.Completer.AfterSettled(func() { close(settled) })
	l.taskMu.Lock()
	prev := l.lastTask
	done := make(chan struct{})
	l.lastTask = done
	l.taskMu.Unlock()
	l.tasks.Go(func() {
		defer func() {
			cancel()
			close(done)
			if then != nil {
				then()
			}
		}()
		for _, c := range []<-chan struct{}{prev, settled} {
			select {
			case <-c:
			case <-tctx.Done():
				return
			}
		}
		l.completeEvents(tctx, events)
	})
}

// completeEvents runs the terminal stages for the events every expected
// perspective has applied; the others wait for a later batch (or instance).
func (l *Lifecycle) completeEvents(ctx context.Context, events []ports.Event) {
	ready, err := l.ready(ctx, events)
	if err != nil {
		if ctx.Err() == nil {
			l.Faults.Fail(ctx, "checking which events every perspective applied", err)
		}
		return
	}
	l.Faults.OK(ctx, "checking which events every perspective applied")
	l.runTerminalStages(ctx, ready)
}

// ready returns the events every perspective registered for their type has
// applied: from the LifecycleStore, which sees pending rows (a late event
// below a cursor is not applied before its rewind), else from the cursors'
// positions only.
func (l *Lifecycle) ready(ctx context.Context, events []ports.Event) ([]ports.Event, error) {
	subscribers := l.cfg.Registry.Subscribers()
	if store := l.cfg.Lifecycle; store != nil {
		ids := make([]uuid.UUID, len(events))
		byID := make(map[uuid.UUID]ports.Event, len(events))
		for i, e := range events {
			ids[i] = e.ID
			byID[e.ID] = e
		}
		got, err := store.LifecycleReady(ctx, &ports.LifecycleReadyParams{EventIDs: ids, Expected: subscribers})
		if err != nil {
			return nil, err
		}
		out := make([]ports.Event, 0, len(got))
		for _, id := range got {
			if e, ok := byID[id]; ok {
				out = append(out, e)
			}
		}
		return out, nil
	}
	var streams []uuid.UUID
	seen := map[uuid.UUID]bool{}
	for _, e := range events {
		if !seen[e.StreamID] {
			seen[e.StreamID] = true
			streams = append(streams, e.StreamID)
		}
	}
	cursors, err := l.cfg.Cursors.CursorsGet(ctx, &ports.CursorsGetParams{StreamIDs: streams})
	if err != nil {
		return nil, err
	}
	pos := map[pair.Key]int64{}
	for _, c := range cursors {
		pos[pair.Key{Stream: c.StreamID, Perspective: c.Perspective}] = c.LastVersion
	}
	var out []ports.Event
	for _, e := range events {
		all := true
		for _, p := range subscribers[e.Type] {
			if pos[pair.Key{Stream: e.StreamID, Perspective: p}] < e.Version {
				all = false
				break
			}
		}
		if all {
			out = append(out, e)
		}
	}
	return out, nil
}

// runTerminalStages runs PostAllPerspectives, then PostLifecycle for the
// events whose PostAllPerspectives is done (here or elsewhere); a completed
// PostLifecycle is the event's durable completion marker.
func (l *Lifecycle) runTerminalStages(ctx context.Context, events []ports.Event) {
	if len(events) == 0 {
		return
	}
	// A failed claim leaves the events to the reconciliation, which finds
	// those whose PostLifecycle is not done.
	if _, err := l.run(ctx, PostAllPerspectives, "", events); err != nil {
		l.claimFailed(ctx, PostAllPerspectives, err)
		return
	}
	next := events
	if store := l.cfg.Lifecycle; store != nil {
		ids := make([]uuid.UUID, len(events))
		for i, e := range events {
			ids[i] = e.ID
		}
		done, err := store.LifecycleStages(ctx, &ports.LifecycleStagesParams{EventIDs: ids})
		if err != nil {
			if ctx.Err() == nil {
				l.Faults.Fail(ctx, "reading lifecycle stages", err)
			}
			return
		}
		l.Faults.OK(ctx, "reading lifecycle stages")
		next = next[:0:0]
		for _, e := range events {
			if done[e.ID]&ports.StagePostAllPerspectives != 0 {
				next = append(next, e)
			}
		}
	}
	won, err := l.run(ctx, PostLifecycle, "", next)
	if err != nil {
		l.claimFailed(ctx, PostLifecycle, err)
		return
	}
	if h := l.cfg.OnCompleted; h != nil && len(won) > 0 {
		h(won)
	}
}

// Orphan reconciliation bounds: passes of up to orphanBatch events created
// within orphanLookback, at start-up and every reconcileEvery.
const (
	orphanPasses   = 20
	orphanBatch    = 100
	orphanLookback = 30 * time.Minute
	reconcileEvery = time.Minute
)

// Reconcile heals events whose perspectives all applied them but whose
// PostLifecycle never completed (a crash in between, or a claim of an
// instance that died): it runs their remaining stages. It returns how many
// events it took up.
func (l *Lifecycle) Reconcile(ctx context.Context) int {
	store := l.cfg.Lifecycle
	if store == nil || !l.cfg.Registry.HasReceptors(PostAllPerspectives, PostLifecycle) {
		return 0
	}
	// Tracked as lifecycle work, so that WaitLifecycle waits for the
	// stages it runs.
	defer l.tasks.track()()
	expected := l.cfg.Registry.Subscribers()
	healed := 0
	for range orphanPasses {
		orphans, err := store.LifecycleOrphans(ctx, &ports.LifecycleOrphansParams{Expected: expected, Since: l.Now().Add(-orphanLookback), Limit: orphanBatch})
		if err != nil {
			if ctx.Err() == nil {
				l.Faults.Fail(ctx, "finding interrupted lifecycles", err)
			}
			return healed
		}
		l.Faults.OK(ctx, "finding interrupted lifecycles")
		l.runTerminalStages(ctx, orphans)
		healed += len(orphans)
		if len(orphans) < orphanBatch {
			break
		}
	}
	if healed > 0 {
		l.Log.InfoContext(ctx, "took up interrupted lifecycles", slog.Int("events", healed))
	}
	return healed
}

// ReconcileLoop reconciles every reconcileEvery, so that a stage claimed by
// an instance that died is taken up even when no instance restarts.
func (l *Lifecycle) ReconcileLoop(ctx context.Context) {
	if l.cfg.Lifecycle == nil || !l.cfg.Registry.HasReceptors(PostAllPerspectives, PostLifecycle) {
		return
	}
	base.Every(ctx, l.Clock, reconcileEvery, func() { l.Reconcile(ctx) })
}

// Wait blocks until the lifecycle work started before the call finished,
// and the work that work started meanwhile, or ctx ends.
func (l *Lifecycle) Wait(ctx context.Context) error { return l.tasks.wait(ctx) }
