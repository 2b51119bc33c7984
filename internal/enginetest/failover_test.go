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
	"github.com/vantage-go/vantage/ports"
)

// observedBeat is one heartbeat of the watched instance: the Now it ran at
// and what the backend answered.
type observedBeat struct {
	now    time.Time
	result ports.InstanceHeartbeatResult
}

// beatWatcher reports every successful heartbeat on beats.
type beatWatcher struct {
	ports.WorkClaimer
	beats chan<- observedBeat
}

func (c beatWatcher) InstanceHeartbeat(ctx context.Context, p *ports.InstanceHeartbeatParams) (*ports.InstanceHeartbeatResult, error) {
	res, err := c.WorkClaimer.InstanceHeartbeat(ctx, p)
	if err == nil {
		select {
		case c.beats <- observedBeat{now: p.Now, result: *res}:
		default: // the test stopped watching; never block the engine
		}
	}
	return res, err
}

// shortTimers is a fake clock that reports the deadline of every timer armed
// for less than a minute, once it is armed. A test whose worker waits an
// hour in every other loop learns from it when the heartbeat loop armed its
// next heartbeat, and advances the clock only then.
type shortTimers struct {
	*clocktest.Fake
	armed chan time.Time
}

func (c *shortTimers) NewTimer(d time.Duration) ports.Timer {
	deadline := c.Now().Add(d)
	t := &reportingTimer{Timer: c.Fake.NewTimer(d), clock: c}
	c.report(d, deadline)
	return t
}

func (c *shortTimers) report(d time.Duration, deadline time.Time) {
	if d <= 0 || d >= time.Minute {
		return
	}
	select {
	case c.armed <- deadline:
	default: // the test stopped watching; never block the engine
	}
}

type reportingTimer struct {
	ports.Timer
	clock *shortTimers
}

func (t *reportingTimer) Reset(d time.Duration) {
	deadline := t.clock.Now().Add(d)
	t.Timer.Reset(d)
	t.clock.report(d, deadline)
}

// An instance that dies holding a stream loses it as soon as it becomes
// stale, not up to a HeartbeatInterval later: the survivor times a heartbeat
// just after the peer's last heartbeat + StaleInstanceThreshold, abandons it
// there and claims its stream at once.
//
// The worker runs in a synctest bubble on a fake clock: before each move of
// the clock, synctest.Wait returns once every goroutine of the worker is
// blocked, so its claim loop has answered its first claim, however slowly
// the machine schedules it. A claim still in flight while the clock runs
// half a threshold past it is a stall of the claim loop, which stops the
// heartbeats (see heartbeat.Watch).
func TestStaleInstanceTakenOverAtThreshold(t *testing.T) {
	t.Parallel()

	synctest.Test(t, testStaleInstanceTakenOverAtThreshold)
}

func testStaleInstanceTakenOverAtThreshold(t *testing.T) {
	const (
		interval  = 5 * time.Second
		threshold = 30 * time.Second
	)
	ctx := t.Context()
	clock := clocktest.NewFake()
	store := memory.New(memory.Options{Clock: clock})
	t.Cleanup(func() { _ = store.Close() })
	reg := testRegistry(t)

	// The crashed instance heartbeat, claimed the stream for an hour and
	// died without deregistering: only abandonment frees the stream.
	crashed := uuid.New()
	lastBeat := clock.Now()
	_, err := store.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{InstanceID: crashed, StaleThreshold: threshold})
	require.NoError(t, err)
	stream := uuid.New()
	appended := appendAdded(t, reg, store.Backend(), stream, 1, 2)
	claimed, err := store.WorkClaim(ctx, &ports.WorkClaimParams{InstanceID: crashed, MaxStreams: 10, LeaseDuration: time.Hour, StaleThreshold: threshold})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{stream}, claimed.StreamIDs)

	// The survivor starts out of step with the crashed instance's beats, so
	// its interval alone would abandon it only at lastBeat+32s.
	clock.Advance(2 * time.Second)
	beats := make(chan observedBeat, 64)
	b := store.Backend()
	b.Notifier = silentNotifier{}
	b.Claimer = beatWatcher{WorkClaimer: b.Claimer, beats: beats}
	timers := &shortTimers{Fake: clock, armed: make(chan time.Time, 64)}
	// Only the heartbeat loop runs on the clock: every other loop waits an
	// hour, so a claim after the takeover comes from the heartbeat's wake.
	opts := wakeOnlyOptions(t)
	opts.Clock = timers
	opts.Claims.HeartbeatInterval = interval
	opts.Claims.StaleInstanceThreshold = threshold
	// quietOptions' sliding window stays on: the streams of an abandoned
	// instance must not wait for it (it would wait on the stopped clock).
	processed := reportProcessed(&opts, 10)
	w := startWorker(t, b, reg, opts)

	started := waitFor(t, beats, "the heartbeat at start")
	require.Empty(t, started.result.Abandoned)
	require.True(t, lastBeat.Add(threshold).Equal(started.result.NextStaleAt), "NextStaleAt %s", started.result.NextStaleAt)

	// Run the clock from one armed heartbeat to the next until the survivor
	// abandons the crashed instance, each time once every loop waits.
	var takeover observedBeat
	for takeover.now.IsZero() {
		synctest.Wait()
		next := waitFor(t, timers.armed, "the next heartbeat to be armed")
		require.True(t, next.Before(lastBeat.Add(threshold+interval)), "heartbeat armed for %s, past the old worst case", next)
		require.Empty(t, processed, "the crashed instance's stream is drained only after its abandonment")
		clock.Set(next)
		beat := waitFor(t, beats, "the heartbeat at "+next.String())
		require.True(t, next.Equal(beat.now), "heartbeat ran at %s, armed for %s", beat.now, next)
		if len(beat.result.Abandoned) > 0 {
			takeover = beat
		}
	}
	require.Equal(t, []uuid.UUID{crashed}, takeover.result.Abandoned)
	staleAt := lastBeat.Add(threshold)
	require.True(t, takeover.now.After(staleAt), "abandoned at %s, before going stale at %s", takeover.now, staleAt)
	require.False(t, takeover.now.After(staleAt.Add(time.Second)), "abandoned at %s, more than a polling interval after going stale at %s", takeover.now, staleAt)
	require.True(t, takeover.result.NextStaleAt.IsZero(), "no other instance left")

	// The clock stands still from here: the heartbeat's wake claims the
	// stream and a consumer drains it.
	e := waitFor(t, processed, "the survivor to drain the crashed instance's stream")
	require.Equal(t, stream, e.StreamID)
	require.Equal(t, 2, e.EventCount)
	waitCtx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	require.NoError(t, w.WaitForStream(waitCtx, stream, appended.Events[1].Version))
	require.Equal(t, []int64{1, 2}, loadTotal(t, b, stream).Seen)
	require.True(t, clock.Now().Equal(takeover.now), "drained without the clock moving")
}
