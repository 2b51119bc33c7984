package core

import (
	"context"
	"sync"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/dedup"
)

// pairKey identifies a (stream, perspective) pair.
type pairKey struct {
	stream      uuid.UUID
	perspective string
}

// dedupKey returns k as the dedup cache names pairs.
func (k pairKey) dedupKey() dedup.Key {
	return dedup.Key{Stream: k.stream, Perspective: k.perspective}
}

// gates serializes load-apply-save per (stream, perspective) within one
// process, while different pairs run in parallel. Entries are reference
// counted and removed when the last holder or waiter leaves, so the map only
// holds pairs in use.
type gates struct {
	mu      sync.Mutex
	entries map[pairKey]*gateEntry
}

type gateEntry struct {
	sem  chan struct{}
	refs int
}

func newGates() *gates { return &gates{entries: map[pairKey]*gateEntry{}} }

// acquire takes the gate of k, calling contended if another holder has it.
// It returns a release func, or ctx.Err().
func (g *gates) acquire(ctx context.Context, k pairKey, contended func()) (func(), error) {
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

func (g *gates) leave(k pairKey, e *gateEntry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e.refs--
	if e.refs == 0 && g.entries[k] == e {
		delete(g.entries, k)
	}
}

func (g *gates) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.entries)
}
