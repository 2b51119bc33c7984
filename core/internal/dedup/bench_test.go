package dedup_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/dedup"
	"github.com/vantage-go/vantage/internal/clocktest"
)

// BenchmarkContains measures the per-row dedup check of a drain, for a row
// the cache holds (InFlight or Retained) and one it does not, with size
// entries stored.
func BenchmarkContains(b *testing.B) {
	for _, size := range []int{1_000, 100_000} {
		inFlight, retained := ids(size/2), ids(size/2)
		c := dedup.New(dedup.Options{Clock: clocktest.NewFake()})
		c.AddRange(inFlight)
		c.AddRange(retained)
		c.ActivateRetentionFor(retained)
		absent := uuid.New()
		for _, bc := range []struct {
			name string
			id   uuid.UUID
		}{{"inflight", inFlight[size/4]}, {"retained", retained[size/4]}, {"absent", absent}} {
			b.Run(fmt.Sprintf("size=%d/%s", size, bc.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					c.Contains(bc.id)
				}
			})
		}
	}
}

// BenchmarkAddRange measures recording the rows of one completion (a pair
// drained with PerspectiveBatchSize rows) as InFlight.
func BenchmarkAddRange(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			c := dedup.New(dedup.Options{Clock: clocktest.NewFake()})
			batches := make([][]uuid.UUID, 1024)
			for i := range batches {
				batches[i] = ids(n)
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				batch := batches[i%len(batches)]
				c.AddRange(batch)
				c.RemoveRange(batch) // keep the cache at a steady size
				i++
			}
		})
	}
}

// BenchmarkActivateRetentionFor measures the acknowledgement path: the rows
// of a completion enter InFlight, then move to Retained, in a cache whose
// Retained phase is full, so every activation also evicts the oldest entry.
func BenchmarkActivateRetentionFor(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			c := dedup.New(dedup.Options{Clock: clocktest.NewFake(), Capacity: 10_000})
			fill := ids(10_000)
			c.AddRange(fill)
			c.ActivateRetentionFor(fill)
			batches := make([][]uuid.UUID, 1024)
			for i := range batches {
				batches[i] = ids(n)
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				batch := batches[i%len(batches)]
				c.AddRange(batch)
				c.ActivateRetentionFor(batch)
				i++
			}
		})
	}
}
