package enginetest_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/internal/clocktest"
)

// A worker that is stopping still holds the streams it drains: it keeps
// heartbeating until its batches in flight ended and their outcomes were
// sent, so no peer takes a stream over while the stopping instance may
// still save its model. Only then does it stop heartbeating and
// deregister.
func TestStoppingWorkerHeartbeatsUntilItsDrainsEnd(t *testing.T) {
	t.Parallel()

	synctest.Test(t, func(t *testing.T) {
		const (
			tick      = 250 * time.Millisecond // the claim and polling interval
			interval  = time.Second            // HeartbeatInterval
			threshold = 4 * time.Second        // StaleInstanceThreshold
		)
		clock := clocktest.NewFake()
		mem := memory.New(memory.Options{Clock: clock}).Backend()
		mem.Notifier = nil
		// The apply of the stream's first event waits for applying,
		// ignoring its context, so that A still drains the stream while
		// it stops.
		applying, entered := make(chan struct{}), make(chan struct{}, 1)
		reg := heldFirstRegistry(t, applying, entered)
		opts := tickedOptions(t, clock, tick, interval, threshold)
		opts.Drain.ApplyTimeout = time.Hour // the apply runs as long as the test holds it

		claims := &stallingClaimer{WorkClaimer: mem.Claimer, clock: clock, release: make(chan struct{})}
		a := mem
		a.Claimer = claims
		optsA := opts
		processedA := reportProcessed(&optsA, 100)
		wa := startWorker(t, a, reg, optsA)
		t.Cleanup(func() { closeOnce(applying) })
		step := func() {
			clock.Advance(tick)
			synctest.Wait()
		}
		synctest.Wait()

		stream := uuid.New()
		appendAdded(t, reg, mem, stream, 1)
		wa.RequestImmediatePoll()
		for i := 0; i < 40 && len(entered) == 0; i++ {
			step()
		}
		require.Len(t, entered, 1, "A claimed the stream and applies its event")
		optsB := opts
		processedB := reportProcessed(&optsB, 100)
		startWorker(t, mem, reg, optsB)
		step()

		// A stops while its apply runs: for two stale thresholds it is
		// still draining, heartbeats, and keeps the stream.
		stopping := clock.Now()
		stopped := make(chan error, 1)
		go func() { stopped <- wa.Stop(context.Background()) }()
		for clock.Now().Before(stopping.Add(2 * threshold)) {
			step()
		}
		require.Empty(t, stopped, "Stop waits for the drain in flight")
		require.NotEmpty(t, claims.beatsSince(stopping.Add(threshold)), "A heartbeats while it drains at Stop")
		require.Empty(t, processedB, "no peer took the stream of a stopping instance that still drains it")

		close(applying)
		for i := 0; i < 40 && len(stopped) == 0; i++ {
			step()
		}
		require.Len(t, stopped, 1, "Stop returned once the drain ended")
		require.NoError(t, <-stopped)
		require.Len(t, processedA, 1, "A applied the event")
		last := clock.Now()
		for range 8 {
			step()
		}
		require.Empty(t, claims.beatsSince(last), "A heartbeats no more once stopped")
		require.Empty(t, processedB)
		require.Equal(t, []int64{1}, loadTotal(t, mem, stream).Seen, "the event applied once")
	})
}
