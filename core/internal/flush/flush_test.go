package flush_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/vantage-go/vantage/core/internal/flush"
	"github.com/vantage-go/vantage/core/internal/retry"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitLimit bounds every wait on the code under test, so a bug fails the
// test instead of hanging it. It is never used to let time pass.
const waitLimit = 10 * time.Second

var errFlush = errors.New("database unavailable")

// recv returns the next value of ch, failing the test after waitLimit.
func recv[V any](t *testing.T, ch <-chan V) V {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("nothing received within %s", waitLimit)
		panic("unreachable")
	}
}

// requireNone fails if ch holds a value right now.
func requireNone[V any](t *testing.T, ch <-chan V, msg string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s: got %v", msg, v)
	default:
	}
}

// wait blocks until ch is closed, failing the test after waitLimit.
func wait(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	recv(t, ch)
}

// logRecorder is a slog.Handler that keeps every record and echoes it to
// the test log.
type logRecorder struct {
	t       *testing.T
	mu      sync.Mutex
	records []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	h.t.Log(r.Level, r.Message)
	return nil
}

func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// messages returns the messages logged at level.
func (h *logRecorder) messages(level slog.Level) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.records {
		if r.Level == level {
			out = append(out, r.Message)
		}
	}
	return out
}

// faultRecorder is a flush.Faults that keeps a line per call.
type faultRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *faultRecorder) add(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, line)
}

func (r *faultRecorder) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

// attr returns the value of the slog.Attr named key in attrs.
func attr(attrs []any, key string) any {
	for _, a := range attrs {
		if a, ok := a.(slog.Attr); ok && a.Key == key {
			return a.Value.Any()
		}
	}
	return nil
}

func (r *faultRecorder) Fail(_ context.Context, op string, err error, attrs ...any) {
	r.add(fmt.Sprintf("fail %s: attempt %v of a batch of %v: %v", op, attr(attrs, "attempt"), attr(attrs, "batch_size"), err))
}

func (r *faultRecorder) OK(_ context.Context, op string) { r.add("ok " + op) }

func (r *faultRecorder) Drop(_ context.Context, op, _ string, n int, err error, attrs ...any) {
	r.add(fmt.Sprintf("drop %s: %d items after %v attempts: %v", op, n, attr(attrs, "attempts"), err))
}

type dropped struct {
	batch []int
	err   error
}

type testBundle struct {
	clock   *clocktest.Fake
	flusher *flush.Flusher[int]
	logs    *logRecorder
	// calls receives the batch of every flush call; the call then blocks
	// until the test sends its result on results.
	calls   chan []int
	results chan error
	flushed chan []int
	dropped chan dropped
}

// answer receives the next flush call and makes it return err.
func (b *testBundle) answer(t *testing.T, err error) []int {
	t.Helper()
	batch := recv(t, b.calls)
	select {
	case b.results <- err:
	case <-time.After(waitLimit):
		t.Fatal("flush call did not take its result")
	}
	return batch
}

