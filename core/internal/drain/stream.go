package drain

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/core/internal/perspective"
	"github.com/vantage-go/vantage/ports"
)

// uncovered returns the streams of ids a fetch with the given result did not
// reach: none unless the fetch was cut, else those ordered after the stream
// it was cut in (Work is ordered by stream id bytes).
func uncovered(ids []uuid.UUID, streams []streamWork) []uuid.UUID {
	if len(streams) == 0 || !streams[len(streams)-1].cut {
		return nil
	}
	last := streams[len(streams)-1].id
	var out []uuid.UUID
	for _, id := range ids {
		if bytes.Compare(id[:], last[:]) > 0 {
			out = append(out, id)
		}
	}
	return out
}

// streamWork is one stream's share of a fetch result. Its perspectives
// drain it in parallel: they only read it, but for the cache of what they
// share about its events.
type streamWork struct {
	id     uuid.UUID
	events []ports.Event    // ordered by version
	work   []ports.WorkItem // ordered by perspective, version
	seq    uint64           // the fetch's sequence number (see pair.Parking.NextFetch)
	cut    bool             // the fetch may have stopped inside this stream's rows
	// decoded caches, by index in events, what every perspective applying
	// an event may share. It is allocated with the streamWork (one array
	// per fetch, as events), since the perspectives fill it concurrently.
	decoded []decodedEvent
}

// decodedEvent is what the perspectives of a stream share about one of its
// events, each part computed once, by the first perspective that needs it,
// while the others wait for it.
type decodedEvent struct {
	decodeOnce sync.Once
	value      any // the decoded value, when it is shareable
	err        error
	shareable  bool
}

// decode returns the decoded value of events[i]. A value of a shareable
// type (see perspective.Registry.Decode) is decoded once for all the perspectives
// applying it; others are decoded afresh for each but the first, since a
// handler may mutate what its value refers to.
func (sw *streamWork) decode(reg perspective.Registry, i int) (any, error) {
	d := &sw.decoded[i]
	var (
		v     any
		err   error
		first bool
	)
	d.decodeOnce.Do(func() {
		first = true
		v, d.shareable, err = reg.Decode(sw.events[i])
		if d.shareable {
			d.value, d.err = v, err
		}
	})
	switch {
	case first:
		return v, err
	case d.shareable:
		return d.value, d.err
	}
	v, _, err = reg.Decode(sw.events[i])
	return v, err
}

// event returns the index in sw.events of the event of row r, -1 when the
// fetch did not return it. hint is where to look first: rows walked in
// version order find their events at or just after the previous one's.
func (sw *streamWork) event(r ports.WorkItem, hint int) int {
	for i := hint; i < len(sw.events) && i <= hint+1; i++ {
		if sw.events[i].Version == r.EventVersion && sw.events[i].ID == r.EventID {
			return i
		}
	}
	i, ok := slices.BinarySearchFunc(sw.events, r.EventVersion, func(e ports.Event, v int64) int {
		return cmp.Compare(e.Version, v)
	})
	if ok && sw.events[i].ID == r.EventID {
		return i
	}
	for i := range sw.events { // not where the port's ordering puts it
		if sw.events[i].ID == r.EventID {
			return i
		}
	}
	return -1
}

