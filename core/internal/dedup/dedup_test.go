package dedup_test

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/vantage-go/vantage/core/internal/dedup"
	"github.com/vantage-go/vantage/internal/clocktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const retention = 5 * time.Minute

// key is the pair of the ids the tests store.
var key = dedup.Key{Stream: uuid.MustParse("0190d8a4-5c1e-7000-8000-000000000001"), Perspective: "orders"}

// recordingObserver records every callback.
type recordingObserver struct {
	mu        sync.Mutex
	inFlight  [][]uuid.UUID
	activated []int
	evicted   []int
	removed   [][]uuid.UUID
}

func (o *recordingObserver) OnEventsMarkedInFlight(ids []uuid.UUID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inFlight = append(o.inFlight, ids)
}

func (o *recordingObserver) OnRetentionActivated(count int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.activated = append(o.activated, count)
}

func (o *recordingObserver) OnEvicted(count int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.evicted = append(o.evicted, count)
}

func (o *recordingObserver) OnEventsRemoved(ids []uuid.UUID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.removed = append(o.removed, ids)
}

func (o *recordingObserver) OnEventsDeduped([]uuid.UUID, string, uuid.UUID) {}

type testBundle struct {
	cache    *dedup.Cache
	clock    *clocktest.Fake
	observer *recordingObserver
}

func setup(t *testing.T, opts dedup.Options) *testBundle {
	t.Helper()
	b := &testBundle{clock: clocktest.NewFake(), observer: &recordingObserver{}}
	if opts.Retention == 0 {
		opts.Retention = retention
	}
	opts.Clock = b.clock
	opts.Observer = b.observer
	b.cache = dedup.New(opts)
	return b
}

func ids(n int) []uuid.UUID {
	out := make([]uuid.UUID, n)
	for i := range out {
		out[i] = uuid.New()
	}
	return out
}

