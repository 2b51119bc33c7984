package enginetest_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// A failure carries the last applied event and the rows applied before
// it, so the cursor records progress and the error; only the failing row is
// released for retry.
func TestFailureCarriesLastAppliedEvent(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	reg := registryWith(t, func(_ context.Context, m total, e added) (total, error) {
		if e.N < 0 {
			return m, errors.New("negative amounts are not allowed")
		}
		m.Sum += e.N
		return m, nil
	})
	stream := uuid.New()
	res := appendAdded(t, reg, b, stream, 1, 2, -1, 4)

	failures := make(chan ports.Failure, 10)
	flushed := make(chan core.CompletionsFlushed, 10)
	opts := quietOptions(t)
	opts.Retries.Event = core.Backoff{Initial: time.Hour, Max: time.Hour} // one failure is enough here
	opts.Hooks.OnFailure = func(f ports.Failure) { failures <- f }
	opts.Hooks.OnCompletionsFlushed = func(c core.CompletionsFlushed) {
		if len(c.Failures) > 0 {
			flushed <- c
		}
	}
	startWorker(t, b, reg, opts)

	f := waitFor(t, failures, "the failure")
	require.Equal(t, res.Events[1].ID, f.LastEventID)
	require.Equal(t, int64(2), f.LastVersion)
	require.Len(t, f.AppliedWorkIDs, 2)
	require.Len(t, f.FailedWorkIDs, 1)
	require.Contains(t, f.Error, "negative amounts are not allowed")
	require.True(t, f.RetryAt.After(time.Now().Add(30*time.Minute)))

	waitFor(t, flushed, "the failure to be acknowledged")
	cursor := cursorOf(t, b, stream)
	require.True(t, cursor.Status.Has(ports.CursorFailed))
	require.Contains(t, cursor.Error, "negative amounts")
	require.Equal(t, int64(2), cursor.LastVersion)
	require.Equal(t, 3, loadTotal(t, b, stream).Sum, "events before the failure are saved")
}

// An apply that waits for its context is cancelled at its deadline, on the
// engine's clock, and reported as a failure that says so.
//
// The worker runs in a synctest bubble: the clock moves once every loop
// waits, the claim that found the stream answered. A claim still in flight
// while the clock jumps a minute is a stall of the claim loop, which stops
// the heartbeats and gives the stream up.
func TestHungApplyHitsItsDeadline(t *testing.T) {
	t.Parallel()

	synctest.Test(t, testHungApplyHitsItsDeadline)
}

func testHungApplyHitsItsDeadline(t *testing.T) {
	clock := clocktest.NewFake()
	b := memory.New(memory.Options{Clock: clock}).Backend()
	started := make(chan struct{}, 1)
	reg := registryWith(t, func(ctx context.Context, m total, _ added) (total, error) {
		started <- struct{}{}
		<-ctx.Done()
		return m, context.Cause(ctx)
	})
	failures := make(chan ports.Failure, 10)
	opts := quietOptions(t)
	opts.Clock = clock
	opts.Drain.ApplyTimeout = time.Minute
	opts.Retries.Event = core.Backoff{Initial: time.Hour, Max: time.Hour}
	opts.Hooks.OnFailure = func(f ports.Failure) { failures <- f }
	appendAdded(t, reg, b, uuid.New(), 1) // the start-up claim takes it: the clock stands still
	startWorker(t, b, reg, opts)
	waitFor(t, started, "the apply to start")
	synctest.Wait()
	require.Empty(t, failures)
	clock.Advance(time.Minute)
	f := waitFor(t, failures, "the deadline failure")
	require.Contains(t, f.Error, "apply ran past its deadline of 1m0s")
	require.Equal(t, clock.Now().Add(time.Hour), f.RetryAt)
}

// flakyCursors fails the first n completion flushes, as a dropped
// connection would.
type flakyCursors struct {
	ports.CursorStore
	failuresLeft atomic.Int64
	calls        atomic.Int64
}

func (c *flakyCursors) WorkComplete(ctx context.Context, p *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	c.calls.Add(1)
	if c.failuresLeft.Add(-1) >= 0 {
		return nil, errors.New("connection reset by peer")
	}
	return c.CursorStore.WorkComplete(ctx, p)
}

