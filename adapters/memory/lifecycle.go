package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// typeIndex lists the stored events of one type two ways: the streams having
// any, for StreamsWithEventTypes, and the events in creation order, for
// LifecycleOrphans. Events are never deleted, so both only grow.
//
// Entries usually arrive in order (creation times and UUIDv7 stream ids
// grow) and are appended. The others (random stream ids, equal creation
// times) wait in an unsorted tail that the next read sorts and merges in, so
// an append costs O(1) amortized whatever the order, as EventsAppend must,
// and a read pays O(n + k log k) once after k out-of-order appends.
type typeIndex struct {
	streams     []uuid.UUID            // distinct, in byte order; read with sortedStreams
	lateStreams []uuid.UUID            // out of order, not yet merged into streams
	streamSet   map[uuid.UUID]struct{} // every stream of streams and lateStreams
	events      []eventRef             // ordered by compareRefs; read with sortedEvents
	lateEvents  []eventRef             // out of order, not yet merged into events
}

// sortedStreams returns the streams in byte order, merging the tail first.
func (idx *typeIndex) sortedStreams() []uuid.UUID {
	if len(idx.lateStreams) > 0 {
		idx.streams = mergeSorted(idx.streams, idx.lateStreams, compareUUID)
		idx.lateStreams = idx.lateStreams[:0]
	}
	return idx.streams
}

// sortedEvents returns the events ordered by compareRefs, merging the tail
// first.
func (idx *typeIndex) sortedEvents() []eventRef {
	if len(idx.lateEvents) > 0 {
		idx.events = mergeSorted(idx.events, idx.lateEvents, compareRefs)
		idx.lateEvents = idx.lateEvents[:0]
	}
	return idx.events
}

// mergeSorted sorts late and returns a new slice with the elements of sorted
// (already in order) and late, in order.
func mergeSorted[E any](sorted, late []E, compare func(a, b E) int) []E {
	slices.SortFunc(late, compare)
	out := make([]E, 0, len(sorted)+len(late))
	for len(sorted) > 0 && len(late) > 0 {
		if compare(late[0], sorted[0]) < 0 {
			out, late = append(out, late[0]), late[1:]
		} else {
			out, sorted = append(out, sorted[0]), sorted[1:]
		}
	}
	return append(append(out, sorted...), late...)
}

// eventRef locates a stored event (st.events moves on inserts, so it holds
// no pointer) with its creation time, the first sort key of orphans.
type eventRef struct {
	createdAt time.Time
	streamID  uuid.UUID
	version   int64
}

// compareRefs orders refs as LifecycleOrphans returns events: by creation,
// then stream id in byte order, then version.
func compareRefs(a, b eventRef) int {
	return cmp.Or(a.createdAt.Compare(b.createdAt), compareUUID(a.streamID, b.streamID), cmp.Compare(a.version, b.version))
}

// indexEvent adds a newly stored event to the index of its type: an append
// when it sorts after every indexed entry, else an entry of the unsorted tail.
func (s *Store) indexEvent(e *ports.Event) {
	idx := s.types[e.Type]
	if idx == nil {
		idx = &typeIndex{streamSet: make(map[uuid.UUID]struct{})}
		s.types[e.Type] = idx
	}
	if _, known := idx.streamSet[e.StreamID]; !known {
		idx.streamSet[e.StreamID] = struct{}{}
		if n := len(idx.streams); len(idx.lateStreams) == 0 && (n == 0 || compareUUID(idx.streams[n-1], e.StreamID) < 0) {
			idx.streams = append(idx.streams, e.StreamID)
		} else {
			idx.lateStreams = append(idx.lateStreams, e.StreamID)
		}
	}
	ref := eventRef{createdAt: e.CreatedAt, streamID: e.StreamID, version: e.Version}
	if n := len(idx.events); len(idx.lateEvents) == 0 && (n == 0 || compareRefs(idx.events[n-1], ref) <= 0) {
		idx.events = append(idx.events, ref)
	} else {
		idx.lateEvents = append(idx.lateEvents, ref)
	}
}

// lifecycleRecord holds the stages recorded for one event and the latest
// claim, the durable counterpart of the engine's in-memory stage guard.
type lifecycleRecord struct {
	stages     ports.LifecycleStage
	instanceID uuid.UUID // the instance of the latest claim
	claimedAt  time.Time // the time of the latest claim
}