func TestCache(t *testing.T) {
	t.Parallel()

	// The cache's scenarios: in flight, retained, expired, removed.

	t.Run("AddRangeInFlightContainsReturnsTrue", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		id := uuid.New()
		b.cache.AddRange(key, []uuid.UUID{id})
		require.True(t, b.cache.Contains(key, id))
	})

	t.Run("IDsBelongToTheirPair", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		other := dedup.Key{Stream: key.Stream, Perspective: "invoices"}
		id := uuid.New()
		b.cache.AddRange(key, []uuid.UUID{id})
		require.False(t, b.cache.Contains(other, id), "looked for under another pair")
		b.cache.RemoveRange(other, []uuid.UUID{id})
		b.cache.ActivateRetentionFor([]dedup.Range{{Key: other, IDs: []uuid.UUID{id}}})
		require.Empty(t, b.observer.removed)
		require.Empty(t, b.observer.activated)
		require.True(t, b.cache.Contains(key, id))
	})

	t.Run("InFlightNeverExpiresUntilActivated", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		id := uuid.New()
		b.cache.AddRange(key, []uuid.UUID{id})
		b.clock.Advance(time.Hour)
		b.cache.EvictExpired()
		require.True(t, b.cache.Contains(key, id))
	})

	t.Run("ActivateRetentionStartsCountdown", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		id := uuid.New()
		b.cache.AddRange(key, []uuid.UUID{id})
		b.cache.ActivateRetention()
		b.clock.Advance(retention + time.Second)
		b.cache.EvictExpired()
		require.False(t, b.cache.Contains(key, id))
	})

	t.Run("RetainedBeforeTTLExpiresContainsReturnsTrue", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		id := uuid.New()
		b.cache.AddRange(key, []uuid.UUID{id})
		b.cache.ActivateRetention()
		b.clock.Advance(retention - time.Second)
		require.True(t, b.cache.Contains(key, id))
	})

	t.Run("RetainedAfterTTLExpiresContainsReturnsFalse", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		id := uuid.New()
		b.cache.AddRange(key, []uuid.UUID{id})
		b.cache.ActivateRetention()
		b.clock.Advance(retention + time.Second)
		require.False(t, b.cache.Contains(key, id), "expiry is lazy: no EvictExpired needed")
		require.Equal(t, 1, b.cache.Count(), "the expired entry is still stored until evicted")
	})

	t.Run("ActivateRetentionOnlyAffectsInFlight", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		a, c := uuid.New(), uuid.New()
		b.cache.AddRange(key, []uuid.UUID{a})
		b.cache.ActivateRetention()
		b.clock.Advance(time.Minute)
		b.cache.AddRange(key, []uuid.UUID{c})
		b.cache.ActivateRetention()
		b.clock.Advance(4*time.Minute + time.Second)
		require.False(t, b.cache.Contains(key, a), "A's timer must not be reset by the second activation")
		require.True(t, b.cache.Contains(key, c))
	})

	t.Run("EvictExpiredRemovesOnlyRetainedPastTTL", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		a, c := uuid.New(), uuid.New()
		b.cache.AddRange(key, []uuid.UUID{a})
		b.cache.ActivateRetention()
		b.clock.Advance(retention + time.Second)
		b.cache.AddRange(key, []uuid.UUID{c})
		b.cache.EvictExpired()
		require.False(t, b.cache.Contains(key, a))
		require.True(t, b.cache.Contains(key, c))
		require.Equal(t, 1, b.cache.Count())
	})

	t.Run("EvictExpiredIgnoresInFlightEntries", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		b.cache.AddRange(key, ids(2))
		b.clock.Advance(time.Hour)
		b.cache.EvictExpired()
		require.Equal(t, 2, b.cache.Count())
		require.Empty(t, b.observer.evicted)
	})

	t.Run("AddRangeDuplicateIDDoesNotPanic", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		id := uuid.New()
		b.cache.AddRange(key, []uuid.UUID{id})
		b.cache.AddRange(key, []uuid.UUID{id})
		require.True(t, b.cache.Contains(key, id))
		require.Equal(t, 1, b.cache.Count())
		require.Equal(t, [][]uuid.UUID{{id}}, b.observer.inFlight, "the second add changed nothing")
	})

	t.Run("ContainsEmptyCacheReturnsFalse", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		require.False(t, b.cache.Contains(key, uuid.New()))
		require.Zero(t, b.cache.Count())
	})

	t.Run("RemoveClearsEntryForRewind", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		id := uuid.New()
		b.cache.AddRange(key, []uuid.UUID{id})
		b.cache.Remove(key, id)
		require.False(t, b.cache.Contains(key, id))
		require.Equal(t, [][]uuid.UUID{{id}}, b.observer.removed)
	})

	t.Run("CountExcludesExpiredEntries", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		b.cache.AddRange(key, ids(2))
		b.cache.ActivateRetention()
		b.clock.Advance(retention + time.Second)
		b.cache.EvictExpired()
		b.cache.AddRange(key, ids(1))
		require.Equal(t, 1, b.cache.Count())
	})

	t.Run("ObserverOnEventsMarkedInFlightCalled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		added := ids(2)
		b.cache.AddRange(key, added)
		require.Equal(t, [][]uuid.UUID{added}, b.observer.inFlight)
	})

	t.Run("ObserverOnRetentionActivatedCalled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		b.cache.AddRange(key, ids(2))
		b.cache.ActivateRetention()
		require.Equal(t, []int{2}, b.observer.activated)

		b.cache.ActivateRetention()
		require.Equal(t, []int{2}, b.observer.activated, "nothing activated: no callback")
	})

	t.Run("ObserverOnEvictedCalled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		b.cache.AddRange(key, ids(1))
		b.cache.ActivateRetention()
		b.clock.Advance(retention + time.Second)
		b.cache.EvictExpired()
		require.Equal(t, []int{1}, b.observer.evicted)

		b.cache.EvictExpired()
		require.Equal(t, []int{1}, b.observer.evicted, "nothing evicted: no callback")
	})

	t.Run("ObserverOnEventsRemovedCalled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		id := uuid.New()
		b.cache.AddRange(key, []uuid.UUID{id})
		b.cache.Remove(key, id)
		require.Len(t, b.observer.removed, 1)
		require.Contains(t, b.observer.removed[0], id)
	})

	// Go additions.

	t.Run("ActivateRetentionForLeavesOtherInFlight", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		acked, other, unknown := uuid.New(), uuid.New(), uuid.New()
		b.cache.AddRange(key, []uuid.UUID{acked, other})
		b.cache.ActivateRetentionFor([]dedup.Range{{Key: key, IDs: []uuid.UUID{acked, unknown}}})
		require.Equal(t, []int{1}, b.observer.activated, "only the InFlight listed id counts")

		b.clock.Advance(retention)
		b.cache.EvictExpired()
		require.False(t, b.cache.Contains(key, acked))
		require.True(t, b.cache.Contains(key, other), "an id not acknowledged stays InFlight")
		require.Equal(t, 1, b.cache.Count())
	})

	t.Run("AddRangeRetainedStartsCountdownAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		inFlight, fresh := uuid.New(), uuid.New()
		b.cache.AddRange(key, []uuid.UUID{inFlight})
		b.cache.AddRangeRetained(key, []uuid.UUID{inFlight, fresh})
		require.Equal(t, [][]uuid.UUID{{inFlight}, {fresh}}, b.observer.inFlight)
		require.Equal(t, []int{1}, b.observer.activated)

		b.clock.Advance(retention)
		require.False(t, b.cache.Contains(key, fresh))
		require.True(t, b.cache.Contains(key, inFlight), "a present InFlight entry is left untouched")
	})

	t.Run("CapacityEvictsOldestRetainedNeverInFlight", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{Capacity: 2})
		retained := ids(3)
		for _, id := range retained {
			b.cache.AddRange(key, []uuid.UUID{id})
			b.cache.ActivateRetention()
			b.clock.Advance(time.Second)
		}
		inFlight := ids(5)
		b.cache.AddRange(key, inFlight)

		require.False(t, b.cache.Contains(key, retained[0]), "the oldest retained entry made room")
		require.True(t, b.cache.Contains(key, retained[1]))
		require.True(t, b.cache.Contains(key, retained[2]))
		for _, id := range inFlight {
			require.True(t, b.cache.Contains(key, id), "InFlight entries are not bounded")
		}
		require.Equal(t, 7, b.cache.Count())
		require.Equal(t, []int{1}, b.observer.evicted)
	})

	t.Run("ConcurrentUse", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{Capacity: 50})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 100 {
					batch := ids(3)
					b.cache.AddRange(key, batch)
					_ = b.cache.Contains(key, batch[0])
					b.cache.ActivateRetentionFor([]dedup.Range{{Key: key, IDs: batch[:1]}})
					b.cache.AddRangeRetained(key, ids(1))
					b.cache.RemoveRange(key, batch[1:2])
					b.cache.EvictExpired()
					b.clock.Advance(time.Second)
					_ = b.cache.Count()
				}
				b.cache.ActivateRetention()
			})
		}
		wg.Wait()
		b.clock.Advance(retention)
		b.cache.EvictExpired()
		require.Zero(t, b.cache.Count())
	})

	t.Run("DefaultsApply", func(t *testing.T) {
		t.Parallel()
		clock := clocktest.NewFake()
		cache := dedup.New(dedup.Options{Clock: clock})
		id := uuid.New()
		cache.AddRangeRetained(key, []uuid.UUID{id})
		clock.Advance(dedup.RetentionDefault - time.Nanosecond)
		require.True(t, cache.Contains(key, id))
		clock.Advance(time.Nanosecond)
		require.False(t, cache.Contains(key, id))
	})

	t.Run("ExpiredRetainedEntryIsReAddedInFlight", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		id := uuid.New()
		b.cache.AddRangeRetained(key, []uuid.UUID{id})
		b.clock.Advance(retention)
		require.False(t, b.cache.Contains(key, id))

		b.cache.AddRange(key, []uuid.UUID{id})
		b.clock.Advance(time.Hour)
		require.True(t, b.cache.Contains(key, id), "logically absent, so it was added InFlight again")
		require.Equal(t, 1, b.cache.Count())
	})

	t.Run("NegativeOptionsPanic", func(t *testing.T) {
		t.Parallel()
		require.PanicsWithValue(t, "dedup.Options.Retention must not be negative, got -1s", func() {
			dedup.New(dedup.Options{Retention: -time.Second})
		})
		require.PanicsWithValue(t, "dedup.Options.Capacity must not be negative, got -1", func() {
			dedup.New(dedup.Options{Capacity: -1})
		})
	})

	t.Run("ReAddingRetainedDoesNotResetTimer", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		id := uuid.New()
		b.cache.AddRange(key, []uuid.UUID{id})
		b.cache.ActivateRetention()
		b.clock.Advance(4 * time.Minute)
		b.cache.AddRange(key, []uuid.UUID{id})
		b.cache.AddRangeRetained(key, []uuid.UUID{id})
		b.cache.ActivateRetention()
		require.Len(t, b.observer.inFlight, 1, "re-adding a live Retained id adds nothing")

		b.clock.Advance(time.Minute)
		require.False(t, b.cache.Contains(key, id), "expires 5 min after the first activation")
	})

	t.Run("RemoveRangeReportsOnlyPresentIDs", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		inFlight, retained, absent := uuid.New(), uuid.New(), uuid.New()
		b.cache.AddRangeRetained(key, []uuid.UUID{retained})
		b.cache.AddRange(key, []uuid.UUID{inFlight})
		b.cache.RemoveRange(key, []uuid.UUID{absent, retained, inFlight})
		require.Equal(t, [][]uuid.UUID{{retained, inFlight}}, b.observer.removed)
		require.Zero(t, b.cache.Count())

		b.cache.RemoveRange(key, []uuid.UUID{absent})
		require.Len(t, b.observer.removed, 1, "nothing removed: no callback")
	})
}

