// Package clocktest provides ports.Clock implementations for tests: Fake,
// which moves only when told to, and Offset, which runs real timers but lets a
// test jump its notion of "now" forward.
package clocktest

import (
	"sort"
	"sync"
	"time"

	"github.com/vantage-go/vantage/ports"
)

// Start is the instant every Fake clock starts at unless told otherwise.
var Start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// Fake is a ports.Clock that moves only on Advance or Set. Timers fire, in
// deadline order, when the clock reaches their deadline. Safe for concurrent
// use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	waiters []chan struct{}
}

var _ ports.Clock = (*Fake)(nil)

// NewFake returns a Fake clock at Start.
func NewFake() *Fake { return &Fake{now: Start} }

// Now returns the fake time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and fires due timers.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	due := c.dueLocked()
	c.mu.Unlock()
	for _, t := range due {
		t.timer.fire(t.deadline)
	}
}

// Set moves the clock to t (never backwards) and fires due timers.
func (c *Fake) Set(t time.Time) {
	c.mu.Lock()
	if t.After(c.now) {
		c.now = t
	}
	due := c.dueLocked()
	c.mu.Unlock()
	for _, tm := range due {
		tm.timer.fire(tm.deadline)
	}
}

// dueTimer is a timer that is due, with its deadline read under the
// clock's lock: a concurrent Reset may change the timer's deadline once the
// lock is released, before it fires.
type dueTimer struct {
	timer    *fakeTimer
	deadline time.Time
}

func (c *Fake) dueLocked() []dueTimer {
	var (
		due  []dueTimer
		keep []*fakeTimer
	)
	for _, t := range c.timers {
		if !t.deadline.After(c.now) {
			due = append(due, dueTimer{timer: t, deadline: t.deadline})
		} else {
			keep = append(keep, t)
		}
	}
	c.timers = keep
	sort.Slice(due, func(i, j int) bool { return due[i].deadline.Before(due[j].deadline) })
	return due
}

// Timers returns how many timers are armed.
func (c *Fake) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitTimers returns a channel closed once at least n timers are armed, so a
// test can advance the clock only after the code under test is waiting.
func (c *Fake) WaitTimers(n int) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for {
			c.mu.Lock()
			if len(c.timers) >= n {
				c.mu.Unlock()
				close(ch)
				return
			}
			w := make(chan struct{})
			c.waiters = append(c.waiters, w)
			c.mu.Unlock()
			<-w
		}
	}()
	return ch
}

// NewTimer returns a timer firing when the clock reaches Now()+d.
func (c *Fake) NewTimer(d time.Duration) ports.Timer {
	t := &fakeTimer{clock: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

type fakeTimer struct {
	clock    *Fake
	ch       chan time.Time
	deadline time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) fire(deadline time.Time) {
	select {
	case t.ch <- deadline:
	default:
	}
}

func (t *fakeTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.timers {
		if x == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return true
		}
	}
	return false
}

func (t *fakeTimer) Reset(d time.Duration) {
	t.Stop()
	c := t.clock
	c.mu.Lock()
	t.deadline = c.now.Add(d)
	if d <= 0 {
		deadline := t.deadline
		c.mu.Unlock()
		t.fire(deadline)
		return
	}
	c.timers = append(c.timers, t)
	waiters := c.waiters
	c.waiters = nil
	c.mu.Unlock()
	for _, w := range waiters {
		close(w)
	}
}

// Offset is a ports.Clock whose timers are real but whose Now can be jumped
// forward, for scenario tests where loops must run freely while a test makes
// leases expire or heartbeats go stale. Safe for concurrent use.
type Offset struct {
	mu     sync.Mutex
	offset time.Duration
}

var _ ports.Clock = (*Offset)(nil)

// NewOffset returns an Offset clock with no offset.
func NewOffset() *Offset { return &Offset{} }

// Now returns the wall time plus the accumulated jumps.
func (c *Offset) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Jump moves Now forward by d; timers keep their real deadlines.
func (c *Offset) Jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// NewTimer returns a real timer.
func (c *Offset) NewTimer(d time.Duration) ports.Timer { return ports.SystemClock{}.NewTimer(d) }
