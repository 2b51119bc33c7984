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
// entries stored in pairs of 100.
func BenchmarkContains(b *testing.B) {
	for _, size := range []int{1_000, 100_000} {
		c := dedup.New(dedup.Options{Clock: clocktest.NewFake()})
		inFlight, retained := pairs(size/200, 100), pairs(size/200, 100)
		for _, r := range inFlight {
			c.AddRange(r.Key, r.IDs)
		}
		for _, r := range retained {
			c.AddRange(r.Key, r.IDs)
		}
		c.ActivateRetentionFor(retained)
		for _, bc := range []struct {
			name string
			key  dedup.Key
			id   uuid.UUID
		}{
			{"inflight", inFlight[len(inFlight)/2].Key, inFlight[len(inFlight)/2].IDs[50]},
			{"retained", retained[len(retained)/2].Key, retained[len(retained)/2].IDs[50]},
			{"absent", retained[len(retained)/2].Key, uuid.New()},
		} {
			b.Run(fmt.Sprintf("size=%d/%s", size, bc.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					c.Contains(bc.key, bc.id)
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
			batches := pairs(1024, n)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				batch := batches[i%len(batches)]
				c.AddRange(batch.Key, batch.IDs)
				c.RemoveRange(batch.Key, batch.IDs) // keep the cache at a steady size
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
			fill := pairs(100, 100)
			for _, r := range fill {
				c.AddRange(r.Key, r.IDs)
			}
			c.ActivateRetentionFor(fill)
			batches := pairs(1024, n)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				batch := batches[i%len(batches)]
				c.AddRange(batch.Key, batch.IDs)
				c.ActivateRetentionFor([]dedup.Range{batch})
				i++
			}
		})
	}
}

// BenchmarkPartition measures the dedup check of one fetched pair of 100
// rows against a cache holding 10,000 entries of 100 pairs: rows of a pair
// the cache holds nothing of (the catch-up case), rows still InFlight
// (re-delivered before their completion was acknowledged) and rows already
// Retained.
func BenchmarkPartition(b *testing.B) {
	type row struct {
		id      uuid.UUID
		version int64
	}
	const rows, stored = 100, 10_000
	inFlight, retained := pairs(stored/rows/2, rows), pairs(stored/rows/2, rows)
	c := dedup.New(dedup.Options{Clock: clocktest.NewFake()})
	for _, r := range inFlight {
		c.AddRange(r.Key, r.IDs)
	}
	for _, r := range retained {
		c.AddRangeRetained(r.Key, r.IDs)
	}
	rowsOf := func(ids []uuid.UUID) []row {
		out := make([]row, len(ids))
		for i, id := range ids {
			out[i] = row{id: id, version: int64(i)}
		}
		return out
	}
	workID := func(r *row) uuid.UUID { return r.id }
	fresh := pairs(1, rows)[0]
	for _, bc := range []struct {
		name    string
		pair    dedup.Range
		skipped int
	}{
		{"fresh", fresh, 0},
		{"inflight", inFlight[0], rows},
		{"retained", retained[0], rows},
	} {
		b.Run(fmt.Sprintf("rows=%d/%s", rows, bc.name), func(b *testing.B) {
			rs := rowsOf(bc.pair.IDs)
			b.ReportAllocs()
			for b.Loop() {
				if _, skipped := dedup.Partition(c, bc.pair.Key, rs, workID); len(skipped) != bc.skipped {
					b.Fatalf("skipped %d rows, want %d", len(skipped), bc.skipped)
				}
			}
		})
	}
}

// BenchmarkRetentionStep measures one completion's whole stay in the cache
// at a steady state: its 100 rows, of one pair, enter InFlight, are
// acknowledged, and the expiry sweep drops the 100 rows acknowledged
// Retention ago, so the Retained phase holds 10,000 entries throughout.
func BenchmarkRetentionStep(b *testing.B) {
	const n, steps = 100, 100
	clock := clocktest.NewFake()
	c := dedup.New(dedup.Options{Clock: clock, Retention: steps * time.Second})
	batches := pairs(1024, n) // reused only long after expiring
	step := func(i int) {
		batch := batches[i%len(batches)]
		c.AddRange(batch.Key, batch.IDs)
		c.ActivateRetentionFor([]dedup.Range{batch})
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

// pairs returns n pairs of rows ids each.
func pairs(n, rows int) []dedup.Range {
	out := make([]dedup.Range, n)
	for i := range out {
		out[i] = dedup.Range{Key: dedup.Key{Stream: uuid.New(), Perspective: "orders"}, IDs: ids(rows)}
	}
	return out
}

// BenchmarkCatchUpPair measures one pair of a catch-up from the cache's
// side: its 200 fetched rows are checked, recorded InFlight after their
// apply and acknowledged, in a cache whose Retained phase is full at the
// default capacity, so that every acknowledged row evicts one of a pair
// acknowledged long before, whose entries have left the CPU cache.
func BenchmarkCatchUpPair(b *testing.B) {
	const rows = 200
	c := dedup.New(dedup.Options{Clock: clocktest.NewFake()})
	batches := pairs(4*dedup.CapacityDefault/rows, rows) // each reused only after its eviction
	type row struct{ id uuid.UUID }
	fetched := make([][]row, len(batches))
	for i, p := range batches {
		fetched[i] = make([]row, rows)
		for j, id := range p.IDs {
			fetched[i][j].id = id
		}
	}
	workID := func(r *row) uuid.UUID { return r.id }
	step := func(i int) {
		p := batches[i%len(batches)]
		if fresh, _ := dedup.Partition(c, p.Key, fetched[i%len(batches)], workID); len(fresh) != rows {
			b.Fatalf("%d fresh rows, want %d", len(fresh), rows)
		}
		c.AddRange(p.Key, p.IDs)
		c.ActivateRetentionFor([]dedup.Range{p})
	}
	for i := range dedup.CapacityDefault / rows {
		step(i)
	}
	i := dedup.CapacityDefault / rows
	b.ReportAllocs()
	for b.Loop() {
		step(i)
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
}
