package conformance

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// withIDs gives each event a fresh id, as a caller that may retry does.
func withIDs(t *testing.T, events ...ports.NewEvent) []ports.NewEvent {
	t.Helper()
	for i, id := range newIDs(t, len(events)) {
		events[i].ID = id
	}
	return events
}

// streamLength returns the number of events stored in stream.
func streamLength(t *testing.T, b ports.Backend, stream uuid.UUID) int {
	t.Helper()
	events, err := b.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream})
	require.NoError(t, err)
	return len(events)
}

// runEvents verifies ports.EventStore.
func runEvents(t *testing.T, newBackend NewBackendFunc) {
	t.Helper()

	group(t, "EventsAppend", map[string]func(t *testing.T){
		"AssignsVersionsAndIDs": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			meta := ports.Metadata{
				CorrelationID: newID(t),
				CausationID:   newID(t),
				Scope:         &ports.Scope{TenantID: "tenant", UserID: "user", Extras: map[string]string{"role": "admin"}},
				Headers:       map[string]string{"trace": "abc"},
			}
			placed := ports.NewEvent{Type: eventType, Data: []byte(`{"total": 42}`), Metadata: meta}

			first := appendEvents(t, tb.backend, stream, at(0), placed, newEvent(otherType, 0)).Events
			second := appendEvents(t, tb.backend, stream, at(time.Second), newEvent(eventType, 0)).Events

			stored := append(append([]ports.Event{}, first...), second...)
			for i, e := range stored {
				require.Equal(t, int64(i+1), e.Version)
				require.Equal(t, stream, e.StreamID)
				require.NotEqual(t, uuid.Nil, e.ID)
				require.Equal(t, uuid.Version(7), e.ID.Version(), "ids are UUIDv7")
			}
			require.Equal(t, eventType, first[0].Type)
			require.JSONEq(t, `{"total": 42}`, string(first[0].Data))
			require.Equal(t, meta, first[0].Metadata)
			requireTime(t, at(0), first[0].CreatedAt, "CreatedAt")
			requireTime(t, at(time.Second), second[0].CreatedAt, "CreatedAt")
			read, err := tb.backend.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream})
			require.NoError(t, err)
			require.Len(t, read, len(stored))
			for i := range stored {
				requireEvent(t, stored[i], read[i])
			}
		},
		"RoundTripsMetadata": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			metas := []ports.Metadata{
				{},
				{
					CorrelationID: newID(t),
					CausationID:   newID(t),
					Scope:         &ports.Scope{TenantID: "t-1", UserID: "u-1", Extras: map[string]string{"role": "admin", "": "empty key"}},
					Headers: map[string]string{
						"trace":      "00-4bf92f3577b34da6-01",
						"empty":      "",
						"quotes":     `say "hi" \ 'there'`,
						"json":       `{"nested": [1, 2]}`,
						"unicode":    "zürich 東京 🚀",
						"spaced key": "line\nbreak\ttab",
					},
				},
				{CorrelationID: newID(t)},
				{Scope: &ports.Scope{}},
				{Scope: &ports.Scope{UserID: "u-2", Extras: map[string]string{}}, Headers: map[string]string{}},
				{Headers: map[string]string{"only": "headers"}},
			}
			events := make([]ports.NewEvent, len(metas))
			for i, md := range metas {
				// A copy of its own, empty maps kept (Clone would drop them).
				md.Headers = maps.Clone(md.Headers)
				if md.Scope != nil {
					scope := *md.Scope
					scope.Extras = maps.Clone(scope.Extras)
					md.Scope = &scope
				}
				events[i] = newEvent(eventType, 0)
				events[i].Metadata = md
			}
			params := ports.EventsAppendParams{StreamID: stream, Events: withIDs(t, events...), Now: at(0)}
			res, err := tb.backend.Events.EventsAppend(t.Context(), &params)
			require.NoError(t, err)
			// The backend keeps copies: changing the caller's maps afterwards
			// changes nothing stored.
			events[1].Metadata.Headers["trace"] = "changed"
			events[1].Metadata.Scope.Extras["role"] = "changed"

			read, err := tb.backend.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream})
			require.NoError(t, err)
			a.heartbeat(t, at(0))
			fetched := a.fetch(t, at(0), stream).Events
			// A repeat of the append hands out the metadata stored, not the
			// call's.
			repeat, err := tb.backend.Events.EventsAppend(t.Context(), &params)
			require.NoError(t, err)
			require.True(t, repeat.AlreadyStored)
			require.Len(t, read, len(metas))
			require.Len(t, fetched, len(metas))
			for i, want := range metas {
				requireMetadata(t, want, res.Events[i].Metadata, "appended event %d", i)
				requireMetadata(t, want, read[i].Metadata, "read event %d", i)
				requireMetadata(t, want, fetched[i].Metadata, "fetched event %d", i)
				requireMetadata(t, want, repeat.Events[i].Metadata, "repeated event %d", i)
			}
		},
		"RoundTripsTraceContext": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			// The W3C trace context of the appending code: the engine links
			// the spans of an event's applies to it, so it must come back
			// exactly as given.
			metas := []ports.Metadata{
				{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceState: "vendor=opaque,other=t61rcWkgMzE"},
				{TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"},
				{},
				{CorrelationID: newID(t), Headers: map[string]string{"h": "v"}, TraceParent: "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"},
			}
			events := make([]ports.NewEvent, len(metas))
			for i, md := range metas {
				events[i] = newEvent(eventType, 0)
				events[i].Metadata = md.Clone()
			}
			params := ports.EventsAppendParams{StreamID: stream, Events: withIDs(t, events...), Now: at(0)}
			res, err := tb.backend.Events.EventsAppend(t.Context(), &params)
			require.NoError(t, err)

			read, err := tb.backend.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream})
			require.NoError(t, err)
			a.heartbeat(t, at(0))
			fetched := a.fetch(t, at(0), stream).Events
			repeat, err := tb.backend.Events.EventsAppend(t.Context(), &params)
			require.NoError(t, err)
			require.True(t, repeat.AlreadyStored)
			require.Len(t, read, len(metas))
			require.Len(t, fetched, len(metas))
			for i, want := range metas {
				for what, got := range map[string]ports.Metadata{
					"appended": res.Events[i].Metadata, "read": read[i].Metadata,
					"fetched": fetched[i].Metadata, "repeated": repeat.Events[i].Metadata,
				} {
					require.Equal(t, want.TraceParent, got.TraceParent, "TraceParent of %s event %d", what, i)
					require.Equal(t, want.TraceState, got.TraceState, "TraceState of %s event %d", what, i)
				}
				requireMetadata(t, want, read[i].Metadata, "read event %d", i)
			}
		},
		"ChecksExpectedVersion": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			try := func(expected int64) error {
				t.Helper()
				_, err := tb.backend.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{
					StreamID: stream, ExpectedVersion: expected, Events: []ports.NewEvent{newEvent(eventType, 0)}, Now: at(0),
				})
				return err
			}
			length := func() int {
				t.Helper()
				events, err := tb.backend.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream})
				require.NoError(t, err)
				return len(events)
			}

			require.ErrorIs(t, try(1), ports.ErrVersionConflict, "the stream is empty")
			require.NoError(t, try(ports.ExpectNoStream))
			require.ErrorIs(t, try(ports.ExpectNoStream), ports.ErrVersionConflict)
			require.ErrorIs(t, try(2), ports.ErrVersionConflict, "the head is 1")
			require.Equal(t, 1, length(), "conflicts store nothing")
			require.NoError(t, try(1))
			require.NoError(t, try(0), "0 skips the check")
			require.Equal(t, 3, length())
		},
		"DoesNotFlagInOrderEvents": func(t *testing.T) {
			f := setupDrain(t, newBackend, 1)
			f.a.complete(t, at(time.Second), f.completion(1, 1))

			appendN(t, f.tb.backend, f.stream, at(2*time.Second), eventType, 1)

			requireNoRewind(t, f.cursor(t))
		},
		"FansOutToSubscribedPerspectives": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			subscribe(t, tb.backend, otherType, perspective2)
			stream := newID(t)

			res := appendEvents(t, tb.backend, stream, at(0), newEvent(eventType, 0), newEvent(otherType, 0), newEvent("Unrelated", 0))

			require.Equal(t, 3, res.WorkRows)
			a.heartbeat(t, at(0))
			work := a.fetch(t, at(0), stream).Work
			require.Equal(t, []int64{1}, versionsOf(ofPerspective(work, perspective)))
			require.Equal(t, []int64{1, 2}, versionsOf(ofPerspective(work, perspective2)))
			require.Len(t, work, 3)
			for _, w := range work {
				require.Equal(t, res.Events[w.EventVersion-1].ID, w.EventID)
				require.Zero(t, w.Attempts, "stored with zero attempts; leasing counts none")
			}
		},
		"FlagsLateArrivals": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendEvents(t, tb.backend, stream, at(0), newEvent(eventType, 1), newEvent(eventType, 5), newEvent(eventType, 6)).Events
			a.heartbeat(t, at(0))
			a.complete(t, at(time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[2].ID, LastVersion: 6, WorkIDs: workIDs(a.fetch(t, at(0), stream).Work),
			})
			requireNoRewind(t, mustCursor(t, tb.backend, stream, perspective))

			late3 := appendEvents(t, tb.backend, stream, at(2*time.Second), newEvent(eventType, 3)).Events[0]
			requireRewind(t, mustCursor(t, tb.backend, stream, perspective), late3, at(2*time.Second), at(2*time.Second))

			appendEvents(t, tb.backend, stream, at(3*time.Second), newEvent(eventType, 4))
			requireRewind(t, mustCursor(t, tb.backend, stream, perspective), late3, at(3*time.Second), at(2*time.Second))

			late2 := appendEvents(t, tb.backend, stream, at(4*time.Second), newEvent(eventType, 2)).Events[0]
			cur := mustCursor(t, tb.backend, stream, perspective)
			requireRewind(t, cur, late2, at(4*time.Second), at(2*time.Second))
			require.Equal(t, int64(6), cur.LastVersion, "a flag does not move the cursor")
		},
		"FlagsOnlySubscribedPerspectives": func(t *testing.T) {
			tb := setup(t, newBackend)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendEvents(t, tb.backend, stream, at(0), newEvent(eventType, 1), newEvent(otherType, 4)).Events
			for _, name := range []string{perspective, perspective2} {
				require.NoError(t, tb.backend.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
					StreamID: stream, Perspective: name, Data: []byte(`{}`),
					LastEventID: events[1].ID, LastVersion: 4, Now: at(time.Second),
				}))
			}

			late := appendEvents(t, tb.backend, stream, at(2*time.Second), newEvent(eventType, 2))

			require.Equal(t, 1, late.WorkRows)
			requireRewind(t, mustCursor(t, tb.backend, stream, perspective), late.Events[0], at(2*time.Second), at(2*time.Second))
			requireNoRewind(t, mustCursor(t, tb.backend, stream, perspective2))
		},
		"PlacesExplicitVersions": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 2)

			_, err := tb.backend.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{
				StreamID: stream, Events: []ports.NewEvent{newEvent(eventType, 2)}, Now: at(time.Second),
			})
			require.ErrorIs(t, err, ports.ErrVersionConflict, "version 2 is taken")

			require.Equal(t, int64(5), appendEvents(t, tb.backend, stream, at(time.Second), newEvent(eventType, 5)).Events[0].Version)
			require.Equal(t, int64(6), appendEvents(t, tb.backend, stream, at(time.Second), newEvent(eventType, 0)).Events[0].Version)
			require.Equal(t, int64(3), appendEvents(t, tb.backend, stream, at(time.Second), newEvent(eventType, 3)).Events[0].Version, "a free version below the head")
		},
		"RegistersItsSubscriptions": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			stream := newID(t)
			subs := []ports.Subscription{{EventType: eventType, Perspective: perspective}, {EventType: otherType, Perspective: perspective2}}

			res, err := tb.backend.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{
				StreamID: stream, Events: []ports.NewEvent{newEvent(eventType, 0)}, Subscriptions: subs, Now: at(0),
			})
			require.NoError(t, err)
			require.Equal(t, 1, res.WorkRows, "the append fans out to the subscriptions it carries, never registered before")

			later := appendEvents(t, tb.backend, stream, at(time.Second), newEvent(eventType, 0), newEvent(otherType, 0))
			require.Equal(t, 2, later.WorkRows, "they stay registered, the other type's included")
			a.heartbeat(t, at(time.Second))
			work := a.fetch(t, at(time.Second), stream).Work
			require.Equal(t, []int64{1, 2}, versionsOf(ofPerspective(work, perspective)))
			require.Equal(t, []int64{3}, versionsOf(ofPerspective(work, perspective2)))
		},
		"SubscriptionsAddToRegisteredOnes": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendWith := func(now time.Time, subs []ports.Subscription) int {
				t.Helper()
				res, err := tb.backend.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{
					StreamID: stream, Events: []ports.NewEvent{newEvent(eventType, 0)}, Subscriptions: subs, Now: now,
				})
				require.NoError(t, err)
				return res.WorkRows
			}

			require.Equal(t, 1, appendWith(at(0), []ports.Subscription{}), "no subscriptions change nothing")
			require.Equal(t, 2, appendWith(at(time.Second), []ports.Subscription{
				{EventType: eventType, Perspective: perspective2}, {EventType: eventType, Perspective: perspective2},
			}), "perspective stays subscribed; perspective2 is added once")

			a.heartbeat(t, at(time.Second))
			work := a.fetch(t, at(time.Second), stream).Work
			require.Equal(t, []int64{1, 2}, versionsOf(ofPerspective(work, perspective)))
			require.Equal(t, []int64{2}, versionsOf(ofPerspective(work, perspective2)))
		},
		"RejectsEmptySubscriptionNames": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)

			for _, sub := range []ports.Subscription{{EventType: eventType}, {Perspective: perspective}} {
				_, err := tb.backend.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{
					StreamID: stream, Events: []ports.NewEvent{newEvent(eventType, 0)},
					Subscriptions: []ports.Subscription{{EventType: eventType, Perspective: perspective}, sub}, Now: at(0),
				})
				require.ErrorIs(t, err, ports.ErrInvalidArgument, "as SubscriptionsRegister would")
			}
			require.Zero(t, streamLength(t, tb.backend, stream), "a rejected append stores nothing")
			require.Zero(t, appendEvents(t, tb.backend, stream, at(time.Second), newEvent(eventType, 0)).WorkRows,
				"nor registers any of its subscriptions")
		},
		"RejectsDuplicateEventIDs": func(t *testing.T) {
			tb := setup(t, newBackend)
			first, other := newID(t), newID(t)
			taken := newID(t)
			withID := func(id uuid.UUID) ports.NewEvent {
				e := newEvent(eventType, 0)
				e.ID = id
				return e
			}
			stored := appendEvents(t, tb.backend, first, at(0), withID(taken)).Events
			require.Equal(t, taken, stored[0].ID, "a given id is kept")
			try := func(stream uuid.UUID, events ...ports.NewEvent) error {
				t.Helper()
				_, err := tb.backend.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{StreamID: stream, Events: events, Now: at(time.Second)})
				return err
			}
			fresh := newID(t)

			require.ErrorIs(t, try(other, withID(taken)), ports.ErrVersionConflict, "stored in another stream")
			require.ErrorIs(t, try(first, withID(fresh), withID(taken)), ports.ErrVersionConflict)
			require.ErrorIs(t, try(other, withID(fresh), withID(fresh)), ports.ErrVersionConflict, "repeated in the batch")
			require.NoError(t, try(first, withID(fresh)), "the failed batches stored nothing")
		},
		"RetryReturnsStoredEvents": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			params := ports.EventsAppendParams{StreamID: stream, Events: withIDs(t, newEvent(eventType, 0), newEvent(otherType, 0)), Now: at(0)}
			first, err := tb.backend.Events.EventsAppend(t.Context(), &params)
			require.NoError(t, err)
			require.False(t, first.AlreadyStored)

			// The first call took effect but its caller saw it fail (say, the
			// connection broke after the commit), so it sends it again.
			params.Now = at(time.Second)
			again, err := tb.backend.Events.EventsAppend(t.Context(), &params)

			require.NoError(t, err)
			require.True(t, again.AlreadyStored)
			require.Zero(t, again.WorkRows, "nothing stored now")
			require.Len(t, again.Events, 2)
			for i := range first.Events {
				requireEvent(t, first.Events[i], again.Events[i])
			}
			require.Equal(t, 2, streamLength(t, tb.backend, stream), "no event stored twice")
			a.heartbeat(t, at(time.Second))
			require.Equal(t, []int64{1}, versionsOf(a.fetch(t, at(time.Second), stream).Work), "no work row stored twice")
		},
		"RetryChecksExpectedVersion": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			first := withIDs(t, newEvent(eventType, 0), newEvent(eventType, 0))
			second := withIDs(t, newEvent(eventType, 0))
			try := func(expected int64, events []ports.NewEvent) (*ports.EventsAppendResult, error) {
				t.Helper()
				return tb.backend.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{
					StreamID: stream, ExpectedVersion: expected, Events: events, Now: at(time.Second),
				})
			}
			_, err := try(ports.ExpectNoStream, first)
			require.NoError(t, err)
			_, err = try(2, second)
			require.NoError(t, err)

			for name, c := range map[string]struct {
				expected int64
				events   []ports.NewEvent
				repeat   bool
			}{
				"FirstWithoutCheck":     {0, first, true},
				"FirstNoStream":         {ports.ExpectNoStream, first, true},
				"FirstAfterVersion1":    {1, first, false},
				"SecondWithoutCheck":    {0, second, true},
				"SecondAfterVersion2":   {2, second, true},
				"SecondAfterVersion1":   {1, second, false},
				"SecondNoStream":        {ports.ExpectNoStream, second, false},
				"BothWithoutCheck":      {0, append(slices.Clone(first), second...), true},
				"BothNoStream":          {ports.ExpectNoStream, append(slices.Clone(first), second...), true},
				"BothAfterVersion2":     {2, append(slices.Clone(first), second...), false},
				"BothReorderedNoStream": {ports.ExpectNoStream, append(slices.Clone(second), first...), true},
			} {
				res, err := try(c.expected, c.events)
				if !c.repeat {
					require.ErrorIs(t, err, ports.ErrVersionConflict, "%s: the lowest stored version is not ExpectedVersion+1", name)
					continue
				}
				require.NoError(t, err, name)
				require.True(t, res.AlreadyStored, name)
				for i, e := range res.Events {
					require.Equal(t, c.events[i].ID, e.ID, "%s: in the order of the call", name)
				}
			}
			require.Equal(t, 3, streamLength(t, tb.backend, stream))
		},
		"RetryThatDiffersConflicts": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream, other := newID(t), newID(t)
			stored := appendEvents(t, tb.backend, stream, at(0), withIDs(t, newEvent(eventType, 0), newEvent(eventType, 0))...).Events
			appendEvents(t, tb.backend, other, at(0), withIDs(t, newEvent(eventType, 0))...)
			again := func(i int) ports.NewEvent {
				return ports.NewEvent{ID: stored[i].ID, Type: stored[i].Type, Data: stored[i].Data}
			}
			changedData, changedType, misplaced := again(0), again(0), again(1)
			changedData.Data = []byte(`{"changed":true}`)
			changedType.Type = otherType
			misplaced.Version = 1

			for name, c := range map[string]struct {
				stream uuid.UUID
				events []ports.NewEvent
			}{
				"OtherData":        {stream, []ports.NewEvent{changedData}},
				"OtherType":        {stream, []ports.NewEvent{changedType}},
				"OtherVersion":     {stream, []ports.NewEvent{misplaced}},
				"StoredAndNew":     {stream, []ports.NewEvent{again(1), withIDs(t, newEvent(eventType, 0))[0]}},
				"NewAndStored":     {stream, []ports.NewEvent{withIDs(t, newEvent(eventType, 0))[0], again(0)}},
				"RepeatedID":       {stream, []ports.NewEvent{again(0), again(0)}},
				"OtherStream":      {other, []ports.NewEvent{again(0)}},
				"OtherStreamFresh": {newID(t), []ports.NewEvent{again(0)}},
			} {
				_, err := tb.backend.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{StreamID: c.stream, Events: c.events, Now: at(time.Second)})
				require.ErrorIs(t, err, ports.ErrVersionConflict, name)
			}

			require.Equal(t, 2, streamLength(t, tb.backend, stream), "the conflicts stored nothing")
			require.Equal(t, 1, streamLength(t, tb.backend, other))
			a.heartbeat(t, at(2*time.Second))
			require.Len(t, a.fetch(t, at(2*time.Second), stream, other).Work, 3, "nor any work row")
		},
		"RejectsInvalidArguments": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			valid := newEvent(eventType, 0)
			for name, params := range map[string]ports.EventsAppendParams{
				"NilStream":          {Events: []ports.NewEvent{valid}},
				"EmptyType":          {StreamID: stream, Events: []ports.NewEvent{{Data: []byte(`{}`)}}},
				"NilData":            {StreamID: stream, Events: []ports.NewEvent{{Type: eventType}}},
				"MalformedData":      {StreamID: stream, Events: []ports.NewEvent{{Type: eventType, Data: []byte(`{"total":`)}}},
				"NullData":           {StreamID: stream, Events: []ports.NewEvent{valid, {Type: eventType, Data: []byte(" null\n")}}},
				"NegativeVersion":    {StreamID: stream, Events: []ports.NewEvent{{Type: eventType, Version: -1, Data: []byte(`{}`)}}},
				"BadExpectedVersion": {StreamID: stream, ExpectedVersion: -2, Events: []ports.NewEvent{valid}},
			} {
				params.Now = at(0)
				_, err := tb.backend.Events.EventsAppend(t.Context(), &params)
				require.ErrorIs(t, err, ports.ErrInvalidArgument, name)
			}
			events, err := tb.backend.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream})
			require.NoError(t, err)
			require.Empty(t, events)
		},
		"StoresRowsBelowACursorLate": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			stream := newID(t)
			events := appendEvents(t, tb.backend, stream, at(0), newEvent(eventType, 1), newEvent(eventType, 3)).Events
			a.heartbeat(t, at(0))
			work := a.fetch(t, at(0), stream).Work
			require.Equal(t, []bool{false, false, false, false}, lateOf(work), "rows appended above every cursor are not late")
			a.complete(t, at(time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[1].ID, LastVersion: 3, WorkIDs: workIDs(ofPerspective(work, perspective)),
			})

			appendEvents(t, tb.backend, stream, at(2*time.Second), newEvent(eventType, 2))

			work = a.fetch(t, at(3*time.Second), stream).Work
			require.Equal(t, []int64{2}, versionsOf(ofPerspective(work, perspective)))
			require.Equal(t, []bool{true}, lateOf(ofPerspective(work, perspective)), "stored below the cursor of perspective")
			require.Equal(t, []int64{1, 2, 3}, versionsOf(ofPerspective(work, perspective2)))
			require.Equal(t, []bool{false, true, false}, lateOf(ofPerspective(work, perspective2)),
				"perspective2 has no cursor past it, but version 3 was handed to an apply")
			c, ok := cursorOf(t, tb.backend, stream, perspective2)
			require.False(t, ok && c.Status.Has(ports.CursorRewindRequired), "only a cursor past the event is flagged")
		},
		"StoresImplicitRowsBelowACursorLate": func(t *testing.T) {
			// A completion may report a position past the stream's head (an
			// apply of events appended elsewhere, a cursor set by hand): an
			// event appended at the next version then lies below it.
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendEvents(t, tb.backend, stream, at(0), newEvent(eventType, 0)).Events
			a.heartbeat(t, at(0))
			a.complete(t, at(time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[0].ID, LastVersion: 3, WorkIDs: workIDs(a.fetch(t, at(0), stream).Work),
			})

			next := appendEvents(t, tb.backend, stream, at(2*time.Second), newEvent(eventType, 0)).Events[0]
			require.Equal(t, int64(2), next.Version)
			requireRewind(t, mustCursor(t, tb.backend, stream, perspective), next, at(2*time.Second), at(2*time.Second))
			work := a.fetch(t, at(3*time.Second), stream).Work
			require.Equal(t, []int64{2}, versionsOf(work))
			require.Equal(t, []bool{true}, lateOf(work), "stored below the cursor")

			above := appendEvents(t, tb.backend, stream, at(4*time.Second), newEvent(eventType, 0), newEvent(eventType, 0)).Events
			require.Equal(t, []int64{3, 4}, []int64{above[0].Version, above[1].Version})
			work = a.fetch(t, at(5*time.Second), stream).Work
			require.Equal(t, []int64{2, 3, 4}, versionsOf(work))
			require.Equal(t, []bool{true, false, false}, lateOf(work), "the cursor is at version 3, not past it")
		},
		"StoresRowsBelowTheHandedOutMarkLate": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, c := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			handed, idle, released := newID(t), newID(t), newID(t)
			for _, stream := range []uuid.UUID{handed, idle, released} {
				appendEvents(t, tb.backend, stream, at(0), newEvent(eventType, 1), newEvent(eventType, 3))
			}
			a.heartbeat(t, at(0))
			c.heartbeat(t, at(0))
			require.Len(t, a.fetch(t, at(0), handed).Work, 2)
			require.Len(t, c.fetch(t, at(0), released).Work, 2)
			// A graceful shutdown releases the lease and its marks: c's
			// applies are over.
			require.NoError(t, c.b.Claimer.InstanceDeregister(t.Context(), &ports.InstanceDeregisterParams{InstanceID: c.id}))

			// Past the lease and a's liveness: the mark still counts, its
			// holder may have saved. Version 4 lands above it.
			for _, stream := range []uuid.UUID{handed, idle, released} {
				appendEvents(t, tb.backend, stream, at(time.Hour), newEvent(eventType, 2), newEvent(eventType, 4))
			}

			a.heartbeat(t, at(time.Hour))
			work := a.fetch(t, at(time.Hour), handed, idle, released).Work
			require.Equal(t, []int64{1, 2, 3, 4}, versionsOf(ofStream(work, handed)))
			require.Equal(t, []bool{false, true, false, false}, lateOf(ofStream(work, handed)),
				"version 3 was handed to an apply, whose save may pass version 2")
			require.Equal(t, []int64{1, 2, 3, 4}, versionsOf(ofStream(work, idle)))
			require.Equal(t, []bool{false, false, false, false}, lateOf(ofStream(work, idle)), "nothing of the stream was handed out")
			require.Equal(t, []bool{false, false, false, false}, lateOf(ofStream(work, released)), "the released lease kept no mark")
			_, ok := cursorOf(t, tb.backend, handed, perspective)
			require.False(t, ok, "no cursor is flagged: none is past the event")
		},
		"StoresNoWorkWithoutSubscribers": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, otherType, perspective)
			stream := newID(t)

			res := appendEvents(t, tb.backend, stream, at(0), newEvent(eventType, 0))

			require.Zero(t, res.WorkRows)
			a.heartbeat(t, at(0))
			require.Empty(t, a.claim(t, at(0)))
		},
	})

	group(t, "SubscriptionsRegister", map[string]func(t *testing.T){
		"AdditiveAndIdempotent": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			subscribe(t, tb.backend, eventType, perspective)
			subscribe(t, tb.backend, eventType, perspective)
			require.Equal(t, 1, appendEvents(t, tb.backend, stream, at(0), newEvent(eventType, 0)).WorkRows)

			subscribe(t, tb.backend, eventType, perspective2, perspective)

			require.Equal(t, 2, appendEvents(t, tb.backend, stream, at(0), newEvent(eventType, 0)).WorkRows)
		},
		"AffectsOnlyLaterAppends": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			stream := newID(t)
			require.Zero(t, appendEvents(t, tb.backend, stream, at(0), newEvent(eventType, 0)).WorkRows)

			subscribe(t, tb.backend, eventType, perspective)
			appendEvents(t, tb.backend, stream, at(time.Second), newEvent(eventType, 0))

			a.heartbeat(t, at(time.Second))
			require.Equal(t, []int64{2}, versionsOf(a.fetch(t, at(time.Second), stream).Work))
		},
		"RejectsEmptyNames": func(t *testing.T) {
			tb := setup(t, newBackend)

			for _, sub := range []ports.Subscription{{EventType: eventType}, {Perspective: perspective}} {
				err := tb.backend.Events.SubscriptionsRegister(t.Context(), &ports.SubscriptionsRegisterParams{Subscriptions: []ports.Subscription{sub}})
				require.ErrorIs(t, err, ports.ErrInvalidArgument)
			}
		},
	})
}

// requireMetadata fails t unless got is want as stored. Metadata is
// compared through its JSON encoding, the stored form: a nil map and an
// empty one are the same metadata, so a backend may hand out either.
func requireMetadata(t *testing.T, want, got ports.Metadata, msgAndArgs ...any) {
	t.Helper()
	w, err := json.Marshal(want)
	require.NoError(t, err)
	g, err := json.Marshal(got)
	require.NoError(t, err)
	require.JSONEq(t, string(w), string(g), msgAndArgs...)
}
