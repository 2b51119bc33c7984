package heartbeat

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/internal/logtest"
)

// The claim loop is stalled once no claim was answered for half of
// StaleInstanceThreshold past the time one was due; a claim that failed
// answered nothing. The stall is logged and counted once, and its end
// once, which wakes the heartbeat loop. A watch the claim loop never armed
// (a passive instance runs none) always vouches.
func TestClaimWatchVouches(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	logger, logs := logtest.NewJSON(slog.LevelInfo)
	stalls := 0
	h := New(&base.Env{Clock: clock, Log: logger}, Config{StaleThreshold: 10 * time.Second, Interval: time.Second,
		OnStall: func(context.Context) { stalls++ }})
	watch, ctx := h.Watch(), t.Context()
	require.True(t, watch.vouch(ctx), "no claim loop runs")
	clock.Advance(time.Hour)
	require.True(t, watch.vouch(ctx), "no claim loop runs, however long")

	due := clock.Now()
	watch.Arm(due)
	clock.Advance(5 * time.Second)
	require.True(t, watch.vouch(ctx), "late by the bound, not past it")
	watch.Arm(clock.Now().Add(time.Second)) // the claim failed; the next is due in a second
	clock.Advance(time.Millisecond)
	require.False(t, watch.vouch(ctx), "a failed claim answers nothing: late since the first due time")
	clock.Advance(time.Second)
	require.False(t, watch.vouch(ctx))
	require.Empty(t, h.wake)
	require.Equal(t, 1, stalls, "the stall is counted once")

	watch.Answered(ctx, clock.Now().Add(time.Second))
	require.Len(t, h.wake, 1, "the end of the stall wakes the heartbeat loop")
	require.True(t, watch.vouch(ctx))
	watch.Answered(ctx, clock.Now().Add(time.Second))

	lines := logs.Lines(t)
	require.Len(t, lines, 2, "the stall and its end, once each")
	require.Equal(t, "WARN", lines[0].Level())
	require.Equal(t, "claim loop stalled; no longer heartbeating, so that other instances take over this instance's streams", lines[0].Msg())
	require.Equal(t, float64(5*time.Second+time.Millisecond), lines[0]["stalled_for"])
	require.Equal(t, float64(5*time.Second), lines[0]["stall_bound"])
	require.Equal(t, "INFO", lines[1].Level())
	require.Equal(t, "claim loop recovered", lines[1].Msg())
	require.Equal(t, float64(clock.Now().Sub(due)), lines[1]["stalled_for"])
}
