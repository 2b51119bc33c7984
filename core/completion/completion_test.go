package completion_test

import (
	"context"
	"fmt"
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
		clock    *clocktest.Fake
		reporter *countingReporter
		strategy *completion.Instant
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		r := &countingReporter{}
		return &testBundle{clock: clocktest.NewFake(), reporter: r, strategy: completion.NewInstant(r)}
	}

	errDown := fmt.Errorf("database down: %w", ports.ErrTransient)

	t.Run("DeliveredOutcomesAreNotKept", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), newCompletion()))
		require.NoError(t, b.strategy.ReportFailure(t.Context(), newFailure()))
		require.Empty(t, b.strategy.PendingCompletions())
		require.Empty(t, b.strategy.PendingFailures())
		require.Zero(t, b.strategy.ResetStale(b.clock.Now().Add(time.Hour)), "nothing to send again")
	})

	t.Run("NilReporterPanics", func(t *testing.T) {
		t.Parallel()
		require.Panics(t, func() { completion.NewInstant(nil) })
		require.Panics(t, func() { _, _ = completion.NewInstantWith(nil, completion.BatchedOptions{}) })
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

	t.Run("FailedReportIsKeptPending", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.reporter.err = errDown
		c, f := newCompletion(), newFailure()
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), c), "kept, so recorded")
		require.NoError(t, b.strategy.ReportFailure(t.Context(), f), "kept, so recorded")
		require.Equal(t, []ports.Completion{c}, items(b.strategy.PendingCompletions()))
		require.Equal(t, []ports.Failure{f}, items(b.strategy.PendingFailures()))
	})

	t.Run("ReportCancelledByItsContextIsKept", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.reporter.err = context.Canceled
		c := newCompletion()
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), c))
		require.Equal(t, []ports.Completion{c}, items(b.strategy.PendingCompletions()))
	})

	t.Run("KeptUntilAcknowledgedByIdentity", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.reporter.err = errDown
		c, f := newCompletion(), newFailure()
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), c))
		require.NoError(t, b.strategy.ReportFailure(t.Context(), f))
		cID, fID := b.strategy.PendingCompletions()[0].ID, b.strategy.PendingFailures()[0].ID
		b.strategy.MarkSent([]uuid.UUID{cID, fID}, b.clock.Now())
		require.Empty(t, b.strategy.PendingCompletions(), "sent, waiting for the acknowledgement")

		// An acknowledgement of something else settles nothing.
		b.strategy.MarkAcknowledged([]uuid.UUID{uuid.New()})
		b.strategy.ClearAcknowledged()
		b.clock.Advance(time.Second + time.Nanosecond)
		require.Equal(t, 2, b.strategy.ResetStale(b.clock.Now()), "both still kept")

		b.strategy.MarkAcknowledged([]uuid.UUID{cID})
		b.strategy.ClearAcknowledged()
		require.Empty(t, b.strategy.PendingCompletions(), "the completion is settled")
		require.Equal(t, []ports.Failure{f}, items(b.strategy.PendingFailures()), "the failure is still kept")
	})

	t.Run("ResetStaleRequeuesUnacknowledged", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.reporter.err = errDown
		c := newCompletion()
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), c))
		b.strategy.MarkSent(trackingIDs(b.strategy.PendingCompletions()), b.clock.Now())

		// The default timeouts of Batched: 1s, then 2s.
		require.Zero(t, b.strategy.ResetStale(b.clock.Now().Add(time.Second)), "not overdue at exactly BaseTimeout")
		b.clock.Advance(time.Second + time.Nanosecond)
		require.Equal(t, 1, b.strategy.ResetStale(b.clock.Now()))
		pending := b.strategy.PendingCompletions()
		require.Len(t, pending, 1)
		require.Equal(t, c, pending[0].Item)
		require.Equal(t, 1, pending[0].RetryCount)
		require.Equal(t, completion.Pending, pending[0].Status)

		b.strategy.MarkSent(trackingIDs(pending), b.clock.Now())
		require.Zero(t, b.strategy.ResetStale(b.clock.Now().Add(2*time.Second)))
		require.Equal(t, 1, b.strategy.ResetStale(b.clock.Now().Add(2*time.Second+time.Nanosecond)))
	})

	t.Run("RefusedReportIsReturnedNotKept", func(t *testing.T) {
		t.Parallel()
		for _, refusal := range []error{ports.ErrInvalidArgument, ports.ErrNotFound} {
			b := setup(t)
			b.reporter.err = fmt.Errorf("completing work: %w", refusal)
			require.ErrorIs(t, b.strategy.ReportCompletion(t.Context(), newCompletion()), refusal)
			require.ErrorIs(t, b.strategy.ReportFailure(t.Context(), newFailure()), refusal)
			require.Empty(t, b.strategy.PendingCompletions(), "sending it again would be refused again")
			require.Empty(t, b.strategy.PendingFailures())
		}
	})

	t.Run("PairWaitsBehindItsKeptOutcome", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.reporter.err = errDown
		first := newCompletion()
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), first))
		b.reporter.err = nil

		// The pair's next outcomes queue behind the kept one, so that the
		// backend gets them in order; other pairs go at once.
		next := first
		next.LastVersion, next.WorkIDs = 4, []uuid.UUID{uuid.New()}
		fail := newFailure()
		fail.StreamID, fail.Perspective = first.StreamID, first.Perspective
		other := newCompletion()
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), next))
		require.NoError(t, b.strategy.ReportFailure(t.Context(), fail))
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), other))
		require.Equal(t, [][]ports.Completion{{first}, {other}}, b.reporter.completions)
		require.Empty(t, b.reporter.failures)
		require.Equal(t, []ports.Completion{first, next}, items(b.strategy.PendingCompletions()))
		require.Equal(t, []ports.Failure{fail}, items(b.strategy.PendingFailures()))

		// Once they are acknowledged, the pair's outcomes go at once again.
		kept := append(trackingIDs(b.strategy.PendingCompletions()), trackingIDs(b.strategy.PendingFailures())...)
		b.strategy.MarkSent(kept, b.clock.Now())
		b.strategy.MarkAcknowledged(kept)
		b.strategy.ClearAcknowledged()
		last := first
		last.LastVersion, last.WorkIDs = 5, []uuid.UUID{uuid.New()}
		require.NoError(t, b.strategy.ReportCompletion(t.Context(), last))
		require.Equal(t, [][]ports.Completion{{first}, {other}, {last}}, b.reporter.completions)
		require.Empty(t, b.strategy.PendingCompletions())
	})

	t.Run("NewInstantWithTimeouts", func(t *testing.T) {
		t.Parallel()
		r := &countingReporter{err: errDown}
		s, err := completion.NewInstantWith(r, completion.BatchedOptions{BaseTimeout: 5 * time.Second, DisableExponentialBackoff: true})
		require.NoError(t, err)
		require.NoError(t, s.ReportCompletion(t.Context(), newCompletion()))
		b := &testBundle{clock: clocktest.NewFake(), reporter: r, strategy: s}
		b.strategy.MarkSent(trackingIDs(b.strategy.PendingCompletions()), b.clock.Now())
		require.Zero(t, b.strategy.ResetStale(b.clock.Now().Add(5*time.Second)))
		require.Equal(t, 1, b.strategy.ResetStale(b.clock.Now().Add(5*time.Second+time.Nanosecond)))

		_, err = completion.NewInstantWith(r, completion.BatchedOptions{BaseTimeout: -time.Second})
		require.ErrorContains(t, err, "BatchedOptions.BaseTimeout must not be negative")
	})

	t.Run("UnknownIDsAreIgnored", func(t *testing.T) {
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