// setup builds a Flusher of ints driven by a fake clock, with flush calls
// scripted through the bundle. Unless flushFunc is given, flush hands its
// batch to the test and returns what the test answers. The Flusher is not
// started; it is closed at cleanup.
func setup(t *testing.T, opts flush.Options[int], flushFunc func(context.Context, []int) error) *testBundle {
	t.Helper()
	b := &testBundle{
		clock:   clocktest.NewFake(),
		calls:   make(chan []int),
		results: make(chan error),
		flushed: make(chan []int, 100),
		dropped: make(chan dropped, 100),
	}
	b.logs = &logRecorder{t: t}
	if flushFunc == nil {
		flushFunc = func(ctx context.Context, batch []int) error {
			select {
			case b.calls <- batch:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case err := <-b.results:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	opts.Clock = b.clock
	opts.Logger = slog.New(b.logs)
	opts.OnFlushed = func(batch []int) { b.flushed <- batch }
	opts.OnDropped = func(batch []int, err error) { b.dropped <- dropped{batch, err} }
	f, err := flush.New("test", opts, flushFunc)
	require.NoError(t, err)
	b.flusher = f
	t.Cleanup(func() {
		// Tests that check Close call it themselves. Here a done context
		// stops the loop at once, even if a scripted flush call is left
		// unanswered, so goleak sees no goroutine behind.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = f.Close(ctx)
	})
	return b
}

// started is setup followed by Start.
func started(t *testing.T, opts flush.Options[int]) *testBundle {
	t.Helper()
	b := setup(t, opts, nil)
	require.NoError(t, b.flusher.Start(t.Context()))
	return b
}

// flushAsync runs Flush in a goroutine and returns its result channel.
func flushAsync(ctx context.Context, f *flush.Flusher[int]) <-chan error {
	res := make(chan error, 1)
	go func() { res <- f.Flush(ctx) }()
	return res
}

func TestFlusher(t *testing.T) {
	t.Parallel()

	t.Run("AddAfterCloseReturnsErrClosed", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{})
		require.NoError(t, b.flusher.Close(t.Context()))
		require.ErrorIs(t, b.flusher.Add(t.Context(), 1), ports.ErrClosed)
		require.ErrorIs(t, b.flusher.Add(t.Context()), ports.ErrClosed)
		require.ErrorIs(t, b.flusher.Flush(t.Context()), ports.ErrClosed)
		require.ErrorIs(t, b.flusher.Start(t.Context()), ports.ErrClosed)
	})

	t.Run("AddBlocksWhenFullUntilContextDone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, flush.Options[int]{Capacity: 2}, nil) // not started: nothing frees room
		require.NoError(t, b.flusher.Add(t.Context(), 1, 2))

		ctx, cancel := context.WithCancel(t.Context())
		res := make(chan error, 1)
		go func() { res <- b.flusher.Add(ctx, 3) }()
		requireNone(t, res, "Add must block while the buffer is full")
		cancel()
		require.ErrorIs(t, recv(t, res), context.Canceled)

		// The rejected item was not queued: only 1 and 2 are flushed.
		require.NoError(t, b.flusher.Start(t.Context()))
		flushed := flushAsync(t.Context(), b.flusher)
		require.Equal(t, []int{1, 2}, b.answer(t, nil))
		require.NoError(t, recv(t, flushed))
	})

	t.Run("AddBlockedReturnsErrClosedOnClose", func(t *testing.T) {
		t.Parallel()
		b := setup(t, flush.Options[int]{Capacity: 1}, nil)
		require.NoError(t, b.flusher.Add(t.Context(), 1))
		res := make(chan error, 1)
		go func() { res <- b.flusher.Add(t.Context(), 2) }()

		closed := make(chan error, 1)
		go func() { closed <- b.flusher.Close(t.Context()) }()
		require.ErrorIs(t, recv(t, res), ports.ErrClosed)
		require.Equal(t, []int{1}, b.answer(t, nil), "Close drains what was queued, even unstarted")
		require.NoError(t, recv(t, closed))
	})

	t.Run("AddUnblocksWhenRoomFrees", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{Capacity: 2, ImmediateAt: 2})
		require.NoError(t, b.flusher.Add(t.Context(), 1, 2))
		require.Equal(t, []int{1, 2}, recv(t, b.calls), "the loop took 1 and 2 and is flushing")
		require.NoError(t, b.flusher.Add(t.Context(), 3, 4)) // buffer full again

		res := make(chan error, 1)
		go func() { res <- b.flusher.Add(t.Context(), 5) }()
		requireNone(t, res, "Add must block while the buffer is full")
		b.results <- nil
		require.Equal(t, []int{3, 4}, b.answer(t, nil))
		require.NoError(t, recv(t, res))

		flushed := flushAsync(t.Context(), b.flusher)
		require.Equal(t, []int{5}, b.answer(t, nil))
		require.NoError(t, recv(t, flushed))
	})

	t.Run("AddLongerThanCapacityQueuesInChunks", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{Capacity: 2, ImmediateAt: 2})
		res := make(chan error, 1)
		go func() { res <- b.flusher.Add(t.Context(), 1, 2, 3, 4, 5) }()
		require.Equal(t, []int{1, 2}, b.answer(t, nil))
		require.Equal(t, []int{3, 4}, b.answer(t, nil))
		require.NoError(t, recv(t, res))

		flushed := flushAsync(t.Context(), b.flusher)
		require.Equal(t, []int{5}, b.answer(t, nil))
		require.NoError(t, recv(t, flushed))
	})

	t.Run("AlwaysFailingDropsAfterMaxAttempts", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{})
		require.NoError(t, b.flusher.Add(t.Context(), 1, 2))
		// Only Flush can end the coalescing window while the clock stands
		// still, so the first call proves this Flush waits for the batch.
		flushed := flushAsync(t.Context(), b.flusher)

		// Waits between the 5 attempts: 100, 200, 400, 800 ms.
		waits := []time.Duration{100, 200, 400, 800}
		for attempt := range flush.MaxAttemptsDefault {
			require.Equal(t, []int{1, 2}, b.answer(t, errFlush), "attempt %d", attempt+1)
			if attempt == len(waits) {
				break
			}
			wait(t, b.clock.WaitTimers(1))
			b.clock.Advance(waits[attempt]*time.Millisecond - time.Nanosecond)
			requireNone(t, b.calls, "retried before its backoff elapsed")
			b.clock.Advance(time.Nanosecond)
		}

		d := recv(t, b.dropped)
		require.Equal(t, []int{1, 2}, d.batch)
		require.ErrorIs(t, d.err, errFlush)
		requireNone(t, b.flushed, "nothing was flushed")
		require.Len(t, b.logs.messages(slog.LevelWarn), flush.MaxAttemptsDefault-1)
		errs := b.logs.messages(slog.LevelError)
		require.Len(t, errs, 1)
		require.Contains(t, errs[0], "rows stay leased until their lease expires and are re-delivered")
		require.ErrorIs(t, recv(t, flushed), errFlush, "Flush reports the drop")

		// No sixth call: the next call carries the next batch.
		require.NoError(t, b.flusher.Add(t.Context(), 3))
		flushed = flushAsync(t.Context(), b.flusher)
		require.Equal(t, []int{3}, b.answer(t, nil))
		require.NoError(t, recv(t, flushed))
	})

	t.Run("CloseCancelsAfterDrainTimeout", func(t *testing.T) {
		t.Parallel()
		entered := make(chan []int, 10)
		b := setup(t, flush.Options[int]{ImmediateAt: 1}, func(ctx context.Context, batch []int) error {
			entered <- batch
			<-ctx.Done() // a flush that hangs until cancelled
			return ctx.Err()
		})
		require.NoError(t, b.flusher.Start(t.Context()))
		require.NoError(t, b.flusher.Add(t.Context(), 1))
		require.Equal(t, []int{1}, recv(t, entered))
		require.NoError(t, b.flusher.Add(t.Context(), 2))

		closed := make(chan error, 1)
		go func() { closed <- b.flusher.Close(t.Context()) }()
		wait(t, b.clock.WaitTimers(1))
		b.clock.Advance(flush.DrainTimeoutDefault)

		require.ErrorIs(t, recv(t, closed), flush.ErrDrainTimeout)
		d := recv(t, b.dropped)
		require.Equal(t, []int{1}, d.batch, "the hung batch is dropped")
		require.ErrorIs(t, d.err, context.Canceled)
		d = recv(t, b.dropped)
		require.Equal(t, []int{2}, d.batch, "queued items are dropped")
		require.ErrorIs(t, d.err, flush.ErrDrainTimeout)
		require.Len(t, b.logs.messages(slog.LevelError), 2)
	})

	t.Run("CloseDrainsQueuedItems", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{MaxBatch: 2})
		require.NoError(t, b.flusher.Add(t.Context(), 1))
		wait(t, b.clock.WaitTimers(1)) // coalescing; the window never elapses
		require.NoError(t, b.flusher.Add(t.Context(), 2, 3))

		closed := make(chan error, 1)
		go func() { closed <- b.flusher.Close(t.Context()) }()
		require.Equal(t, []int{1, 2}, b.answer(t, nil))
		require.Equal(t, []int{3}, b.answer(t, nil))
		require.NoError(t, recv(t, closed))
		require.Equal(t, []int{1, 2}, recv(t, b.flushed))
		require.Equal(t, []int{3}, recv(t, b.flushed))
		requireNone(t, b.dropped, "nothing dropped")
	})

	t.Run("CloseIsIdempotent", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{})
		require.NoError(t, b.flusher.Close(t.Context()))
		require.NoError(t, b.flusher.Close(t.Context()))

		unstarted := setup(t, flush.Options[int]{}, nil)
		require.NoError(t, unstarted.flusher.Close(t.Context()))
		require.NoError(t, unstarted.flusher.Close(t.Context()))
	})

	t.Run("CloseReturnsWhenContextDone", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{ImmediateAt: 1})
		require.NoError(t, b.flusher.Add(t.Context(), 1))
		require.Equal(t, []int{1}, recv(t, b.calls)) // never answered

		ctx, cancel := context.WithCancel(t.Context())
		closed := make(chan error, 1)
		go func() { closed <- b.flusher.Close(ctx) }()
		wait(t, b.clock.WaitTimers(1))
		cancel()
		require.ErrorIs(t, recv(t, closed), context.Canceled)
		d := recv(t, b.dropped)
		require.Equal(t, []int{1}, d.batch)
	})

	t.Run("CoalescesUntilThreshold", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{ImmediateAt: 3})
		require.NoError(t, b.flusher.Add(t.Context(), 1, 2))
		wait(t, b.clock.WaitTimers(1))
		requireNone(t, b.calls, "below the threshold the window is still open")
		require.NoError(t, b.flusher.Add(t.Context(), 3))
		require.Equal(t, []int{1, 2, 3}, b.answer(t, nil), "the threshold flushes without the clock moving")
		require.Equal(t, []int{1, 2, 3}, recv(t, b.flushed))
	})

	t.Run("CoalescesUntilMaxBatch", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{MaxBatch: 2}) // ImmediateAt 500 acts as 2
		require.NoError(t, b.flusher.Add(t.Context(), 1, 2, 3, 4, 5))
		require.Equal(t, []int{1, 2}, b.answer(t, nil))
		require.Equal(t, []int{3, 4}, b.answer(t, nil))

		wait(t, b.clock.WaitTimers(1))
		requireNone(t, b.calls, "one item waits for its window")
		b.clock.Advance(flush.CoalesceDefault)
		require.Equal(t, []int{5}, b.answer(t, nil))
	})

	t.Run("CoalescesUntilWindowElapses", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{})
		require.NoError(t, b.flusher.Add(t.Context(), 1))
		wait(t, b.clock.WaitTimers(1))
		require.NoError(t, b.flusher.Add(t.Context(), 2))
		require.NoError(t, b.flusher.Add(t.Context(), 3))

		b.clock.Advance(flush.CoalesceDefault - time.Nanosecond)
		requireNone(t, b.calls, "flushed before the window elapsed")
		b.clock.Advance(time.Nanosecond)
		require.Equal(t, []int{1, 2, 3}, b.answer(t, nil))
		require.Equal(t, []int{1, 2, 3}, recv(t, b.flushed))
	})

	t.Run("FailOnceRetriesSameBatch", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{ImmediateAt: 3})
		require.NoError(t, b.flusher.Add(t.Context(), 1, 2, 3))
		require.Equal(t, []int{1, 2, 3}, b.answer(t, errFlush))

		wait(t, b.clock.WaitTimers(1)) // backing off
		require.NoError(t, b.flusher.Add(t.Context(), 4, 5))
		b.clock.Advance(flush.RetryDefault.Initial)
		require.Equal(t, []int{1, 2, 3}, b.answer(t, nil), "same batch, same order")

		flushed := flushAsync(t.Context(), b.flusher)
		require.Equal(t, []int{4, 5}, b.answer(t, nil), "later items follow, unmixed")
		require.NoError(t, recv(t, flushed))

		require.Equal(t, []int{1, 2, 3}, recv(t, b.flushed))
		require.Equal(t, []int{4, 5}, recv(t, b.flushed))
		requireNone(t, b.dropped, "nothing dropped")
		warns := b.logs.messages(slog.LevelWarn)
		require.Len(t, warns, 1)
		require.Contains(t, warns[0], "retrying")
		require.Empty(t, b.logs.messages(slog.LevelError))
	})

	t.Run("FaultsTakeRetriesAndDropsFromTheLogger", func(t *testing.T) {
		t.Parallel()
		faults := &faultRecorder{}
		b := started(t, flush.Options[int]{MaxAttempts: 2, Faults: faults})
		require.NoError(t, b.flusher.Add(t.Context(), 1, 2))
		flushed := flushAsync(t.Context(), b.flusher)
		require.Equal(t, []int{1, 2}, b.answer(t, errFlush))
		wait(t, b.clock.WaitTimers(1))
		b.clock.Advance(flush.RetryDefault.Initial)
		require.Equal(t, []int{1, 2}, b.answer(t, errFlush))
		require.ErrorIs(t, recv(t, flushed), errFlush)
		require.NoError(t, b.flusher.Add(t.Context(), 3))
		flushed = flushAsync(t.Context(), b.flusher)
		require.Equal(t, []int{3}, b.answer(t, nil))
		require.NoError(t, recv(t, flushed))

		require.Equal(t, []string{
			"fail flushing test: attempt 1 of a batch of 2: database unavailable",
			"drop flushing test: 2 items after 2 attempts: database unavailable",
			"ok flushing test",
		}, faults.calls(), "each failed call retried, each drop and each success, in order")
		require.Empty(t, b.logs.messages(slog.LevelWarn), "the retries went to Faults only")
		require.Empty(t, b.logs.messages(slog.LevelError), "the drop went to Faults only")
	})

	t.Run("FlushReportsDroppedItems", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{MaxAttempts: 1})
		require.NoError(t, b.flusher.Add(t.Context(), 1))
		flushed := flushAsync(t.Context(), b.flusher)
		require.Equal(t, []int{1}, b.answer(t, errFlush))
		err := recv(t, flushed)
		require.ErrorIs(t, err, errFlush)
		require.ErrorContains(t, err, "dropped a batch of 1 after 1 attempts")
	})

	t.Run("FlushReturnsAtOnceWhenNothingQueued", func(t *testing.T) {
		t.Parallel()
		b := setup(t, flush.Options[int]{}, nil) // not even started
		require.NoError(t, b.flusher.Flush(t.Context()))
	})

	t.Run("FlushReturnsWhenContextDone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, flush.Options[int]{}, nil) // not started: the item waits
		require.NoError(t, b.flusher.Add(t.Context(), 1))
		ctx, cancel := context.WithCancel(t.Context())
		flushed := flushAsync(ctx, b.flusher)
		cancel()
		require.ErrorIs(t, recv(t, flushed), context.Canceled)
	})

	t.Run("FlushWaitsUntilFlushed", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{})
		require.NoError(t, b.flusher.Add(t.Context(), 1, 2))
		flushed := flushAsync(t.Context(), b.flusher)

		require.Equal(t, []int{1, 2}, recv(t, b.calls), "Flush ends the window without the clock moving")
		requireNone(t, flushed, "Flush returned while the batch was still being flushed")
		b.results <- nil
		require.NoError(t, recv(t, flushed))
		require.Equal(t, []int{1, 2}, recv(t, b.flushed), "OnFlushed ran before Flush returned")
	})

	t.Run("InvalidOptions", func(t *testing.T) {
		t.Parallel()
		noop := func(context.Context, []int) error { return nil }
		for _, tc := range []struct {
			opts flush.Options[int]
			want string
		}{
			{flush.Options[int]{MaxBatch: -1}, "flush.Options.MaxBatch must not be negative, got -1"},
			{flush.Options[int]{Coalesce: -1}, "flush.Options.Coalesce must not be negative"},
			{flush.Options[int]{ImmediateAt: -1}, "flush.Options.ImmediateAt must not be negative"},
			{flush.Options[int]{Capacity: -1}, "flush.Options.Capacity must not be negative"},
			{flush.Options[int]{MaxAttempts: -1}, "flush.Options.MaxAttempts must not be negative"},
			{flush.Options[int]{Retry: retry.Backoff{Initial: -1}}, "flush.Options.Retry: invalid backoff: Initial must be positive"},
			{flush.Options[int]{Retry: retry.Backoff{Max: -1}}, "flush.Options.Retry: invalid backoff: Max must be positive"},
			{flush.Options[int]{DrainTimeout: -1}, "flush.Options.DrainTimeout must not be negative"},
			{flush.Options[int]{Retry: retry.Backoff{Initial: time.Minute}}, "flush.Options.Retry: invalid backoff: Max (5s) must not be below Initial (1m0s)"},
			{flush.Options[int]{Retry: retry.Backoff{Multiplier: 0.5}}, "flush.Options.Retry: invalid backoff: Multiplier must be at least 1, got 0.5"},
			{flush.Options[int]{Retry: retry.Backoff{Jitter: 2}}, "flush.Options.Retry: invalid backoff: Jitter must be within [0, 1], got 2"},
		} {
			f, err := flush.New("test", tc.opts, noop)
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, f)
		}

		_, err := flush.New[int]("", flush.Options[int]{}, nil)
		require.ErrorContains(t, err, "name must not be empty")
		require.ErrorContains(t, err, "flush func must not be nil")
	})

	t.Run("CoalesceReportsTheWindow", func(t *testing.T) {
		t.Parallel()
		noop := func(context.Context, []int) error { return nil }
		f, err := flush.New("test", flush.Options[int]{}, noop)
		require.NoError(t, err)
		require.Equal(t, flush.CoalesceDefault, f.Coalesce())
		f, err = flush.New("test", flush.Options[int]{Coalesce: 7 * time.Millisecond}, noop)
		require.NoError(t, err)
		require.Equal(t, 7*time.Millisecond, f.Coalesce())
	})

	t.Run("KeepsFIFOOrderAcrossBatches", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{MaxBatch: 3})
		var want []int
		for i := range 10 {
			require.NoError(t, b.flusher.Add(t.Context(), i))
			want = append(want, i)
		}
		flushed := flushAsync(t.Context(), b.flusher)
		var got []int
		for len(got) < len(want) {
			batch := b.answer(t, nil)
			require.LessOrEqual(t, len(batch), 3)
			got = append(got, batch...)
		}
		require.NoError(t, recv(t, flushed))
		require.Equal(t, want, got)
	})

	t.Run("StartIsIdempotent", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{ImmediateAt: 1})
		require.NoError(t, b.flusher.Start(t.Context()))
		require.NoError(t, b.flusher.Add(t.Context(), 1))
		require.Equal(t, []int{1}, b.answer(t, nil))
	})

	t.Run("StartContextCancellationDoesNotStopLoop", func(t *testing.T) {
		t.Parallel()
		b := setup(t, flush.Options[int]{ImmediateAt: 1}, nil)
		ctx, cancel := context.WithCancel(t.Context())
		require.NoError(t, b.flusher.Start(ctx))
		cancel()
		require.NoError(t, b.flusher.Add(t.Context(), 1))
		require.Equal(t, []int{1}, b.answer(t, nil))
	})

	t.Run("ConcurrentAddersLoseNothing", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var got []int
		b := setup(t, flush.Options[int]{MaxBatch: 7, Capacity: 16, ImmediateAt: 5}, func(_ context.Context, batch []int) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, batch...)
			return nil
		})
		require.NoError(t, b.flusher.Start(t.Context()))
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 50 {
					_ = b.flusher.Add(t.Context(), g*1000+i)
				}
			})
		}
		wg.Wait()
		require.NoError(t, b.flusher.Flush(t.Context()))

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, got, 200)
		for g := range 4 { // each adder's items keep their order
			var mine []int
			for _, v := range got {
				if v/1000 == g {
					mine = append(mine, v)
				}
			}
			require.True(t, slices.IsSorted(mine), "adder %d reordered", g)
			require.Len(t, mine, 50)
		}
	})
}

