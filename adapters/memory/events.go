package memory

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// EventsAppend implements ports.EventStore.
//
// Events are placed in order: one without a Version gets the version after
// the highest one stored or placed so far, so in a batch an implicit event
// following an explicit one continues after it. Work rows go to the
// perspectives subscribed to each type, in name order. The append is atomic:
// on any error nothing is stored. Listeners are woken once the append is
// visible.
//
// It returns ports.ErrInvalidArgument for a nil stream id, no events, an
// ExpectedVersion below ExpectNoStream, an event with an empty type, a
// negative version, or data that is not a non-empty JSON document; and
// ports.ErrVersionConflict for a failed ExpectedVersion check, a taken
// version or a stored (or repeated) event id.
func (s *Store) EventsAppend(ctx context.Context, params *ports.EventsAppendParams) (*ports.EventsAppendResult, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	now := s.now(params.Now)
	existing := s.streams[params.StreamID]
	head := existing.head()
	switch want := params.ExpectedVersion; {
	case want == ports.ExpectNoStream && head != 0:
		return nil, fmt.Errorf("appending to stream %s: expected no stream, found version %d: %w", params.StreamID, head, ports.ErrVersionConflict)
	case want > 0 && head != want:
		return nil, fmt.Errorf("appending to stream %s: expected version %d, found %d: %w", params.StreamID, want, head, ports.ErrVersionConflict)
	}

	// Place every event before storing any, so a conflict stores nothing.
	placed := make([]ports.Event, 0, len(params.Events))
	ids := make(map[uuid.UUID]struct{}, len(params.Events))
	versions := make(map[int64]struct{}, len(params.Events))
	next := head
	for _, ne := range params.Events {
		id := ne.ID
		if id == uuid.Nil {
			var err error
			if id, err = uuid.NewV7(); err != nil {
				return nil, fmt.Errorf("appending to stream %s: generating event id: %w", params.StreamID, err)
			}
		}
		if _, dup := s.eventIDs[id]; dup {
			return nil, fmt.Errorf("appending to stream %s: event %s is already stored: %w", params.StreamID, id, ports.ErrVersionConflict)
		}
		if _, dup := ids[id]; dup {
			return nil, fmt.Errorf("appending to stream %s: event %s appears twice: %w", params.StreamID, id, ports.ErrVersionConflict)
		}
		version := ne.Version
		if version == 0 {
			version = next + 1
		}
		if _, inBatch := versions[version]; inBatch || storesVersion(existing, version) {
			return nil, fmt.Errorf("appending to stream %s: version %d is taken: %w", params.StreamID, version, ports.ErrVersionConflict)
		}
		ids[id] = struct{}{}
		versions[version] = struct{}{}
		next = max(next, version)
		placed = append(placed, ports.Event{
			ID:        id,
			StreamID:  params.StreamID,
			Type:      ne.Type,
			Version:   version,
			Data:      bytes.Clone(ne.Data),
			Metadata:  ne.Metadata.Clone(),
			CreatedAt: now,
		})
	}

	// Generate the work ids up front too: nothing can fail once storing starts.
	var workIDs []uuid.UUID
	for _, e := range placed {
		for range s.subs[e.Type] {
			id, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("appending to stream %s: generating work id: %w", params.StreamID, err)
			}
			workIDs = append(workIDs, id)
		}
	}

	st := s.streamFor(params.StreamID)
	result := &ports.EventsAppendResult{Events: make([]ports.Event, 0, len(placed))}
	for _, e := range placed {
		i, _ := st.eventIndex(e.Version)
		st.events = slices.Insert(st.events, i, e)
		s.eventIDs[e.ID] = struct{}{}
		s.indexEvent(&e)
		for _, perspective := range s.subs[e.Type] {
			s.addRow(st, &workRow{
				id:          workIDs[result.WorkRows],
				streamID:    st.id,
				perspective: perspective,
				eventID:     e.ID,
				version:     e.Version,
				seq:         s.nextSeq(),
				createdAt:   now,
			})
			result.WorkRows++
			if cur := st.cursors[perspective]; cur != nil && cur.LastVersion > e.Version {
				flagRewind(cur, e.ID, e.Version, now) // a late arrival below the cursor
			}
		}
		result.Events = append(result.Events, copyEvent(e))
	}
	if result.WorkRows > 0 {
		s.touch(st, now)
	}
	s.publishLocked()
	return result, nil
}

// storesVersion reports whether st (possibly nil) stores version.
func storesVersion(st *stream, version int64) bool {
	if st == nil {
		return false
	}
	_, ok := st.eventIndex(version)
	return ok
}

// SubscriptionsRegister implements ports.EventStore. Registering a known
// subscription again is a no-op. It returns ports.ErrInvalidArgument, and
// records nothing, when a subscription has an empty event type or
// perspective.
func (s *Store) SubscriptionsRegister(ctx context.Context, subscriptions []ports.Subscription) error {
	for _, sub := range subscriptions {
		if sub.EventType == "" || sub.Perspective == "" {
			return fmt.Errorf("registering subscription %+v: empty event type or perspective: %w", sub, ports.ErrInvalidArgument)
		}
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()

	for _, sub := range subscriptions {
		names := s.subs[sub.EventType]
		if i, found := slices.BinarySearch(names, sub.Perspective); !found {
			s.subs[sub.EventType] = slices.Insert(names, i, sub.Perspective)
		}
	}
	return nil
}
