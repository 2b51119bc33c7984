package consume

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/queue"
	"github.com/vantage-go/vantage/internal/clocktest"
)

// newWindowConsumers returns consumers on a fake clock, not started, with
// the engine's default window (300ms sliding, 3s cap) and maxSize ids at
// most, unhealthy notifications, and a drain, tick and send that do
// nothing.
func newWindowConsumers(tb testing.TB, maxSize int) (*Consumers, *clocktest.Fake) {
	tb.Helper()
	clock := clocktest.NewFake()
	env := &base.Env{Clock: clock, Log: slog.New(slog.DiscardHandler), Signals: &base.Signals{}}
	wakes := make([]chan struct{}, 4)
	for i := range wakes {
		wakes[i] = make(chan struct{}, 1)
	}
	c := New(env, Config{
		PollingInterval: time.Second, NotifyHealthyPollingInterval: time.Second,
		MaxSize: maxSize, SlidingWindow: 300 * time.Millisecond, MaxWait: 3 * time.Second, Coalesce: 25 * time.Millisecond,
	}, Funcs{
		Drain: func(context.Context, []uuid.UUID) {}, Tick: func(context.Context) {}, SendHeld: func() {},
	}, queue.New(queue.Hooks{}), &heard{}, wakes, NewArrivals(3*time.Second), NewActivity(2, nil, nil))
	return c, clock
}

// recv returns the next value of ch, failing the test if none comes within
// ten seconds.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

type windowBundle struct {
	c     *Consumers
	clock *clocktest.Fake
	took  chan int
	out   chan []uuid.UUID
}

// setupWindow runs collectWindow on a fake clock with the default window
// (300ms sliding, 3s cap) and maxSize ids at most, gathering for as long
// as the window allows.
func setupWindow(t *testing.T, maxSize int, first ...uuid.UUID) *windowBundle {
	t.Helper()
	return setupGather(t, maxSize, time.Hour, nil, first...)
}

// setupGather runs collectWindow as setupWindow does, for at most wait and
// until ended closes.
func setupGather(t *testing.T, maxSize int, wait time.Duration, ended <-chan struct{}, first ...uuid.UUID) *windowBundle {
	t.Helper()
	c, clock := newWindowConsumers(t, maxSize)
	wb := &windowBundle{c: c, clock: clock, took: make(chan int, 100), out: make(chan []uuid.UUID, 1)}
	c.Signals.Window = func(n int, closed bool) {
		if !closed {
			wb.took <- n
		}
	}
	go func() { wb.out <- c.collectWindow(t.Context(), first, wait, ended) }()
	<-clock.WaitTimers(1)
	return wb
}

// push queues ids and waits until the window took them and re-armed.
func (wb *windowBundle) push(t *testing.T, ids ...uuid.UUID) {
	t.Helper()
	wb.c.queue.Push(ids...)
	recv(t, wb.took, "the window to take the pushed ids")
}

func (wb *windowBundle) result(t *testing.T) []uuid.UUID {
	t.Helper()
	return recv(t, wb.out, "the window to close")
}

func (wb *windowBundle) requireOpen(t *testing.T) {
	t.Helper()
	select {
	case ids := <-wb.out:
		t.Fatalf("the window closed early with %d ids", len(ids))
	default:
	}
}

