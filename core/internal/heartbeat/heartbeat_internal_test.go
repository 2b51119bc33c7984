package heartbeat

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/faultlog"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

func TestHeartbeatDelay(t *testing.T) {
	t.Parallel()

	const interval = 5 * time.Second
	at := func(d time.Duration) time.Time { return clocktest.Start.Add(d) }
	due := at(30 * time.Second)

	t.Run("AimsJustPastTheNextStaleness", func(t *testing.T) {
		t.Parallel()

		require.Equal(t, interval, heartbeatDelay(interval, at(0), time.Time{}), "no peer")
		require.Equal(t, interval, heartbeatDelay(interval, at(0), due), "peer stale after the interval")
		require.Equal(t, 3*time.Second+staleMargin, heartbeatDelay(interval, at(27*time.Second), due))
		require.Equal(t, staleMargin, heartbeatDelay(interval, due, due), "peer at the boundary")
		require.Equal(t, heartbeatMinDelay, heartbeatDelay(interval, due.Add(staleMargin-time.Millisecond), due), "never below the floor")
	})
	t.Run("BacksOffWhenTheBackendClockLags", func(t *testing.T) {
		t.Parallel()

		// The backend reports the same deadline after every heartbeat aimed
		// past it: its clock is behind ours. The overshoot doubles each time
		// until the waits reach the interval.
		now := at(27 * time.Second)
		now = now.Add(heartbeatDelay(interval, now, due))
		require.Equal(t, due.Add(staleMargin), now)
		var waits []time.Duration
		for range 9 {
			d := heartbeatDelay(interval, now, due)
			waits = append(waits, d)
			now = now.Add(d)
		}
		m := staleMargin
		require.Equal(t, []time.Duration{m, 2 * m, 4 * m, 8 * m, 16 * m, 32 * m, 64 * m, interval, interval}, waits)
	})
}

func TestPeerGone(t *testing.T) {
	t.Parallel()

	at := func(d time.Duration) time.Time { return clocktest.Start.Add(d) }
	due := at(30 * time.Second)
	require.False(t, peerGone(time.Time{}, at(31*time.Second), time.Time{}), "no peer was due")
	require.False(t, peerGone(due, at(29*time.Second), time.Time{}), "not due yet")
	require.False(t, peerGone(due, at(31*time.Second), due), "still recorded: not abandoned yet")
	require.True(t, peerGone(due, at(31*time.Second), time.Time{}), "abandoned, no peer left")
	require.True(t, peerGone(due, due, at(40*time.Second)), "abandoned, the next peer is due later")
}

// beats answers heartbeats with the results it is given, in turn.
type beats struct {
	ports.WorkClaimer
	results chan *ports.InstanceHeartbeatResult
}

func (b *beats) InstanceHeartbeat(context.Context, *ports.InstanceHeartbeatParams) (*ports.InstanceHeartbeatResult, error) {
	return <-b.results, nil
}

// Start runs from Register's heartbeat, and refuses to run without it; a
// heartbeat that abandoned a peer signals TakeOvers, and a heartbeat that
// finds the peer it waited for gone does too (another survivor abandoned
// it).
func TestRegisterStartAndTakeOvers(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	b := &beats{results: make(chan *ports.InstanceHeartbeatResult, 4)}
	h := New(&base.Env{Clock: clock, Log: slog.New(slog.DiscardHandler), Faults: faultlog.New(slog.New(slog.DiscardHandler), clock)},
		Config{Claimer: b, Interval: time.Second, StaleThreshold: 10 * time.Second})
	require.Error(t, h.Start(t.Context()), "Start before Register")

	peerDue := clock.Now().Add(500 * time.Millisecond)
	b.results <- &ports.InstanceHeartbeatResult{Live: 1, Abandoned: []uuid.UUID{uuid.New()}, NextStaleAt: peerDue}
	require.NoError(t, h.Register(t.Context()))
	require.Len(t, h.TakeOvers(), 1, "the first heartbeat abandoned a peer")
	<-h.TakeOvers()
	require.True(t, h.Alone(), "one live instance, heartbeat fresh")

	timers := clock.Timers()
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, h.Stop(context.Background())) })
	<-clock.WaitTimers(timers + 1)
	b.results <- &ports.InstanceHeartbeatResult{Live: 1} // the peer is gone
	clock.Advance(staleMargin + 500*time.Millisecond)    // the heartbeat aimed just past the peer's staleness
	<-h.TakeOvers()
}
