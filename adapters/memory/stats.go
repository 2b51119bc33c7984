package memory

import (
	"cmp"
	"container/heap"
	"context"
	"slices"

	"github.com/vantage-go/vantage/ports"
)

// PerspectivesLag implements ports.Stats. Each perspective's pending rows
// are counted and kept in storage order (see backlog), so a call costs
// O(perspectives), plus the rows that left since the last call, amortized,
// whatever the backlog, and holds the store's mutex only that long. Ages
// are measured at params.Now, or on the store's Clock when it is zero.
func (s *Store) PerspectivesLag(ctx context.Context, params *ports.PerspectivesLagParams) ([]ports.PerspectiveLag, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	now := s.now(params.Now)
	out := make([]ports.PerspectiveLag, 0, len(s.backlogs))
	for name, b := range s.backlogs {
		out = append(out, ports.PerspectiveLag{
			Perspective: name,
			Pending:     int64(b.pending),
			OldestAge:   max(now.Sub(b.oldest().createdAt), 0),
		})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b ports.PerspectiveLag) int { return cmp.Compare(a.Perspective, b.Perspective) })
	return out, nil
}

// backlog tracks the pending rows of one perspective, over every stream:
// how many there are, and which is the oldest, by storage time, then
// insertion order.
//
// Rows are stored in that order but complete in any order (stream after
// stream, perspective after perspective), and the oldest row is asked for
// only by the rare figures reads, so the backlog does the least work when a
// row is stored or leaves and the rest when the oldest is asked for. A row
// stored no earlier than the last one, the rule, is appended to queue, which
// stays sorted; one stored earlier (a Now moved backwards) goes to the heap
// early instead. A row that leaves is only flagged (workRow.left) and
// counted: the oldest skips the flagged rows in front of queue and at the
// root of early, and when flagged rows outnumber pending ones both are
// compacted. Storing or removing a row thus costs O(1) amortized, O(log n)
// for a row stored out of order, and finding the oldest O(1) amortized.
//
// It is reached through Store.backlogs and pair.backlog, guarded by
// Store.mu, and never without pending rows: the store drops it with its
// last one.
type backlog struct {
	pending int        // the perspective's pending rows
	left    int        // rows of queue and early flagged as left
	queue   []*workRow // rows in storage order from head on, left ones included
	head    int
	early   rowHeap // rows stored before the last row of queue, left ones included
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
	if p.backlog.pending == 0 {
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

// push adds r, a new pending row.
func (b *backlog) push(r *workRow) {
	b.pending++
	if n := len(b.queue); n > b.head && older(r, b.queue[n-1]) {
		heap.Push(&b.early, r)
		return
	}
	b.queue = append(b.queue, r)
}

// remove flags r, one of b's pending rows, as left, compacting b once
// left rows are the larger part.
func (b *backlog) remove(r *workRow) {
	r.left = true
	b.pending--
	b.left++
	if b.left > b.pending {
		b.compact()
	}
}

// oldest returns the oldest pending row. b must hold one.
func (b *backlog) oldest() *workRow {
	for b.head < len(b.queue) && b.queue[b.head].left {
		b.queue[b.head] = nil
		b.head++
		b.left--
	}
	if b.head > 16 && 2*b.head > len(b.queue) {
		n := copy(b.queue, b.queue[b.head:])
		clear(b.queue[n:])
		b.queue, b.head = b.queue[:n], 0
	}
	for len(b.early) > 0 && b.early[0].left {
		heap.Pop(&b.early)
		b.left--
	}
	switch {
	case len(b.early) == 0:
		return b.queue[b.head]
	case b.head == len(b.queue) || older(b.early[0], b.queue[b.head]):
		return b.early[0]
	}
	return b.queue[b.head]
}

// compact drops every row flagged as left.
func (b *backlog) compact() {
	q := slices.DeleteFunc(b.queue[b.head:], func(r *workRow) bool { return r.left })
	n := copy(b.queue, q)
	clear(b.queue[n:])
	b.queue, b.head = b.queue[:n], 0
	if len(b.early) > 0 {
		b.early = slices.DeleteFunc(b.early, func(r *workRow) bool { return r.left })
		heap.Init(&b.early)
	}
	b.left = 0
}

// rowHeap is a min-heap of rows by storage order, for container/heap.
type rowHeap []*workRow

func (h rowHeap) Len() int           { return len(h) }
func (h rowHeap) Less(i, j int) bool { return older(h[i], h[j]) }
func (h rowHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *rowHeap) Push(x any)        { *h = append(*h, x.(*workRow)) }

func (h *rowHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return r
}
