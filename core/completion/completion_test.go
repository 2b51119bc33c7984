package completion_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/vantage-go/vantage/core/completion"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// countingReporter records every call it receives.
type countingReporter struct {
	mu          sync.Mutex
	completions [][]ports.Completion
	failures    [][]ports.Failure
	err         error
}

func (r *countingReporter) Complete(_ context.Context, items []ports.Completion) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.completions = append(r.completions, items)
	return r.err
}

func (r *countingReporter) Fail(_ context.Context, items []ports.Failure) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, items)
	return r.err
}

func newCompletion() ports.Completion {
	return ports.Completion{
		StreamID:    uuid.New(),
		Perspective: "orders",
		LastEventID: uuid.New(),
		LastVersion: 3,
		WorkIDs:     []uuid.UUID{uuid.New()},
	}
}

func newFailure() ports.Failure {
	return ports.Failure{
		StreamID:      uuid.New(),
		Perspective:   "orders",
		FailedWorkIDs: []uuid.UUID{uuid.New()},
		Error:         "boom",
	}
}

func trackingIDs[T any](items []completion.Tracked[T]) []uuid.UUID {
	out := make([]uuid.UUID, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

func items[T any](tracked []completion.Tracked[T]) []T {
	out := make([]T, len(tracked))
	for i, it := range tracked {
		out[i] = it.Item
	}
	return out
}

func TestBatched(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		clock    *clocktest.Fake
		strategy *completion.Batched
	}

	setup := func(t *testing.T, opts completion.BatchedOptions) *testBundle {
		t.Helper()
		s, err := completion.NewBatched(opts)
		require.NoError(t, err)
		return &testBundle{clock: clocktest.NewFake(), strategy: s}
	}

	// sendAll marks every Pending item Sent at the clock's time.
	sendAll := func(b *testBundle) {
		b.strategy.MarkSent(trackingIDs(b.strategy.PendingCompletions()), b.clock.Now())
		b.strategy.MarkSent(trackingIDs(b.strategy.PendingFailures()), b.clock.Now())
	}

	t.Run("AckByIdentityNewerLeavesOlderSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, completion.BatchedOptions{})
		older, newer := newCompletion(), newCompletion()

		// Idle tick: older is sent but its acknowledgement is not recorded.
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), older))
		olderID := b.strategy.PendingCompletions()[0].ID
		b.strategy.MarkSent([]uuid.UUID{olderID}, b.clock.Now())

		// Next batch: newer is sent and acknowledged by its own id.
		b.clock.Advance(500 * time.Millisecond)
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), newer))
		newerID := b.strategy.PendingCompletions()[0].ID
		b.strategy.MarkSent([]uuid.UUID{newerID}, b.clock.Now())
		b.strategy.MarkAcknowledged([]uuid.UUID{newerID})
		b.strategy.ClearAcknowledged()

		// Only older, still unacknowledged, is re-queued.
		b.clock.Advance(time.Second)
		require.Equal(t, 1, b.strategy.ResetStale(b.clock.Now()))
		pending := b.strategy.PendingCompletions()
		require.Equal(t, []ports.Completion{older}, items(pending))
		require.Equal(t, olderID, pending[0].ID)
		require.Equal(t, 1, pending[0].RetryCount)
	})

	t.Run("AckByIdentityOlderLeavesNewerSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, completion.BatchedOptions{})
		older, newer := newCompletion(), newCompletion()
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), older))
		olderID := b.strategy.PendingCompletions()[0].ID
		b.strategy.MarkSent([]uuid.UUID{olderID}, b.clock.Now())
		b.clock.Advance(500 * time.Millisecond)
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), newer))
		newerID := b.strategy.PendingCompletions()[0].ID
		b.strategy.MarkSent([]uuid.UUID{newerID}, b.clock.Now())

		b.strategy.MarkAcknowledged([]uuid.UUID{olderID, uuid.New()}) // unknown id ignored
		b.strategy.ClearAcknowledged()

		b.clock.Advance(time.Second + time.Nanosecond)
		require.Equal(t, 1, b.strategy.ResetStale(b.clock.Now()))
		require.Equal(t, []ports.Completion{newer}, items(b.strategy.PendingCompletions()))
	})

	t.Run("AcknowledgementFlowRemovesAcknowledgedItems", func(t *testing.T) {
		t.Parallel()
		b := setup(t, completion.BatchedOptions{})
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), newCompletion()))
		require.NoError(t, b.strategy.ReportFailure(t.Context(), newFailure()))
		ids := append(trackingIDs(b.strategy.PendingCompletions()), trackingIDs(b.strategy.PendingFailures())...)

		b.strategy.MarkSent(ids, b.clock.Now())
		require.Empty(t, b.strategy.PendingCompletions())
		require.Empty(t, b.strategy.PendingFailures())
		b.strategy.MarkAcknowledged(ids)
		b.strategy.ClearAcknowledged()

		b.clock.Advance(time.Hour)
		require.Zero(t, b.strategy.ResetStale(b.clock.Now()), "nothing is left to re-queue")
		require.Empty(t, b.strategy.PendingCompletions())
		require.Empty(t, b.strategy.PendingFailures())
	})

	t.Run("ConcurrentUse", func(t *testing.T) {
		t.Parallel()
		b := setup(t, completion.BatchedOptions{})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 50 {
					_ = b.strategy.ReportCompletion(t.Context(), newCompletion())
					_ = b.strategy.ReportFailure(t.Context(), newFailure())
					ids := append(trackingIDs(b.strategy.PendingCompletions()), trackingIDs(b.strategy.PendingFailures())...)
					b.strategy.MarkSent(ids, b.clock.Now())
					b.strategy.MarkAcknowledged(ids)
					b.strategy.ResetStale(b.clock.Now())
					b.strategy.ClearAcknowledged()
				}
			})
		}
		wg.Wait()
		sendAll(b)
		b.strategy.MarkAcknowledged(append(
			trackingIDs(b.strategy.PendingCompletions()), trackingIDs(b.strategy.PendingFailures())...))
		b.clock.Advance(time.Hour)
		require.Zero(t, b.strategy.ResetStale(b.clock.Now()), "every item was acknowledged")
	})

	t.Run("GetPendingCompletionsReturnsCollectedCompletions", func(t *testing.T) {
		t.Parallel()
		b := setup(t, completion.BatchedOptions{})
		first, second := newCompletion(), newCompletion()
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), first))
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), second))

		pending := b.strategy.PendingCompletions()
		require.Equal(t, []ports.Completion{first, second}, items(pending))
		for _, it := range pending {
			require.Equal(t, completion.Pending, it.Status)
			require.True(t, it.SentAt.IsZero())
			require.NotEqual(t, uuid.Nil, it.ID)
		}
		require.NotEqual(t, pending[0].ID, pending[1].ID)
		require.Empty(t, b.strategy.PendingFailures())
	})

	t.Run("GetPendingFailuresReturnsCollectedFailures", func(t *testing.T) {
		t.Parallel()
		b := setup(t, completion.BatchedOptions{})
		first, second := newFailure(), newFailure()
		require.NoError(t, b.strategy.ReportFailure(t.Context(), first))
		require.NoError(t, b.strategy.ReportFailure(t.Context(), second))
		require.Equal(t, []ports.Failure{first, second}, items(b.strategy.PendingFailures()))
		require.Empty(t, b.strategy.PendingCompletions())
	})

	t.Run("InvalidOptions", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			opts completion.BatchedOptions
			want string
		}{
			{completion.BatchedOptions{BaseTimeout: -1}, "BatchedOptions.BaseTimeout must not be negative"},
			{completion.BatchedOptions{MaxTimeout: -1}, "BatchedOptions.MaxTimeout must not be negative"},
			{completion.BatchedOptions{Multiplier: 0.5}, "BatchedOptions.Multiplier must be at least 1"},
			{completion.BatchedOptions{Multiplier: math.NaN()}, "BatchedOptions.Multiplier must be at least 1"},
			{completion.BatchedOptions{BaseTimeout: 2 * time.Minute}, "BatchedOptions.MaxTimeout (1m0s) must not be below BatchedOptions.BaseTimeout (2m0s)"},
		} {
			_, err := completion.NewBatched(tc.opts)
			require.ErrorContains(t, err, tc.want)
		}
	})

	t.Run("LateAckSettlesRequeuedItem", func(t *testing.T) {
		t.Parallel()
		b := setup(t, completion.BatchedOptions{})
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), newCompletion()))
		sendAll(b)
		require.Empty(t, b.strategy.PendingCompletions())
		b.clock.Advance(2 * time.Second)
		require.Equal(t, 1, b.strategy.ResetStale(b.clock.Now()))
		requeued := b.strategy.PendingCompletions()
		require.Len(t, requeued, 1)

		b.strategy.MarkAcknowledged(trackingIDs(requeued))
		require.Empty(t, b.strategy.PendingCompletions(), "the flush that was in flight succeeded after all")
	})

	t.Run("MarkSentIgnoresUnknownAndAcknowledged", func(t *testing.T) {
		t.Parallel()
		b := setup(t, completion.BatchedOptions{})
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), newCompletion()))
		ids := trackingIDs(b.strategy.PendingCompletions())
		b.strategy.MarkSent([]uuid.UUID{uuid.New()}, b.clock.Now())
		require.Len(t, b.strategy.PendingCompletions(), 1)

		b.strategy.MarkAcknowledged(ids)
		b.strategy.MarkSent(ids, b.clock.Now())
		b.clock.Advance(time.Hour)
		require.Zero(t, b.strategy.ResetStale(b.clock.Now()), "an Acknowledged item is never sent again")
	})

	t.Run("MultiplierIsOneWhenExponentialBackoffDisabled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, completion.BatchedOptions{Multiplier: 3, DisableExponentialBackoff: true})
		for n := range 10 {
			require.Equal(t, completion.BaseTimeoutDefault, b.strategy.Timeout(n), "retry %d", n)
		}

		require.NoError(t, b.strategy.ReportCompletion(t.Context(), newCompletion()))
		for retry := range 3 {
			sendAll(b)
			b.clock.Advance(time.Second)
			require.Zero(t, b.strategy.ResetStale(b.clock.Now()), "retry %d", retry)
			b.clock.Advance(time.Nanosecond)
			require.Equal(t, 1, b.strategy.ResetStale(b.clock.Now()), "retry %d", retry)
		}
	})

	t.Run("OverflowClampsToMax", func(t *testing.T) {
		t.Parallel()
		b := setup(t, completion.BatchedOptions{})
		require.Equal(t, completion.MaxTimeoutDefault, b.strategy.Timeout(2000))
		require.Equal(t, completion.MaxTimeoutDefault, b.strategy.Timeout(math.MaxInt))

		huge := setup(t, completion.BatchedOptions{Multiplier: math.MaxFloat64})
		require.Equal(t, completion.MaxTimeoutDefault, huge.strategy.Timeout(2))

		// Drive a real item to RetryCount 2000: it is still re-queued after
		// the capped timeout, never after an overflowed one.
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), newCompletion()))
		for range 2000 {
			sendAll(b)
			b.clock.Advance(completion.MaxTimeoutDefault + time.Nanosecond)
			require.Equal(t, 1, b.strategy.ResetStale(b.clock.Now()))
		}
		require.Equal(t, 2000, b.strategy.PendingCompletions()[0].RetryCount)
		sendAll(b)
		b.clock.Advance(completion.MaxTimeoutDefault)
		require.Zero(t, b.strategy.ResetStale(b.clock.Now()))
		b.clock.Advance(time.Nanosecond)
		require.Equal(t, 1, b.strategy.ResetStale(b.clock.Now()))
	})

	t.Run("PendingOrderedBySentAtThenReportOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, completion.BatchedOptions{})
		first, second, third := newCompletion(), newCompletion(), newCompletion()
		for _, c := range []ports.Completion{first, second, third} {
			require.NoError(t, b.strategy.ReportCompletion(t.Context(), c))
		}
		ids := trackingIDs(b.strategy.PendingCompletions())
		b.strategy.MarkSent(ids[:1], b.clock.Now())
		b.clock.Advance(2 * time.Second)
		require.Equal(t, 1, b.strategy.ResetStale(b.clock.Now()))

		// first was sent once (SentAt set); second and third never were.
		require.Equal(t, []ports.Completion{second, third, first}, items(b.strategy.PendingCompletions()))
	})

	t.Run("ReportCompletionDoesNotCallReporterImmediately", func(t *testing.T) {
		t.Parallel()
		b := setup(t, completion.BatchedOptions{})
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), newCompletion()))
		// Batched holds no Reporter: the outcome only waits to be flushed.
		require.Len(t, b.strategy.PendingCompletions(), 1)
		require.Empty(t, b.strategy.PendingFailures())
	})

	t.Run("ReportFailureDoesNotCallReporterImmediately", func(t *testing.T) {
		t.Parallel()
		b := setup(t, completion.BatchedOptions{})
		require.NoError(t, b.strategy.ReportFailure(t.Context(), newFailure()))
		require.Len(t, b.strategy.PendingFailures(), 1)
		require.Empty(t, b.strategy.PendingCompletions())
	})

	t.Run("ResetStaleBackoffSequence", func(t *testing.T) {
		t.Parallel()
		b := setup(t, completion.BatchedOptions{})
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), newCompletion()))
		require.NoError(t, b.strategy.ReportFailure(t.Context(), newFailure()))

		want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
		for retry, secs := range want {
			timeout := secs * time.Second
			require.Equal(t, timeout, b.strategy.Timeout(retry))

			sendAll(b)
			b.clock.Advance(timeout)
			require.Zero(t, b.strategy.ResetStale(b.clock.Now()), "retry %d: not yet stale at exactly %s", retry, timeout)
			b.clock.Advance(time.Nanosecond)
			require.Equal(t, 2, b.strategy.ResetStale(b.clock.Now()), "retry %d: stale just after %s", retry, timeout)
			require.Equal(t, retry+1, b.strategy.PendingCompletions()[0].RetryCount)
			require.Equal(t, retry+1, b.strategy.PendingFailures()[0].RetryCount)
		}
	})
}

