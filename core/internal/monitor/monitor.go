// Package monitor enforces the deadline of every apply in flight: past its
// timeout it cancels the apply's context, and past a grace more it
// abandons the apply, whose pair is then handed back while it runs on.
package monitor

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

// ErrDeadline is the cause of the context of an apply that ran past its
// timeout; ErrAbandoned ends an apply the engine gave up waiting for.
var (
	ErrDeadline  = errors.New("apply ran past its deadline")
	ErrAbandoned = errors.New("apply abandoned: it ran past its deadline and ignored its cancelled context")
)

// Config is what a Monitor reads.
type Config struct {
	// Timeout is the deadline of one apply; Grace how long an apply may
	// ignore its cancelled context before it is abandoned.
	Timeout time.Duration
	Grace   time.Duration
	// OnAbandoned, when set, sees each abandonment that NoteAbandoned
	// records (to log, count and announce it).
	OnAbandoned func(ctx context.Context, info Abandoned)
}

// Abandoned describes an apply the engine abandoned.
type Abandoned struct {
	StreamID    uuid.UUID
	Perspective string
	EventID     uuid.UUID
	Version     int64
	// Started is when the apply began, on the engine's clock.
	Started time.Time
	// Elapsed is how long it had run when it was abandoned.
	Elapsed time.Duration
}

// Monitor enforces the deadline of every apply in flight, on the engine's
// clock: past Config.Timeout it cancels the apply's context, and past
// Config.Grace more it abandons the apply. One goroutine
// serves every apply: a run registers once, and each apply only notes its
// start under the run's lock, so the cost of an apply is two uncontended
// locks and no timer.
//
// The monitor's timer targets the earliest deadline it knows. An apply that
// begins never has a deadline earlier than those of applies that began
// before it, so it wakes the monitor only when none is armed (armedAt).
type Monitor struct {
	*base.Env
	startstop.Base
	cfg     Config
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
	watches   map[*Watch]struct{}
	abandoned map[*Watch]Abandoned // abandoned and still running
}

// New returns a Monitor of env configured by cfg.
func New(env *base.Env, cfg Config) *Monitor {
	m := &Monitor{
		Env:       env,
		cfg:       cfg,
		timeout:   cfg.Timeout,
		grace:     cfg.Grace,
		wake:      make(chan struct{}, 1),
		watches:   map[*Watch]struct{}{},
		abandoned: map[*Watch]Abandoned{},
	}
	m.armedAt.Store(math.MaxInt64)
	return m
}

// Start launches the monitor. It outlives the drains: when work is closed
// (the drains' work context ended: Stop's deadline passed) it still
// abandons the applies that ignore their cancellation, so that the drains,
// and Stop, end. It runs until Stop or until ctx ends; WaitAbandons then
// waits for the abandonments it started.
func (m *Monitor) Start(ctx context.Context, work <-chan struct{}) {
	ctx, wg, ok := m.StartInit(ctx)
	if ok {
		wg.Go(func() { m.run(ctx, work, &m.abandons) })
	}
}

// WaitAbandons waits for the goroutines taking over abandoned applies.
func (m *Monitor) WaitAbandons() { m.abandons.Wait() }

// AbandonFunc takes over an abandoned apply. late is false when the apply
// was abandoned because the worker stopped, not because of its deadline:
// then it costs its event nothing.
type AbandonFunc func(info Abandoned, late bool)

