// Package workload defines what every benchmarked pipeline does, so Vantage
// and the raw SQL reference do the same work: one event type with a small
// JSON payload, P perspectives that each fold a stream's events into a small
// JSON model, and a seeding plan that spreads N events over S streams in
// round-robin batches.
package workload

import (
	"fmt"
	"strings"
)

// EventType is the registered name of Incremented.
const EventType = "bench.incremented"

// pad makes a payload of about 100 bytes, the size of a typical domain event.
var pad = strings.Repeat("x", 64)

// Incremented is the one event type of the benchmark.
type Incremented struct {
	N   int64  `json:"n"`
	Pad string `json:"pad"`
}

// NewIncremented returns the i-th event of a stream.
func NewIncremented(i int64) Incremented { return Incremented{N: i, Pad: pad} }

// Model is what every perspective stores per stream. Last, Gaps and Dups let
// the benchmark check afterwards that nothing was skipped or applied twice:
// Gaps counts the versions jumped over, Dups the versions applied at or
// below Last.
type Model struct {
	Count int64 `json:"count"`
	Last  int64 `json:"last"`
	Sum   int64 `json:"sum"`
	Gaps  int64 `json:"gaps,omitempty"`
	Dups  int64 `json:"dups,omitempty"`
}

// Apply folds the event at version into m.
func Apply(m Model, version int64, e Incremented) Model {
	switch {
	case version <= m.Last:
		m.Dups++
	case version != m.Last+1:
		m.Gaps += version - m.Last - 1
	}
	m.Count++
	m.Last = max(m.Last, version)
	m.Sum += e.N
	return m
}

// PerspectiveName is the name of the i-th perspective.
func PerspectiveName(i int) string { return fmt.Sprintf("p%d", i) }

// Perspectives returns the names of n perspectives.
func Perspectives(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = PerspectiveName(i)
	}
	return out
}

// Batch is one append of the seeding plan: Count events to stream Stream,
// the first at version From (1-based).
type Batch struct {
	Stream int
	From   int64
	Count  int
}

// StreamLength returns how many events stream i gets when events are spread
// over streams.
func StreamLength(events, streams, i int) int64 {
	n := events / streams
	if i < events%streams {
		n++
	}
	return int64(n)
}

// Plan returns the appends of one appender out of appenders: the streams
// with index ≡ appender (mod appenders), in round-robin batches of at most
// batch events (batch k of every stream before batch k+1 of any), so work
// rows of many streams interleave as they do when many streams are written
// at once, and one stream is only ever appended by one appender.
func Plan(events, streams, batch, appenders, appender int) []Batch {
	var out []Batch
	for from := int64(1); ; from += int64(batch) {
		added := false
		for s := appender; s < streams; s += appenders {
			n := StreamLength(events, streams, s)
			if from > n {
				continue
			}
			out = append(out, Batch{Stream: s, From: from, Count: int(min(int64(batch), n-from+1))})
			added = true
		}
		if !added {
			return out
		}
	}
}

// Check is the verdict over stored models.
type Check struct {
	// Pairs is the number of (stream, perspective) models read.
	Pairs int
	// Skipped counts events missing from models: versions never applied.
	Skipped int64
	// DoubleApplied counts events applied twice to a stored model.
	DoubleApplied int64
}

// Add accounts the stored model of one (stream, perspective) whose stream
// head is at version head; a missing model is the zero Model.
func (c *Check) Add(m Model, head int64) {
	c.Pairs++
	c.Skipped += m.Gaps + max(0, head-m.Last)
	c.DoubleApplied += m.Dups
}

// String formats the verdict.
func (c Check) String() string {
	verdict := "OK"
	if c.Skipped != 0 || c.DoubleApplied != 0 {
		verdict = "FAILED"
	}
	return fmt.Sprintf("%d models, skipped=%d double_applied=%d %s", c.Pairs, c.Skipped, c.DoubleApplied, verdict)
}
