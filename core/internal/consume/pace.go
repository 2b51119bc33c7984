package consume

import (
	"sync"
	"time"

	"github.com/vantage-go/vantage/core/internal/base"
)

// The drain window adapts to load like a group commit: a batch starts at
// once when no other batch is being drained, and streams that arrive while
// one is gather into the next, for as long as the batch in flight is
// expected to run and more arrivals are expected meanwhile. The options
// SlidingWindow, MaxWait and MaxSize bound the gathering; they are no
// longer how long every batch waits. A quiet worker thus drains an append
// as soon as it is claimed, and a busy one still drains in full batches.

// Arrivals measures how often streams arrive in the drain queue.
type Arrivals struct {
	mu    sync.Mutex
	last  time.Time
	every time.Duration // moving average of the gap between arrivals; 0 until two were seen
	cap   time.Duration // the longest gap a sample counts, so an idle spell is forgotten fast
}

// Arrived records an arrival at now.
func (a *Arrivals) Arrived(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.last.IsZero() {
		a.every = base.EWMA(a.every, min(max(now.Sub(a.last), 0), a.cap))
	}
	a.last = now
}

// interval returns the average gap between arrivals, 0 while unknown.
func (a *Arrivals) interval() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.every
}

// NewArrivals returns Arrivals in which a gap counts as at most limit, so
// that an idle spell is forgotten fast.
func NewArrivals(limit time.Duration) *Arrivals { return &Arrivals{cap: limit} }

// flights tracks the batches being drained: when each started, how long
// batches take on average, and a channel closed whenever one ends.
type flights struct {
	mu      sync.Mutex
	started map[int]time.Time // by consumer
	took    time.Duration     // moving average of a batch's duration
	ended   chan struct{}     // closed and replaced when a batch ends
}

func newFlights() *flights {
	return &flights{started: map[int]time.Time{}, ended: make(chan struct{})}
}

// start records that consumer began a batch at now.
func (f *flights) start(consumer int, now time.Time) {
	f.mu.Lock()
	f.started[consumer] = now
	f.mu.Unlock()
}

// end records that consumer's batch ended at now, wakes those gathering
// behind it and reports whether no batch is in flight any more.
func (f *flights) end(consumer int, now time.Time) (last bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if at, ok := f.started[consumer]; ok {
		f.took = base.EWMA(f.took, max(now.Sub(at), 0))
		delete(f.started, consumer)
	}
	close(f.ended)
	f.ended = make(chan struct{})
	return len(f.started) == 0
}

// gather returns how long a batch about to start at now should gather more
// streams, and a channel closed when a batch in flight ends (which ends the
// gathering: the group it waited behind committed). It is zero when no
// batch is in flight (nothing to wait behind), when the oldest one has
// already run longer than batches take on average (it may be stalled on a
// slow apply, and waiting behind it would make every stream pay for one),
// or when no arrival is expected before it ends.
func (f *flights) gather(now time.Time, arrivalEvery time.Duration) (time.Duration, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var oldest time.Time
	for _, at := range f.started {
		if oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	if oldest.IsZero() || f.took == 0 || arrivalEvery == 0 {
		return 0, nil
	}
	remaining := f.took - now.Sub(oldest)
	if remaining <= 0 || remaining < arrivalEvery {
		return 0, nil
	}
	return remaining, f.ended
}
