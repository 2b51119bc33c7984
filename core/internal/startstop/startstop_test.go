package startstop_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/startstop"
)

// looper is a service with one goroutine that runs until its context ends.
type looper struct {
	startstop.Base
	ended chan error // the cause its goroutine saw, once ended
	hold  chan struct{}
}

func newLooper() *looper {
	return &looper{ended: make(chan error, 10), hold: make(chan struct{})}
}

func (l *looper) Start(ctx context.Context) error {
	ctx, wg, ok := l.StartInit(ctx)
	if !ok {
		return nil
	}
	wg.Go(func() {
		<-ctx.Done()
		<-l.hold // held until the test lets it return
		l.ended <- context.Cause(ctx)
	})
	return nil
}

func TestBaseStopBeforeStartDoesNothing(t *testing.T) {
	t.Parallel()
	l := newLooper()
	require.NoError(t, l.Stop(t.Context()))
	require.False(t, l.Running())
}

func TestBaseSecondStartStartsNothing(t *testing.T) {
	t.Parallel()
	var b startstop.Base
	_, _, ok := b.StartInit(t.Context())
	require.True(t, ok)
	_, _, ok = b.StartInit(t.Context())
	require.False(t, ok, "running already")
	require.NoError(t, b.Stop(t.Context()))
	_, _, ok = b.StartInit(t.Context())
	require.True(t, ok, "a stopped service starts again")
	require.NoError(t, b.Stop(t.Context()))
}

// Stop ends the goroutines' context with ErrStopped and returns once they
// returned; with an ended ctx it returns at once, and a later Stop waits.
func TestBaseStopWaitsForTheGoroutines(t *testing.T) {
	t.Parallel()
	l := newLooper()
	require.NoError(t, l.Start(t.Context()))
	require.True(t, l.Running())

	ended, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, l.Stop(ended), context.Canceled)
	require.True(t, l.Running(), "its goroutine has not returned")

	stopped := make(chan error, 1)
	go func() { stopped <- l.Stop(t.Context()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) before the goroutine did", err)
	case <-time.After(10 * time.Millisecond):
	}
	close(l.hold)
	require.NoError(t, <-stopped)
	require.ErrorIs(t, <-l.ended, startstop.ErrStopped)
	require.False(t, l.Running())
}

// record is a service that logs its calls.
type record struct {
	name     string
	log      *calls
	startErr error
	block    chan struct{} // Start waits for it when set
	entered  chan struct{} // closed when Start was entered, when set
}

type calls struct {
	mu  sync.Mutex
	got []string
}

func (c *calls) add(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, s)
}

func (c *calls) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}

func (r *record) Start(context.Context) error {
	if r.entered != nil {
		close(r.entered)
	}
	if r.block != nil {
		<-r.block
	}
	r.log.add("start " + r.name)
	return r.startErr
}

func (r *record) Stop(context.Context) error {
	r.log.add("stop " + r.name)
	return nil
}

func (r *record) String() string { return r.name }

func TestListStartsInOrderAndStopsInReverse(t *testing.T) {
	t.Parallel()
	log := &calls{}
	l := startstop.NewList(&record{name: "a", log: log}, &record{name: "b", log: log}, &record{name: "c", log: log})
	require.NoError(t, l.Start(t.Context()))
	require.NoError(t, l.Start(t.Context()), "a second start starts nothing")
	require.NoError(t, l.Stop(t.Context()))
	require.NoError(t, l.Stop(t.Context()), "a second stop stops nothing")
	require.Equal(t, []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}, log.list())

	require.NoError(t, l.Start(t.Context()), "a stopped list starts again")
	require.NoError(t, l.Stop(t.Context()))
	require.Len(t, log.list(), 12)
}

func TestListStopBeforeStartStopsNothing(t *testing.T) {
	t.Parallel()
	log := &calls{}
	l := startstop.NewList(&record{name: "a", log: log})
	require.NoError(t, l.Stop(t.Context()))
	require.Empty(t, log.list())
}

