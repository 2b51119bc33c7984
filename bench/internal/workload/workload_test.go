package workload

import "testing"

func TestPlanCoversEveryEventOnce(t *testing.T) {
	t.Parallel()

	const events, streams, batch, appenders = 1003, 10, 7, 3
	next := make([]int64, streams) // next version expected per stream
	for i := range next {
		next[i] = 1
	}
	total := 0
	for a := range appenders {
		for _, b := range Plan(events, streams, batch, appenders, a) {
			if b.Stream%appenders != a {
				t.Fatalf("appender %d got stream %d", a, b.Stream)
			}
			if b.From != next[b.Stream] {
				t.Fatalf("stream %d: batch from %d, want %d", b.Stream, b.From, next[b.Stream])
			}
			if b.Count < 1 || b.Count > batch {
				t.Fatalf("batch of %d events", b.Count)
			}
			next[b.Stream] += int64(b.Count)
			total += b.Count
		}
	}
	if total != events {
		t.Fatalf("planned %d events, want %d", total, events)
	}
	for s := range streams {
		if got, want := next[s]-1, StreamLength(events, streams, s); got != want {
			t.Fatalf("stream %d: %d events, want %d", s, got, want)
		}
	}
}

func TestCheckCountsSkippedAndDoubleApplied(t *testing.T) {
	t.Parallel()

	var m Model
	for _, v := range []int64{1, 2, 4, 4, 5} { // 3 skipped, 4 applied twice
		m = Apply(m, v, NewIncremented(v))
	}
	var c Check
	c.Add(m, 6)       // 6 never applied
	c.Add(Model{}, 2) // a missing model: both events skipped
	if c.Skipped != 4 || c.DoubleApplied != 1 || c.Pairs != 2 {
		t.Fatalf("got %+v, want 4 skipped, 1 double-applied, 2 pairs", c)
	}
}
