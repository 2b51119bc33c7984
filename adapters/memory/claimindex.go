package memory

import (
	"container/heap"
	"time"

	"github.com/google/uuid"
)

// claimIndex finds the streams a claim may lease rows of without looking at
// any other stream.
//
// Whether a claim can lease a row of a stream depends only on the first
// pending row of each of its perspectives: the ordering guard stops every
// walk at the first row that is scheduled in the future or under a live
// lease, so a stream is claimable exactly when some perspective's first row
// is unleased or lease-expired and not scheduled in the future. (A first row
// under the caller's own live lease makes the stream one the caller already
// drains; WorkClaim handles those from Store.held.) Being claimable is
// therefore a property of the stream and the time, not of the caller, and it
// changes only when a first row changes (rows appended, leased, released,
// completed, a lease renewed) or when time reaches the lease expiry or retry
// time of a blocked first row.
//
// Every claimable stream sits in one ready queue: the queue of its owner when
// it is pinned, or the orphan queue of its rank bucket ((hash mod partitions)
// mod live instances that are not passive) when it is not. Queues are
// min-heaps on readyKey, the insertion sequence of the stream's oldest
// claimable first row, so a claim pops streams oldest work first and stops
// as soon as it is full. A stream with a blocked first row also sits in the
// timer queue until the earliest time one can unblock.
//
// Store operations call touch after changing a stream's rows or pin, with
// their own Now. Queue membership is therefore exact as of that Now; a claim
// with a different Now first moves due timers to the ready queues, and checks
// each stream it pops again, so a stale entry costs one check and is refiled.
type claimIndex struct {
	partitions uint32
	orphans    []*readyQueue             // unpinned claimable streams by rank bucket; len = ranked live instances
	owned      map[uuid.UUID]*readyQueue // pinned claimable streams by owner; no queue is empty
	timers     timerQueue                // streams with a blocked first row, earliest wake first
}

// init sets up an empty index for one live instance.
func (c *claimIndex) init(partitions uint32) {
	c.partitions = partitions
	c.orphans = []*readyQueue{{}}
	c.owned = make(map[uuid.UUID]*readyQueue)
}

// bucket returns the rank whose claims may take st when it is unpinned or
// pinned to a dead instance.
func (c *claimIndex) bucket(st *stream) int {
	return int(st.hash%c.partitions) % len(c.orphans)
}

// arrange re-buckets the orphan queues when the partition count or the
// number of ranked live instances differs from the last claim's. Membership
// changes are rare, so the O(orphans) rebuild is amortized over many claims.
func (c *claimIndex) arrange(partitions uint32, live int) {
	if partitions == c.partitions && live == len(c.orphans) {
		return
	}
	old := c.orphans
	c.partitions = partitions
	c.orphans = make([]*readyQueue, live)
	for i := range c.orphans {
		c.orphans[i] = &readyQueue{}
	}
	for _, q := range old {
		for _, st := range q.streams {
			nq := c.orphans[c.bucket(st)]
			st.ready, st.readyIdx = nq, len(nq.streams)
			nq.streams = append(nq.streams, st)
		}
	}
	for _, q := range c.orphans {
		heap.Init(q)
	}
}

// queueFor returns the ready queue st belongs in while claimable.
func (c *claimIndex) queueFor(st *stream) *readyQueue {
	if st.pinnedTo == uuid.Nil {
		return c.orphans[c.bucket(st)]
	}
	q := c.owned[st.pinnedTo]
	if q == nil {
		q = &readyQueue{owner: st.pinnedTo}
		c.owned[st.pinnedTo] = q
	}
	return q
}

// leave takes st out of its ready queue, if any.
func (c *claimIndex) leave(st *stream) {
	q := st.ready
	if q == nil {
		return
	}
	heap.Remove(q, st.readyIdx)
	if q.owner != uuid.Nil && q.Len() == 0 {
		delete(c.owned, q.owner)
	}
}