func TestPartition(t *testing.T) {
	t.Parallel()

	type row struct{ id uuid.UUID }
	id := func(r *row) uuid.UUID { return r.id }

	t.Run("EmptyCacheReturnsItems", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		rows := []row{{uuid.New()}, {uuid.New()}}
		fresh, skipped := dedup.Partition(b.cache, key, rows, id)
		require.Equal(t, rows, fresh)
		require.Empty(t, skipped)
	})

	t.Run("SplitsAsContainsDoes", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		inFlight, retained, expired, absent := uuid.New(), uuid.New(), uuid.New(), uuid.New()
		b.cache.AddRangeRetained(key, []uuid.UUID{expired})
		b.clock.Advance(retention)
		b.cache.AddRange(key, []uuid.UUID{inFlight})
		b.cache.AddRangeRetained(key, []uuid.UUID{retained})
		rows := []row{{inFlight}, {absent}, {expired}, {retained}}
		fresh, skipped := dedup.Partition(b.cache, key, rows, id)
		require.Equal(t, []row{{absent}, {expired}}, fresh)
		require.Equal(t, []uuid.UUID{inFlight, retained}, skipped)
		require.Equal(t, []row{{inFlight}, {absent}, {expired}, {retained}}, rows, "items are not modified")
	})

	t.Run("NothingContainedAliasesItems", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		b.cache.AddRange(key, []uuid.UUID{uuid.New()})
		rows := []row{{uuid.New()}, {uuid.New()}}
		fresh, skipped := dedup.Partition(b.cache, key, rows, id)
		require.Equal(t, rows, fresh)
		require.Empty(t, skipped)
	})
}

