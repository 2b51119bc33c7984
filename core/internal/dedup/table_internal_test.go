package dedup

import (
	"math/rand/v2"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// The table agrees with a map under random adds, updates and deletes,
// through its growths and shrinks.
func TestTableMatchesMap(t *testing.T) {
	t.Parallel()

	rng := rand.New(rand.NewPCG(1, 2))
	tb := newTable(rng.Uint64())
	want := map[uuid.UUID]int64{}
	var keys []uuid.UUID
	for step := range 200_000 {
		// Grow for a while, then shrink, then churn at a steady size.
		deleteBias := 0.3
		switch {
		case step > 150_000:
			deleteBias = 0.5
		case step > 80_000:
			deleteBias = 0.8
		}
		if len(keys) > 0 && rng.Float64() < deleteBias {
			i := rng.IntN(len(keys))
			id := keys[i]
			keys[i], keys = keys[len(keys)-1], keys[:len(keys)-1]
			require.True(t, tb.delete(id))
			delete(want, id)
			require.False(t, tb.delete(id), "deleted twice")
			continue
		}
		var id uuid.UUID
		if len(keys) > 0 && rng.IntN(4) == 0 {
			id = keys[rng.IntN(len(keys))] // update in place
		} else {
			id = uuid.New()
			keys = append(keys, id)
		}
		mark := rng.Int64N(1 << 40)
		tb.set(id, mark)
		want[id] = mark
		if step%10_000 == 0 {
			requireTable(t, &tb, want)
		}
	}
	requireTable(t, &tb, want)
	for _, id := range keys {
		require.True(t, tb.delete(id))
	}
	require.Equal(t, 0, tb.n)
	require.LessOrEqual(t, len(tb.slots), tableShrinkMin, "an emptied table shrank")
}

func requireTable(t *testing.T, tb *table, want map[uuid.UUID]int64) {
	t.Helper()
	require.Equal(t, len(want), tb.n)
	require.LessOrEqual(t, 4*tb.n, 3*len(tb.slots), "at most three quarters full")
	if len(tb.slots) > tableShrinkMin {
		require.GreaterOrEqual(t, 8*tb.n, len(tb.slots)/2, "shrunk when an eighth full")
	}
	held := 0
	for i := range tb.slots {
		if tb.slots[i].mark != markEmpty {
			held++
		}
	}
	require.Equal(t, len(want), held)
	for id, mark := range want {
		require.Equal(t, mark, tb.get(id))
	}
	require.Equal(t, markEmpty, tb.get(uuid.New()))
}

// The retention order keeps its elements in order across its growths and
// shrinks.
func TestFifoKeepsOrder(t *testing.T) {
	t.Parallel()

	var q fifo
	next, front := int64(0), int64(0)
	for round := range 3 {
		for range 10_000 * (round + 1) {
			q.push(retainedRef{mark: next})
			next++
		}
		for q.n > 1000 {
			require.Equal(t, front, q.front().mark)
			q.pop()
			front++
		}
	}
	require.Equal(t, 4096, len(q.buf), "halved while at most an eighth full: 1000 of 4096")
	for q.n > 0 {
		require.Equal(t, front, q.front().mark)
		q.pop()
		front++
	}
	require.Equal(t, next, front)
}
