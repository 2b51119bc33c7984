package memory

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// EventsFetchPending implements ports.EventFetcher.
//
// Streams are processed in id order (duplicates ignored, unknown streams
// skipped). The caller need not be live: the call only gates on a live other
// owner, as the contract says. A stream in which the caller holds at least
// one row after the leasing step is pinned to it.
//
// It returns ports.ErrInvalidArgument for a nil instance id, a non-positive
// LeaseDuration or StaleThreshold, or a negative MaxRows.
func (s *Store) EventsFetchPending(ctx context.Context, params *ports.EventsFetchPendingParams) (*ports.EventsFetchPendingResult, error) {
	switch {
	case params.InstanceID == uuid.Nil:
		return nil, fmt.Errorf("fetching pending events: nil instance id: %w", ports.ErrInvalidArgument)
	case params.LeaseDuration <= 0:
		return nil, fmt.Errorf("fetching pending events: lease duration %s must be positive: %w", params.LeaseDuration, ports.ErrInvalidArgument)
	case params.StaleThreshold <= 0:
		return nil, fmt.Errorf("fetching pending events: stale threshold %s must be positive: %w", params.StaleThreshold, ports.ErrInvalidArgument)
	case params.MaxRows < 0:
		return nil, fmt.Errorf("fetching pending events: max rows %d is negative: %w", params.MaxRows, ports.ErrInvalidArgument)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	now := s.now(params.Now)
	caller := params.InstanceID
	live := s.liveInstances(now, params.StaleThreshold)
	expiry := now.Add(params.LeaseDuration)

	var streams []*stream
	for _, id := range uniqueSorted(params.StreamIDs) {
		if st := s.active[id]; st != nil {
			streams = append(streams, st)
		}
	}

	// Lease: take every candidate row (attempts+1) and extend the caller's
	// own live leases (no bump), unless a live other instance owns the stream.
	for _, st := range streams {
		if owner := st.pinnedTo; owner != uuid.Nil && owner != caller && live.live(owner) {
			continue
		}
		leased := false
		for _, p := range st.pairs {
			for _, r := range p.rows {
				if r.scheduled.After(now) {
					break
				}
				liveLease := r.holder != uuid.Nil && r.expiry.After(now)
				if liveLease && r.holder != caller {
					break
				}
				if !liveLease {
					r.attempts++
				}
				s.take(st, r, caller, expiry)
				leased = true
			}
		}
		if leased {
			s.pin(st, caller)
		}
	}

	// Fetch: per (stream, perspective) the prefix of rows under the caller's
	// live lease, bounded by MaxRows over the whole result.
	result := &ports.EventsFetchPendingResult{}
	for _, st := range streams {
		var versions []int64
		for _, name := range st.sortedPerspectives() {
			for _, r := range st.pairs[name].rows {
				if r.holder != caller || !r.expiry.After(now) {
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
				})
				versions = append(versions, r.version)
			}
		}
		result.Events = append(result.Events, st.eventsAt(versions)...)
	}
	return result, nil
}

// eventsAt returns copies of the events with the given versions (in any
// order, repeats allowed), each once, in version order.
func (st *stream) eventsAt(versions []int64) []ports.Event {
	if len(versions) == 0 {
		return nil
	}
	want := make(map[int64]struct{}, len(versions))
	for _, v := range versions {
		want[v] = struct{}{}
	}
	out := make([]ports.Event, 0, len(want))
	for _, e := range st.events {
		if _, ok := want[e.Version]; ok {
			out = append(out, copyEvent(e))
		}
	}
	return out
}

// EventsReadStream implements ports.EventFetcher. An unknown stream has no
// events. It returns ports.ErrInvalidArgument for a nil stream id or a
// negative Limit.
func (s *Store) EventsReadStream(ctx context.Context, params *ports.EventsReadStreamParams) ([]ports.Event, error) {
	switch {
	case params.StreamID == uuid.Nil:
		return nil, fmt.Errorf("reading stream: nil stream id: %w", ports.ErrInvalidArgument)
	case params.Limit < 0:
		return nil, fmt.Errorf("reading stream %s: limit %d is negative: %w", params.StreamID, params.Limit, ports.ErrInvalidArgument)
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