func TestCapacityAfterRemovals(t *testing.T) {
	t.Parallel()

	// Removed and re-added entries leave stale places in the retention
	// order; evictions must skip them and still drop the oldest live entry.
	b := setup(t, dedup.Options{Capacity: 3})
	a, c, d, e := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	b.cache.AddRangeRetained(key, []uuid.UUID{a, c})
	b.cache.Remove(key, a)
	b.clock.Advance(time.Second)
	b.cache.AddRangeRetained(key, []uuid.UUID{a, d}) // a is now newer than c
	require.Equal(t, 3, b.cache.Count())
	b.clock.Advance(time.Second)
	b.cache.AddRangeRetained(key, []uuid.UUID{e}) // full: evicts c, the oldest
	require.False(t, b.cache.Contains(key, c))
	require.True(t, b.cache.Contains(key, a))
	require.True(t, b.cache.Contains(key, d))
	require.True(t, b.cache.Contains(key, e))
	require.Equal(t, 3, b.cache.Count())

	b.clock.Advance(retention - time.Second) // a and d (1s) expire, e (2s) not yet
	b.cache.EvictExpired()
	require.Equal(t, 1, b.cache.Count())
	require.True(t, b.cache.Contains(key, e))
}

func TestRetainedOrder(t *testing.T) {
	t.Parallel()

	// Capacity evictions and EvictExpired both take the oldest retention
	// start first; these cases move entries around that order.

	t.Run("ActivateRetentionBeyondCapacity", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{Capacity: 2})
		old := uuid.New()
		b.cache.AddRangeRetained(key, []uuid.UUID{old})
		b.clock.Advance(time.Second)
		b.cache.AddRange(key, ids(3))
		b.cache.ActivateRetention()
		require.Equal(t, []int{1, 3}, b.observer.activated)
		require.Equal(t, []int{2}, b.observer.evicted, "the older entry, then one of the three")
		require.False(t, b.cache.Contains(key, old))
		require.Equal(t, 2, b.cache.Count())
	})

	t.Run("ExpiredEntryReAddedRetainedIsNewest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{Capacity: 2})
		a, c, d := uuid.New(), uuid.New(), uuid.New()
		b.cache.AddRangeRetained(key, []uuid.UUID{a})
		b.clock.Advance(time.Second)
		b.cache.AddRangeRetained(key, []uuid.UUID{c})
		b.clock.Advance(retention - time.Second) // a expired, c has 1s left
		b.cache.AddRangeRetained(key, []uuid.UUID{a})
		require.Empty(t, b.observer.evicted, "replacing an expired entry is not an eviction")
		require.Equal(t, 2, b.cache.Count())

		b.cache.AddRangeRetained(key, []uuid.UUID{d}) // full: c is now the oldest
		require.Equal(t, []int{1}, b.observer.evicted)
		require.False(t, b.cache.Contains(key, c))
		require.True(t, b.cache.Contains(key, a), "a's retention restarted when it was re-added")
		require.True(t, b.cache.Contains(key, d))

		b.clock.Advance(retention - time.Nanosecond)
		b.cache.EvictExpired()
		require.Equal(t, 2, b.cache.Count(), "both started at the same time, neither has expired")
		b.clock.Advance(time.Nanosecond)
		b.cache.EvictExpired()
		require.Zero(t, b.cache.Count())
		require.Equal(t, []int{1, 2}, b.observer.evicted)
	})

	t.Run("EvictExpiredStopsAtFirstLiveEntry", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dedup.Options{})
		first, second := ids(2), ids(3)
		b.cache.AddRangeRetained(key, first)
		b.clock.Advance(time.Second)
		b.cache.AddRange(key, second)
		b.cache.ActivateRetentionFor([]dedup.Range{{Key: key, IDs: second}})
		b.clock.Advance(retention - time.Second)
		b.cache.EvictExpired()
		require.Equal(t, []int{2}, b.observer.evicted)
		for _, id := range second {
			require.True(t, b.cache.Contains(key, id))
		}
	})
}

