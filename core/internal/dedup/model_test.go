package dedup_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/dedup"
)

// modelEntry is an entry of cacheModel: InFlight, or Retained since start
// (seq orders retention starts, for capacity evictions).
type modelEntry struct {
	inFlight bool
	start    time.Duration
	seq      int
}

// cacheModel is the cache's documented behaviour written as plainly as
// possible, to check the cache against.
type cacheModel struct {
	retention time.Duration
	capacity  int
	now       time.Duration
	seq       int
	entries   map[uuid.UUID]*modelEntry
	// Observer totals.
	markedInFlight, activated, evicted, removed int
}

func (m *cacheModel) contains(id uuid.UUID) bool {
	e, ok := m.entries[id]
	return ok && (e.inFlight || m.now < e.start+m.retention)
}

func (m *cacheModel) retainedCount() int {
	n := 0
	for _, e := range m.entries {
		if !e.inFlight {
			n++
		}
	}
	return n
}

// retain makes id Retained from now, evicting the oldest Retained entry
// when the phase is full.
func (m *cacheModel) retain(id uuid.UUID) {
	if m.retainedCount() >= m.capacity {
		var oldest uuid.UUID
		oldestSeq := -1
		for k, e := range m.entries {
			if !e.inFlight && (oldestSeq < 0 || e.seq < oldestSeq) {
				oldest, oldestSeq = k, e.seq
			}
		}
		delete(m.entries, oldest)
		m.evicted++
	}
	m.seq++
	m.entries[id] = &modelEntry{start: m.now, seq: m.seq}
	m.activated++
}

func (m *cacheModel) addRange(ids []uuid.UUID) {
	for _, id := range ids {
		if !m.contains(id) {
			m.entries[id] = &modelEntry{inFlight: true}
			m.markedInFlight++
		}
	}
}

func (m *cacheModel) addRangeRetained(ids []uuid.UUID) {
	for _, id := range ids {
		if !m.contains(id) {
			delete(m.entries, id) // an expired entry is replaced, not evicted
			m.markedInFlight++
			m.retain(id)
		}
	}
}

func (m *cacheModel) activateRetentionFor(ids []uuid.UUID) {
	for _, id := range ids {
		if e, ok := m.entries[id]; ok && e.inFlight {
			m.retain(id)
		}
	}
}

func (m *cacheModel) evictExpired() {
	for id, e := range m.entries {
		if !e.inFlight && m.now >= e.start+m.retention {
			delete(m.entries, id)
			m.evicted++
		}
	}
}

func (m *cacheModel) removeRange(ids []uuid.UUID) {
	for _, id := range ids {
		if _, ok := m.entries[id]; ok {
			delete(m.entries, id)
			m.removed++
		}
	}
}

// The cache agrees with cacheModel under random operations on a small set
// of ids, so that entries move through every phase, expire, are evicted
// for room, removed and added again.
func TestCacheMatchesModel(t *testing.T) {
	t.Parallel()

	for _, seed := range []uint64{1, 2, 3, 4} {
		rng := rand.New(rand.NewPCG(seed, 42))
		const retentionSteps = 20
		capacity := 8 + rng.IntN(24)
		b := setup(t, dedup.Options{Retention: retentionSteps * time.Second, Capacity: capacity})
		m := &cacheModel{retention: retentionSteps * time.Second, capacity: capacity, entries: map[uuid.UUID]*modelEntry{}}
		// The ids belong to three pairs; a call names one of them.
		keys := []dedup.Key{{Stream: uuid.New(), Perspective: "a"}, {Stream: uuid.New(), Perspective: "a"}, {Stream: key.Stream, Perspective: "b"}}
		pool := ids(63)
		keyOf := func(i int) dedup.Key { return keys[i%len(keys)] }
		pick := func() (dedup.Key, []uuid.UUID) {
			k := rng.IntN(len(keys))
			out := make([]uuid.UUID, rng.IntN(12))
			for i := range out {
				out[i] = pool[k+len(keys)*rng.IntN(len(pool)/len(keys))] // repeats included
			}
			return keys[k], out
		}
		type row struct{ id uuid.UUID }
		for step := range 20_000 {
			// Every call sees its own time: entries retained by different
			// calls never share a retention start, so "oldest first" names
			// one entry.
			b.clock.Advance(time.Nanosecond)
			m.now += time.Nanosecond
			switch op := rng.IntN(100); {
			case op < 30:
				k, batch := pick()
				b.cache.AddRange(k, batch)
				m.addRange(batch)
			case op < 40:
				k, batch := pick()
				b.cache.AddRangeRetained(k, batch)
				m.addRangeRetained(batch)
			case op < 65:
				var ranges []dedup.Range
				var all []uuid.UUID
				for range 1 + rng.IntN(3) {
					k, batch := pick()
					ranges = append(ranges, dedup.Range{Key: k, IDs: batch})
					all = append(all, batch...)
				}
				b.cache.ActivateRetentionFor(ranges)
				m.activateRetentionFor(all)
			case op < 70:
				b.cache.EvictExpired()
				m.evictExpired()
			case op < 78:
				k, batch := pick()
				b.cache.RemoveRange(k, batch)
				m.removeRange(batch)
			case op < 90:
				d := time.Duration(rng.IntN(3)) * time.Second
				b.clock.Advance(d)
				m.now += d
			default:
				k, batch := pick()
				rows := make([]row, len(batch))
				var wantFresh []row
				var wantSkipped []uuid.UUID
				for i, id := range batch {
					rows[i] = row{id}
					if m.contains(id) {
						wantSkipped = append(wantSkipped, id)
					} else {
						wantFresh = append(wantFresh, row{id})
					}
				}
				fresh, skipped := dedup.Partition(b.cache, k, rows, func(r *row) uuid.UUID { return r.id })
				require.Equal(t, len(wantFresh), len(fresh), "step %d", step)
				if len(wantFresh) > 0 {
					require.Equal(t, wantFresh, fresh, "step %d", step)
				}
				require.Equal(t, wantSkipped, skipped, "step %d", step)
			}
			require.Equal(t, len(m.entries), b.cache.Count(), "step %d", step)
			for i, id := range pool {
				require.Equal(t, m.contains(id), b.cache.Contains(keyOf(i), id), "step %d", step)
			}
		}
		o := b.observer
		require.Equal(t, m.markedInFlight, sumLens(o.inFlight))
		require.Equal(t, m.activated, sum(o.activated))
		require.Equal(t, m.evicted, sum(o.evicted))
		require.Equal(t, m.removed, sumLens(o.removed))
	}
}

func sum(counts []int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func sumLens(lists [][]uuid.UUID) int {
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	return n
}
