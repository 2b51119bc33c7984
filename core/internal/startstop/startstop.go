// Package startstop gives the engine's services one shape: Start(ctx)
// error and Stop(ctx) error, safe to call in any order and any number of
// times, and a List that starts services in turn and stops them in
// reverse.
//
// A service that runs goroutines embeds Base: its Start calls StartInit and
// launches them on the WaitGroup it returns; Base's Stop ends their context
// and waits for them. A List is how a Worker runs its services: a service
// started later may rely on every one started before it, which stops only
// after it.
//
// Unlike River's startstop, Base does not detach the context it is given:
// the goroutines of a service run under a context derived from Start's,
// so the owner that ends that context ends them all at once; only Stop
// waits for them.
package startstop

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// ErrStopped is the cause of the context a service's goroutines run under
// once Stop ended it, and the error of a Start that a Stop ended. The
// engine's public core.ErrStopped is this error.
var ErrStopped = errors.New("vantage: worker stopped")

// Service is a part of the engine that runs between Start and Stop.
//
// Start launches what the service runs and returns; ctx is the context its
// goroutines run under, and a cancelled ctx makes Start give up. A second
// Start while the service runs starts nothing. Stop ends what Start
// launched and waits for it, or until ctx ends (then it returns ctx.Err()
// and what it ended finishes on its own); Stop on a service that never
// started, or stopped already, does nothing.
type Service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Base is embedded by a service that runs goroutines. Its zero value is
// ready.
type Base struct {
	mu  sync.Mutex
	run *run
	gen uint64 // counts runs, so a late Stop never forgets a newer run
}

// run is one run of a service: between a Start and its Stop.
type run struct {
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
}

// StartInit begins a start. It returns the context the service's
// goroutines run under (ended by Stop, or with ctx) and the WaitGroup to
// start them with (wg.Go), which Stop waits for; ok is false when the
// service runs already and must start nothing.
func (b *Base) StartInit(ctx context.Context) (runCtx context.Context, wg *sync.WaitGroup, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.run != nil {
		return nil, nil, false
	}
	r := &run{}
	runCtx, r.cancel = context.WithCancelCause(ctx)
	b.run = r
	b.gen++
	return runCtx, &r.wg, true
}

// Running reports whether the service started and did not stop since.
func (b *Base) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.run != nil
}

// Stop ends the context of the service's goroutines with ErrStopped and
// waits for them, or for ctx. It is safe to call at any time, from several
// goroutines; once the goroutines returned, the service may start again.
func (b *Base) Stop(ctx context.Context) error {
	b.mu.Lock()
	r, gen := b.run, b.gen
	b.mu.Unlock()
	if r == nil {
		return nil
	}
	r.cancel(ErrStopped)
	if ctx.Done() == nil {
		r.wg.Wait()
	} else {
		done := make(chan struct{})
		go func() {
			r.wg.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err() // the goroutines end on their own
		}
	}
	b.mu.Lock()
	if b.gen == gen {
		b.run = nil
	}
	b.mu.Unlock()
	return nil
}

// Func is a Service made of two functions, for a step of a List that is
// not a service of its own (registering the instance, and deregistering it
// at the end). Either may be nil.
type Func struct {
	Name    string
	OnStart func(ctx context.Context) error
	OnStop  func(ctx context.Context) error
}

// Start implements Service.
func (f Func) Start(ctx context.Context) error {
	if f.OnStart == nil {
		return nil
	}
	return f.OnStart(ctx)
}

// Stop implements Service.
func (f Func) Stop(ctx context.Context) error {
	if f.OnStop == nil {
		return nil
	}
	return f.OnStop(ctx)
}

// String returns the step's name, which a List's errors carry.
func (f Func) String() string { return f.Name }

// List runs services as one: Start starts them in order, Stop stops those
// started in reverse. Like a Service, it may be started and stopped any
// number of times, in any order, from any goroutine.
type List struct {
	services []Service

	turn     chan struct{} // held (a token taken) by Start and Stop while they run
	stopping atomic.Int32  // Stops waiting for the Start in progress
	started  int           // services[:started] are running; guarded by turn
}

// NewList returns a List of services, started in the order given.
func NewList(services ...Service) *List {
	return &List{services: services, turn: make(chan struct{}, 1)}
}

// Start starts each service in order, each with ctx, and returns once all
// did. When one fails, it stops the ones started before it (in reverse) and
// returns the error, naming the service; when Stop is called meanwhile, it
// starts no further service, stops those it started and returns
// ErrStopped. A Start while the list runs starts nothing.
func (l *List) Start(ctx context.Context) error {
	if err := l.take(ctx); err != nil {
		return err
	}
	defer l.give()
	if l.started > 0 {
		return nil
	}
	for _, s := range l.services {
		err := ctx.Err()
		if l.stopping.Load() > 0 {
			err = ErrStopped
		}
		if err == nil {
			err = s.Start(ctx)
		}
		if err != nil {
			stopErr := l.stopStarted(context.WithoutCancel(ctx))
			return errors.Join(fmt.Errorf("starting %s: %w", name(s), err), stopErr)
		}
		l.started++
	}
	return nil
}

// Stop stops the started services in reverse order, each once the ones
// after it stopped, and returns their errors joined. A Start in progress
// starts no further service and stops those it started (see Start); Stop
// waits for it. When ctx ends, Stop returns ctx.Err() if it was still
// waiting for a Start; otherwise the services not stopped yet are still
// stopped, each with the ended ctx: their Stop ends what they run and
// returns without waiting.
func (l *List) Stop(ctx context.Context) error {
	l.stopping.Add(1)
	err := l.take(ctx)
	l.stopping.Add(-1)
	if err != nil {
		return err
	}
	defer l.give()
	return l.stopStarted(ctx)
}

// take takes the turn, waiting for the Start or Stop that holds it until
// ctx ends. A free turn is taken whatever becomes of ctx: a Stop past its
// deadline still stops what runs.
func (l *List) take(ctx context.Context) error {
	select {
	case l.turn <- struct{}{}:
		return nil
	default:
	}
	select {
	case l.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *List) give() { <-l.turn }

// stopStarted stops services[:started] in reverse. The caller holds the
// turn.
func (l *List) stopStarted(ctx context.Context) error {
	var errs []error
	for i := l.started - 1; i >= 0; i-- {
		s := l.services[i]
		if err := s.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stopping %s: %w", name(s), err))
		}
	}
	l.started = 0
	return errors.Join(errs...)
}

// Services returns the services of the list, in start order.
func (l *List) Services() []Service { return slices.Clone(l.services) }

// name names a service in errors: its String, or its type.
func name(s Service) string {
	if n, ok := s.(fmt.Stringer); ok {
		return n.String()
	}
	return fmt.Sprintf("%T", s)
}