func TestRetryMultiplierGrowsWaits(t *testing.T) {
	t.Parallel()

	b := started(t, flush.Options[int]{ImmediateAt: 1, MaxAttempts: 4, Retry: retry.Backoff{Multiplier: 3, Max: 500 * time.Millisecond}})
	require.NoError(t, b.flusher.Add(t.Context(), 1))
	// Waits between the 4 attempts: 100ms, 300ms, then 900ms capped at
	// 500ms.
	waits := []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond}
	for attempt, w := range waits {
		require.Equal(t, []int{1}, b.answer(t, errFlush), "attempt %d", attempt+1)
		wait(t, b.clock.WaitTimers(1))
		b.clock.Advance(w - time.Nanosecond)
		requireNone(t, b.calls, "retried before its backoff elapsed")
		b.clock.Advance(time.Nanosecond)
	}
	require.Equal(t, []int{1}, b.answer(t, nil), "attempt 4")
	require.Equal(t, []int{1}, recv(t, b.flushed))
}

// OnRetry hears of every retry, before its backoff, with the attempt that
// failed; neither the last failed attempt nor a success is a retry.
func TestOnRetryReportsEachRetry(t *testing.T) {
	t.Parallel()

	type retried struct {
		batch   []int
		attempt int
		err     error
	}
	retries := make(chan retried, 10)
	b := started(t, flush.Options[int]{ImmediateAt: 2, MaxAttempts: 3, OnRetry: func(batch []int, attempt int, err error) {
		retries <- retried{batch, attempt, err}
	}})
	require.NoError(t, b.flusher.Add(t.Context(), 1, 2))
	for attempt := 1; attempt <= 2; attempt++ {
		require.Equal(t, []int{1, 2}, b.answer(t, errFlush), "attempt %d", attempt)
		r := recv(t, retries)
		require.Equal(t, retried{[]int{1, 2}, attempt, errFlush}, r)
		wait(t, b.clock.WaitTimers(1))
		b.clock.Advance(time.Minute)
	}
	require.Equal(t, []int{1, 2}, b.answer(t, errFlush), "attempt 3, the last")
	require.Equal(t, []int{1, 2}, recv(t, b.dropped).batch)
	requireNone(t, retries, "the last attempt is not followed by a retry")

	require.NoError(t, b.flusher.Add(t.Context(), 3, 4))
	require.Equal(t, []int{3, 4}, b.answer(t, nil))
	require.Equal(t, []int{3, 4}, recv(t, b.flushed))
	requireNone(t, retries, "a batch flushed at once was not retried")
}

