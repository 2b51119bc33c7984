package consume

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
)

func benchIDs(n int) []uuid.UUID {
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.New()
	}
	return ids
}

// BenchmarkSlidingWindowBySize measures collecting a full batch: the first
// id starts the window, the rest is already queued and the window closes on
// MaxSize without waiting (the catch-up case).
func BenchmarkSlidingWindowBySize(b *testing.B) {
	for _, n := range []int{30, 1000} {
		b.Run(fmt.Sprintf("ids=%d", n), func(b *testing.B) {
			c, _ := newWindowConsumers(b, n)
			ids := benchIDs(n)
			b.ReportAllocs()
			for b.Loop() {
				c.queue.Push(ids...)
				batch := c.collectWindow(b.Context(), c.queue.Take(1), time.Hour, nil)
				if len(batch) != n {
					b.Fatalf("window closed with %d ids, want %d", len(batch), n)
				}
				c.queue.Done(batch)
			}
		})
	}
}

// BenchmarkSlidingWindowByTimer measures a window that closes on its
// timer: one id, then the fake clock passes the sliding window. It includes
// the goroutine hand-off the real consumer loop does not pay.
func BenchmarkSlidingWindowByTimer(b *testing.B) {
	c, clock := newWindowConsumers(b, 1000)
	id := benchIDs(1)
	out := make(chan []uuid.UUID)
	b.ReportAllocs()
	for b.Loop() {
		c.queue.Push(id...)
		first := c.queue.Take(1)
		go func() { out <- c.collectWindow(b.Context(), first, time.Hour, nil) }()
		<-clock.WaitTimers(1)
		clock.Advance(300 * time.Millisecond)
		c.queue.Done(<-out)
	}
}