// A failing start stops the services started before it, in reverse, and
// names the one that failed; the ones after it never start.
func TestListFailingStartStopsTheStartedOnes(t *testing.T) {
	t.Parallel()
	log := &calls{}
	boom := errors.New("boom")
	l := startstop.NewList(&record{name: "a", log: log}, &record{name: "b", log: log},
		&record{name: "c", log: log, startErr: boom}, &record{name: "d", log: log})
	err := l.Start(t.Context())
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "starting c: boom")
	require.Equal(t, []string{"start a", "start b", "start c", "stop b", "stop a"}, log.list())
	require.NoError(t, l.Stop(t.Context()))
	require.Len(t, log.list(), 5, "nothing left to stop")
}

// A Stop during a Start lets the service being started finish its start,
// starts no further one, and stops those started; Start returns
// ErrStopped.
func TestListStopWhileStarting(t *testing.T) {
	t.Parallel()
	log := &calls{}
	slow := &record{name: "b", log: log, block: make(chan struct{}), entered: make(chan struct{})}
	l := startstop.NewList(&record{name: "a", log: log}, slow, &record{name: "c", log: log})
	started := make(chan error, 1)
	go func() { started <- l.Start(t.Context()) }()
	<-slow.entered

	stopped := make(chan error, 1)
	go func() { stopped <- l.Stop(t.Context()) }()
	require.Eventually(t, func() bool { return startstop.StopsWaiting(l) == 1 }, 10*time.Second, time.Millisecond)
	require.Equal(t, []string{"start a"}, log.list(), "Stop waits for the Start in progress")
	close(slow.block)

	require.ErrorIs(t, <-started, startstop.ErrStopped)
	require.NoError(t, <-stopped)
	require.Equal(t, []string{"start a", "start b", "stop b", "stop a"}, log.list())
}

// A Stop whose ctx ends while it waits for a Start returns ctx's error.
func TestListStopGivesUpWaitingForAStartWithItsContext(t *testing.T) {
	t.Parallel()
	log := &calls{}
	slow := &record{name: "a", log: log, block: make(chan struct{}), entered: make(chan struct{})}
	l := startstop.NewList(slow)
	started := make(chan error, 1)
	go func() { started <- l.Start(t.Context()) }()
	<-slow.entered

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, l.Stop(ctx), context.Canceled)
	require.Zero(t, startstop.StopsWaiting(l))
	close(slow.block)
	require.NoError(t, <-started, "no Stop waits any more")
	require.NoError(t, l.Stop(t.Context()))
	require.Equal(t, []string{"start a", "stop a"}, log.list())
}

// A Stop whose ctx ended already, while no Start is in progress, still
// stops every started service (each with the ended ctx): a Worker stopped
// past its deadline must not leave them running.
func TestListStopWithAnEndedContextStopsTheStartedOnes(t *testing.T) {
	t.Parallel()
	for range 200 { // a choice between the two would fail about half the time
		log := &calls{}
		l := startstop.NewList(&record{name: "a", log: log}, &record{name: "b", log: log})
		require.NoError(t, l.Start(t.Context()))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		require.NoError(t, l.Stop(ctx))
		require.Equal(t, []string{"start a", "start b", "stop b", "stop a"}, log.list())
	}
}

func TestFuncRunsItsSteps(t *testing.T) {
	t.Parallel()
	var got []string
	f := startstop.Func{Name: "registration",
		OnStart: func(context.Context) error { got = append(got, "register"); return nil },
		OnStop:  func(context.Context) error { got = append(got, "deregister"); return nil },
	}
	l := startstop.NewList(f, startstop.Func{Name: "empty"})
	require.NoError(t, l.Start(t.Context()))
	require.NoError(t, l.Stop(t.Context()))
	require.Equal(t, []string{"register", "deregister"}, got)
	require.Equal(t, "registration", f.String())
}