func TestPermanentErrorDropsAtOnce(t *testing.T) {
	t.Parallel()

	for _, sentinel := range []error{ports.ErrInvalidArgument, ports.ErrNotFound} {
		t.Run(sentinel.Error(), func(t *testing.T) {
			t.Parallel()
			b := started(t, flush.Options[int]{})
			require.NoError(t, b.flusher.Add(t.Context(), 1))
			// Only Flush can end the coalescing window while the clock
			// stands still, so the first call proves this Flush waits for
			// the batch.
			flushed := flushAsync(t.Context(), b.flusher)
			refused := fmt.Errorf("completing work: nil stream id: %w", sentinel)
			require.Equal(t, []int{1}, b.answer(t, refused))

			d := recv(t, b.dropped)
			require.Equal(t, []int{1}, d.batch)
			require.ErrorIs(t, d.err, sentinel)
			requireNone(t, b.flushed, "nothing was flushed")
			require.Empty(t, b.logs.messages(slog.LevelWarn), "a permanent error is not retried")
			errs := b.logs.messages(slog.LevelError)
			require.Len(t, errs, 1)
			require.Contains(t, errs[0], "not retried")
			require.ErrorIs(t, recv(t, flushed), sentinel, "Flush reports the drop")

			// No second call of the batch: the next call carries the next
			// batch, without any backoff.
			require.NoError(t, b.flusher.Add(t.Context(), 3, 4))
			flushed = flushAsync(t.Context(), b.flusher)
			require.Equal(t, []int{3, 4}, b.answer(t, nil))
			require.Equal(t, []int{3, 4}, recv(t, b.flushed))
			require.NoError(t, recv(t, flushed))
		})
	}
}