// reentrantObserver calls back into its cache from every callback, which
// deadlocks unless callbacks run after the cache released its lock.
type reentrantObserver struct {
	cache *dedup.Cache
	calls int // guarded by the test running on one goroutine
}

func (o *reentrantObserver) OnEventsMarkedInFlight(ids []uuid.UUID) {
	o.calls++
	_ = o.cache.Contains(key, ids[0])
}
func (o *reentrantObserver) OnRetentionActivated(int) { o.calls++; _ = o.cache.Count() }
func (o *reentrantObserver) OnEvicted(int)            { o.calls++; o.cache.EvictExpired() }
func (o *reentrantObserver) OnEventsRemoved(ids []uuid.UUID) {
	o.calls++
	o.cache.AddRange(key, ids)
}
func (o *reentrantObserver) OnEventsDeduped([]uuid.UUID, string, uuid.UUID) {}

func TestObserverRunsOutsideLock(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	o := &reentrantObserver{}
	o.cache = dedup.New(dedup.Options{Retention: retention, Capacity: 1, Clock: clock, Observer: o})
	a, c := uuid.New(), uuid.New()
	o.cache.AddRange(key, []uuid.UUID{a})                                        // marked in flight
	o.cache.ActivateRetentionFor([]dedup.Range{{Key: key, IDs: []uuid.UUID{a}}}) // activated
	o.cache.AddRangeRetained(key, []uuid.UUID{c})                                // marked, activated, evicted a
	o.cache.RemoveRange(key, []uuid.UUID{c})                                     // removed, then marked in flight again
	clock.Advance(retention)
	require.Equal(t, 7, o.calls)
	require.True(t, o.cache.Contains(key, c), "the observer added c back InFlight")
	require.Equal(t, 1, o.cache.Count())
}
