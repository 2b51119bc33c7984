package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// EventsAppend implements ports.EventStore.
//
// Events are placed in order: one without a Version gets the version after
// the highest one stored or placed so far, so in a batch an implicit event
// following an explicit one continues after it. Work rows go to the
// perspectives subscribed to each type, in name order, the Subscriptions of
// the call included: they are registered by the same atomic step, before the
// fan-out, those of retired perspectives excepted. The append is atomic: on
// any error nothing is stored and nothing is registered. Listeners are woken
// once the append is visible.
//
// A call whose events all carry stored ids is a retry: it succeeds, storing
// nothing, registering nothing and waking nobody, when it repeats an append
// that took effect (see ports.EventStore), and returns the stored events in
// the order of the call.
// Payloads compare as JSON values, as a database comparing jsonb would, so a
// retry that re-encoded its payload is still a repeat.
//
// It returns ports.ErrInvalidArgument for a nil stream id, no events, an
// ExpectedVersion below ExpectNoStream, an event with an empty type, a
// negative version, data that is not a non-empty JSON document, or a
// subscription with an empty event type or perspective; and
// ports.ErrVersionConflict for a failed ExpectedVersion check, a taken
// version, a repeated event id, or a stored event id in a call that is not
// a repeat.
func (s *Store) EventsAppend(ctx context.Context, params *ports.EventsAppendParams) (*ports.EventsAppendResult, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	if res, err := s.repeatedAppend(params); res != nil || err != nil {
		return res, err
	}
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

	// Generate the work ids up front too, counting the subscriptions the call
	// adds: nothing can fail once storing starts.
	added := s.unregistered(params.Subscriptions)
	var workIDs []uuid.UUID
	for _, e := range placed {
		n := len(s.subs[e.Type])
		for _, sub := range added {
			if sub.EventType == e.Type {
				n++
			}
		}
		for range n {
			id, err := s.work.newID()
			if err != nil {
				return nil, fmt.Errorf("appending to stream %s: generating work id: %w", params.StreamID, err)
			}
			workIDs = append(workIDs, id)
		}
	}

	for _, sub := range added {
		s.register(sub)
	}
	st := s.streamFor(params.StreamID)
	result := &ports.EventsAppendResult{Events: make([]ports.Event, 0, len(placed))}
	for _, e := range placed {
		i, _ := st.eventIndex(e.Version)
		st.events = slices.Insert(st.events, i, e)
		s.eventIDs[e.ID] = eventLoc{st: st, version: e.Version}
		s.indexEvent(&e)
		for _, perspective := range s.subs[e.Type] {
			late, below := arrivesLate(st, perspective, e.Version)
			s.addRow(st, &workRow{
				id:          workIDs[result.WorkRows],
				streamID:    st.id,
				perspective: perspective,
				eventID:     e.ID,
				version:     e.Version,
				late:        late,
				seq:         s.nextSeq(),
				createdAt:   now,
			})
			result.WorkRows++
			if below {
				flagRewind(st.cursors[perspective], e.ID, e.Version, now)
			}
		}
		result.Events = append(result.Events, copyEvent(e))
	}
	if result.WorkRows > 0 {
		s.touch(st, now)
	}
	s.publishLocked(params.StreamID)
	return result, nil
}

// repeatedAppend handles a call that names stored event ids. It returns
// (nil, nil) when no event of the call is stored: the call is a new append.
// When every event is stored, in this stream, with the same type and data, at
// its explicit version where one is given, and the lowest of their versions
// is the one the call expected to append first, the call repeats an append
// that took effect: it returns the stored events with AlreadyStored set. Any
// other stored id is ports.ErrVersionConflict.
func (s *Store) repeatedAppend(params *ports.EventsAppendParams) (*ports.EventsAppendResult, error) {
	stored := 0
	for _, ne := range params.Events {
		if _, ok := s.eventIDs[ne.ID]; ok { // a zero id is never stored
			stored++
		}
	}
	if stored == 0 {
		return nil, nil
	}
	conflict := func(format string, args ...any) error {
		return fmt.Errorf("appending to stream %s: %s: %w", params.StreamID, fmt.Sprintf(format, args...), ports.ErrVersionConflict)
	}
	if stored < len(params.Events) {
		return nil, conflict("%d of %d events are already stored", stored, len(params.Events))
	}
	result := &ports.EventsAppendResult{Events: make([]ports.Event, 0, len(params.Events)), AlreadyStored: true}
	seen := make(map[uuid.UUID]struct{}, len(params.Events))
	lowest := int64(0)
	for _, ne := range params.Events {
		if _, dup := seen[ne.ID]; dup {
			return nil, conflict("event %s appears twice", ne.ID)
		}
		seen[ne.ID] = struct{}{}
		loc := s.eventIDs[ne.ID]
		if loc.st.id != params.StreamID {
			return nil, conflict("event %s is stored in stream %s", ne.ID, loc.st.id)
		}
		i, _ := loc.st.eventIndex(loc.version)
		e := loc.st.events[i]
		switch {
		case e.Type != ne.Type || !sameJSON(e.Data, ne.Data):
			return nil, conflict("event %s is stored with another type or data", ne.ID)
		case ne.Version != 0 && ne.Version != e.Version:
			return nil, conflict("event %s is stored at version %d, not %d", ne.ID, e.Version, ne.Version)
		}
		if lowest == 0 || e.Version < lowest {
			lowest = e.Version
		}
		result.Events = append(result.Events, copyEvent(e))
	}
	switch want := params.ExpectedVersion; {
	case want == ports.ExpectNoStream && lowest != 1:
		return nil, conflict("expected no stream, the events are stored from version %d", lowest)
	case want > 0 && lowest != want+1:
		return nil, conflict("expected version %d, the events are stored from version %d", want, lowest)
	}
	return result, nil
}

// sameJSON reports whether a and b encode the same JSON value.
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	return json.Unmarshal(a, &va) == nil && json.Unmarshal(b, &vb) == nil && reflect.DeepEqual(va, vb)
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
// subscription again is a no-op, and so is registering one of a retired
// perspective (see PerspectiveRetire). It returns ports.ErrInvalidArgument,
// and records nothing, when a subscription has an empty event type or
// perspective.
func (s *Store) SubscriptionsRegister(ctx context.Context, params *ports.SubscriptionsRegisterParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("registering subscriptions: %w", err)
	}
	subscriptions := params.Subscriptions
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()

	for _, sub := range subscriptions {
		s.register(sub)
	}
	return nil
}

// unregistered returns the distinct subscriptions of subs that register would
// add. Appends usually carry subscriptions registered long ago, so the common
// case costs a binary search each and allocates nothing.
func (s *Store) unregistered(subs []ports.Subscription) []ports.Subscription {
	var out []ports.Subscription
	for _, sub := range subs {
		if _, retired := s.retired[sub.Perspective]; retired {
			continue
		}
		if _, found := slices.BinarySearch(s.subs[sub.EventType], sub.Perspective); !found && !slices.Contains(out, sub) {
			out = append(out, sub)
		}
	}
	return out
}

// register records sub, keeping each type's perspectives sorted, unless its
// perspective is retired.
func (s *Store) register(sub ports.Subscription) {
	if _, retired := s.retired[sub.Perspective]; retired {
		return
	}
	names := s.subs[sub.EventType]
	if i, found := slices.BinarySearch(names, sub.Perspective); !found {
		s.subs[sub.EventType] = slices.Insert(names, i, sub.Perspective)
	}
}