// One item the backend refuses fails the whole call: the batch is halved
// until it is alone, so every other item still lands, in order.
func TestPermanentErrorIsolatesTheRefusedItem(t *testing.T) {
	t.Parallel()

	b := started(t, flush.Options[int]{})
	require.NoError(t, b.flusher.Add(t.Context(), 1, 2, 3, 4))
	flushed := flushAsync(t.Context(), b.flusher)
	refused := fmt.Errorf("completing work: nil stream id: %w", ports.ErrInvalidArgument)
	require.Equal(t, []int{1, 2, 3, 4}, b.answer(t, refused))
	require.Equal(t, []int{1, 2}, b.answer(t, nil))
	require.Equal(t, []int{1, 2}, recv(t, b.flushed))
	require.Equal(t, []int{3, 4}, b.answer(t, refused))
	require.Equal(t, []int{3}, b.answer(t, refused))
	d := recv(t, b.dropped)
	require.Equal(t, []int{3}, d.batch, "only the refused item is dropped")
	require.ErrorIs(t, d.err, ports.ErrInvalidArgument)
	require.Equal(t, []int{4}, b.answer(t, nil))
	require.Equal(t, []int{4}, recv(t, b.flushed))
	require.ErrorIs(t, recv(t, flushed), ports.ErrInvalidArgument, "Flush reports the drop")
	require.Empty(t, b.logs.messages(slog.LevelWarn), "a permanent error is not retried")
	require.Len(t, b.logs.messages(slog.LevelError), 1, "one drop, one error")
}

