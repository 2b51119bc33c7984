package stage

import (
	"context"
	"sync"
)

// tasks tracks goroutines so that a waiter can wait for those started
// before it, safely while others start.
type tasks struct {
	mu      sync.Mutex
	next    uint64
	running map[uint64]chan struct{}
}

// Go runs f on a goroutine of its own, tracked until it returns.
func (t *tasks) Go(f func()) {
	untrack := t.track()
	go func() {
		defer untrack()
		f()
	}()
}

// track tracks work running on the caller's goroutine until the returned
// function is called.
func (t *tasks) track() func() {
	done := make(chan struct{})
	t.mu.Lock()
	if t.running == nil {
		t.running = map[uint64]chan struct{}{}
	}
	id := t.next
	t.next++
	t.running[id] = done
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		delete(t.running, id)
		t.mu.Unlock()
		close(done)
	}
}

// wait waits for the tasks running at the call, then for those started
// while it waited by then (their children), or until ctx ends.
func (t *tasks) wait(ctx context.Context) error {
	t.mu.Lock()
	upTo := t.next
	t.mu.Unlock()
	for round := 0; round < 2; round++ {
		t.mu.Lock()
		var pending []chan struct{}
		for id, done := range t.running {
			if id < upTo {
				pending = append(pending, done)
			}
		}
		t.mu.Unlock()
		for _, done := range pending {
			select {
			case <-done:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		t.mu.Lock()
		upTo = t.next
		t.mu.Unlock()
	}
	return nil
}
