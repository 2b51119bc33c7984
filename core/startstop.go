package core

import (
	"context"
	"sync"
)

// startStop is embedded by the components of a Worker that own goroutines,
// in the spirit of River's startstop.BaseStartStop: a second Start while
// the component runs starts nothing, Stop on a component that never started
// (or already stopped) does nothing, and Stop returns only once every
// goroutine the component started has returned.
//
// Unlike River's, it does not detach the context it is given: the Worker
// detaches its caller's context once and hands its components the contexts
// it ends together (every loop at once when Stop begins; the drains' work
// at the end of Stop or at its deadline). Ending that context stops a
// component's goroutines as Stop does; only Stop waits for them.
type startStop struct {
	mu  sync.Mutex
	run *serviceRun
	gen uint64 // counts runs, so a late Stop never forgets a newer run
}

// serviceRun is one run of a component: between a Start and its Stop.
type serviceRun struct {
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
}

// startInit begins a start. It returns the context the component's
// goroutines run under (ended by Stop, or with ctx) and the WaitGroup to
// start them with (wg.Go), which Stop waits on; ok is false when the
// component runs already and must start nothing.
func (s *startStop) startInit(ctx context.Context) (runCtx context.Context, wg *sync.WaitGroup, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run != nil {
		return nil, nil, false
	}
	r := &serviceRun{}
	runCtx, r.cancel = context.WithCancelCause(ctx)
	s.run = r
	s.gen++
	return runCtx, &r.wg, true
}

// Stop cancels the component's context with ErrStopped and waits for its
// goroutines. It is safe to call at any time, from several goroutines.
func (s *startStop) Stop() {
	s.mu.Lock()
	r, gen := s.run, s.gen
	s.mu.Unlock()
	if r == nil {
		return
	}
	r.cancel(ErrStopped)
	r.wg.Wait()
	s.mu.Lock()
	if s.gen == gen {
		s.run = nil
	}
	s.mu.Unlock()
}