func TestDropLogNamesLeaseConsequence(t *testing.T) {
	t.Parallel()

	b := started(t, flush.Options[int]{MaxAttempts: 1, ImmediateAt: 1})
	require.NoError(t, b.flusher.Add(t.Context(), 7))
	require.Equal(t, []int{7}, b.answer(t, errFlush))
	recv(t, b.dropped)
	errs := b.logs.messages(slog.LevelError)
	require.Len(t, errs, 1)
	require.True(t, strings.Contains(errs[0], "lease"), errs[0])
	require.Empty(t, b.logs.messages(slog.LevelWarn), "no retry with MaxAttempts 1")
}

func TestBusy(t *testing.T) {
	t.Parallel()

	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	f, err := flush.New("busy", flush.Options[int]{MaxBatch: 1, Clock: clocktest.NewFake()}, func(ctx context.Context, batch []int) error {
		entered <- struct{}{}
		<-release
		return nil
	})
	require.NoError(t, err)
	require.False(t, f.Busy(), "a new flusher is idle")
	require.NoError(t, f.Start(t.Context()))
	require.NoError(t, f.Add(t.Context(), 1))
	require.True(t, f.Busy(), "an accepted item keeps it busy")
	<-entered
	require.True(t, f.Busy(), "a flush in progress keeps it busy")
	close(release)
	require.NoError(t, f.Flush(t.Context()))
	require.False(t, f.Busy(), "idle once everything settled")
	require.NoError(t, f.Close(t.Context()))
}