// LifecycleClaim implements ports.LifecycleStore. Ids are claimed one by one
// in input order, so an id listed twice is returned once, at its first
// position. The events need not be stored: the claim records only their ids.
// It returns ports.ErrInvalidArgument, and records nothing, for a Stage that
// is not exactly one of the durable stages, a nil instance id or a nil event
// id.
func (s *Store) LifecycleClaim(ctx context.Context, params *ports.LifecycleClaimParams) ([]uuid.UUID, error) {
	switch params.Stage {
	case ports.StagePrePerspective, ports.StagePostAllPerspectives, ports.StagePostLifecycle:
	default:
		return nil, fmt.Errorf("claiming lifecycle stage %d: not a single durable stage: %w", params.Stage, ports.ErrInvalidArgument)
	}
	if params.InstanceID == uuid.Nil {
		return nil, fmt.Errorf("claiming lifecycle stage %d: nil instance id: %w", params.Stage, ports.ErrInvalidArgument)
	}
	if slices.Contains(params.EventIDs, uuid.Nil) {
		return nil, fmt.Errorf("claiming lifecycle stage %d: nil event id: %w", params.Stage, ports.ErrInvalidArgument)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	now := s.now(params.Now)
	won := make([]uuid.UUID, 0, len(params.EventIDs))
	for _, id := range params.EventIDs {
		rec := s.lifecycle[id]
		if rec == nil {
			rec = &lifecycleRecord{}
			s.lifecycle[id] = rec
		}
		if rec.stages&params.Stage != 0 {
			continue
		}
		rec.stages |= params.Stage
		rec.instanceID, rec.claimedAt = params.InstanceID, now
		won = append(won, id)
	}
	return won, nil
}

// LifecycleStages implements ports.LifecycleStore. The map is never nil.
func (s *Store) LifecycleStages(ctx context.Context, eventIDs []uuid.UUID) (map[uuid.UUID]ports.LifecycleStage, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	out := make(map[uuid.UUID]ports.LifecycleStage)
	for _, id := range eventIDs {
		if rec := s.lifecycle[id]; rec != nil {
			out[id] = rec.stages
		}
	}
	return out, nil
}

// LifecycleOrphans implements ports.LifecycleStore. A perspective listed
// twice for a type counts once, and a type mapped to no perspective is
// treated like a type absent from Expected: its events are never returned
// (no perspective processes them, so no lifecycle of theirs was
// interrupted). The cost is one walk of the creation index of each expected
// type from Since, stopping at Limit matches per type. It returns
// ports.ErrInvalidArgument for a negative Limit.
func (s *Store) LifecycleOrphans(ctx context.Context, params *ports.LifecycleOrphansParams) ([]ports.Event, error) {
	if params.Limit < 0 {
		return nil, fmt.Errorf("finding orphaned lifecycles: limit %d is negative: %w", params.Limit, ports.ErrInvalidArgument)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	// The first Limit matches overall are among the first Limit matches of
	// each type, so each walk stops there and the union is cut after sorting.
	var refs []eventRef
	for typ, perspectives := range params.Expected {
		idx := s.types[typ]
		if idx == nil || len(perspectives) == 0 {
			continue
		}
		events := idx.sortedEvents()
		start, _ := slices.BinarySearchFunc(events, params.Since, func(r eventRef, since time.Time) int {
			return r.createdAt.Compare(since)
		})
		found := 0
		for _, ref := range events[start:] {
			if params.Limit > 0 && found == params.Limit {
				break
			}
			if s.isOrphan(ref, perspectives) {
				refs = append(refs, ref)
				found++
			}
		}
	}
	slices.SortFunc(refs, compareRefs)
	if params.Limit > 0 && len(refs) > params.Limit {
		refs = refs[:params.Limit]
	}
	out := make([]ports.Event, 0, len(refs))
	for _, ref := range refs {
		out = append(out, copyEvent(*s.eventAt(ref)))
	}
	return out, nil
}

// isOrphan reports whether the event at ref has no PostLifecycle record
// although every listed perspective has a cursor at or past its version.
func (s *Store) isOrphan(ref eventRef, perspectives []string) bool {
	st := s.streams[ref.streamID]
	for _, p := range perspectives {
		cur := st.cursors[p]
		if cur == nil || cur.LastVersion < ref.version {
			return false
		}
		// A pending row below the cursor is a late event a rewind has not
		// applied yet: not complete.
		if pr := st.pair(p); pr != nil {
			if _, pending := pr.rowIndex(ref.version); pending {
				return false
			}
		}
	}
	e := s.eventAt(ref)
	rec := s.lifecycle[e.ID]
	return rec == nil || rec.stages&ports.StagePostLifecycle == 0
}

// eventAt returns the stored event ref points at, which always exists.
func (s *Store) eventAt(ref eventRef) *ports.Event {
	st := s.streams[ref.streamID]
	i, _ := st.eventIndex(ref.version)
	return &st.events[i]
}
