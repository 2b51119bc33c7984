package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// Stage is a point in an event's lifecycle where receptors run.
type Stage int

// Lifecycle stages, in the order they fire for an event.
const (
	// PrePerspective fires once per event, before the first perspective
	// applies it.
	PrePerspective Stage = iota + 1
	// PostPerspective fires once per (event, perspective), after that
	// perspective's model including the event was saved.
	PostPerspective
	// PostAllPerspectives fires once per event, after every perspective
	// registered for its type applied it (in any batch, on any instance).
	PostAllPerspectives
	// PostLifecycle fires once per event, after PostAllPerspectives.
	PostLifecycle
)

// String returns the stage's name.
func (s Stage) String() string {
	switch s {
	case PrePerspective:
		return "PrePerspective"
	case PostPerspective:
		return "PostPerspective"
	case PostAllPerspectives:
		return "PostAllPerspectives"
	case PostLifecycle:
		return "PostLifecycle"
	}
	return fmt.Sprintf("Stage(%d)", int(s))
}

// Mode says how a receptor runs.
type Mode int

const (
	// Inline receptors are awaited, in registration order; an error (or a
	// panic, recovered) is logged and the next receptor still runs.
	Inline Mode = iota
	// Detached receptors run in the background; their errors and panics
	// are logged. Stop waits for them.
	Detached
)

// String returns the mode's name.
func (m Mode) String() string {
	if m == Detached {
		return "Detached"
	}
	return "Inline"
}

// StageInfo describes one receptor invocation.
type StageInfo struct {
	Stage Stage
	Mode  Mode
	// Event is the stored event (id, stream, version, metadata).
	Event ports.Event
	// Perspective is the perspective that applied the event, for
	// PostPerspective; empty otherwise.
	Perspective string
}

type receptor struct {
	stage  Stage
	mode   Mode
	goType reflect.Type
	call   func(ctx context.Context, event any, info StageInfo) error
}

// AddReceptor registers fn to run at stage, in mode, for events of type E
// (registered with RegisterEvent before the worker starts). Receptors run
// under the event's security context (see SecurityFromContext).
func AddReceptor[E any](r *Registry, stage Stage, mode Mode, fn func(ctx context.Context, event E, info StageInfo) error) error {
	if r == nil || fn == nil {
		return errors.New("adding receptor: nil registry or function")
	}
	if stage < PrePerspective || stage > PostLifecycle {
		return fmt.Errorf("adding receptor: unknown stage %d", int(stage))
	}
	if mode != Inline && mode != Detached {
		return fmt.Errorf("adding receptor: unknown mode %d", int(mode))
	}
	t := reflect.TypeFor[E]()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byGoType[t]; !ok {
		return fmt.Errorf("adding receptor for %s: %w (call RegisterEvent first)", t, ErrUnknownEventType)
	}
	r.receptors = append(r.receptors, receptor{stage: stage, mode: mode, goType: t, call: func(ctx context.Context, e any, info StageInfo) error {
		return fn(ctx, e.(E), info)
	}})
	r.receptorStages.Or(1 << stage)
	return nil
}

// receptorsFor returns the receptors of a stage for an event type name.
func (r *Registry) receptorsFor(stage Stage, typ string) []receptor {
	r.mu.RLock()
	defer r.mu.RUnlock()
	et, ok := r.byName[typ]
	if !ok {
		return nil
	}
	var out []receptor
	for _, rc := range r.receptors {
		if rc.stage == stage && rc.goType == et.goType {
			out = append(out, rc)
		}
	}
	return out
}

// hasReceptors reports whether any receptor is registered for any of the
// stages. It takes no lock: the drain path asks it for every pair.
func (r *Registry) hasReceptors(stages ...Stage) bool {
	added := r.receptorStages.Load()
	for _, s := range stages {
		if added&(1<<s) != 0 {
			return true
		}
	}
	return false
}

// lifecycle runs receptors and keeps the stage guards.
type lifecycle struct {
	w        *Worker
	detached sync.WaitGroup

	// memGuard is the in-process stage guard used when the backend has no
	// LifecycleStore.
	memMu    sync.Mutex
	memGuard map[uuid.UUID]ports.LifecycleStage

	taskMu   sync.Mutex
	lastTask chan struct{} // closed when the latest batch task finished
}

func newLifecycle(w *Worker) *lifecycle {
	done := make(chan struct{})
	close(done)
	return &lifecycle{w: w, memGuard: map[uuid.UUID]ports.LifecycleStage{}, lastTask: done}
}

