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
// read from the per-perspective heaps, equals the figures of a scan of every
// pending row, and that each heap holds exactly its perspective's rows.
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
	for _, r := range s.work {
		if at, ok := oldest[r.perspective]; !ok || r.createdAt.Before(at) {
			oldest[r.perspective] = r.createdAt
		}
		count[r.perspective]++
	}
	out := make([]ports.PerspectiveLag, 0, len(count))
	for name, n := range count {
		out = append(out, ports.PerspectiveLag{Perspective: name, Pending: n, OldestAge: max(now.Sub(oldest[name]), 0)})
	}
	slices.SortFunc(out, func(a, b ports.PerspectiveLag) int { return cmp.Compare(a.Perspective, b.Perspective) })
	return out
}

// requireBacklogsConsistent checks that every pending row is in its
// perspective's backlog at the position it records, that the backlogs hold
// nothing else, none is empty, and each is a heap.
func (s *Store) requireBacklogsConsistent(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	held := 0
	for name, b := range s.backlogs {
		if len(b.rows) == 0 {
			t.Fatalf("backlog %s is kept empty: it goes with its last row", name)
		}
		for i, r := range b.rows {
			switch {
			case r.perspective != name:
				t.Fatalf("row %s of %s is in the backlog of %s", r.id, r.perspective, name)
			case r.backlogIdx != i:
				t.Fatalf("row %s records position %d, is at %d", r.id, r.backlogIdx, i)
			case s.work[r.id] != r:
				t.Fatalf("row %s of the backlog of %s is not pending", r.id, name)
			case i > 0 && older(r, b.rows[(i-1)/2]):
				t.Fatalf("row %s is older than its parent in the backlog of %s", r.id, name)
			}
		}
		held += len(b.rows)
	}
	require.Equal(t, len(s.work), held, "every pending row is in a backlog")
	for _, st := range s.streams {
		for _, p := range st.pairs {
			if p.backlog != s.backlogs[p.perspective] {
				t.Fatalf("pair (%s, %s) points to another backlog than its perspective's", st.id, p.perspective)
			}
		}
	}
}
