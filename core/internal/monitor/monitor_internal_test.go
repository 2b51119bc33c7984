package monitor

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/internal/clocktest"
)

// startMonitor runs an apply monitor with the given deadline and grace on a
// fake clock until the test ends; closing work ends the work, as Stop's
// deadline does.
func startMonitor(t *testing.T, timeout, grace time.Duration, work chan struct{}) (*Monitor, *clocktest.Fake) {
	t.Helper()
	clock := clocktest.NewFake()
	m := New(&base.Env{Clock: clock, Log: slog.New(slog.DiscardHandler)}, Config{Timeout: timeout, Grace: grace})
	var wg sync.WaitGroup
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); m.run(ctx, work, &wg) }()
	t.Cleanup(func() { stop(); <-done; wg.Wait() })
	return m, clock
}

func TestMonitorCancelsThenAbandons(t *testing.T) {
	t.Parallel()

	m, clock := startMonitor(t, time.Minute, 10*time.Second, nil)

	actx, cancel := context.WithCancelCause(t.Context())
	abandoned := make(chan Abandoned, 1)
	var late atomic.Bool
	stream, event := uuid.New(), uuid.New()
	aw := m.Watch(stream, "p", cancel, func(a Abandoned, l bool) { late.Store(l); abandoned <- a })
	defer aw.Done()

	// An apply that returns in time stands. The monitor's only timer is
	// armed for its deadline.
	aw.Begin(event, 1)
	<-clock.WaitTimers(1)
	clock.Advance(30 * time.Second)
	require.Equal(t, InTime, aw.End())
	require.NoError(t, actx.Err())

	// The next one runs past its deadline: its context is cancelled with a
	// cause that says so, then, past the grace, it is abandoned.
	aw.Begin(event, 2)
	clock.Advance(time.Minute) // fires the timer armed for the first apply
	select {
	case <-actx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the apply's context was not cancelled at its deadline")
	}
	require.ErrorIs(t, context.Cause(actx), ErrDeadline)
	require.True(t, m.Applying(), "a cancelled apply still runs")
	<-clock.WaitTimers(1) // armed again, for the grace
	clock.Advance(10 * time.Second)
	a := <-abandoned
	require.True(t, late.Load(), "abandoned for its deadline, not a stop")
	require.Equal(t, int64(2), a.Version)
	require.Equal(t, stream, a.StreamID)
	require.Equal(t, "p", a.Perspective)
	require.Equal(t, event, a.EventID)
	require.Equal(t, 70*time.Second, a.Elapsed)
	require.Len(t, m.List(), 1, "listed until it returns")
	require.False(t, m.Applying(), "an abandoned apply is no longer counted as running")
	require.Equal(t, AbandonedApply, aw.End())
	require.Empty(t, m.List())
}

func TestMonitorLateApplyIsNotInTime(t *testing.T) {
	t.Parallel()

	m, clock := startMonitor(t, time.Second, time.Hour, nil)

	actx, cancel := context.WithCancelCause(t.Context())
	aw := m.Watch(uuid.New(), "p", cancel, func(Abandoned, bool) { t.Error("abandoned before its grace") })
	defer aw.Done()
	aw.Begin(uuid.New(), 1)
	<-clock.WaitTimers(1)
	clock.Advance(time.Second)
	<-actx.Done()
	require.Equal(t, Late, aw.End(), "a result returned after the deadline does not stand")
}

func TestMonitorAbandonsAtStopWithoutCharge(t *testing.T) {
	t.Parallel()

	work := make(chan struct{})
	m, clock := startMonitor(t, time.Hour, 10*time.Second, work)

	_, cancel := context.WithCancelCause(t.Context())
	type abandonment struct {
		info Abandoned
		late bool
	}
	abandoned := make(chan abandonment, 1)
	aw := m.Watch(uuid.New(), "p", cancel, func(a Abandoned, late bool) { abandoned <- abandonment{a, late} })
	defer aw.Done()
	aw.Begin(uuid.New(), 1)
	<-clock.WaitTimers(1)
	clock.Advance(time.Minute)
	close(work) // Stop's deadline passed: the work context ended
	require.Eventually(t, func() bool {
		aw.mu.Lock()
		defer aw.mu.Unlock()
		return aw.cancelled
	}, 10*time.Second, time.Millisecond, "the monitor saw the work end")
	clock.Advance(10 * time.Second)
	a := <-abandoned
	require.False(t, a.late, "abandoned because the worker stops: its event is not charged")
	require.Equal(t, 70*time.Second, a.info.Elapsed)
}