// claimState reports whether a claim at now can lease a row of st that is
// not under the caller's own live lease (see claimIndex), with the insertion
// sequence of the oldest such first row as key, and the earliest time after
// now at which a blocked first row can become claimable (zero when none is
// blocked).
func (st *stream) claimState(now time.Time) (key uint64, claimable bool, wake time.Time) {
	for _, p := range st.pairs {
		r := p.first()
		var until time.Time
		switch {
		case r.scheduled.After(now):
			until = r.scheduled
		case r.holder != uuid.Nil && r.expiry.After(now):
			until = r.expiry
		default:
			if !claimable || r.seq < key {
				key = r.seq
			}
			claimable = true
			continue
		}
		if wake.IsZero() || until.Before(wake) {
			wake = until
		}
	}
	return key, claimable, wake
}

// touch files st in the claim index as of now, after a change to its rows or
// pin. It costs O(perspectives of st + log queue length).
func (s *Store) touch(st *stream, now time.Time) {
	c := &s.claims
	key, claimable, wake := st.claimState(now)
	var q *readyQueue
	if claimable {
		q = c.queueFor(st)
	}
	switch {
	case st.ready != q:
		c.leave(st)
		if q != nil {
			st.readyKey = key
			heap.Push(q, st)
		}
	case q != nil && st.readyKey != key:
		st.readyKey = key
		heap.Fix(q, st.readyIdx)
	}
	switch {
	case wake.IsZero():
		if st.timerIdx >= 0 {
			heap.Remove(&c.timers, st.timerIdx)
		}
	case st.timerIdx < 0:
		st.wake = wake
		heap.Push(&c.timers, st)
	case !st.wake.Equal(wake):
		st.wake = wake
		heap.Fix(&c.timers, st.timerIdx)
	}
}

// wakeDue refiles every stream whose timer is due at now: a lease expired or
// a retry time passed, so it may have become claimable.
func (s *Store) wakeDue(now time.Time) {
	for s.claims.timers.Len() > 0 && !s.claims.timers[0].wake.After(now) {
		st := heap.Pop(&s.claims.timers).(*stream)
		s.touch(st, now)
	}
}

// readyQueue is a min-heap of claimable streams on readyKey. It implements
// heap.Interface and keeps each stream's ready and readyIdx up to date.
type readyQueue struct {
	owner   uuid.UUID // the pin owner, uuid.Nil for an orphan bucket
	streams []*stream
}

func (q *readyQueue) Len() int           { return len(q.streams) }
func (q *readyQueue) Less(i, j int) bool { return q.streams[i].readyKey < q.streams[j].readyKey }

func (q *readyQueue) Swap(i, j int) {
	q.streams[i], q.streams[j] = q.streams[j], q.streams[i]
	q.streams[i].readyIdx = i
	q.streams[j].readyIdx = j
}

func (q *readyQueue) Push(x any) {
	st := x.(*stream)
	st.ready, st.readyIdx = q, len(q.streams)
	q.streams = append(q.streams, st)
}

func (q *readyQueue) Pop() any {
	n := len(q.streams) - 1
	st := q.streams[n]
	q.streams[n] = nil
	q.streams = q.streams[:n]
	st.ready, st.readyIdx = nil, -1
	return st
}

// peek returns the stream with the smallest key, nil when q is nil or empty.
func (q *readyQueue) peek() *stream {
	if q == nil || len(q.streams) == 0 {
		return nil
	}
	return q.streams[0]
}

// timerQueue is a min-heap of streams on wake. It implements heap.Interface
// and keeps each stream's timerIdx up to date.
type timerQueue []*stream

func (t timerQueue) Len() int           { return len(t) }
func (t timerQueue) Less(i, j int) bool { return t[i].wake.Before(t[j].wake) }

func (t timerQueue) Swap(i, j int) {
	t[i], t[j] = t[j], t[i]
	t[i].timerIdx = i
	t[j].timerIdx = j
}

func (t *timerQueue) Push(x any) {
	st := x.(*stream)
	st.timerIdx = len(*t)
	*t = append(*t, st)
}

func (t *timerQueue) Pop() any {
	old := *t
	n := len(old) - 1
	st := old[n]
	old[n] = nil
	*t = old[:n]
	st.timerIdx = -1
	return st
}