// memGuardLimit bounds the in-process guard; the oldest half is dropped when
// it is reached (events that old are long complete).
const memGuardLimit = 200_000

// claim returns the events for which this caller may fire stage.
func (l *lifecycle) claim(ctx context.Context, events []ports.Event, stage ports.LifecycleStage) ([]ports.Event, error) {
	if len(events) == 0 {
		return nil, nil
	}
	if store := l.w.backend.Lifecycle; store != nil {
		ids := make([]uuid.UUID, len(events))
		for i, e := range events {
			ids[i] = e.ID
		}
		won, err := store.LifecycleClaim(ctx, &ports.LifecycleClaimParams{EventIDs: ids, Stage: stage, InstanceID: l.w.opts.InstanceID, Now: l.w.paramNow()})
		if err != nil {
			return nil, fmt.Errorf("claiming lifecycle stage: %w", err)
		}
		set := make(map[uuid.UUID]bool, len(won))
		for _, id := range won {
			set[id] = true
		}
		out := events[:0:0]
		for _, e := range events {
			if set[e.ID] {
				out = append(out, e)
			}
		}
		return out, nil
	}
	l.memMu.Lock()
	defer l.memMu.Unlock()
	if len(l.memGuard) >= memGuardLimit {
		n := 0
		for id := range l.memGuard {
			delete(l.memGuard, id)
			if n++; n >= memGuardLimit/2 {
				break
			}
		}
	}
	out := events[:0:0]
	for _, e := range events {
		if l.memGuard[e.ID]&stage == 0 {
			l.memGuard[e.ID] |= stage
			out = append(out, e)
		}
	}
	return out, nil
}

// fire runs the receptors of stage for each event: detached ones in the
// background, inline ones awaited in order. Each event gets its own security
// context. Errors, and panics turned into errors, are logged, never
// returned: a receptor cannot block perspectives.
func (l *lifecycle) fire(ctx context.Context, stage Stage, perspective string, events []ports.Event) {
	w := l.w
	for _, e := range events {
		receptors := w.reg.receptorsFor(stage, e.Type)
		if len(receptors) == 0 {
			continue
		}
		decoded, err := w.reg.Decode(e)
		if err != nil {
			w.log.ErrorContext(ctx, "decoding event for receptors", slog.String("stage", stage.String()), slog.Any("error", err))
			continue
		}
		for _, rc := range receptors {
			info := StageInfo{Stage: stage, Mode: rc.mode, Event: e, Perspective: perspective}
			if rc.mode == Detached {
				l.detached.Go(func() {
					if err := l.callReceptor(context.WithoutCancel(ctx), rc, e, decoded, info); err != nil {
						w.log.ErrorContext(ctx, "detached receptor failed", slog.String("stage", stage.String()), slog.String("event_id", e.ID.String()), slog.Any("error", err))
					}
				})
				continue
			}
			if err := l.callReceptor(ctx, rc, e, decoded, info); err != nil {
				w.log.ErrorContext(ctx, "inline receptor failed", slog.String("stage", stage.String()), slog.String("event_id", e.ID.String()), slog.Any("error", err))
			}
		}
	}
}

// callReceptor runs rc for e under e's security context, turning a panic
// into an error.
func (l *lifecycle) callReceptor(ctx context.Context, rc receptor, e ports.Event, decoded any, info StageInfo) (err error) {
	ctx, err = l.w.establishSecurity(ctx, e)
	if err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("receptor panicked: %v", r)
		}
	}()
	return rc.call(ctx, decoded, info)
}

// prePerspective fires PrePerspective for events about to be applied.
func (l *lifecycle) prePerspective(ctx context.Context, events []ports.Event) {
	if l.w.reg.hasReceptors(PrePerspective) {
		l.claimAndFire(ctx, PrePerspective, ports.StagePrePerspective, events)
	}
}

// claimAndFire fires stage for the events whose durable stage this caller
// claims and returns them. It reports false when the claim failed, which it
// logs.
func (l *lifecycle) claimAndFire(ctx context.Context, stage Stage, durable ports.LifecycleStage, events []ports.Event) ([]ports.Event, bool) {
	won, err := l.claim(ctx, events, durable)
	if err != nil {
		l.w.log.ErrorContext(ctx, stage.String()+" skipped", slog.Any("error", err))
		return nil, false
	}
	l.fire(ctx, stage, "", won)
	return won, true
}

