package core

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/internal/clocktest"
)

// A heartbeat loop that stopped trying is what a restart cures: once no
// heartbeat returned for the stale threshold plus the bound of one call,
// the worker is not live.
func TestHealthHeartbeatLoopStalled(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	backend := memory.New(memory.Options{Clock: clock}).Backend()
	backend.Stats = nil
	// No claim loop: a claim that finds this instance stale heartbeats
	// again, which would race the checks below.
	w, err := New(backend, newTestRegistry(t), &Options{Clock: clock, Logger: slog.New(slog.DiscardHandler), Claims: ClaimOptions{Disabled: true}})
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.WithoutCancel(t.Context()))) })
	recv(t, w.StartupScanComplete(), "the startup scan")

	require.NoError(t, w.heartbeat.Stop(t.Context())) // the loop ends; every other part of the worker runs on
	limit := StaleInstanceThresholdDefault + base.BackendCallTimeout
	clock.Advance(limit)
	r := w.Health(t.Context())
	require.True(t, r.Live, "a loop that works may take this long between two heartbeats")
	require.False(t, r.Ready, "past the stale threshold")

	clock.Advance(time.Millisecond)
	r = w.Health(t.Context())
	require.False(t, r.Live)
	running, _ := r.Check(HealthCheckRunning)
	require.Equal(t, HealthFailing, running.Status)
	require.Equal(t, "the heartbeat loop stalled: no heartbeat returned for 1m0s (limit 1m0s)", running.Message)
}
