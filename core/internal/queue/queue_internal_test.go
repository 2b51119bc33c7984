package queue

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestDrainQueue(t *testing.T) {
	t.Parallel()

	a, b, c := uuid.New(), uuid.New(), uuid.New()

	t.Run("PushIsIdempotentAndSignals", func(t *testing.T) {
		t.Parallel()
		q := New(Hooks{})
		q.Push(a, b, a)
		require.Equal(t, 2, q.Len())
		select {
		case <-q.signal:
		default:
			t.Fatal("push did not signal")
		}
		require.Equal(t, []uuid.UUID{a, b}, q.Take(10))
		require.Zero(t, q.Len())
	})

	t.Run("TakeBoundedResignalsRemainder", func(t *testing.T) {
		t.Parallel()
		q := New(Hooks{})
		q.Push(a, b, c)
		<-q.signal
		require.Equal(t, []uuid.UUID{a}, q.Take(1))
		select {
		case <-q.signal:
		default:
			t.Fatal("remaining ids were not signalled")
		}
	})

	t.Run("InFlightFlag", func(t *testing.T) {
		t.Parallel()
		q := New(Hooks{})
		require.False(t, q.IsInFlight(a))
		q.Push(a)
		ids := q.Take(5)
		require.True(t, q.IsInFlight(a))
		q.Done(ids)
		require.False(t, q.IsInFlight(a))
		require.Zero(t, q.Len())
	})

	t.Run("PushWhileInFlightRequeuesOnDone", func(t *testing.T) {
		t.Parallel()
		q := New(Hooks{})
		q.Push(a)
		ids := q.Take(5)
		q.Push(a) // re-emitted by the claim loop during the drain
		require.Zero(t, q.Len(), "not queued twice while in flight")
		q.Done(ids)
		require.Equal(t, 1, q.Len(), "queued again once the drain ended")
		require.Equal(t, []uuid.UUID{a}, q.Take(5))
	})

	t.Run("TakeDirtyConsumesThePush", func(t *testing.T) {
		t.Parallel()
		q := New(Hooks{})
		require.False(t, q.TakeDirty(a), "not in flight")
		q.Push(a)
		ids := q.Take(5)
		require.False(t, q.TakeDirty(a), "not pushed while in flight")
		q.Push(a)
		require.True(t, q.TakeDirty(a), "pushed while in flight")
		require.False(t, q.TakeDirty(a), "taken once")
		require.True(t, q.IsInFlight(a))
		q.Done(ids)
		require.Zero(t, q.Len(), "the drain that took the mark drained the stream again itself")
		q.Push(a)
		ids = q.Take(5)
		q.Push(a)
		q.Done(ids)
		require.Equal(t, 1, q.Len(), "a mark not taken still queues the stream again")
	})
}

// PushHeld queues new ids as Push does, but a stream in flight is not
// marked: its drain is not sent back for another fetch.
func TestDrainQueuePushHeld(t *testing.T) {
	t.Parallel()
	q := New(Hooks{})
	a, b := uuid.New(), uuid.New()
	q.Push(a)
	q.Take(1)
	require.Equal(t, 1, q.PushHeld(a, b), "b is new, a in flight")
	require.False(t, q.TakeDirty(a), "a held, not marked")
	q.Push(a)
	require.True(t, q.TakeDirty(a), "Push marks it")
}

// A push that marks a stream waiting for its completions' acknowledgement
// calls waiting, once: events wait behind that acknowledgement.
func TestDrainQueueSettle(t *testing.T) {
	t.Parallel()
	waited := 0
	q := New(Hooks{Waiting: func() { waited++ }})
	a, b := uuid.New(), uuid.New()
	q.Push(a, b)
	q.Take(2)
	q.Push(b) // b is being drained, not settling
	require.Zero(t, waited)
	require.False(t, q.Settle(a), "nothing arrived for a")
	q.PushHeld(a)
	require.Zero(t, waited, "a held push marks nothing")
	q.Push(a)
	q.Push(a)
	require.Equal(t, 1, waited, "the first mark of a settling stream")
	require.True(t, q.Settle(b), "b was marked while drained")
	q.Done([]uuid.UUID{a, b})
	require.Equal(t, 2, q.Len(), "both queued again")
	q.Take(2)
	q.Push(a)
	require.Equal(t, 1, waited, "Done ended the settling")
}