// A failing completion flush is retried and nothing is lost or applied
// twice; the cursor completes once the backend answers again.
func TestCompletionFlushRetried(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	cursors := &flakyCursors{CursorStore: b.Cursors}
	cursors.failuresLeft.Store(2)
	b.Cursors = cursors
	flushed := make(chan core.CompletionsFlushed, 10)
	var applied atomic.Int64
	opts := quietOptions(t)
	opts.Hooks.OnCompletionsFlushed = func(c core.CompletionsFlushed) { flushed <- c }
	opts.Hooks.OnPerspectiveEventProcessed = func(e core.PerspectiveEventProcessed) { applied.Add(int64(e.EventCount)) }
	reg := testRegistry(t)
	startWorker(t, b, reg, opts)
	stream := uuid.New()
	appendAdded(t, reg, b, stream, 1, 2)
	c := waitFor(t, flushed, "the completion to be flushed after retries")
	require.Len(t, c.Completions, 1)
	require.GreaterOrEqual(t, cursors.calls.Load(), int64(3))
	require.Equal(t, int64(2), applied.Load(), "no event applied twice while the flush was failing")
	require.Equal(t, []int64{1, 2}, loadTotal(t, b, stream).Seen)
}

// Concurrent batches on one stream (re-emitted ids, several consumers)
// never apply a pair concurrently or twice.
func TestManyConsumersOneStream(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	var inside, overlaps atomic.Int64
	var calls atomic.Int64
	reg := registryWith(t, func(ctx context.Context, m total, e added) (total, error) {
		if inside.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer inside.Add(-1)
		calls.Add(1)
		ev, _ := core.EventFromContext(ctx)
		m.Seen = append(m.Seen, ev.Version)
		m.Sum += e.N
		return m, nil
	})
	done := make(chan struct{})
	var applied atomic.Int64
	const n = 200
	opts := quietOptions(t)
	opts.Drain.Consumers = 8
	opts.Drain.LoopMaxIterations = 1
	opts.Drain.PerspectiveBatchSize = 7
	opts.Hooks.OnPerspectiveEventProcessed = func(e core.PerspectiveEventProcessed) {
		if applied.Add(int64(e.EventCount)) == n {
			close(done)
		}
	}
	w := startWorker(t, b, reg, opts)
	stream := uuid.New()
	for i := range n {
		appendAdded(t, reg, b, stream, i)
		w.RequestImmediatePoll()
	}
	waitFor(t, done, "all events applied")
	require.Zero(t, overlaps.Load(), "the pair was never applied concurrently")
	require.Equal(t, int64(n), calls.Load(), "each event applied once")
	require.Equal(t, n*(n-1)/2, loadTotal(t, b, stream).Sum)
}

// failingSaves fails the first left model saves with a transient error, and
// reports every save's outcome on saves.
type failingSaves struct {
	ports.ModelStore
	left  atomic.Int64
	saves chan error
}

func (f *failingSaves) ModelSave(ctx context.Context, p *ports.ModelSaveParams) error {
	err := error(nil)
	if f.left.Add(-1) >= 0 {
		err = fmt.Errorf("saving model: connection reset by peer: %w", ports.ErrTransient)
	} else {
		err = f.ModelStore.ModelSave(ctx, p)
	}
	f.saves <- err
	return err
}

// A backend error costs the event nothing: the pair is drained again after
// a short backoff on the engine's clock (about 100ms the first time), not
// after a failure's retry delay, and no attempt is counted (with one
// attempt allowed, a charge would dead-letter the event).
func TestBackendErrorRetriedAfterShortBackoff(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	mem := memory.New(memory.Options{Clock: clock}).Backend()
	saves := &failingSaves{ModelStore: mem.Models, saves: make(chan error, 10)}
	saves.left.Store(1)
	b := mem
	b.Models = saves
	b.ModelBatch = nil // every save goes through failingSaves
	reg := testRegistry(t)
	stream := uuid.New()
	appendAdded(t, reg, mem, stream, 1, 2) // the start-up claim takes them: the clock stands still
	opts := quietOptions(t)
	opts.Clock = clock
	opts.Retries.MaxEventAttempts = 1
	failures := make(chan ports.Failure, 1)
	opts.Hooks.OnFailure = func(f ports.Failure) { failures <- f }
	processed := reportProcessed(&opts, 10)
	batches := make(chan core.BatchCycle, 10)
	opts.Hooks.OnBatchCycleComplete = func(c core.BatchCycle) {
		if c.Streams > 0 {
			batches <- c
		}
	}
	startWorker(t, b, reg, opts)

	require.ErrorIs(t, waitFor(t, saves.saves, "the failed save"), ports.ErrTransient)
	require.Zero(t, waitFor(t, batches, "the batch of the failed save").Applied)
	clock.Advance(150 * time.Millisecond) // the first backoff: 100ms, give or take half
	require.NoError(t, waitFor(t, saves.saves, "the retried save"))
	waitFor(t, processed, "the events applied")
	require.Equal(t, 3, loadTotal(t, b, stream).Sum)
	require.Empty(t, failures, "no event failure was recorded")
	dls, err := mem.DeadLetters.DeadLettersList(t.Context(), &ports.DeadLettersListParams{})
	require.NoError(t, err)
	require.Empty(t, dls)
}