// afterBatch starts the batch's PostAllPerspectives/PostLifecycle task,
// ordered after the previous batch's task.
func (l *lifecycle) afterBatch(ctx context.Context, events []ports.Event) {
	if len(events) == 0 || !l.w.reg.hasReceptors(PostAllPerspectives, PostLifecycle) {
		return
	}
	l.taskMu.Lock()
	prev := l.lastTask
	done := make(chan struct{})
	l.lastTask = done
	l.taskMu.Unlock()
	l.detached.Go(func() {
		defer close(done)
		select {
		case <-prev:
		case <-ctx.Done():
			return
		}
		l.completeEvents(ctx, events)
	})
}

// completeEvents fires the terminal stages for the events every expected
// perspective has applied; the others wait for a later batch (or instance).
func (l *lifecycle) completeEvents(ctx context.Context, events []ports.Event) {
	w := l.w
	byStream := map[uuid.UUID][]ports.Event{}
	var streams []uuid.UUID
	for _, e := range events {
		if _, ok := byStream[e.StreamID]; !ok {
			streams = append(streams, e.StreamID)
		}
		byStream[e.StreamID] = append(byStream[e.StreamID], e)
	}
	cursors, err := w.backend.Cursors.CursorsGet(ctx, &ports.CursorsGetParams{StreamIDs: streams})
	if err != nil {
		if ctx.Err() == nil {
			w.log.ErrorContext(ctx, "reading cursors for lifecycle; the startup reconciliation will catch up", slog.Any("error", err))
		}
		return
	}
	pos := map[pairKey]int64{}
	for _, c := range cursors {
		pos[pairKey{stream: c.StreamID, perspective: c.Perspective}] = c.LastVersion
	}
	subscribers := w.reg.subscribers()
	var ready []ports.Event
	for _, e := range events {
		all := true
		for _, p := range subscribers[e.Type] {
			if pos[pairKey{stream: e.StreamID, perspective: p}] < e.Version {
				all = false
				break
			}
		}
		if all {
			ready = append(ready, e)
		}
	}
	l.runTerminalStages(ctx, ready)
}

// runTerminalStages claims and fires PostAllPerspectives then PostLifecycle;
// the PostLifecycle claim is the durable completion marker.
func (l *lifecycle) runTerminalStages(ctx context.Context, events []ports.Event) {
	if _, ok := l.claimAndFire(ctx, PostAllPerspectives, ports.StagePostAllPerspectives, events); !ok {
		return
	}
	won, _ := l.claimAndFire(ctx, PostLifecycle, ports.StagePostLifecycle, events)
	if h := l.w.opts.Hooks.OnLifecycleCompleted; h != nil && len(won) > 0 {
		h(won)
	}
}

// Orphan reconciliation bounds: passes of up to orphanBatch
// events created within orphanLookback.
const (
	orphanPasses   = 20
	orphanBatch    = 100
	orphanLookback = 30 * time.Minute
)

// reconcile heals events whose perspectives all completed but whose
// PostLifecycle never fired (a crash in between): it runs their remaining
// stages. It returns how many events it completed.
func (l *lifecycle) reconcile(ctx context.Context) int {
	w := l.w
	store := w.backend.Lifecycle
	if store == nil || !w.reg.hasReceptors(PostAllPerspectives, PostLifecycle) {
		return 0
	}
	expected := w.reg.subscribers()
	healed := 0
	for range orphanPasses {
		orphans, err := store.LifecycleOrphans(ctx, &ports.LifecycleOrphansParams{Expected: expected, Since: w.now().Add(-orphanLookback), Limit: orphanBatch})
		if err != nil {
			if ctx.Err() == nil {
				w.log.ErrorContext(ctx, "finding orphaned lifecycles", slog.Any("error", err))
			}
			return healed
		}
		l.runTerminalStages(ctx, orphans)
		healed += len(orphans)
		if len(orphans) < orphanBatch {
			break
		}
	}
	if healed > 0 {
		w.log.InfoContext(ctx, "completed interrupted lifecycles", slog.Int("events", healed))
	}
	return healed
}

// wait blocks until the latest batch task and every detached receptor
// started so far finished, or ctx ends.
func (l *lifecycle) wait(ctx context.Context) error {
	l.taskMu.Lock()
	last := l.lastTask
	l.taskMu.Unlock()
	select {
	case <-last:
	case <-ctx.Done():
		return ctx.Err()
	}
	done := make(chan struct{})
	go func() {
		l.detached.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
