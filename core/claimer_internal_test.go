package core

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// setupClaims is setupBatchWith on a memory backend on clock, the
// worker's clock.
func setupClaims(t *testing.T, opts *Options, clock ports.Clock) *batchBundle {
	t.Helper()
	return setupBatchNamed(t, opts, memory.New(memory.Options{Clock: clock}).Backend(), "c")
}

// runClaimLoop runs bb's claim loop until the test ends. In a synctest
// bubble, synctest.Wait returns once the loop handled what it was sent and
// waits again.
func runClaimLoop(t *testing.T, bb *batchBundle) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); bb.w.claims.loop(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// deferrals records the waits the claim loop reports for the notifications
// whose claim it defers.
type deferrals struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (d *deferrals) watch(w *Worker) {
	w.Signals.ClaimDeferred = func(wait time.Duration) {
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

// One claim that took long (it waited on a lock, or the process was
// paused) costs the claims after it no long pause: under a steady stream
// of notifications every one claims at once again, as before it, instead
// of waiting twice as long as the slow claim took for the budget to drain.
func TestClaimLoopSlowClaimCostsNoLongPause(t *testing.T) {
	t.Parallel()

	synctest.Test(t, func(t *testing.T) {
		clock := clocktest.NewFake()
		bb := setupClaims(t, &Options{Clock: clock, ClaimInterval: 250 * time.Millisecond}, clock)
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
		waits.watch(bb.w)
		runClaimLoop(t, bb)
		synctest.Wait()
		require.Equal(t, int64(1), bb.spy.claims.Load(), "the claim at start")

		slow.Store(true)
		base.Signal(bb.w.claims.notify)
		synctest.Wait()
		require.Equal(t, int64(2), bb.spy.claims.Load(), "the slow claim is in flight")
		clock.Advance(12 * time.Second)
		slow.Store(false)
		close(release)
		synctest.Wait()

		// A notification every 50ms for a second, each claiming in no time.
		for i := range 20 {
			clock.Advance(50 * time.Millisecond)
			base.Signal(bb.w.claims.notify)
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
		bb := setupClaims(t, &Options{Clock: clock, ClaimInterval: interval}, clock)
		bb.spy.duringClaim = func() { clock.Advance(10 * time.Millisecond) } // every claim takes 10ms
		var waits deferrals
		waits.watch(bb.w)
		runClaimLoop(t, bb)
		synctest.Wait()

		// Immediate wakes claim whatever the budget: back to back, these
		// claims take all of the time, and a notification waits.
		for range 8 {
			base.Signal(bb.w.claims.wake)
			synctest.Wait()
		}
		claims := bb.spy.claims.Load()
		require.Equal(t, int64(9), claims)
		base.Signal(bb.w.claims.notify)
		synctest.Wait()
		require.Equal(t, []time.Duration{interval}, waits.take(), "the notification waits for the budget, at most ClaimInterval")
		due := clock.Now().Add(interval)

		for clock.Now().Add(every).Before(due) {
			clock.Advance(every)
			base.Signal(bb.w.claims.notify)
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