// splitByStream cuts a fetch result into its streams, in stream id order,
// dropping streams without work. The port orders Work by stream,
// perspective and version and Events by stream and version, so each stream's
// share is a contiguous run; a result ordered otherwise is sorted first.
// When the result holds maxRows rows the fetch may have been cut inside its
// last stream, which is marked cut.
func splitByStream(res *ports.EventsFetchPendingResult, seq uint64, maxRows int) []streamWork {
	work, events := res.Work, res.Events
	if !slices.IsSortedFunc(work, compareWork) {
		work = slices.Clone(work)
		slices.SortStableFunc(work, compareWork)
	}
	if !slices.IsSortedFunc(events, compareEvents) {
		events = slices.Clone(events)
		slices.SortStableFunc(events, compareEvents)
	}
	var out []streamWork
	for i, j := 0, 0; i < len(work); {
		id := work[i].StreamID
		end := i + 1
		for end < len(work) && work[end].StreamID == id {
			end++
		}
		for j < len(events) && bytes.Compare(events[j].StreamID[:], id[:]) < 0 {
			j++
		}
		evEnd := j
		for evEnd < len(events) && events[evEnd].StreamID == id {
			evEnd++
		}
		out = append(out, streamWork{id: id, events: events[j:evEnd:evEnd], work: work[i:end:end], seq: seq})
		i, j = end, evEnd
	}
	// Each stream of a result holding several gets arrays of its own: a
	// stream's rows are then let go when its drain ends, as drainBatch
	// counts them, not once the last stream of the fetch ended.
	for k := range out {
		sw := &out[k]
		if len(out) > 1 {
			sw.events, sw.work = slices.Clone(sw.events), slices.Clone(sw.work)
		}
		sw.decoded = make([]decodedEvent, len(sw.events))
	}
	if maxRows > 0 && len(work) >= maxRows && len(out) > 0 {
		out[len(out)-1].cut = true
	}
	return out
}

func compareWork(a, b ports.WorkItem) int {
	if c := bytes.Compare(a.StreamID[:], b.StreamID[:]); c != 0 {
		return c
	}
	return cmp.Or(strings.Compare(a.Perspective, b.Perspective), cmp.Compare(a.EventVersion, b.EventVersion))
}

func compareEvents(a, b ports.Event) int {
	if c := bytes.Compare(a.StreamID[:], b.StreamID[:]); c != 0 {
		return c
	}
	return cmp.Compare(a.Version, b.Version)
}

// groupByPerspective splits a stream's work into its perspectives' rows. The
// rows are ordered by perspective and version (see splitByStream), so each
// group is a sub-slice.
func groupByPerspective(work []ports.WorkItem) [][]ports.WorkItem {
	var groups [][]ports.WorkItem
	for i := 0; i < len(work); {
		j := i + 1
		for j < len(work) && work[j].Perspective == work[i].Perspective {
			j++
		}
		groups = append(groups, work[i:j:j])
		i = j
	}
	return groups
}

// drainStream drains a stream's pending events in passes, each applying
// what one fetch returned (see drainPass). The stream is fetched again
// within the batch when its fetch may have been cut at FetchMaxRows, or
// when it was pushed to the drain queue while it was drained (a claim or a
// notification saw events appended meanwhile): up to Drain.LoopMaxIterations
// passes in all, while the last pass applied at least
// Drain.LoopRefetchMinBatch events. A pass that found less to do leaves the
// rest to the next batch, which the push queues. Before a refetch what was
// applied is acknowledged, else the refetch would return it again. The
// task notes when rows past the fetch limit may be left. A pass in which an
// apply was abandoned ends the drain: the abandoned pair is retried later.
func (dr *Drainer) drainStream(ctx context.Context, t *streamTask, sw *streamWork, cursors map[pair.Key]*ports.Cursor) {
	for iter := 1; ; iter++ {
		pass, abandoned := dr.drainPass(ctx, t, sw, cursors)
		if abandoned {
			return
		}
		if !pass.enough || iter >= dr.cfg.MaxPasses || ctx.Err() != nil {
			t.more = sw.cut && ctx.Err() == nil
			return
		}
		// The push is taken before the fetch: one that comes after it
		// marks the stream again, for the next pass or the next batch.
		if !dr.queue.TakeDirty(sw.id) && !sw.cut {
			return
		}
		if err := dr.completer.FlushNow(ctx); err != nil && ctx.Err() != nil {
			return
		}
		res, seq, err := dr.fetcher.Fetch(ctx, []uuid.UUID{sw.id})
		if err != nil {
			if ctx.Err() == nil {
				dr.parking.WakeAt(sw.id, dr.Now().Add(dr.cfg.InfraRetryMax))
			}
			return
		}
		t.refetched(len(res.Work))
		next := splitByStream(res, seq, dr.cfg.FetchMaxRows)
		if len(next) == 0 || next[0].id != sw.id {
			return
		}
		sw = &next[0]
		dr.renewer.Hold(sw.id, dr.Now())
		cursors = cursorsByPair(res.Cursors)
	}
}