func TestSlidingWindow(t *testing.T) {
	t.Parallel()

	a, b, c := uuid.New(), uuid.New(), uuid.New()

	t.Run("ClosesAfterQuietWindow", func(t *testing.T) {
		t.Parallel()
		wb := setupWindow(t, 1000, a)
		wb.clock.Advance(299 * time.Millisecond)
		wb.requireOpen(t)
		wb.clock.Advance(time.Millisecond)
		require.Equal(t, []uuid.UUID{a}, wb.result(t))
	})

	t.Run("ArrivalSlidesTheWindow", func(t *testing.T) {
		t.Parallel()
		wb := setupWindow(t, 1000, a)
		wb.clock.Advance(200 * time.Millisecond)
		wb.push(t, b)
		<-wb.clock.WaitTimers(1)
		wb.clock.Advance(250 * time.Millisecond) // 450ms after the first arrival
		wb.requireOpen(t)
		wb.push(t, c)
		<-wb.clock.WaitTimers(1)
		wb.clock.Advance(300 * time.Millisecond)
		require.Equal(t, []uuid.UUID{a, b, c}, wb.result(t))
	})

	t.Run("MaxWaitCapsTheWindow", func(t *testing.T) {
		t.Parallel()
		wb := setupWindow(t, 1000, a)
		// An arrival every 250ms keeps the window sliding, until 3s.
		for range 11 {
			wb.clock.Advance(250 * time.Millisecond)
			wb.push(t, uuid.New())
			<-wb.clock.WaitTimers(1)
		}
		// 2750ms elapsed: 250ms remain of the cap, not a fresh 300ms.
		wb.clock.Advance(250 * time.Millisecond)
		require.Len(t, wb.result(t), 12)
	})

	t.Run("MaxSizeClosesAtOnce", func(t *testing.T) {
		t.Parallel()
		wb := setupWindow(t, 3, a)
		wb.c.queue.Push(b, c, uuid.New())
		ids := wb.result(t)
		require.Equal(t, []uuid.UUID{a, b, c}, ids)
		require.Equal(t, 1, wb.c.queue.Len(), "the id beyond MaxSize stays queued")
	})

	t.Run("WaitCapsTheWindow", func(t *testing.T) {
		t.Parallel()
		wb := setupGather(t, 1000, 40*time.Millisecond, nil, a)
		wb.clock.Advance(30 * time.Millisecond)
		wb.push(t, b)
		<-wb.clock.WaitTimers(1)
		wb.clock.Advance(9 * time.Millisecond)
		wb.requireOpen(t)
		wb.clock.Advance(time.Millisecond) // 40ms: the gathering ends, not 300ms after b
		require.Equal(t, []uuid.UUID{a, b}, wb.result(t))
	})

	t.Run("EndsWithTheBatchInFlight", func(t *testing.T) {
		t.Parallel()
		ended := make(chan struct{})
		wb := setupGather(t, 1000, time.Second, ended, a)
		wb.c.queue.Push(b)
		recv(t, wb.took, "the window to take b")
		<-wb.clock.WaitTimers(1)
		close(ended)
		require.Equal(t, []uuid.UUID{a, b}, wb.result(t), "drains at once, clock unmoved")
	})
}

func TestGatherBehindBatches(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	at := time.Unix(1000, 0)

	t.Run("NothingInFlightDrainsAtOnce", func(t *testing.T) {
		t.Parallel()
		f := newFlights()
		f.took = 10 * ms
		wait, _ := f.gather(at, ms)
		require.Zero(t, wait)
	})
	t.Run("GathersWhileTheBatchRuns", func(t *testing.T) {
		t.Parallel()
		f := newFlights()
		f.took = 10 * ms
		f.start(0, at)
		wait, ended := f.gather(at.Add(2*ms), ms)
		require.Equal(t, 8*ms, wait, "until the batch in flight is expected to end")
		f.end(0, at.Add(3*ms))
		select {
		case <-ended:
		default:
			t.Fatal("the end of the batch did not end the gathering")
		}
	})
	t.Run("OldestBatchSetsTheWait", func(t *testing.T) {
		t.Parallel()
		f := newFlights()
		f.took = 10 * ms
		f.start(0, at.Add(4*ms))
		f.start(1, at)
		wait, _ := f.gather(at.Add(5*ms), ms)
		require.Equal(t, 5*ms, wait)
	})
	t.Run("NoArrivalExpected", func(t *testing.T) {
		t.Parallel()
		f := newFlights()
		f.took = 10 * ms
		f.start(0, at)
		wait, _ := f.gather(at.Add(2*ms), 20*ms)
		require.Zero(t, wait, "arrivals every 20ms: none before the batch ends in 8ms")
		wait, _ = f.gather(at.Add(2*ms), 0)
		require.Zero(t, wait, "no arrival rate measured yet")
	})
	t.Run("StalledBatchIsNotWaitedFor", func(t *testing.T) {
		t.Parallel()
		f := newFlights()
		f.took = 10 * ms
		f.start(0, at)
		wait, _ := f.gather(at.Add(11*ms), ms)
		require.Zero(t, wait, "the batch ran past its average: it may be stuck on a slow apply")
	})
	t.Run("BatchDurationsAverage", func(t *testing.T) {
		t.Parallel()
		f := newFlights()
		f.start(0, at)
		f.end(0, at.Add(8*ms))
		require.Equal(t, 8*ms, f.took, "the first sample is taken as it is")
		f.start(0, at)
		f.end(0, at.Add(16*ms))
		require.Equal(t, 9*ms, f.took, "later ones move the average an eighth of the way")
	})
	t.Run("ArrivalGapsAverageAndForgetIdleSpells", func(t *testing.T) {
		t.Parallel()
		a := NewArrivals(100 * ms)
		a.Arrived(at)
		require.Zero(t, a.interval(), "one arrival tells no rate")
		a.Arrived(at.Add(4 * ms))
		require.Equal(t, 4*ms, a.interval())
		a.Arrived(at.Add(time.Hour))
		require.Equal(t, 4*ms+(100*ms-4*ms)/8, a.interval(), "an idle hour counts as the cap")
	})
}

