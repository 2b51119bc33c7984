package core

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

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
	w     *Worker
	clock *clocktest.Fake
	took  chan int
	out   chan []uuid.UUID
}

// setupWindow runs collectWindow on a fake clock with the default window
// (300ms sliding, 3s cap) and maxSize ids at most.
func setupWindow(t *testing.T, maxSize int, first ...uuid.UUID) *windowBundle {
	t.Helper()
	w, clock := newWindowWorker(t, maxSize)
	wb := &windowBundle{w: w, clock: clock, took: make(chan int, 100), out: make(chan []uuid.UUID, 1)}
	w.signals.windowFunc = func(n int, closed bool) {
		if !closed {
			wb.took <- n
		}
	}
	go func() { wb.out <- w.consumers.collectWindow(t.Context(), first) }()
	<-clock.WaitTimers(1)
	return wb
}

// push queues ids and waits until the window took them and re-armed.
func (wb *windowBundle) push(t *testing.T, ids ...uuid.UUID) {
	t.Helper()
	wb.w.consumers.queue.Push(ids...)
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
		wb.w.consumers.queue.Push(b, c, uuid.New())
		ids := wb.result(t)
		require.Equal(t, []uuid.UUID{a, b, c}, ids)
		require.Equal(t, 1, wb.w.consumers.queue.Len(), "the id beyond MaxSize stays queued")
	})
}

// healthyNotifier reports healthy notifications; nothing else is called.
type healthyNotifier struct{ ports.Notifier }

func (healthyNotifier) NotifierHealthy() bool { return true }

func TestWantWindow(t *testing.T) {
	t.Parallel()
	build := func(t *testing.T, healthy bool) *Worker {
		t.Helper()
		b := newIdleBackend()
		if healthy {
			b.Notifier = healthyNotifier{}
		}
		w, err := New(b, NewRegistry(), &Options{Clock: clocktest.NewFake()})
		require.NoError(t, err)
		w.notes.listening.Store(healthy)
		return w
	}

	t.Run("PollingOnlyAlwaysWindows", func(t *testing.T) {
		t.Parallel()
		w := build(t, false)
		var last uint64
		require.True(t, w.consumers.wantWindow(1, &last))
		require.True(t, w.consumers.wantWindow(1, &last), "no notifications to tell bursts by: the window always applies")
	})
	t.Run("WindowsOnlyAfterNotifications", func(t *testing.T) {
		t.Parallel()
		w := build(t, true)
		var last uint64
		require.False(t, w.consumers.wantWindow(1, &last), "no notification: a backlog or a periodic claim")
		w.notes.count.Add(1)
		require.True(t, w.consumers.wantWindow(1, &last), "a notification since the last batch: live appends")
		require.False(t, w.consumers.wantWindow(1, &last), "none since")
	})
	t.Run("SkipsFullBatchesBacklogAndTakeovers", func(t *testing.T) {
		t.Parallel()
		w := build(t, false)
		var last uint64
		require.False(t, w.consumers.wantWindow(w.opts.DrainBatcher.MaxSize, &last), "a full batch")
		w.claims.hasMore.Store(true)
		require.False(t, w.consumers.wantWindow(1, &last), "claims report a backlog")
		w.claims.hasMore.Store(false)
		w.claims.windowSkip.Store(true)
		require.False(t, w.consumers.wantWindow(1, &last), "streams taken over from an abandoned instance")
		require.True(t, w.consumers.wantWindow(1, &last), "the takeover skips one window only")
	})
}
