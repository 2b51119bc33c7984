package postgres

import (
	"context"
	"sync"
)

// Gate holds every SQL user of a Store until the schema is ready. It starts
// closed; Open lets waiters through for good, Fail releases them with an error
// (migrations failed). The first Open or Fail wins; later calls are no-ops.
// The zero value is not usable: create gates with NewGate. Safe for concurrent
// use.
type Gate struct {
	once sync.Once
	done chan struct{}
	err  error // written once before done is closed
}

// NewGate returns a closed gate.
func NewGate() *Gate { return &Gate{done: make(chan struct{})} }

// openGate returns a gate that is already open, for stores whose schema the
// host migrated beforehand.
func openGate() *Gate {
	g := NewGate()
	g.Open()
	return g
}

// Open marks the schema ready and releases every waiter.
func (g *Gate) Open() { g.settle(nil) }

// Fail releases every waiter, now and later, with err (which should say why
// the schema is not usable).
func (g *Gate) Fail(err error) { g.settle(err) }

func (g *Gate) settle(err error) {
	g.once.Do(func() {
		g.err = err
		close(g.done)
	})
}

// Wait blocks until the gate opens or fails, or ctx is done. It returns nil
// once open, the Fail error, or ctx's error.
func (g *Gate) Wait(ctx context.Context) error {
	select {
	case <-g.done:
		return g.err
	default:
	}
	select {
	case <-g.done:
		return g.err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Ready reports whether the gate is open (not failed).
func (g *Gate) Ready() bool {
	select {
	case <-g.done:
		return g.err == nil
	default:
		return false
	}
}
