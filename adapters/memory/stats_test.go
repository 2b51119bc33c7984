package memory

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// TestPerspectivesLagMatchesFullScan drives the random operations of
// TestClaimIndexMatchesFullScan (appends below pending rows, completions in
// and out of debug mode, failures, replay failures, dead letters, requeues,
// Now moving backwards) and checks after every one that PerspectivesLag,
// read from the per-perspective backlogs, equals the figures of a scan of every
// pending row, and that each backlog holds exactly its perspective's rows.
func TestPerspectivesLagMatchesFullScan(t *testing.T) {
	t.Parallel()

	for seed := range uint64(8) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			tw := newTwin(t, seed)
			for step := range 1500 {
				op := tw.step()
				got, err := tw.fast.PerspectivesLag(t.Context(), &ports.PerspectivesLagParams{Now: tw.now})
				require.NoError(t, err)
				require.Equal(t, tw.fast.referenceLag(tw.now), got, "step %d (%s)", step, op)
				tw.fast.requireBacklogsConsistent(t)
			}
		})
	}
}

// referenceLag is PerspectivesLag written out as a scan of every pending
// row.
func (s *Store) referenceLag(now time.Time) []ports.PerspectiveLag {
	s.mu.Lock()
	defer s.mu.Unlock()
	oldest := map[string]time.Time{}
	count := map[string]int64{}
	for _, st := range s.streams {
		for _, p := range st.pairs {
			for _, r := range p.pending() {
				if at, ok := oldest[r.perspective]; !ok || r.createdAt.Before(at) {
					oldest[r.perspective] = r.createdAt
				}
				count[r.perspective]++
			}
		}
	}
	out := make([]ports.PerspectiveLag, 0, len(count))
	for name, n := range count {
		out = append(out, ports.PerspectiveLag{Perspective: name, Pending: n, OldestAge: max(now.Sub(oldest[name]), 0)})
	}
	slices.SortFunc(out, func(a, b ports.PerspectiveLag) int { return cmp.Compare(a.Perspective, b.Perspective) })
	return out
}

// requireBacklogsConsistent checks that every pending row is in its
// perspective's backlog exactly once, that the backlogs hold nothing else
// but rows flagged as left, which they count, that the counts are right,
// none is kept without pending rows, queue is in storage order and early a
// heap.
func (s *Store) requireBacklogsConsistent(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	held := 0
	for name, b := range s.backlogs {
		if b.pending == 0 {
			t.Fatalf("backlog %s is kept without pending rows: it goes with its last one", name)
		}
		queue := b.queue[b.head:]
		seen := map[*workRow]bool{}
		pending, left := 0, 0
		for i, r := range slices.Concat(queue, b.early) {
			switch {
			case r.perspective != name:
				t.Fatalf("row %s of %s is in the backlog of %s", r.id, r.perspective, name)
			case seen[r]:
				t.Fatalf("row %s is twice in the backlog of %s", r.id, name)
			case r.left && s.work.get(r.id) == r:
				t.Fatalf("row %s of the backlog of %s is flagged as left but pending", r.id, name)
			case !r.left && s.work.get(r.id) != r:
				t.Fatalf("row %s of the backlog of %s is not pending", r.id, name)
			case i > 0 && i < len(queue) && older(r, queue[i-1]):
				t.Fatalf("row %s is older than the row before it in the queue of %s", r.id, name)
			case i > len(queue) && older(r, b.early[(i-len(queue)-1)/2]):
				t.Fatalf("row %s is older than its parent in the early rows of %s", r.id, name)
			}
			seen[r] = true
			if r.left {
				left++
			} else {
				pending++
			}
		}
		require.Equal(t, pending, b.pending, "the backlog of %s counts its pending rows", name)
		require.Equal(t, left, b.left, "the backlog of %s counts its rows flagged as left", name)
		require.LessOrEqual(t, b.left, b.pending, "the backlog of %s is compacted once left rows are the larger part", name)
		held += pending
	}
	require.Equal(t, s.work.rows, held, "every pending row is in a backlog")
	for _, st := range s.streams {
		for _, p := range st.pairs {
			if p.backlog != s.backlogs[p.perspective] {
				t.Fatalf("pair (%s, %s) points to another backlog than its perspective's", st.id, p.perspective)
			}
		}
	}
}
