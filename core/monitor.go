package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/startstop"
)

// errApplyDeadline is the cause of the context of an apply that ran past
// Options.ApplyTimeout; errApplyAbandoned ends an apply the engine gave up
// waiting for.
var (
	errApplyDeadline  = errors.New("apply ran past its deadline")
	errApplyAbandoned = errors.New("apply abandoned: it ran past its deadline and ignored its cancelled context")
)

// applyMonitor enforces the deadline of every apply in flight, on the
// engine's clock: past Options.ApplyTimeout it cancels the apply's context,
// and past ApplyAbandonGrace more it abandons the apply. One goroutine
// serves every apply: a run registers once, and each apply only notes its
// start under the run's lock, so the cost of an apply is two uncontended
// locks and no timer.
//
// The monitor's timer targets the earliest deadline it knows. An apply that
// begins never has a deadline earlier than those of applies that began
// before it, so it wakes the monitor only when none is armed (armedAt).
type applyMonitor struct {
	*engine
	startstop.Base
	timeout time.Duration
	grace   time.Duration
	wake    chan struct{}
	// armedAt is the monitor timer's target in Unix nanoseconds on the
	// engine's clock, math.MaxInt64 while it sleeps with nothing to watch.
	armedAt atomic.Int64
	// stopping is set once the work context ended: every apply's context is
	// cancelled then, and one that ignores it is abandoned after the grace,
	// so that Stop is not held up by it.
	stopping atomic.Bool
	// abandons owns the goroutines that take over abandoned applies;
	// abandonedTotal counts the abandonments.
	abandons       sync.WaitGroup
	abandonedTotal atomic.Int64

	mu        sync.Mutex
	watches   map[*applyWatch]struct{}
	abandoned map[*applyWatch]AbandonedApply // abandoned and still running
}

func newApplyMonitor(e *engine) *applyMonitor {
	m := &applyMonitor{
		engine:    e,
		timeout:   e.opts.ApplyTimeout,
		grace:     e.opts.ApplyAbandonGrace,
		wake:      make(chan struct{}, 1),
		watches:   map[*applyWatch]struct{}{},
		abandoned: map[*applyWatch]AbandonedApply{},
	}
	m.armedAt.Store(math.MaxInt64)
	return m
}

// Start launches the monitor. It outlives the drains: when work is closed
// (the drains' work context ended: Stop's deadline passed) it still
// abandons the applies that ignore their cancellation, so that the drains,
// and Stop, end. It runs until Stop or until ctx ends; waitAbandons then
// waits for the abandonments it started.
func (m *applyMonitor) Start(ctx context.Context, work <-chan struct{}) {
	ctx, wg, ok := m.StartInit(ctx)
	if ok {
		wg.Go(func() { m.run(ctx, work, &m.abandons) })
	}
}

// waitAbandons waits for the goroutines taking over abandoned applies.
func (m *applyMonitor) waitAbandons() { m.abandons.Wait() }

// abandonFunc takes over an abandoned apply. late is false when the apply
// was abandoned because the worker stopped, not because of its deadline:
// then it costs its event nothing.
type abandonFunc func(info AbandonedApply, late bool)

// applyWatch follows the applies of one run (one pair in one drain), one at
// a time. cancel cancels the run's apply context; abandon is called, on a
// goroutine of its own, when an apply is abandoned.
type applyWatch struct {
	m           *applyMonitor
	cancel      context.CancelCauseFunc
	abandon     abandonFunc
	stream      uuid.UUID
	perspective string

	mu          sync.Mutex
	active      bool // an apply is running
	started     time.Time
	eventID     uuid.UUID // the running apply's event
	version     int64
	cancelled   bool // its context was cancelled: its deadline passed, or the worker is stopping
	cancelledAt time.Time
	late        bool // its deadline passed
	abandoned   bool
}

// watch registers a run whose applies run under a context cancelled by
// cancel. The caller must call done when the run ends.
func (m *applyMonitor) watch(k pairKey, cancel context.CancelCauseFunc, abandon abandonFunc) *applyWatch {
	aw := &applyWatch{m: m, cancel: cancel, abandon: abandon, stream: k.stream, perspective: k.perspective}
	m.mu.Lock()
	m.watches[aw] = struct{}{}
	m.mu.Unlock()
	return aw
}

// setCancel replaces the function cancelling the run's apply context (a
// run goes on with a fresh context after an apply that ran late).
func (aw *applyWatch) setCancel(cancel context.CancelCauseFunc) {
	aw.mu.Lock()
	aw.cancel = cancel
	aw.mu.Unlock()
}

// done deregisters the run. An abandoned apply stays listed until it returns.
func (aw *applyWatch) done() {
	aw.m.mu.Lock()
	delete(aw.m.watches, aw)
	aw.m.mu.Unlock()
}

// begin notes that an apply of the event started now, and returns now.
func (aw *applyWatch) begin(eventID uuid.UUID, version int64) time.Time {
	now := aw.m.Now()
	aw.mu.Lock()
	aw.active, aw.started, aw.eventID, aw.version = true, now, eventID, version
	aw.cancelled, aw.cancelledAt, aw.late = false, time.Time{}, false
	if aw.m.stopping.Load() {
		aw.cancelled, aw.cancelledAt = true, now
	}
	aw.mu.Unlock()
	if now.Add(aw.m.timeout).UnixNano() < aw.m.armedAt.Load() {
		base.Signal(aw.m.wake)
	}
	return now
}

