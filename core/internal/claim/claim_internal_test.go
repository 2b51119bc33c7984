package claim

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/heartbeat"
	"github.com/vantage-go/vantage/core/internal/queue"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// spyClaimer is a backend that every instance finds alone: it answers
// heartbeats with one live instance and claims with streams, and counts
// the claims.
type spyClaimer struct {
	ports.WorkClaimer
	// streams are what each claim returns.
	streams []uuid.UUID
	claims  atomic.Int64
	// cancelled tells whether the context of the latest claim was done.
	cancelled atomic.Bool
	// claimed, when set, receives the Now of every claim.
	claimed chan time.Time
	// duringClaim, when set, runs inside every claim.
	duringClaim func()
}

func (s *spyClaimer) InstanceHeartbeat(context.Context, *ports.InstanceHeartbeatParams) (*ports.InstanceHeartbeatResult, error) {
	return &ports.InstanceHeartbeatResult{Live: 1}, nil
}

func (s *spyClaimer) WorkClaim(ctx context.Context, p *ports.WorkClaimParams) (*ports.WorkClaimResult, error) {
	s.claims.Add(1)
	s.cancelled.Store(ctx.Err() != nil)
	if s.duringClaim != nil {
		s.duringClaim()
	}
	if s.claimed != nil {
		s.claimed <- p.Now
	}
	return &ports.WorkClaimResult{StreamIDs: s.streams}, nil
}

// polling are notifications that never arrive.
type polling struct{}

func (polling) Healthy() bool { return false }

type bundle struct {
	c     *Claimer
	spy   *spyClaimer
	wakes *Wakes
	q     *queue.Queue
	env   *base.Env
}

// setup builds a claimer on clock, claiming every interval, that is not
// started.
func setup(t *testing.T, clock ports.Clock, interval time.Duration) *bundle {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	env := base.NewEnv(clock, true, log)
	spy := &spyClaimer{}
	heart := heartbeat.New(env, heartbeat.Config{Claimer: spy, Interval: time.Second, StaleThreshold: 10 * time.Second})
	q := queue.New(queue.Hooks{})
	wakes := NewWakes()
	c := New(env, Config{
		Claimer: spy, InstanceID: uuid.New(), MaxStreams: 300, PartitionCount: ports.PartitionCountDefault,
		LeaseDuration: time.Minute, StaleThreshold: 10 * time.Second, Interval: interval, NotifyHealthyInterval: interval,
	}, wakes, q, heart, polling{})
	return &bundle{c: c, spy: spy, wakes: wakes, q: q, env: env}
}

// runLoop runs bb's claim loop until the test ends. In a synctest bubble,
// synctest.Wait returns once the loop handled what it was sent and waits
// again.
func runLoop(t *testing.T, bb *bundle) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); bb.c.loop(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// deferrals records the waits the claim loop reports for the notifications
// whose claim it defers.
type deferrals struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (d *deferrals) watch(env *base.Env) {
	env.Signals.ClaimDeferred = func(wait time.Duration) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.waits = append(d.waits, wait)
	}
}

func (d *deferrals) take() []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.waits
	d.waits = nil
	return w
}

// recv receives from c, failing the test after a minute.
func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// One claim that took long (it waited on a lock, or the process was
// paused) costs the claims after it no long pause: under a steady stream
// of notifications every one claims at once again, as before it, instead
// of waiting twice as long as the slow claim took for the budget to drain.
func TestClaimLoopSlowClaimCostsNoLongPause(t *testing.T) {
	t.Parallel()

	synctest.Test(t, func(t *testing.T) {
		clock := clocktest.NewFake()
		bb := setup(t, clock, 250*time.Millisecond)
		var (
			slow    atomic.Bool
			release = make(chan struct{})
			waits   deferrals
		)
		bb.spy.duringClaim = func() {
			if slow.Load() {
				<-release
			}
		}
		waits.watch(bb.env)
		runLoop(t, bb)
		synctest.Wait()
		require.Equal(t, int64(1), bb.spy.claims.Load(), "the claim at start")

		slow.Store(true)
		bb.wakes.Notified()
		synctest.Wait()
		require.Equal(t, int64(2), bb.spy.claims.Load(), "the slow claim is in flight")
		clock.Advance(12 * time.Second)
		slow.Store(false)
		close(release)
		synctest.Wait()

		// A notification every 50ms for a second, each claiming in no time.
		for i := range 20 {
			clock.Advance(50 * time.Millisecond)
			bb.wakes.Notified()
			synctest.Wait()
			require.Equal(t, int64(3+i), bb.spy.claims.Load(), "notification %d after the slow claim claims at once", i+1)
		}
		require.Empty(t, waits.take(), "no notification waited for the budget")
	})
}

