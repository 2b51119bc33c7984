package dedup_test

import (
	"fmt"
	"testing"
	"time"

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

// BenchmarkPartition measures the dedup check of one fetched pair of 100
// rows against a cache holding 10,000 entries: rows the cache does not hold
// (the catch-up case), rows still InFlight (re-delivered before their
// completion was acknowledged) and rows already Retained.
func BenchmarkPartition(b *testing.B) {
	type row struct {
		id      uuid.UUID
		version int64
	}
	const rows, stored = 100, 10_000
	inFlight, retained := ids(stored/2), ids(stored/2)
	c := dedup.New(dedup.Options{Clock: clocktest.NewFake()})
	c.AddRange(inFlight)
	c.AddRangeRetained(retained)
	rowsOf := func(ids []uuid.UUID) []row {
		out := make([]row, len(ids))
		for i, id := range ids {
			out[i] = row{id: id, version: int64(i)}
		}
		return out
	}
	workID := func(r *row) uuid.UUID { return r.id }
	for _, bc := range []struct {
		name    string
		rows    []row
		skipped int
	}{
		{"fresh", rowsOf(ids(rows)), 0},
		{"inflight", rowsOf(inFlight[:rows]), rows},
		{"retained", rowsOf(retained[:rows]), rows},
	} {
		b.Run(fmt.Sprintf("rows=%d/%s", rows, bc.name), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, skipped := dedup.Partition(c, bc.rows, workID); len(skipped) != bc.skipped {
					b.Fatalf("skipped %d rows, want %d", len(skipped), bc.skipped)
				}
			}
		})
	}
}

// BenchmarkRetentionStep measures one completion's whole stay in the cache
// at a steady state: its 100 rows enter InFlight, are acknowledged, and the
// expiry sweep drops the 100 rows acknowledged Retention ago, so the
// Retained phase holds 10,000 entries throughout.
func BenchmarkRetentionStep(b *testing.B) {
	const n, steps = 100, 100
	clock := clocktest.NewFake()
	c := dedup.New(dedup.Options{Clock: clock, Retention: steps * time.Second})
	batches := make([][]uuid.UUID, 1024) // reused only long after expiring
	for i := range batches {
		batches[i] = ids(n)
	}
	step := func(i int) {
		batch := batches[i%len(batches)]
		c.AddRange(batch)
		c.ActivateRetentionFor(batch)
		c.EvictExpired()
		clock.Advance(time.Second)
	}
	for i := range steps {
		step(i)
	}
	i := steps
	b.ReportAllocs()
	for b.Loop() {
		step(i)
		i++
	}
	if got := c.Count(); got != steps*n {
		b.Fatalf("cache holds %d entries, want %d", got, steps*n)
	}
}