// Watch follows the applies of one run (one pair in one drain), one at a
// time. cancel cancels the run's apply context; abandon is called, on a
// goroutine of its own, when an apply is abandoned.
type Watch struct {
	m           *Monitor
	cancel      context.CancelCauseFunc
	abandon     AbandonFunc
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

// Watch registers a run of the pair (stream, perspective) whose applies
// run under a context cancelled by cancel. The caller must call Done when
// the run ends.
func (m *Monitor) Watch(stream uuid.UUID, perspective string, cancel context.CancelCauseFunc, abandon AbandonFunc) *Watch {
	aw := &Watch{m: m, cancel: cancel, abandon: abandon, stream: stream, perspective: perspective}
	m.mu.Lock()
	m.watches[aw] = struct{}{}
	m.mu.Unlock()
	return aw
}

// SetCancel replaces the function cancelling the run's apply context (a
// run goes on with a fresh context after an apply that ran late).
func (aw *Watch) SetCancel(cancel context.CancelCauseFunc) {
	aw.mu.Lock()
	aw.cancel = cancel
	aw.mu.Unlock()
}

// Done deregisters the run. An abandoned apply stays listed until it returns.
func (aw *Watch) Done() {
	aw.m.mu.Lock()
	delete(aw.m.watches, aw)
	aw.m.mu.Unlock()
}

// Begin notes that an apply of the event started now, and returns now.
func (aw *Watch) Begin(eventID uuid.UUID, version int64) time.Time {
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

// Outcome is what became of an apply by the time it returned.
type Outcome int

const (
	// InTime: it returned before its deadline; its result stands.
	InTime Outcome = iota
	// Late: its deadline passed (its context is cancelled): whatever it
	// returned, the event counts a failed attempt.
	Late
	// AbandonedApply: the engine gave up on it; the run must discard its
	// result and touch nothing more, the abandonment handles the pair.
	AbandonedApply
)

// End notes that the running apply returned and tells what became of it.
func (aw *Watch) End() Outcome {
	aw.mu.Lock()
	aw.active = false
	late, abandoned := aw.late, aw.abandoned
	aw.mu.Unlock()
	switch {
	case abandoned:
		aw.m.returned(aw)
		return AbandonedApply
	case late:
		return Late
	}
	return InTime
}

// returned logs an abandoned apply that finally returned and forgets it.
func (m *Monitor) returned(aw *Watch) {
	m.mu.Lock()
	info, ok := m.abandoned[aw]
	delete(m.abandoned, aw)
	m.mu.Unlock()
	if ok {
		m.Log.Warn("abandoned apply returned; its result is discarded",
			slog.String("stream_id", info.StreamID.String()), slog.String("perspective", info.Perspective), slog.Int64("version", info.Version),
			slog.Duration("elapsed", m.Now().Sub(info.Started)))
	}
}

// List returns the abandoned applies still running, oldest first.
func (m *Monitor) List() []Abandoned {
	m.mu.Lock()
	out := make([]Abandoned, 0, len(m.abandoned))
	for _, a := range m.abandoned {
		out = append(out, a)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Abandoned) int { return a.Started.Compare(b.Started) })
	return out
}

// Applying reports whether any apply is running.
func (m *Monitor) Applying() bool {
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
func (m *Monitor) run(ctx context.Context, work <-chan struct{}, wg *sync.WaitGroup) {
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
func (m *Monitor) check(ctx context.Context, wg *sync.WaitGroup) time.Time {
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
			aw.cancel(fmt.Errorf("%w of %s", ErrDeadline, m.timeout))
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
		info := Abandoned{StreamID: aw.stream, Perspective: aw.perspective, EventID: aw.eventID, Version: aw.version,
			Started: aw.started, Elapsed: now.Sub(aw.started)}
		aw.mu.Unlock()
		m.abandoned[aw] = info
		wg.Go(func() { aw.abandon(info, late) })
	}
	return next
}

// NoteAbandoned counts an abandoned apply, and hands it to
// Config.OnAbandoned.
func (m *Monitor) NoteAbandoned(ctx context.Context, info Abandoned) {
	m.abandonedTotal.Add(1)
	if m.cfg.OnAbandoned != nil {
		m.cfg.OnAbandoned(ctx, info)
	}
}

// AbandonedTotal returns how many applies NoteAbandoned counted.
func (m *Monitor) AbandonedTotal() int64 { return m.abandonedTotal.Load() }