// Notifications arriving faster than the pacing wait never postpone the
// claim already armed: it runs when it was first due, however many come
// meanwhile.
func TestClaimLoopNotificationsNeverPostponeAClaim(t *testing.T) {
	t.Parallel()

	synctest.Test(t, func(t *testing.T) {
		const (
			interval = 20 * time.Millisecond
			every    = 5 * time.Millisecond
		)
		clock := clocktest.NewFake()
		bb := setup(t, clock, interval)
		bb.spy.duringClaim = func() { clock.Advance(10 * time.Millisecond) } // every claim takes 10ms
		var waits deferrals
		waits.watch(bb.env)
		runLoop(t, bb)
		synctest.Wait()

		// Immediate wakes claim whatever the budget: back to back, these
		// claims take all of the time, and a notification waits.
		for range 8 {
			bb.wakes.Now()
			synctest.Wait()
		}
		claims := bb.spy.claims.Load()
		require.Equal(t, int64(9), claims)
		bb.wakes.Notified()
		synctest.Wait()
		require.Equal(t, []time.Duration{interval}, waits.take(), "the notification waits for the budget, at most Claims.Interval")
		due := clock.Now().Add(interval)

		for clock.Now().Add(every).Before(due) {
			clock.Advance(every)
			bb.wakes.Notified()
			synctest.Wait()
			require.Equal(t, claims, bb.spy.claims.Load(), "no claim before it is due, at %s", clock.Now().Sub(due))
		}
		clock.Set(due)
		synctest.Wait()
		require.Equal(t, claims+1, bb.spy.claims.Load(), "the claim ran when it was first due, whatever the notifications since")
		for _, w := range waits.take() {
			require.Positive(t, w)
			require.Less(t, w, interval, "a later notification only waits for the claim armed before it")
		}
	})
}

// A notification claims at once while claims took little of the recent
// time, and waits for the budget when they took more than half of it
// (never longer than Claims.Interval). RequestImmediatePoll-style wakes
// claim at once.
func TestClaimLoopPacesNotifications(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	bb := setup(t, clock, 250*time.Millisecond)
	bb.spy.claimed = make(chan time.Time, 10)
	bb.spy.duringClaim = func() { clock.Advance(10 * time.Millisecond) } // every claim takes 10ms
	deferred := make(chan time.Duration, 10)
	bb.env.Signals.ClaimDeferred = func(wait time.Duration) { deferred <- wait }
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); bb.c.loop(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	start := recv(t, bb.spy.claimed, "the first claim") // it ends 10ms later
	<-clock.WaitTimers(1)                               // the loop re-armed its cadence
	bb.wakes.Notified()
	require.Equal(t, start.Add(10*time.Millisecond), recv(t, bb.spy.claimed, "a claim at once, within the burst"))
	<-clock.WaitTimers(1)
	bb.wakes.Notified()
	require.Equal(t, 10*time.Millisecond, recv(t, deferred, "the notification to wait for the budget"))
	require.Equal(t, int64(2), bb.spy.claims.Load(), "no claim before the budget allows")
	clock.Advance(10 * time.Millisecond)
	require.Equal(t, start.Add(30*time.Millisecond), recv(t, bb.spy.claimed, "the deferred claim"))

	<-clock.WaitTimers(1)
	clock.Advance(50 * time.Millisecond) // the budget drained
	bb.wakes.Notified()
	require.Equal(t, start.Add(90*time.Millisecond), recv(t, bb.spy.claimed, "a claim at once"))

	bb.wakes.Now()
	require.Equal(t, start.Add(100*time.Millisecond), recv(t, bb.spy.claimed, "the immediate wake"), "claims at once, whatever the budget")
}

func TestClaimBudget(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	// run claims of took each, every gap (or as soon as the budget allows),
	// for a second, and returns the share of the time they took and the
	// longest wait.
	run := func(took, gap time.Duration) (share float64, longest time.Duration) {
		var (
			b     claimBudget
			now   = time.Unix(1000, 0)
			end   = now.Add(time.Second)
			spent time.Duration
			start = now
		)
		for now.Before(end) {
			w := b.wait(now)
			longest = max(longest, w)
			now = now.Add(w)
			now = now.Add(took)
			b.spent(now, took)
			spent += took
			now = now.Add(gap)
		}
		return float64(spent) / float64(now.Sub(start)), longest
	}
	share, longest := run(2*ms, 8*ms)
	require.Zero(t, longest, "claims of 2ms every 10ms never wait")
	require.InDelta(t, 0.2, share, 0.01)
	share, longest = run(2*ms, 0)
	require.LessOrEqual(t, share, 0.51, "back-to-back claims take at most half of the time")
	require.Equal(t, 2*ms, longest, "each waits as long as it took")

	bb := setup(t, clocktest.NewFake(), 20*ms)
	b := claimBudget{level: time.Hour, at: bb.env.Now()}
	require.Equal(t, 20*ms, bb.c.claimPace(&b), "at most the claim interval")
}

// A claim marks the streams it returns that are being drained only when it
// may have seen new events of them (a notification came, or none can be
// heard): otherwise every claim of a catch-up would send every held stream
// back for a refetch that finds nothing new.
func TestClaimMarksHeldStreamsOnlyWhenFresh(t *testing.T) {
	t.Parallel()

	bb := setup(t, clocktest.NewFake(), time.Second)
	stream := uuid.New()
	bb.spy.streams = []uuid.UUID{stream}
	bb.c.claimOnce(t.Context(), false)
	require.Equal(t, []uuid.UUID{stream}, bb.q.Take(1), "the claim queued it; now in flight")
	bb.c.claimOnce(t.Context(), false)
	require.False(t, bb.q.TakeDirty(stream), "a claim no notification woke leaves it")
	bb.c.claimOnce(t.Context(), true)
	require.True(t, bb.q.TakeDirty(stream), "a notified claim marks it")
}

// A claim is never abandoned when the worker stops: given up on, it could
// still commit on the server after Stop deregistered the instance, leaving
// rows leased to an instance that is gone.
func TestClaimOutlivesCancellation(t *testing.T) {
	t.Parallel()

	bb := setup(t, clocktest.NewFake(), time.Second)
	stopped, cancel := context.WithCancel(t.Context())
	cancel()
	bb.c.claimOnce(stopped, true)
	require.Equal(t, int64(1), bb.spy.claims.Load())
	require.False(t, bb.spy.cancelled.Load(), "the claim ran on a live context")
}
