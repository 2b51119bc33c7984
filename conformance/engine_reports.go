package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/core/completion"
	"github.com/vantage-go/vantage/ports"
)

// lostReports fails the first calls of WorkComplete (completes of them) and
// of WorkFail (fails of them) with a transient error, as a connection cut
// under the call would, and closes the matching channel at the first
// failure of each.
type lostReports struct {
	ports.CursorStore
	completes, fails           atomic.Int64 // calls left to fail
	completeLost, failLost     chan struct{}
	completeClosed, failClosed atomic.Bool
}

func newLostReports(c ports.CursorStore) *lostReports {
	return &lostReports{CursorStore: c, completeLost: make(chan struct{}), failLost: make(chan struct{})}
}

func (c *lostReports) WorkComplete(ctx context.Context, p *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	if c.completes.Add(-1) >= 0 {
		if c.completeClosed.CompareAndSwap(false, true) {
			close(c.completeLost)
		}
		return nil, fmt.Errorf("conformance: completing: connection reset: %w", ports.ErrTransient)
	}
	return c.CursorStore.WorkComplete(ctx, p)
}

func (c *lostReports) WorkFail(ctx context.Context, p *ports.WorkFailParams) error {
	if c.fails.Add(-1) >= 0 {
		if c.failClosed.CompareAndSwap(false, true) {
			close(c.failLost)
		}
		return fmt.Errorf("conformance: recording failures: connection reset: %w", ports.ErrTransient)
	}
	return c.CursorStore.WorkFail(ctx, p)
}

// testInstantReportsRetried: with instant completions, a completion and a
// failure whose reports fail once are retried until the backend takes
// them. The stream whose completion was lost catches up past a later event
// (its rows are not left behind, pending below the cursor), the stream
// whose failure was lost retries its event and applies it, and
// WaitForStream returns for both; no work is left pending and nothing is
// dead-lettered.
func testInstantReportsRetried(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	reports := newLostReports(b.Cursors)
	reports.completes.Store(1)
	reports.fails.Store(1)
	wrapped := b
	wrapped.Cursors = reports

	lost, failing := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	var tries atomic.Int64
	pr := newProgress()
	opts := fastOptions()
	opts.Completion = completion.InstantFactory
	opts.Hooks = pr.hooks(core.Hooks{})
	reg := newRegistry(t, strictPerspective(t, "alpha", func(_ context.Context, e ports.Event, _ tick) error {
		if e.StreamID == failing && tries.Add(1) == 1 {
			return errors.New("conformance: the first apply fails")
		}
		return nil
	}, nil))
	w := startWorker(t, wrapped, reg, opts)

	appendTicks(t, reg, b, lost, 0, 2)
	select {
	case <-reports.completeLost:
	case <-time.After(scenarioTimeout):
		t.Fatal("timed out waiting for the first completion report to fail")
	}
	appendTicks(t, reg, b, lost, 2, 1) // completes above the lost completion's rows
	appendTicks(t, reg, b, failing, 0, 1)

	n := map[uuid.UUID]int64{lost: 3, failing: 1}
	streams := []uuid.UUID{lost, failing}
	ctx, cancel := context.WithTimeout(t.Context(), scenarioTimeout)
	defer cancel()
	for _, s := range streams {
		require.NoError(t, w.WaitForStream(ctx, s, n[s]), "stream %s caught up", s)
	}
	pr.waitUntil(t, "every report reached the backend", func() bool {
		if !allCaughtUp(t, b, streams, n, []string{"alpha"}) {
			return false
		}
		for _, s := range streams {
			if !rewindClear(t, b, s, "alpha") {
				return false
			}
		}
		if b.Stats == nil {
			return true
		}
		lag, err := b.Stats.PerspectivesLag(t.Context(), &ports.PerspectivesLagParams{Now: opts.Clock.Now()})
		require.NoError(t, err)
		return len(lag) == 0
	})
	requireExactlyOnce(t, b, streams, n, []string{"alpha"})
	select {
	case <-reports.failLost:
	default:
		t.Fatal("the failure's first report did not fail")
	}
	require.Equal(t, int64(2), tries.Load(), "the failed event was applied again once")
	require.Empty(t, deadLetters(t, b, "alpha", ""))
}
