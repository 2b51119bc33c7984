package memory

import (
	"context"
	"fmt"
	"slices"

	"github.com/vantage-go/vantage/ports"
)

// EventsFetchPending implements ports.EventFetcher.
//
// Streams are processed in id order (duplicates ignored, unknown streams
// skipped). The caller need not be live: the call only gates on another
// instance's live lease, as the contract says. Cursors come in the order of
// Work's pairs.
//
// It returns ports.ErrInvalidArgument for a nil instance id, a non-positive
// LeaseDuration or StaleThreshold, or a negative MaxRows.
func (s *Store) EventsFetchPending(ctx context.Context, params *ports.EventsFetchPendingParams) (*ports.EventsFetchPendingResult, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("fetching pending events: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	now := s.now(params.Now)
	caller := params.InstanceID
	live := s.livenessAt(now, params.StaleThreshold)
	expiry := now.Add(params.LeaseDuration)
	extendBefore := now.Add(params.LeaseDuration / 2)

	// Lease: take each drainable stream that is not under another
	// instance's live lease; extend the caller's own lease only when less
	// than half of LeaseDuration is left. Release a stream the caller holds
	// that has nothing pending.
	var streams []*stream
	for _, id := range uniqueSorted(params.StreamIDs) {
		st := s.streams[id]
		switch {
		case st == nil:
			continue
		case st.pending == 0:
			if st.holder == caller {
				s.unlease(st, false)
			}
			continue
		case st.holder != caller && st.leaseLive(live, now):
			continue
		}
		if _, ok, _ := st.drainState(now); !ok {
			continue
		}
		if st.holder != caller || st.expiry.Before(extendBefore) {
			s.leaseTo(st, caller, expiry, live)
			s.touch(st, now)
		}
		streams = append(streams, st)
	}

	// Fetch: per (stream, perspective) the prefix of rows not waiting for a
	// retry time, bounded by MaxRows over the whole result, and the highest
	// version of each handed out under the lease.
	bound := 0
	for _, st := range streams {
		bound += st.pending
	}
	if params.MaxRows > 0 {
		bound = min(bound, params.MaxRows)
	}
	result := &ports.EventsFetchPendingResult{Work: make([]ports.WorkItem, 0, bound)}
	// The versions each stream's rows reference, stream after stream, then
	// the events: counted first, so they are copied once, into one slice
	// and one payload buffer.
	versions := s.versions[:0]
	spans := s.spans[:0]
	for _, st := range streams {
		from := len(versions)
		for _, p := range st.pairs {
			rows := len(result.Work)
			for _, r := range p.pending() {
				if r.scheduled.After(now) {
					break
				}
				if params.MaxRows > 0 && len(result.Work) == params.MaxRows {
					break
				}
				result.Work = append(result.Work, ports.WorkItem{
					WorkID:       r.id,
					StreamID:     st.id,
					Perspective:  r.perspective,
					EventID:      r.eventID,
					EventVersion: r.version,
					Attempts:     r.attempts,
					Late:         r.late,
					Replay:       r.replay,
				})
				versions = append(versions, r.version)
			}
			if len(result.Work) == rows {
				continue
			}
			st.raiseMark(p.perspective, result.Work[len(result.Work)-1].EventVersion)
			if cur := st.cursors[p.perspective]; cur != nil {
				result.Cursors = append(result.Cursors, *cur) // a Cursor holds no reference: the copy is deep
			}
		}
		if len(versions) > from {
			span := versions[from:]
			slices.Sort(span)
			versions = append(versions[:from], slices.Compact(span)...)
			spans = append(spans, versionSpan{st: st, from: from, to: len(versions)})
		}
	}
	size := 0
	for _, sp := range spans {
		// The versions are sorted and usually consecutive: each is looked
		// for just after the previous one's event before being searched.
		next := 0
		for k, v := range versions[sp.from:sp.to] {
			i, ok := next, next < len(sp.st.events) && sp.st.events[next].Version == v
			if !ok {
				i, ok = sp.st.eventIndex(v)
			}
			if !ok {
				versions[sp.from+k] = -1
				continue
			}
			size += len(sp.st.events[i].Data)
			versions[sp.from+k] = int64(i) // from here on, the event's index
			next = i + 1
		}
	}
	result.Events = make([]ports.Event, 0, len(versions))
	buf := make([]byte, 0, size)
	for _, sp := range spans {
		for _, i := range versions[sp.from:sp.to] {
			if i >= 0 {
				e := sp.st.events[i]
				start := len(buf)
				buf = append(buf, e.Data...)
				e.Data = buf[start:len(buf):len(buf)] // a copy, capped so appends never reach the next
				e.Metadata = e.Metadata.Clone()
				result.Events = append(result.Events, e)
			}
		}
	}
	clear(spans)
	s.versions, s.spans = versions[:0], spans[:0]
	return result, nil
}

// versionSpan is one stream's share of EventsFetchPending's version list.
type versionSpan struct {
	st       *stream
	from, to int
}

// EventsReadStream implements ports.EventFetcher. An unknown stream has no
// events. It returns ports.ErrInvalidArgument for a nil stream id or a
// negative Limit.
func (s *Store) EventsReadStream(ctx context.Context, params *ports.EventsReadStreamParams) ([]ports.Event, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("reading stream: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	st := s.streams[params.StreamID]
	if st == nil {
		return []ports.Event{}, nil
	}
	i, found := st.eventIndex(params.AfterVersion)
	if found {
		i++
	}
	events := st.events[i:]
	if params.Limit > 0 && len(events) > params.Limit {
		events = events[:params.Limit]
	}
	out := make([]ports.Event, 0, len(events))
	for _, e := range events {
		out = append(out, copyEvent(e))
	}
	return out, nil
}
