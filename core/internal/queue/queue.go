// Package queue holds the drain queue: the stream ids that the claim loop,
// notifications and parked pairs hand to the consumers, with set semantics
// and an in-flight set.
package queue

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"
)

// Queue is the drain queue: an unbounded FIFO of stream ids with set
// semantics (a queued id is not queued twice) and an in-flight set. A
// stream pushed while it is being drained is marked dirty and queued again
// when its drain ends, so re-emission is harmless and no signal is lost.
//
// It also carries what the claim loop tells the consumers about the ids it
// pushes: whether the backlog is larger than what the instance holds, and
// whether the latest ids were taken over from an abandoned instance.
type Queue struct {
	signal chan struct{} // buffered 1; non-empty queue ⇒ a signal is pending or a reader is awake

	mu       sync.Mutex
	order    []uuid.UUID
	queued   map[uuid.UUID]struct{}
	inFlight map[uuid.UUID]bool // value: dirty
	// settling are the ids in flight whose drain ended and that wait for
	// their completions' acknowledgement (see Settle).
	settling map[uuid.UUID]struct{}

	hooks Hooks

	backlog atomic.Bool
	urgent  atomic.Bool
}

// Hooks are called by a Queue; either may be nil.
type Hooks struct {
	// Arrived is called after a push queued new ids.
	Arrived func()
	// Waiting is called after a push marked a settling id: events wait for
	// its acknowledgement.
	Waiting func()
}

// New returns an empty Queue that calls hooks.
func New(hooks Hooks) *Queue {
	return &Queue{
		signal:   make(chan struct{}, 1),
		queued:   map[uuid.UUID]struct{}{},
		inFlight: map[uuid.UUID]bool{},
		settling: map[uuid.UUID]struct{}{},
		hooks:    hooks,
	}
}

// Signal is ready when ids may be queued: a push queued some, or a Take
// left some for another reader.
func (q *Queue) Signal() <-chan struct{} { return q.signal }

// SetBacklog records whether the latest claim left candidate streams out:
// a backlog larger than what this instance holds.
func (q *Queue) SetBacklog(more bool) { q.backlog.Store(more) }

// Backlog reports what the latest SetBacklog recorded.
func (q *Queue) Backlog() bool { return q.backlog.Load() }

// MarkUrgent records that the ids pushed next were taken over from an
// abandoned instance: they waited a stale threshold already, and are
// drained without waiting for more ids to gather.
func (q *Queue) MarkUrgent() { q.urgent.Store(true) }

// TakeUrgent reports whether ids were marked urgent since the last
// TakeUrgent, and clears the mark.
func (q *Queue) TakeUrgent() bool { return q.urgent.Swap(false) }

// Push queues stream ids and reports how many were newly queued (neither
// queued already nor in flight). An id in flight is marked dirty: it may
// have received events its drain has not fetched.
func (q *Queue) Push(ids ...uuid.UUID) int { return q.push(true, ids) }

// PushHeld queues stream ids as Push does but leaves the ids in flight
// unmarked: for a claim that cannot have seen new events of the streams
// this instance drains (no notification since), since a mark would make
// their drains fetch again for nothing.
func (q *Queue) PushHeld(ids ...uuid.UUID) int { return q.push(false, ids) }

func (q *Queue) push(dirty bool, ids []uuid.UUID) int {
	q.mu.Lock()
	added, waiting := 0, false
	for _, id := range ids {
		if was, ok := q.inFlight[id]; ok {
			if dirty {
				q.inFlight[id] = true
				if _, settling := q.settling[id]; settling && !was {
					waiting = true
				}
			}
			continue
		}
		if _, ok := q.queued[id]; ok {
			continue
		}
		q.queued[id] = struct{}{}
		q.order = append(q.order, id)
		added++
	}
	q.mu.Unlock()
	if waiting && q.hooks.Waiting != nil {
		q.hooks.Waiting()
	}
	if added > 0 {
		if q.hooks.Arrived != nil {
			q.hooks.Arrived()
		}
		q.notify()
	}
	return added
}

// Settle marks an id in flight whose drain ended and that waits for its
// completions' acknowledgement, until Done, and reports whether it is
// dirty: events wait for the acknowledgement then. A later push that marks
// it calls Hooks.Waiting.
func (q *Queue) Settle(id uuid.UUID) (dirty bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.inFlight[id]; ok {
		q.settling[id] = struct{}{}
	}
	return q.inFlight[id]
}

func (q *Queue) notify() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// Take removes up to n queued ids and marks them in flight.
func (q *Queue) Take(n int) []uuid.UUID {
	q.mu.Lock()
	n = min(n, len(q.order))
	ids := slices.Clone(q.order[:n])
	q.order = q.order[n:]
	if len(q.order) == 0 {
		q.order = nil
	}
	for _, id := range ids {
		delete(q.queued, id)
		q.inFlight[id] = false
	}
	more := len(q.order) > 0
	q.mu.Unlock()
	if more {
		q.notify() // wake another reader for the rest
	}
	return ids
}

// Done ends the drain of ids; dirty ones are queued again.
func (q *Queue) Done(ids []uuid.UUID) {
	var again []uuid.UUID
	q.mu.Lock()
	for _, id := range ids {
		if dirty := q.inFlight[id]; dirty {
			again = append(again, id)
		}
		delete(q.inFlight, id)
		delete(q.settling, id)
	}
	q.mu.Unlock()
	if len(again) > 0 {
		q.Push(again...)
	}
}

// TakeDirty reports whether an in-flight id was pushed since it was taken
// (or since the last TakeDirty) and clears the mark: the drain that takes
// it fetches the stream again itself, so the stream is not queued again
// when its drain ends unless it is pushed once more.
func (q *Queue) TakeDirty(id uuid.UUID) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	dirty := q.inFlight[id]
	if dirty {
		q.inFlight[id] = false
	}
	return dirty
}

// IsInFlight reports whether a stream is being drained.
func (q *Queue) IsInFlight(id uuid.UUID) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.inFlight[id]
	return ok
}

// Len returns the number of queued ids.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.order)
}