func TestInstant(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		reporter *countingReporter
		strategy *completion.Instant
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		r := &countingReporter{}
		return &testBundle{reporter: r, strategy: completion.NewInstant(r)}
	}

	t.Run("GetPendingCompletionsAlwaysReturnsEmpty", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), newCompletion()))
		require.Empty(t, b.strategy.PendingCompletions())
	})

	t.Run("GetPendingFailuresAlwaysReturnsEmpty", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, b.strategy.ReportFailure(t.Context(), newFailure()))
		require.Empty(t, b.strategy.PendingFailures())
	})

	t.Run("NilReporterPanics", func(t *testing.T) {
		t.Parallel()
		require.Panics(t, func() { completion.NewInstant(nil) })
	})

	t.Run("ReportCompletionCallsReporterImmediately", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := newCompletion()
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), c))
		require.Equal(t, [][]ports.Completion{{c}}, b.reporter.completions)
		require.Empty(t, b.reporter.failures)
	})

	t.Run("ReportFailureCallsReporterImmediately", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		f := newFailure()
		require.NoError(t, b.strategy.ReportFailure(t.Context(), f))
		require.Equal(t, [][]ports.Failure{{f}}, b.reporter.failures)
		require.Empty(t, b.reporter.completions)
	})

	t.Run("ReporterErrorIsReturned", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.reporter.err = errors.New("database down")
		require.ErrorIs(t, b.strategy.ReportCompletion(t.Context(), newCompletion()), b.reporter.err)
		require.ErrorIs(t, b.strategy.ReportFailure(t.Context(), newFailure()), b.reporter.err)
	})

	t.Run("TrackingMethodsAreNoOps", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := uuid.New()
		b.strategy.MarkSent([]uuid.UUID{id}, clocktest.Start)
		b.strategy.MarkAcknowledged([]uuid.UUID{id})
		b.strategy.ClearAcknowledged()
		require.Zero(t, b.strategy.ResetStale(clocktest.Start.Add(time.Hour)))
		require.Empty(t, b.reporter.completions)
		require.Empty(t, b.reporter.failures)
	})
}

func TestStatusString(t *testing.T) {
	t.Parallel()

	require.Equal(t, "Pending", completion.Pending.String())
	require.Equal(t, "Sent", completion.Sent.String())
	require.Equal(t, "Acknowledged", completion.Acknowledged.String())
	require.Equal(t, "Status(7)", completion.Status(7).String())
}
