package completion_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/completion"
	"github.com/vantage-go/vantage/ports"
)

// BenchmarkBatchedCycle measures one flush cycle of the default strategy as
// the engine drives it: n completions reported (one per drained pair), then
// ResetStale, PendingCompletions, MarkSent, MarkAcknowledged and
// ClearAcknowledged.
func BenchmarkBatchedCycle(b *testing.B) {
	for _, n := range []int{1, 30, 300} {
		b.Run(fmt.Sprintf("completions=%d", n), func(b *testing.B) {
			s, err := completion.NewBatched(completion.BatchedOptions{})
			if err != nil {
				b.Fatal(err)
			}
			items := make([]ports.Completion, n)
			for i := range items {
				items[i] = ports.Completion{StreamID: uuid.New(), Perspective: "p", LastEventID: uuid.New(), LastVersion: 100, WorkIDs: []uuid.UUID{uuid.New()}}
			}
			now := time.Unix(0, 0)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				for _, c := range items {
					if err := s.ReportCompletion(ctx, c); err != nil {
						b.Fatal(err)
					}
				}
				s.ResetStale(now)
				pending := s.PendingCompletions()
				ids := make([]uuid.UUID, len(pending))
				for i, p := range pending {
					ids[i] = p.ID
				}
				s.MarkSent(ids, now)
				s.MarkAcknowledged(ids)
				s.ClearAcknowledged()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/completion")
		})
	}
}

// BenchmarkBatchedBacklog measures the same cycle for one completion while
// 1,000 earlier ones are still Sent and unacknowledged (a slow flush): the
// strategy's scans are linear in what it tracks.
func BenchmarkBatchedBacklog(b *testing.B) {
	s, err := completion.NewBatched(completion.BatchedOptions{})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(0, 0)
	ctx := b.Context()
	for range 1000 {
		_ = s.ReportCompletion(ctx, ports.Completion{StreamID: uuid.New(), Perspective: "p", LastVersion: 1})
	}
	var sent []uuid.UUID
	for _, p := range s.PendingCompletions() {
		sent = append(sent, p.ID)
	}
	s.MarkSent(sent, now)
	c := ports.Completion{StreamID: uuid.New(), Perspective: "p", LastVersion: 1, WorkIDs: []uuid.UUID{uuid.New()}}
	b.ReportAllocs()
	for b.Loop() {
		_ = s.ReportCompletion(ctx, c)
		s.ResetStale(now)
		pending := s.PendingCompletions()
		ids := []uuid.UUID{pending[0].ID}
		s.MarkSent(ids, now)
		s.MarkAcknowledged(ids)
		s.ClearAcknowledged()
	}
}

// BenchmarkBatchedTimeout measures the timeout ResetStale computes for every
// Sent item, for retry counts below, at and far past the cap.
func BenchmarkBatchedTimeout(b *testing.B) {
	s, err := completion.NewBatched(completion.BatchedOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{0, 3, 100} {
		b.Run(fmt.Sprintf("retry=%d", n), func(b *testing.B) {
			var sum time.Duration
			for b.Loop() {
				sum += s.Timeout(n)
			}
			if sum < 0 {
				b.Fatal("negative timeout")
			}
		})
	}
}