func TestAfterSettled(t *testing.T) {
	t.Parallel()

	t.Run("NothingPendingRunsAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, flush.Options[int]{}, nil)
		ran := false
		b.flusher.AfterSettled(func() { ran = true })
		require.True(t, ran, "runs on the calling goroutine")
	})

	t.Run("RunsAfterTheBatchSettlingTheLastQueuedItem", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{ImmediateAt: 2, MaxBatch: 2})
		require.NoError(t, b.flusher.Add(t.Context(), 1, 2, 3))
		ran := make(chan struct{})
		b.flusher.AfterSettled(func() { close(ran) })
		require.NoError(t, b.flusher.Add(t.Context(), 4)) // queued after the call: not waited for
		require.Equal(t, []int{1, 2}, b.answer(t, nil))
		require.Equal(t, []int{1, 2}, recv(t, b.flushed))
		requireNone(t, ran, "3 is not settled yet")
		require.Equal(t, []int{3, 4}, b.answer(t, nil))
		wait(t, ran)
		require.Equal(t, []int{3, 4}, recv(t, b.flushed), "OnFlushed ran before")
	})

	t.Run("RunsForDroppedItems", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{MaxAttempts: 1, ImmediateAt: 1})
		require.NoError(t, b.flusher.Add(t.Context(), 1))
		ran := make(chan struct{})
		b.flusher.AfterSettled(func() { close(ran) })
		require.Equal(t, []int{1}, b.answer(t, errFlush))
		wait(t, ran)
	})

	t.Run("RunsWhenCloseDrains", func(t *testing.T) {
		t.Parallel()
		b := setup(t, flush.Options[int]{}, nil) // never started
		require.NoError(t, b.flusher.Add(t.Context(), 1))
		ran := make(chan struct{})
		b.flusher.AfterSettled(func() { close(ran) })
		closed := make(chan error, 1)
		go func() { closed <- b.flusher.Close(t.Context()) }()
		require.Equal(t, []int{1}, b.answer(t, nil))
		wait(t, ran)
		require.NoError(t, recv(t, closed))
	})
}

