package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestIdleBound(t *testing.T) {
	t.Parallel()

	require.Zero(t, idleBound(t.Context(), 0), "no limit and no deadline: the server's setting")
	require.Equal(t, 3*time.Second, idleBound(t.Context(), 3*time.Second))

	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	t.Cleanup(cancel)
	got := idleBound(ctx, 0)
	require.Greater(t, got, 59*time.Minute, "a deadline alone bounds it")
	require.LessOrEqual(t, got, time.Hour+txIdleMargin)
	require.Equal(t, 3*time.Second, idleBound(ctx, 3*time.Second), "the limit, when sooner than the deadline")

	soon, cancelSoon := context.WithTimeout(t.Context(), time.Second)
	t.Cleanup(cancelSoon)
	got = idleBound(soon, time.Hour)
	require.Greater(t, got, txIdleMargin, "the deadline, when sooner than the limit")
	require.LessOrEqual(t, got, time.Second+txIdleMargin)

	done, cancelDone := context.WithDeadline(t.Context(), time.Now().Add(-time.Minute))
	t.Cleanup(cancelDone)
	require.Equal(t, txIdleMargin, idleBound(done, 0), "a deadline past leaves the margin")
}

func TestBeginIdleBounded(t *testing.T) {
	t.Parallel()

	require.Equal(t, "BEGIN; SET LOCAL idle_in_transaction_session_timeout = 4000", beginIdleBounded(4*time.Second))
	require.Equal(t, "BEGIN; SET LOCAL idle_in_transaction_session_timeout = 2", beginIdleBounded(1001*time.Microsecond), "rounded up")
	require.Equal(t, "BEGIN; SET LOCAL idle_in_transaction_session_timeout = 1", beginIdleBounded(time.Nanosecond), "never 0, which would disable it")
	require.Equal(t, "BEGIN; SET LOCAL idle_in_transaction_session_timeout = 2147483647", beginIdleBounded(1000*time.Hour), "at most the setting's maximum")
}
