package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/internal/clocktest"
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