// applyOutcome is what became of an apply by the time it returned.
type applyOutcome int

const (
	// applyInTime: it returned before its deadline; its result stands.
	applyInTime applyOutcome = iota
	// applyLate: its deadline passed (its context is cancelled): whatever
	// it returned, the event counts a failed attempt.
	applyLate
	// applyAbandoned: the engine gave up on it; the run must discard its
	// result and touch nothing more, the abandonment handles the pair.
	applyAbandoned
)

// end notes that the running apply returned and tells what became of it.
func (aw *applyWatch) end() applyOutcome {
	aw.mu.Lock()
	aw.active = false
	late, abandoned := aw.late, aw.abandoned
	aw.mu.Unlock()
	switch {
	case abandoned:
		aw.m.returned(aw)
		return applyAbandoned
	case late:
		return applyLate
	}
	return applyInTime
}

// returned logs an abandoned apply that finally returned and forgets it.
func (m *applyMonitor) returned(aw *applyWatch) {
	m.mu.Lock()
	info, ok := m.abandoned[aw]
	delete(m.abandoned, aw)
	m.mu.Unlock()
	if ok {
		m.Log.Warn("abandoned apply returned; its result is discarded",
			append(pairAttrs(info.StreamID, info.Perspective), slog.Int64("version", info.Version),
				slog.Duration("elapsed", m.Now().Sub(info.Started)))...)
	}
}

// list returns the abandoned applies still running, oldest first.
func (m *applyMonitor) list() []AbandonedApply {
	m.mu.Lock()
	out := make([]AbandonedApply, 0, len(m.abandoned))
	for _, a := range m.abandoned {
		out = append(out, a)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b AbandonedApply) int { return a.Started.Compare(b.Started) })
	return out
}

// applying reports whether any apply is running.
func (m *applyMonitor) applying() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for aw := range m.watches {
		aw.mu.Lock()
		active := aw.active && !aw.abandoned
		aw.mu.Unlock()
		if active {
			return true
		}
	}
	return false
}

// run cancels and abandons applies as their deadlines pass, until ctx is
// done. When work ends (the work context of the applies is done), every
// running apply counts as cancelled then. Abandonments run on goroutines of
// their own, owned by wg.
func (m *applyMonitor) run(ctx context.Context, work <-chan struct{}, wg *sync.WaitGroup) {
	var t base.LazyTimer
	defer t.Stop()
	for {
		next := m.check(ctx, wg)
		if next.IsZero() {
			m.armedAt.Store(math.MaxInt64)
		} else {
			m.armedAt.Store(next.UnixNano())
			t.Reset(m.Clock, max(next.Sub(m.Now()), 0))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-m.wake:
		case <-work:
			work = nil
			m.stopping.Store(true)
		}
	}
}

// check acts on every deadline that passed and returns the next one, zero
// when no apply runs.
func (m *applyMonitor) check(ctx context.Context, wg *sync.WaitGroup) time.Time {
	now := m.Now()
	var next time.Time
	earliest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for aw := range m.watches {
		aw.mu.Lock()
		if !aw.active || aw.abandoned {
			aw.mu.Unlock()
			continue
		}
		deadline := aw.started.Add(m.timeout)
		if !aw.cancelled && m.stopping.Load() {
			aw.cancelled, aw.cancelledAt = true, now // its context ended with the work's
		}
		if !aw.cancelled && !now.Before(deadline) {
			aw.cancelled, aw.cancelledAt, aw.late = true, deadline, true
			aw.cancel(fmt.Errorf("%w of %s", errApplyDeadline, m.timeout))
		}
		if !aw.cancelled {
			earliest(deadline)
			aw.mu.Unlock()
			continue
		}
		giveUp := aw.cancelledAt.Add(m.grace)
		if now.Before(giveUp) {
			earliest(giveUp)
			aw.mu.Unlock()
			continue
		}
		aw.abandoned = true
		late := aw.late
		info := AbandonedApply{StreamID: aw.stream, Perspective: aw.perspective, EventID: aw.eventID, Version: aw.version,
			Started: aw.started, Elapsed: now.Sub(aw.started)}
		aw.mu.Unlock()
		m.abandoned[aw] = info
		wg.Go(func() { aw.abandon(info, late) })
	}
	return next
}

// noteAbandoned logs, counts and announces an abandoned apply.
func (m *applyMonitor) noteAbandoned(ctx context.Context, info AbandonedApply) {
	m.abandonedTotal.Add(1)
	m.metrics.applyAbandoned(ctx, info.Perspective)
	m.Log.ErrorContext(ctx, "apply abandoned: it ran past its deadline and ignored its cancelled context; its pair is retried while it runs on",
		append(pairAttrs(info.StreamID, info.Perspective), slog.String("event_id", info.EventID.String()), slog.Int64("version", info.Version),
			slog.Duration("elapsed", info.Elapsed), slog.Duration("apply_timeout", m.opts.ApplyTimeout))...)
	if h := m.opts.Hooks.OnApplyAbandoned; h != nil {
		h(info)
	}
}

// AbandonedApplies returns the applies the engine abandoned (see
// Options.ApplyAbandonGrace) that are still running, oldest first.
func (w *Worker) AbandonedApplies() []AbandonedApply { return w.monitor.list() }

// AbandonedAppliesTotal returns how many applies this worker abandoned since
// it started.
func (w *Worker) AbandonedAppliesTotal() int64 { return w.monitor.abandonedTotal.Load() }
