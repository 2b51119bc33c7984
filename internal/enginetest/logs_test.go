package enginetest_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/logtest"
)

// TestLogLinesHaveEachKeyOnce runs a worker through its main paths (start,
// applies, a failing apply, completion flushes, stop) and the flusher's
// error path (a failing flush retried, then a batch dropped after its last
// attempt and sent again), logging JSON at Debug: every line must carry each
// key once.
func TestLogLinesHaveEachKeyOnce(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	cursors := &flakyCursors{CursorStore: b.Cursors}
	cursors.failuresLeft.Store(3) // two attempts of the first batch, then one of its re-send
	b.Cursors = cursors
	reg := registryWith(t, func(_ context.Context, m total, e added) (total, error) {
		if e.N < 0 {
			return m, errors.New("negative amounts are refused")
		}
		m.Sum += e.N
		return m, nil
	})
	logger, logs := logtest.NewJSON(slog.LevelDebug)
	opts := quietOptions(t)
	opts.Logger = logger
	opts.Generation = "v2"
	opts.Retries.Flush = core.FlushRetryOptions{MaxAttempts: 2, Backoff: core.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 1}}
	opts.Retries.CompletionResend = core.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 1}
	flushed := make(chan core.CompletionsFlushed, 10)
	opts.Hooks.OnCompletionsFlushed = func(c core.CompletionsFlushed) { flushed <- c }
	w, err := core.New(b, reg, &opts)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))

	appendAdded(t, reg, b, uuid.New(), 1, 2)
	appendAdded(t, reg, b, uuid.New(), -1)
	var completions, failures int
	for completions == 0 || failures == 0 {
		c := waitFor(t, flushed, "the completion and the failure acknowledged")
		completions += len(c.Completions)
		failures += len(c.Failures)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, w.Stop(ctx))

	lines := logs.Lines(t) // fails on a duplicate key
	for _, msg := range []string{"worker started", "worker stopped", "perspective failed on event; will retry"} {
		require.NotEmpty(t, logtest.WithMsg(lines, msg), "the run logged %q", msg)
	}
	var flusherLines int
	for _, l := range lines {
		if l["flusher"] != nil {
			flusherLines++
			require.Equal(t, "vantage.worker", l["component"], "a flusher line names the worker's component once: %v", l)
		}
	}
	require.Positive(t, flusherLines, "the flushers logged")
}

// TestWorkerStartAndStopLoggedWithIdentity checks that the start and the
// stop of a worker are logged at Info with what names the instance: its
// service, host, instance id and deploy generation.
func TestWorkerStartAndStopLoggedWithIdentity(t *testing.T) {
	t.Parallel()

	logger, logs := logtest.NewJSON(slog.LevelInfo)
	opts := quietOptions(t)
	opts.Logger = logger
	opts.ServiceName = "orders"
	opts.HostName = "host-7"
	opts.Generation = "v2"
	opts.InstanceID = uuid.New()
	w, err := core.New(memory.New(memory.Options{}).Backend(), testRegistry(t), &opts)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, w.Stop(ctx))

	lines := logs.Lines(t)
	for _, msg := range []string{"worker started", "worker stopped"} {
		got := logtest.WithMsg(lines, msg)
		require.Len(t, got, 1, "%q is logged once", msg)
		l := got[0]
		require.Equal(t, "INFO", l.Level(), msg)
		require.Equal(t, "orders", l["service"], msg)
		require.Equal(t, "host-7", l["host"], msg)
		require.Equal(t, opts.InstanceID.String(), l["instance_id"], msg)
		require.Equal(t, "v2", l["generation"], msg)
	}
}
