package core

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/google/uuid"

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

// streamWork is one stream's share of a fetch result. It is drained by one
// goroutine at a time.
type streamWork struct {
	id     uuid.UUID
	events []ports.Event    // ordered by version
	work   []ports.WorkItem // ordered by perspective, version
	seq    uint64           // the fetch's sequence number (see parking.nextFetch)
	cut    bool             // the fetch may have stopped inside this stream's rows
	// decoded caches, by index in events, decoded values every perspective
	// may share; nil until the first decode.
	decoded []decodedEvent
}

type decodedEvent struct {
	value any
	err   error
	done  bool
	boxed any // events[i] as an any, for the contexts of its applies
}

// boxed returns events[i] as an any, boxed once for every perspective
// applying it (EventFromContext hands out copies).
func (sw *streamWork) boxed(i int) any {
	d := sw.slot(i)
	if d.boxed == nil {
		d.boxed = sw.events[i]
	}
	return d.boxed
}

// decode returns the decoded value of events[i]. A value of a shareable
// type (see eventType.shareable) is decoded once for all the perspectives
// applying it; others are decoded afresh for each, since a handler may
// mutate what its value refers to.
func (sw *streamWork) decode(reg *Registry, i int) (any, error) {
	if sw.decoded != nil && sw.decoded[i].done {
		return sw.decoded[i].value, sw.decoded[i].err
	}
	v, shareable, err := reg.decode(sw.events[i])
	if shareable {
		d := sw.slot(i)
		d.value, d.err, d.done = v, err, true
	}
	return v, err
}

// slot returns the cache entry of events[i], allocating the cache on first
// use.
func (sw *streamWork) slot(i int) *decodedEvent {
	if sw.decoded == nil {
		sw.decoded = make([]decodedEvent, len(sw.events))
	}
	return &sw.decoded[i]
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
// share is a sub-slice; a result ordered otherwise is sorted first (copies).
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

// drainStream applies a stream's pending events perspective by perspective.
// When the fetch may have been cut inside the stream it refetches the rest,
// once what it applied is acknowledged (else the refetch would return it
// again), while each pass still applies enough; the task notes when rows
// past the fetch limit may be left. It returns errPairAbandoned when one of
// its applies was abandoned: the abandonment then owns the task.
func (dr *drainer) drainStream(ctx context.Context, t *streamTask, sw *streamWork, cursors map[pairKey]*ports.Cursor) error {
	for iter := 1; ; iter++ {
		n := 0
		for _, group := range groupByPerspective(sw.work) {
			k, events, err := dr.drainPair(ctx, t, sw, group, cursors[pairKey{stream: sw.id, perspective: group[0].Perspective}])
			if err != nil {
				return err
			}
			t.add(k, events)
			n += k
		}
		if !sw.cut {
			return nil
		}
		if n < dr.opts.DrainLoopRefetchMinBatch || iter >= dr.opts.DrainLoopMaxIterations || ctx.Err() != nil {
			t.more = ctx.Err() == nil
			return nil
		}
		if err := dr.completer.flushNow(ctx); err != nil && ctx.Err() != nil {
			return nil
		}
		res, seq, err := dr.fetch(ctx, []uuid.UUID{sw.id})
		if err != nil {
			if ctx.Err() == nil {
				dr.parking.wakeAt(sw.id, dr.now().Add(dr.opts.InfraRetry.Max))
			}
			return nil
		}
		next := splitByStream(res, seq, dr.opts.FetchMaxRows)
		if len(next) == 0 || next[0].id != sw.id {
			return nil
		}
		sw = &next[0]
		dr.renewer.hold(sw.id, dr.now())
		cursors = cursorsByPair(res.Cursors)
	}
}
