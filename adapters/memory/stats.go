package memory

import (
	"cmp"
	"context"
	"slices"

	"github.com/vantage-go/vantage/ports"
)

// PerspectivesLag implements ports.Stats. Each perspective's pending rows
// are kept in a heap by storage time (see backlog), so a call costs
// O(perspectives), whatever the backlog, and holds the store's mutex only
// that long. Ages are measured at params.Now, or on the store's Clock when
// it is zero.
func (s *Store) PerspectivesLag(ctx context.Context, params *ports.PerspectivesLagParams) ([]ports.PerspectiveLag, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	now := s.now(params.Now)
	out := make([]ports.PerspectiveLag, 0, len(s.backlogs))
	for name, b := range s.backlogs {
		out = append(out, ports.PerspectiveLag{
			Perspective: name,
			Pending:     int64(len(b.rows)),
			OldestAge:   max(now.Sub(b.rows[0].createdAt), 0),
		})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b ports.PerspectiveLag) int { return cmp.Compare(a.Perspective, b.Perspective) })
	return out, nil
}

// backlog holds the pending rows of one perspective, over every stream, in
// a binary min-heap ordered by storage time, then insertion order: its size
// is the perspective's pending count and its root the oldest row. Each row
// knows its position (workRow.backlogIdx), so any row leaves in O(log n);
// rows arrive mostly in time order and sift no further than their parent.
// It is reached through Store.backlogs and pair.backlog, guarded by
// Store.mu, and never empty: the store drops it with its last row.
type backlog struct {
	rows []*workRow
}

// backlogOf returns the backlog of perspective, creating it when missing.
func (s *Store) backlogOf(perspective string) *backlog {
	b := s.backlogs[perspective]
	if b == nil {
		b = &backlog{}
		s.backlogs[perspective] = b
	}
	return b
}

// leaveBacklog takes r, a row leaving the pending rows of p, out of its
// perspective's backlog, dropping the backlog with its last row.
func (s *Store) leaveBacklog(p *pair, r *workRow) {
	p.backlog.remove(r)
	if len(p.backlog.rows) == 0 {
		delete(s.backlogs, p.perspective)
	}
}

// older reports whether row a was stored before row b. Wall clocks are
// compared, so that rows timed by the Clock (with a monotonic reading) and
// by a params Now (without) order consistently.
func older(a, b *workRow) bool {
	if c := a.createdAt.Round(0).Compare(b.createdAt.Round(0)); c != 0 {
		return c < 0
	}
	return a.seq < b.seq
}

// push adds r.
func (b *backlog) push(r *workRow) {
	r.backlogIdx = len(b.rows)
	b.rows = append(b.rows, r)
	b.up(r.backlogIdx)
}

// remove takes r, one of b's rows, out.
func (b *backlog) remove(r *workRow) {
	i, last := r.backlogIdx, len(b.rows)-1
	if i != last {
		b.swap(i, last)
	}
	b.rows[last] = nil
	b.rows = b.rows[:last]
	if i != last && !b.down(i) {
		b.up(i)
	}
	r.backlogIdx = -1
}

func (b *backlog) swap(i, j int) {
	b.rows[i], b.rows[j] = b.rows[j], b.rows[i]
	b.rows[i].backlogIdx = i
	b.rows[j].backlogIdx = j
}

// up moves the row at i towards the root while it is older than its parent.
func (b *backlog) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !older(b.rows[i], b.rows[parent]) {
			return
		}
		b.swap(i, parent)
		i = parent
	}
}

// down moves the row at i towards the leaves while a child is older, and
// reports whether it moved.
func (b *backlog) down(i int) bool {
	start, n := i, len(b.rows)
	for {
		child := 2*i + 1
		if child >= n {
			break
		}
		if right := child + 1; right < n && older(b.rows[right], b.rows[child]) {
			child = right
		}
		if !older(b.rows[child], b.rows[i]) {
			break
		}
		b.swap(i, child)
		i = child
	}
	return i > start
}