// drainPass runs the perspectives of one fetch of a stream, each on a
// goroutine of its own, at most MaxPerspectivesPerStream at once, and
// waits until every one of them ended or was abandoned: an abandoned apply
// runs on, and neither the stream nor the batch waits for it. It records
// on the task what the pairs applied, in the order of the perspectives
// whatever the order they ended in, and reports the events the pass
// applied and whether an apply was abandoned.
func (dr *Drainer) drainPass(ctx context.Context, t *streamTask, sw *streamWork, cursors map[pair.Key]*ports.Cursor) (passEvents, bool) {
	groups := groupByPerspective(sw.work)
	outcomes := make([]pairOutcome, len(groups))
	ended := make(chan pairEnd, len(groups)) // an ending pair never waits
	running := 0
	wait := func() {
		e := <-ended
		outcomes[e.index] = e.outcome
		running--
	}
	for i, rows := range groups {
		if running == dr.cfg.MaxPerspectivesPerStream {
			dr.Signals.OnPairSlotWait()
			wait()
		}
		running++
		pt := &pairTask{stream: t, index: i, ended: ended}
		cursor := cursors[pair.Key{Stream: sw.id, Perspective: rows[0].Perspective}]
		go func() {
			if o, err := dr.drainPair(ctx, pt, sw, rows, cursor); err == nil {
				pt.end(o)
			} // else abandoned: the abandonment ended the pair
		}()
	}
	for running > 0 {
		wait()
	}
	pass := passEvents{limit: dr.cfg.RefetchMinEvents}
	abandoned := false
	for _, o := range outcomes {
		t.add(o.applied, o.events)
		pass.add(o)
		abandoned = abandoned || o.abandoned
	}
	return pass, abandoned
}

// pairOutcome is what the run of one pair applied.
type pairOutcome struct {
	applied int           // events applied and saved
	events  []ports.Event // those events, when the stream collects them
	// versions are the versions of the events applied when they are fewer
	// than Drain.LoopRefetchMinBatch (see passEvents).
	versions []int64
	// abandoned is set when an apply of the run was abandoned.
	abandoned bool
}

// pairEnd is how a pair of a pass reports its end.
type pairEnd struct {
	index   int // of the pair in the pass
	outcome pairOutcome
}

// pairTask is one pair's part in a pass of its stream's drain. It ends
// exactly once: when its run returns, or, when an apply of the run is
// abandoned, on the abandonment's goroutine while the apply runs on (the
// run's goroutine then touches nothing).
type pairTask struct {
	stream *streamTask
	index  int
	ended  chan<- pairEnd // buffered for every pair of the pass
}

func (pt *pairTask) end(o pairOutcome) { pt.ended <- pairEnd{index: pt.index, outcome: o} }

// abandon ends the task on behalf of a run whose apply was abandoned,
// counting what that run saved.
func (pt *pairTask) abandon(n int, events []ports.Event) {
	pt.end(pairOutcome{applied: n, events: events, abandoned: true})
}

// newPairOutcome returns the outcome of a pair that applied n events (and
// events, when it kept them); version(i) is the version of the i-th.
func (dr *Drainer) newPairOutcome(n int, events []ports.Event, version func(i int) int64) pairOutcome {
	o := pairOutcome{applied: n, events: events}
	if n < dr.cfg.RefetchMinEvents {
		for i := range n {
			o.versions = append(o.versions, version(i))
		}
	}
	return o
}

// passEvents counts the distinct events one pass of the drain loop applied
// (an event applied by several perspectives counts once), as far as the
// loop asks: whether they reach limit. A pair that applied limit events
// settles it; the versions of the pairs that applied fewer are counted
// once each.
type passEvents struct {
	limit    int
	enough   bool
	versions []int64
}

func (p *passEvents) add(o pairOutcome) {
	if p.enough {
		return
	}
	if o.applied >= p.limit {
		p.enough = true
		return
	}
	for _, v := range o.versions {
		if !slices.Contains(p.versions, v) {
			p.versions = append(p.versions, v)
		}
	}
	p.enough = len(p.versions) >= p.limit
}
