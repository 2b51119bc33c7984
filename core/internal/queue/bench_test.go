package queue

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
)

func benchIDs(n int) []uuid.UUID {
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.New()
	}
	return ids
}

// BenchmarkDrainQueue measures one claim tick's worth of drain signals:
// Push a batch of stream ids (half of them already queued, as re-emitted
// claims are), Take them and mark them Done.
func BenchmarkDrainQueue(b *testing.B) {
	for _, n := range []int{10, 300, 1000} {
		b.Run(fmt.Sprintf("ids=%d", n), func(b *testing.B) {
			q := New(Hooks{})
			ids := benchIDs(n)
			b.ReportAllocs()
			for b.Loop() {
				q.Push(ids...)
				q.Push(ids[:n/2]...) // re-emitted: no-ops
				taken := q.Take(n)
				q.Done(taken)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/id")
		})
	}
}

// BenchmarkDrainQueueInFlight measures pushes of streams being drained,
// which only mark them dirty, and the re-queueing at Done.
func BenchmarkDrainQueueInFlight(b *testing.B) {
	q := New(Hooks{})
	ids := benchIDs(300)
	b.ReportAllocs()
	for b.Loop() {
		q.Push(ids...)
		taken := q.Take(len(ids))
		q.Push(ids...) // dirty
		q.Done(taken)  // queued again
		q.Done(q.Take(len(ids)))
	}
}
