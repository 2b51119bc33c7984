package postgres

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// publishTimeout bounds one wake notification sent by the publisher.
const publishTimeout = 5 * time.Second

// publisher sends the wake notification of appends made on the pool from
// outside their transactions, right after they commit, coalesced: while one
// NOTIFY is in flight, appends committing meanwhile only mark another as
// due, which is sent as soon as the first returns, so every committed append
// is followed by a notification that starts after its commit.
//
// A NOTIFY inside the appending transaction would be simpler, but
// PostgreSQL serializes the commits of notifying transactions on one lock
// of the notification queue, held across the commit's WAL flush: with 16
// writers on the development machine that capped commits at about 1,000/s
// against 4,800/s without it. It holds no goroutine while idle.
type publisher struct {
	s  *Store
	wg sync.WaitGroup

	mu      sync.Mutex
	running bool
	due     bool
	stopped bool // set by wait: no notification starts after it
}

// wake asks for a notification after the caller's committed append. After
// wait (the Store is closing) it does nothing: a NOTIFY would fail anyway,
// and starting one then would race with wait.
func (p *publisher) wake() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	if p.running {
		p.due = true
		return
	}
	p.running = true
	p.wg.Add(1)
	go p.run()
}

func (p *publisher) run() {
	defer p.wg.Done()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
		err := p.s.NotifierPublish(ctx)
		cancel()
		if err != nil && !p.s.closed.Load() {
			p.s.opts.Logger.Warn("publishing the wake notification of an append failed; listeners rely on polling", slog.Any("error", err))
		}
		p.mu.Lock()
		if !p.due || p.s.closed.Load() {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.due = false
		p.mu.Unlock()
	}
}

// wait stops the publisher and returns once no notification is in flight
// (see Store.Close).
func (p *publisher) wait() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.wg.Wait()
}
