package memory

import (
	"container/heap"
	"time"

	"github.com/google/uuid"
)

// claimIndex finds the streams a claim may take without looking at any
// other stream.
//
// A claim takes streams that are drainable (some perspective's first
// pending row is not scheduled in the future) and whose lease is not live.
// A lease is live while its expiry is after now and its holder is live;
// the first part is a matter of time, the second of heartbeats. The index
// files streams by the first part only, which depends on the stream and the
// time, never on the caller or on liveness: a stream is claimable when it
// is drainable and unleased or its lease expired. It changes only when a
// first row or the lease changes (rows appended, completed, failed or
// dead-lettered; the stream leased, renewed or released) or when time
// reaches the retry time of a first row or the expiry of the lease.
//
// Every claimable stream sits in the ready queue of its rank bucket ((hash
// mod partitions) mod live instances that are not passive), whoever held
// it last: a min-heap on readyKey, the insertion sequence of the stream's
// oldest first row not waiting for a retry, so a claim pops streams oldest
// work first and stops as soon as it is full. A stream whose first rows
// wait for a retry time, or whose lease has not expired, also sits in the
// timer queue until the earliest time that can change.
//
// The rest is found elsewhere: a claim reaches the streams its caller holds
// through Store.leases (its drainable live ones fill its result, its
// expired ones are taken again whatever their bucket), and the unexpired
// leases of instances that are no longer live through Store.leases too,
// until a heartbeat abandons those instances and releases their streams
// into the ready queues.
//
// Store operations call touch after changing a stream's rows or lease, with
// their own Now. Queue membership is therefore exact as of that Now; a claim
// with a different Now first moves due timers to the ready queues, and checks
// each stream it pops again, so a stale entry costs one check and is refiled.
type claimIndex struct {
	partitions uint32
	buckets    []*readyQueue // claimable streams by rank bucket; len = ranked live instances
	timers     timerQueue    // streams waiting for a retry time or a lease expiry, earliest first
}

// init sets up an empty index for one live instance.
func (c *claimIndex) init(partitions uint32) {
	c.partitions = partitions
	c.buckets = []*readyQueue{{}}
}

// bucket returns the rank whose claims may take st when its lease is not
// live.
func (c *claimIndex) bucket(st *stream) int {
	return int(st.hash%c.partitions) % len(c.buckets)
}

// arrange re-buckets the ready queues when the partition count or the
// number of ranked live instances differs from the last claim's. Membership
// changes are rare, so the O(claimable streams) rebuild is amortized over
// many claims.
func (c *claimIndex) arrange(partitions uint32, live int) {
	if partitions == c.partitions && live == len(c.buckets) {
		return
	}
	old := c.buckets
	c.partitions = partitions
	c.buckets = make([]*readyQueue, live)
	for i := range c.buckets {
		c.buckets[i] = &readyQueue{}
	}
	for _, q := range old {
		for _, st := range q.streams {
			nq := c.buckets[c.bucket(st)]
			st.ready, st.readyIdx = nq, len(nq.streams)
			nq.streams = append(nq.streams, st)
		}
	}
	for _, q := range c.buckets {
		heap.Init(q)
	}
}

// drainState reports whether st is drainable at now (some perspective's
// first row is not scheduled after now), with the insertion sequence of the
// oldest such first row as key, and the earliest retry time after now of a
// first row that waits (zero when none waits).
func (st *stream) drainState(now time.Time) (key uint64, drainable bool, retry time.Time) {
	for _, p := range st.pairs {
		r := p.first()
		if r.scheduled.After(now) {
			if retry.IsZero() || r.scheduled.Before(retry) {
				retry = r.scheduled
			}
			continue
		}
		if !drainable || r.seq < key {
			key = r.seq
		}
		drainable = true
	}
	return key, drainable, retry
}

// claimState reports whether st is claimable at now (see claimIndex), with
// its key, and the earliest time after now at which that can change: a
// retry time, or the expiry of the lease of a drainable stream (zero when
// nothing is due).
func (st *stream) claimState(now time.Time) (key uint64, claimable bool, wake time.Time) {
	key, drainable, wake := st.drainState(now)
	if drainable && st.holder != uuid.Nil && st.expiry.After(now) {
		if wake.IsZero() || st.expiry.Before(wake) {
			wake = st.expiry
		}
		return key, false, wake
	}
	return key, drainable, wake
}

// touch files st in the claim index as of now, after a change to its rows or
// lease. It costs O(perspectives of st + log queue length).
func (s *Store) touch(st *stream, now time.Time) {
	c := &s.claims
	key, claimable, wake := st.claimState(now)
	var q *readyQueue
	if claimable {
		q = c.buckets[c.bucket(st)]
	}
	switch {
	case st.ready != q:
		if st.ready != nil {
			heap.Remove(st.ready, st.readyIdx)
		}
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
