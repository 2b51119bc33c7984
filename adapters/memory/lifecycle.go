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

// lifecycleRecord holds the lifecycle of one event: the stages completed and
// the open claims of the others. A claim stands while its instance is live;
// a completion is final.
type lifecycleRecord struct {
	completed ports.LifecycleStage // completed per-event stages
	// perspectivesDone lists, sorted, the perspectives whose
	// StagePostPerspective completed.
	perspectivesDone []string
	// claims are the open claims, one per (stage, perspective) at most: a
	// handful per event, so a linear scan finds one.
	claims []stageClaim
}

// stageClaim is an open claim of a stage (of a perspective, for
// StagePostPerspective) by an instance.
type stageClaim struct {
	stage       ports.LifecycleStage
	perspective string
	instanceID  uuid.UUID
}

// done reports whether stage (of perspective) completed.
func (rec *lifecycleRecord) done(stage ports.LifecycleStage, perspective string) bool {
	if stage == ports.StagePostPerspective {
		_, found := slices.BinarySearch(rec.perspectivesDone, perspective)
		return found
	}
	return rec.completed&stage != 0
}

// claim returns the open claim of stage (of perspective), nil when none.
func (rec *lifecycleRecord) claim(stage ports.LifecycleStage, perspective string) *stageClaim {
	for i := range rec.claims {
		if c := &rec.claims[i]; c.stage == stage && c.perspective == perspective {
			return c
		}
	}
	return nil
}

// complete records stage (of perspective) as completed and drops its claim.
func (rec *lifecycleRecord) complete(stage ports.LifecycleStage, perspective string) {
	rec.claims = slices.DeleteFunc(rec.claims, func(c stageClaim) bool {
		return c.stage == stage && c.perspective == perspective
	})
	if stage != ports.StagePostPerspective {
		rec.completed |= stage
		return
	}
	if i, found := slices.BinarySearch(rec.perspectivesDone, perspective); !found {
		rec.perspectivesDone = slices.Insert(rec.perspectivesDone, i, perspective)
	}
}

// lifecycleRecord returns the record of event id, creating it when missing.
func (s *Store) lifecycleRecord(id uuid.UUID) *lifecycleRecord {
	rec := s.lifecycle[id]
	if rec == nil {
		rec = &lifecycleRecord{}
		s.lifecycle[id] = rec
	}
	return rec
}

// LifecycleClaim implements ports.LifecycleStore. Ids are claimed one by one
// in input order, so an id listed twice is returned once, at its first
// position. The events need not be stored: the claim records only their ids.
// A claim stands while its instance has a heartbeat newer than Now -
// StaleThreshold; the claim of an instance without a row (never registered,
// deregistered or abandoned) is taken over. It returns
// ports.ErrInvalidArgument, and records nothing, for a Stage that is not
// exactly one of the durable stages, a StagePostPerspective without a
// Perspective or another stage with one, a nil instance id, a nil event id,
// or a StaleThreshold that is not positive.
func (s *Store) LifecycleClaim(ctx context.Context, params *ports.LifecycleClaimParams) ([]uuid.UUID, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("claiming lifecycle stages: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	live := s.livenessAt(s.now(params.Now), params.StaleThreshold)
	won := make([]uuid.UUID, 0, len(params.EventIDs))
	seen := make(map[uuid.UUID]struct{}, len(params.EventIDs))
	for _, id := range params.EventIDs {
		if _, dup := seen[id]; dup {
			continue
		}
		seen[id] = struct{}{}
		rec := s.lifecycleRecord(id)
		if rec.done(params.Stage, params.Perspective) {
			continue
		}
		c := rec.claim(params.Stage, params.Perspective)
		switch {
		case c == nil:
			rec.claims = append(rec.claims, stageClaim{stage: params.Stage, perspective: params.Perspective, instanceID: params.InstanceID})
		case c.instanceID == params.InstanceID || !live.live(c.instanceID):
			c.instanceID = params.InstanceID // the caller's own, or a dead instance's: run it again
		default:
			continue // a live other instance runs it
		}
		won = append(won, id)
	}
	return won, nil
}

// LifecycleComplete implements ports.LifecycleStore. The events need not be
// stored, nor the stages claimed. It returns ports.ErrInvalidArgument, and
// records nothing, for the arguments LifecycleClaim rejects (its
// StaleThreshold aside).
func (s *Store) LifecycleComplete(ctx context.Context, params *ports.LifecycleCompleteParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("completing lifecycle stages: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()

	for _, id := range params.EventIDs {
		s.lifecycleRecord(id).complete(params.Stage, params.Perspective)
	}
	return nil
}

// LifecycleStages implements ports.LifecycleStore. The map is never nil.
// StagePostPerspective of params.Perspective is a binary search of the
// event's completed perspectives.
func (s *Store) LifecycleStages(ctx context.Context, params *ports.LifecycleStagesParams) (map[uuid.UUID]ports.LifecycleStage, error) {
	eventIDs := params.EventIDs
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	out := make(map[uuid.UUID]ports.LifecycleStage)
	for _, id := range eventIDs {
		rec := s.lifecycle[id]
		if rec == nil {
			continue
		}
		stages := rec.completed
		if params.Perspective != "" && rec.done(ports.StagePostPerspective, params.Perspective) {
			stages |= ports.StagePostPerspective
		}
		if stages != 0 {
			out[id] = stages
		}
	}
	return out, nil
}

// LifecycleReady implements ports.LifecycleStore. An id listed twice is
// returned once, at its first position. The cost is O(listed events ×
// expected perspectives of their types), each check a map lookup and a
// binary search.
func (s *Store) LifecycleReady(ctx context.Context, params *ports.LifecycleReadyParams) ([]uuid.UUID, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	out := make([]uuid.UUID, 0, len(params.EventIDs))
	seen := make(map[uuid.UUID]struct{}, len(params.EventIDs))
	for _, id := range params.EventIDs {
		loc, stored := s.eventIDs[id]
		if _, dup := seen[id]; dup || !stored {
			continue
		}
		seen[id] = struct{}{}
		i, _ := loc.st.eventIndex(loc.version)
		if applied(loc.st, loc.version, params.Expected[loc.st.events[i].Type]) {
			out = append(out, id)
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
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("finding orphaned lifecycles: %w", err)
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

// isOrphan reports whether the event at ref has no completed PostLifecycle
// although every listed perspective applied it.
func (s *Store) isOrphan(ref eventRef, perspectives []string) bool {
	if !applied(s.streams[ref.streamID], ref.version, perspectives) {
		return false
	}
	rec := s.lifecycle[s.eventAt(ref).ID]
	return rec == nil || !rec.done(ports.StagePostLifecycle, "")
}

// applied reports whether every listed perspective applied the event at
// version of st: its cursor is at or past the version and it has no pending
// row for the event. A pending row below the cursor is a late event that a
// rewind has not applied yet.
func applied(st *stream, version int64, perspectives []string) bool {
	for _, p := range perspectives {
		cur := st.cursors[p]
		if cur == nil || cur.LastVersion < version {
			return false
		}
		if pr := st.pair(p); pr != nil {
			if _, pending := pr.rowIndex(version); pending {
				return false
			}
		}
	}
	return true
}

// eventAt returns the stored event ref points at, which always exists.
func (s *Store) eventAt(ref eventRef) *ports.Event {
	st := s.streams[ref.streamID]
	i, _ := st.eventIndex(ref.version)
	return &st.events[i]
}
