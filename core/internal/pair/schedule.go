package pair

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/queue"
	"github.com/vantage-go/vantage/core/internal/startstop"
	"github.com/vantage-go/vantage/ports"
)

// schedule queues streams for a drain at a later time: a pair held back by a
// failure's retry time, an infrastructure error's backoff or a rewind's
// debounce is drained again when that time comes, not at the next claim,
// which may be seconds later while notifications are healthy. One goroutine
// serves every scheduled drain, on the engine's clock.
type schedule struct {
	startstop.Base
	clock  ports.Clock
	drain  *queue.Queue
	signal chan struct{}
	// armedAt is when the loop's timer fires next, in Unix nanoseconds on
	// the engine's clock; zero when it waits for a signal only.
	armedAt atomic.Int64

	mu    sync.Mutex
	queue wakeHeap
	due   map[uuid.UUID]time.Time // earliest pending wake per stream
}

func newSchedule(clock ports.Clock, queue *queue.Queue) *schedule {
	return &schedule{clock: clock, drain: queue, signal: make(chan struct{}, 1), due: map[uuid.UUID]time.Time{}}
}

// Start launches the loop that pushes due streams into the drain queue; it
// runs until Stop or until ctx ends.
func (k *schedule) Start(ctx context.Context) {
	ctx, wg, ok := k.StartInit(ctx)
	if ok {
		wg.Go(func() { k.run(ctx) })
	}
}

type wake struct {
	at     time.Time
	stream uuid.UUID
}

type wakeHeap []wake

func (h wakeHeap) Len() int           { return len(h) }
func (h wakeHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h wakeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *wakeHeap) Push(x any)        { *h = append(*h, x.(wake)) }
func (h *wakeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// at queues stream for a drain at t (at once when t has passed). A stream
// already due no later than t is not queued twice.
func (k *schedule) at(stream uuid.UUID, t time.Time) {
	k.mu.Lock()
	if prev, ok := k.due[stream]; ok && !prev.After(t) {
		k.mu.Unlock()
		return
	}
	k.due[stream] = t
	heap.Push(&k.queue, wake{at: t, stream: stream})
	first := k.queue[0].stream == stream && k.queue[0].at.Equal(t)
	k.mu.Unlock()
	if first {
		base.Signal(k.signal)
	}
}

// run pushes due streams into the drain queue until ctx is done.
func (k *schedule) run(ctx context.Context) {
	var t base.LazyTimer
	defer t.Stop()
	for {
		next, ok := k.pushDue()
		if ok {
			t.Reset(k.clock, max(next.Sub(k.clock.Now()), 0))
			k.armedAt.Store(next.UnixNano())
		} else {
			k.armedAt.Store(0)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-k.signal:
		}
	}
}

// pushDue pushes the streams whose time has come and returns the next time,
// if any.
func (k *schedule) pushDue() (time.Time, bool) {
	now := k.clock.Now()
	var due []uuid.UUID
	k.mu.Lock()
	for len(k.queue) > 0 && !k.queue[0].at.After(now) {
		wk := heap.Pop(&k.queue).(wake)
		if at, ok := k.due[wk.stream]; ok && at.Equal(wk.at) {
			delete(k.due, wk.stream)
			due = append(due, wk.stream)
		}
	}
	var next time.Time
	ok := len(k.queue) > 0
	if ok {
		next = k.queue[0].at
	}
	k.mu.Unlock()
	if len(due) > 0 {
		k.drain.Push(due...)
	}
	return next, ok
}

// armed reports whether the loop's timer is set to fire at t.
func (k *schedule) armed(t time.Time) bool { return k.armedAt.Load() == t.UnixNano() }
