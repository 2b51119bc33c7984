package pair

import (
	"context"
	"sync"
)

// Gates serializes load-apply-save per (stream, perspective) within one
// process, while different pairs run in parallel. Entries are reference
// counted and removed when the last holder or waiter leaves, so the map only
// holds pairs in use.
type Gates struct {
	mu      sync.Mutex
	entries map[Key]*gateEntry
}

type gateEntry struct {
	sem  chan struct{}
	refs int
}

// NewGates returns Gates with no pair in use.
func NewGates() *Gates { return &Gates{entries: map[Key]*gateEntry{}} }

// Acquire takes the gate of k, calling contended if another holder has it.
// It returns a release func, or ctx.Err().
func (g *Gates) Acquire(ctx context.Context, k Key, contended func()) (func(), error) {
	g.mu.Lock()
	e, ok := g.entries[k]
	if !ok {
		e = &gateEntry{sem: make(chan struct{}, 1)}
		g.entries[k] = e
	}
	e.refs++
	g.mu.Unlock()

	select {
	case e.sem <- struct{}{}:
	default:
		if contended != nil {
			contended()
		}
		select {
		case e.sem <- struct{}{}:
		case <-ctx.Done():
			g.leave(k, e)
			return nil, ctx.Err()
		}
	}
	return func() {
		<-e.sem
		g.leave(k, e)
	}, nil
}

func (g *Gates) leave(k Key, e *gateEntry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e.refs--
	if e.refs == 0 && g.entries[k] == e {
		delete(g.entries, k)
	}
}

// Len returns the number of pairs in use.
func (g *Gates) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.entries)
}