// A consumer drains at once while no batch is in flight, and another
// gathers the streams that arrive while a batch runs, draining them
// together as soon as it ends (a group commit); the clock never moves.
func TestConsumersGroupCommit(t *testing.T) {
	t.Parallel()

	c, clock := newWindowConsumers(t, 1000)
	c.arrivals.every = time.Millisecond
	c.flights.took = time.Second
	drained := make(chan []uuid.UUID, 2)
	release := make(chan struct{})
	c.fn.Drain = func(_ context.Context, ids []uuid.UUID) {
		drained <- ids
		if len(ids) == 1 {
			<-release // the first batch runs until released
		}
		c.queue.Done(ids)
	}
	c.fn.Tick = func(context.Context) {}
	took := make(chan int, 10)
	c.Signals.Window = func(n int, closed bool) {
		if !closed {
			took <- n
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i, wake := range c.wakes[:2] {
		wg.Go(func() { c.loop(ctx, ctx, i, wake) })
	}
	t.Cleanup(func() { cancel(); close(release); wg.Wait() })

	a, b, d := uuid.New(), uuid.New(), uuid.New()
	c.queue.Push(a)
	require.Equal(t, []uuid.UUID{a}, recv(t, drained, "a, at once"))
	c.queue.Push(b)
	<-clock.WaitTimers(3) // both idle timers, and the gathering behind a
	c.queue.Push(d)
	require.Equal(t, 1, recv(t, took, "d to join b"))
	release <- struct{}{}
	require.ElementsMatch(t, []uuid.UUID{b, d}, recv(t, drained, "b and d, once a ended"))
}

// heard are notifications as the consumers see them: healthy or not, and
// how many arrived.
type heard struct {
	healthy bool
	count   uint64
}

func (h *heard) Healthy() bool { return h.healthy }
func (h *heard) Heard() uint64 { return h.count }

func TestWantWindow(t *testing.T) {
	t.Parallel()
	build := func(t *testing.T, healthy bool) (*Consumers, *heard) {
		t.Helper()
		c, _ := newWindowConsumers(t, 1000)
		notes := &heard{healthy: healthy}
		c.notes = notes
		return c, notes
	}

	t.Run("PollingOnlyAlwaysWindows", func(t *testing.T) {
		t.Parallel()
		c, _ := build(t, false)
		var last uint64
		require.True(t, c.wantWindow(1, &last))
		require.True(t, c.wantWindow(1, &last), "no notifications to tell bursts by: the window always applies")
	})
	t.Run("WindowsOnlyAfterNotifications", func(t *testing.T) {
		t.Parallel()
		c, notes := build(t, true)
		var last uint64
		require.False(t, c.wantWindow(1, &last), "no notification: a backlog or a periodic claim")
		notes.count++
		require.True(t, c.wantWindow(1, &last), "a notification since the last batch: live appends")
		require.False(t, c.wantWindow(1, &last), "none since")
	})
	t.Run("SkipsFullBatchesBacklogAndTakeovers", func(t *testing.T) {
		t.Parallel()
		c, _ := build(t, false)
		var last uint64
		require.False(t, c.wantWindow(c.cfg.MaxSize, &last), "a full batch")
		c.queue.SetBacklog(true)
		require.False(t, c.wantWindow(1, &last), "claims report a backlog")
		c.queue.SetBacklog(false)
		c.queue.MarkUrgent()
		require.False(t, c.wantWindow(1, &last), "streams taken over from an abandoned instance")
		require.True(t, c.wantWindow(1, &last), "the takeover skips one window only")
	})
}

// With no batch in flight, the completions still wait for the coalescing
// window while more can be expected: streams are queued, or streams
// arrive more often than the window lasts.
func TestIdleCompletionsWaitWhileMoreMayCome(t *testing.T) {
	t.Parallel()

	window := 25 * time.Millisecond
	for _, tc := range []struct {
		name   string
		queued int
		every  time.Duration
		now    bool
	}{
		{name: "arrivals not measured yet", now: true},
		{name: "arrivals sparser than the window", every: 40 * time.Millisecond, now: true},
		{name: "arrivals as sparse as the window", every: window, now: true},
		{name: "arrivals denser than the window", every: 10 * time.Millisecond},
		{name: "streams queued", queued: 1},
		{name: "streams queued, arrivals sparse", queued: 3, every: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.now, sendNow(tc.queued, tc.every, window))
		})
	}
}