func TestHurry(t *testing.T) {
	t.Parallel()

	t.Run("SendsWithoutWaitingForTheWindow", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{ImmediateAt: 10})
		require.NoError(t, b.flusher.Add(t.Context(), 1, 2))
		<-b.clock.WaitTimers(1) // the coalescing window is open
		b.flusher.Hurry()
		require.Equal(t, []int{1, 2}, b.answer(t, nil), "sent with the clock unmoved")
		require.Equal(t, []int{1, 2}, recv(t, b.flushed))
	})

	t.Run("NothingPendingDoesNothing", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{ImmediateAt: 10})
		b.flusher.Hurry()
		require.NoError(t, b.flusher.Add(t.Context(), 1))
		<-b.clock.WaitTimers(1)
		select {
		case batch := <-b.calls:
			t.Fatalf("an earlier Hurry sent %v before its window", batch)
		default:
		}
		b.clock.Advance(flush.CoalesceDefault)
		require.Equal(t, []int{1}, b.answer(t, nil), "sent when the window elapsed")
	})
}

func TestWaitBelow(t *testing.T) {
	t.Parallel()

	t.Run("ReturnsAtOnceBelowTheLimit", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{ImmediateAt: 10, Weight: func(n int) int { return n }})
		require.NoError(t, b.flusher.Add(t.Context(), 2, 3))
		waited := false
		require.NoError(t, b.flusher.WaitBelow(t.Context(), 6, func() { waited = true }))
		require.False(t, waited, "2+3 weigh less than 6")
	})

	t.Run("WaitsUntilSettledItemsLightenTheQueue", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{ImmediateAt: 10, MaxBatch: 1, Weight: func(n int) int { return n }})
		require.NoError(t, b.flusher.Add(t.Context(), 4, 3))
		waiting := make(chan struct{})
		done := make(chan error, 1)
		go func() { done <- b.flusher.WaitBelow(t.Context(), 4, func() { close(waiting) }) }()
		wait(t, waiting)
		// The clock never moves: the wait ends the coalescing window.
		require.Equal(t, []int{4}, b.answer(t, nil))
		require.NoError(t, recv(t, done), "3 left, below 4")
	})

	t.Run("CountsDroppedItemsAsSettled", func(t *testing.T) {
		t.Parallel()
		b := started(t, flush.Options[int]{MaxAttempts: 1, ImmediateAt: 1})
		require.NoError(t, b.flusher.Add(t.Context(), 1))
		done := make(chan error, 1)
		go func() { done <- b.flusher.WaitBelow(t.Context(), 1, nil) }()
		require.Equal(t, []int{1}, b.answer(t, errFlush))
		require.NoError(t, recv(t, done))
	})

	t.Run("ReturnsWhenTheContextEnds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, flush.Options[int]{}, nil) // never started: nothing settles
		require.NoError(t, b.flusher.Add(t.Context(), 1))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		require.ErrorIs(t, b.flusher.WaitBelow(ctx, 1, nil), context.Canceled)
	})
}
