package conformance

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// runAdmin verifies ports.Admin, an optional port. Its dead-letter and
// stream-lock methods are verified with the ports whose state they act on
// (runDeadLetters, runRewind).
func runAdmin(t *testing.T, newBackend NewBackendFunc, implemented bool) {
	t.Helper()
	const port = "Admin"

	optionalGroup(t, "InstancesList", port, implemented, map[string]func(t *testing.T){
		"CountsTheStreamsEachHolds": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			streams := newIDs(t, 3)
			for _, s := range streams {
				appendN(t, tb.backend, s, at(0), eventType, 1)
			}
			a.heartbeat(t, at(0))
			b.heartbeat(t, at(0))
			work := a.fetch(t, at(0), streams[0], streams[1]).Work
			require.Len(t, work, 2)
			require.Len(t, b.fetch(t, at(0), streams[2]).Work, 1)
			leased := func() map[uuid.UUID]int {
				t.Helper()
				list, ok := instances(t, tb.backend)
				require.True(t, ok)
				out := map[uuid.UUID]int{}
				for _, in := range list {
					out[in.ID] = in.LeasedStreams
				}
				return out
			}
			require.Equal(t, map[uuid.UUID]int{a.id: 2, b.id: 1}, leased())

			first := ofStream(work, streams[0])[0]
			a.complete(t, at(time.Second), ports.Completion{
				StreamID: streams[0], Perspective: perspective, LastEventID: first.EventID, LastVersion: 1, WorkIDs: workIDs([]ports.WorkItem{first}),
			})
			require.Equal(t, map[uuid.UUID]int{a.id: 1, b.id: 1}, leased(), "a drained stream is released")

			later := at(leaseDuration + time.Minute)
			a.heartbeat(t, later)
			b.heartbeat(t, later)
			require.Equal(t, map[uuid.UUID]int{a.id: 1, b.id: 1}, leased(), "an expired lease still names its holder")
			require.Len(t, b.fetch(t, later, streams[1]).Work, 1)
			require.Equal(t, map[uuid.UUID]int{a.id: 0, b.id: 2}, leased(), "b took the stream whose lease expired")
		},
		"RecordsInstances": func(t *testing.T) {
			tb := setup(t, newBackend)
			ins := tb.instances(t, 2)
			record := func(in *instance, now time.Time, zone string) {
				t.Helper()
				_, err := in.b.Claimer.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{
					InstanceID:     in.id,
					ServiceName:    "billing",
					HostName:       "host-" + zone,
					ProcessID:      42,
					Metadata:       map[string]string{"zone": zone},
					StaleThreshold: staleThreshold,
					Now:            now,
				})
				require.NoError(t, err)
			}
			record(ins[1], at(0), "b")
			record(ins[0], at(time.Second), "a")
			record(ins[0], at(10*time.Second), "c")

			list, ok := instances(t, tb.backend)

			require.True(t, ok)
			require.Len(t, list, 2)
			require.Equal(t, ins[0].id, list[0].ID, "ordered by id")
			require.Equal(t, ins[1].id, list[1].ID)
			require.Equal(t, "billing", list[0].ServiceName)
			require.Equal(t, "host-c", list[0].HostName)
			require.Equal(t, 42, list[0].ProcessID)
			require.Equal(t, map[string]string{"zone": "c"}, list[0].Metadata)
			requireTime(t, at(time.Second), list[0].StartedAt, "StartedAt")
			requireTime(t, at(10*time.Second), list[0].LastHeartbeatAt, "LastHeartbeatAt")
			requireTime(t, at(0), list[1].StartedAt, "StartedAt")
			requireTime(t, at(0), list[1].LastHeartbeatAt, "LastHeartbeatAt")
		},
	})

	optionalGroup(t, "PerspectiveRetire", port, implemented, map[string]func(t *testing.T){
		"CompletionsOfDeletedRowsChangeNothing": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			retire(t, f.tb.backend, perspective, false)

			// An instance that fetched the rows before the retirement
			// reports them afterwards.
			require.Zero(t, f.a.complete(t, at(time.Second), f.completion(1, 1)).Completed)
			f.a.fail(t, at(2*time.Second), ports.Failure{
				StreamID: f.stream, Perspective: perspective,
				FailedWorkIDs: workIDs(f.work[1:]), Error: "boom", RetryAt: at(2 * time.Second),
			})

			requireNoWork(t, f.a.fetch(t, at(3*time.Second), f.stream))
		},
		"ClearsTheRewindItsDeletedRowsAwaited": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendEvents(t, tb.backend, stream, at(0), newEvent(eventType, 1), newEvent(eventType, 3)).Events
			a.heartbeat(t, at(0))
			a.complete(t, at(time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[1].ID, LastVersion: 3, WorkIDs: workIDs(a.fetch(t, at(0), stream).Work),
			})
			appendEvents(t, tb.backend, stream, at(2*time.Second), newEvent(eventType, 2))
			a.complete(t, at(3*time.Second), ports.Completion{StreamID: stream, Perspective: perspective, LastEventID: events[1].ID, LastVersion: 3})
			require.True(t, mustCursor(t, tb.backend, stream, perspective).Status.Has(ports.CursorRewindRequired), "the late event flags a rewind")

			retire(t, tb.backend, perspective, false)

			// The late row is deleted with the others: no rewind would ever
			// come for it, and the flag would hold the pair for good once
			// revived (its rebuild applies the event).
			cur := mustCursor(t, tb.backend, stream, perspective)
			requireNoRewind(t, cur)
			require.Equal(t, int64(3), cur.LastVersion, "the position stays")
		},
		"CompletionsAfterDropStateBringNoCursorBack": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)
			f.a.complete(t, at(time.Second), f.completion(1, 1))
			retire(t, f.tb.backend, perspective, true)

			// Reports sent before the retirement land after it (their
			// acknowledgements were lost): the model they stood for is gone.
			f.a.complete(t, at(2*time.Second), f.completion(2, 2))
			f.a.fail(t, at(3*time.Second), ports.Failure{
				StreamID: f.stream, Perspective: perspective, LastEventID: f.events[1].ID, LastVersion: 2,
				FailedWorkIDs: workIDs(f.work[2:]), Error: "boom", RetryAt: at(3 * time.Second),
			})

			_, exists := cursorOf(t, f.tb.backend, f.stream, perspective)
			require.False(t, exists, "no cursor without its model")
		},
		"FailedReplayOfARetiredPerspectiveStoresNoRow": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			f.a.complete(t, at(time.Second), f.completion(2, 1, 2))
			retire(t, f.tb.backend, perspective, false)

			// A replay of an applied event, running when the perspective
			// was retired, fails.
			f.a.fail(t, at(2*time.Second), ports.Failure{
				StreamID: f.stream, Perspective: perspective,
				FailedEventID: f.events[0].ID, FailedEventVersion: 1, Error: "replay failed", RetryAt: at(2 * time.Second),
			})

			requireNoWork(t, f.a.fetch(t, at(3*time.Second), f.stream))
		},
		"DeletesSubscriptionsAndPendingRows": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			subscribe(t, tb.backend, otherType, perspective)
			streams := newIDs(t, 2)
			appendEvents(t, tb.backend, streams[0], at(0), newEvent(eventType, 0), newEvent(otherType, 0))
			appendEvents(t, tb.backend, streams[1], at(0), newEvent(eventType, 0))
			a.heartbeat(t, at(0))
			require.Len(t, a.fetch(t, at(0), streams[0]).Work, 3, "rows handed out to a live instance are deleted too")

			res := retire(t, tb.backend, perspective, false)

			require.Equal(t, ports.RetireResult{Subscriptions: 2, Work: 3}, res)
			work := a.fetch(t, at(time.Second), streams...).Work
			require.Empty(t, ofPerspective(work, perspective))
			require.Len(t, ofPerspective(work, perspective2), 2, "another perspective's rows stay")
			require.Len(t, work, 2)
		},
		"DropStateDeletesCursorsModelsAndSnapshots": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			streams := newIDs(t, 3)
			for _, stream := range streams[:2] {
				for _, name := range []string{perspective, perspective2} {
					require.NoError(t, tb.backend.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
						StreamID: stream, Perspective: name, Data: []byte(`{}`), LastEventID: newID(t), LastVersion: 1, Now: at(0),
					}))
				}
			}
			event := appendN(t, tb.backend, streams[2], at(0), eventType, 1)[0]
			a.moveCursor(t, at(0), perspective, event) // a cursor without a model
			snapshots := tb.backend.Snapshots != nil
			if snapshots {
				for _, v := range []int64{1, 2} {
					saveSnapshot(t, tb.backend, streams[0], perspective, v, at(0))
				}
				saveSnapshot(t, tb.backend, streams[0], perspective2, 1, at(0))
			}

			require.Equal(t, ports.RetireResult{}, retire(t, tb.backend, perspective, false), "nothing to delete without DropState")
			_, err := tb.backend.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: streams[0], Perspective: perspective})
			require.NoError(t, err, "the state stays without DropState")

			res := retire(t, tb.backend, perspective, true)

			want := ports.RetireResult{Cursors: 3, Models: 2}
			if snapshots {
				want.Snapshots = 2
			}
			require.Equal(t, want, res)
			for _, stream := range streams {
				_, exists := cursorOf(t, tb.backend, stream, perspective)
				require.False(t, exists)
				_, err := tb.backend.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: stream, Perspective: perspective})
				require.ErrorIs(t, err, ports.ErrNotFound)
			}
			for _, stream := range streams[:2] {
				mustCursor(t, tb.backend, stream, perspective2)
				_, err := tb.backend.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: stream, Perspective: perspective2})
				require.NoError(t, err, "another perspective's state stays")
			}
			if snapshots {
				requireNoSnapshot(t, tb.backend, streams[0], perspective, 100)
				require.Equal(t, int64(1), latestSnapshot(t, tb.backend, streams[0], perspective2, 100).Version)
			}
		},
		"Idempotent": func(t *testing.T) {
			tb := setup(t, newBackend)
			subscribe(t, tb.backend, eventType, perspective)
			appendN(t, tb.backend, newID(t), at(0), eventType, 2)
			require.Equal(t, ports.RetireResult{Subscriptions: 1, Work: 2}, retire(t, tb.backend, perspective, true))

			require.Equal(t, ports.RetireResult{}, retire(t, tb.backend, perspective, true), "nothing is left to delete")
			require.Equal(t, []string{perspective}, retired(t, tb.backend))
		},
		"IgnoresLaterSubscriptionsOfIt": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			stream := newID(t)
			retire(t, tb.backend, perspective, false)
			appendWith := func(now time.Time, typ string, subs ...ports.Subscription) int {
				t.Helper()
				res, err := tb.backend.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{
					StreamID: stream, Events: []ports.NewEvent{newEvent(typ, 0)}, Subscriptions: subs, Now: now,
				})
				require.NoError(t, err)
				return res.WorkRows
			}

			require.Equal(t, 1, appendWith(at(0), eventType), "its subscription is deleted")
			require.Equal(t, 1, appendWith(at(time.Second), eventType, ports.Subscription{EventType: eventType, Perspective: perspective}),
				"an append naming it does not register it")
			require.NoError(t, tb.backend.Events.SubscriptionsRegister(t.Context(), &ports.SubscriptionsRegisterParams{Subscriptions: []ports.Subscription{{EventType: eventType, Perspective: perspective}}}))
			require.Equal(t, 1, appendWith(at(2*time.Second), eventType), "nor does SubscriptionsRegister")
			require.Equal(t, 1, appendWith(at(3*time.Second), otherType,
				ports.Subscription{EventType: otherType, Perspective: perspective}, ports.Subscription{EventType: otherType, Perspective: perspective2},
			), "the other subscriptions of the call are registered")
			require.Equal(t, 1, appendWith(at(4*time.Second), otherType))

			a.heartbeat(t, at(4*time.Second))
			work := a.fetch(t, at(4*time.Second), stream).Work
			require.Empty(t, ofPerspective(work, perspective))
			require.Equal(t, []int64{1, 2, 3, 4, 5}, versionsOf(ofPerspective(work, perspective2)))
		},
		"RejectsEmptyPerspective": func(t *testing.T) {
			tb := setup(t, newBackend)

			_, err := tb.backend.Admin.PerspectiveRetire(t.Context(), &ports.PerspectiveRetireParams{DropState: true})

			require.ErrorIs(t, err, ports.ErrInvalidArgument)
			require.Empty(t, retired(t, tb.backend))
		},
	})

	optionalGroup(t, "PerspectiveRevive", port, implemented, map[string]func(t *testing.T){
		"LetsItBeRegisteredAgain": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			retire(t, tb.backend, perspective, false)

			require.NoError(t, tb.backend.Admin.PerspectiveRevive(t.Context(), &ports.PerspectiveReviveParams{Perspective: perspective}))

			require.Empty(t, retired(t, tb.backend))
			require.Zero(t, appendEvents(t, tb.backend, stream, at(0), newEvent(eventType, 0)).WorkRows,
				"its subscriptions were deleted, not suspended")
			subscribe(t, tb.backend, eventType, perspective)
			require.Equal(t, 1, appendEvents(t, tb.backend, stream, at(time.Second), newEvent(eventType, 0)).WorkRows)
			res, err := tb.backend.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{
				StreamID: stream, Events: []ports.NewEvent{newEvent(otherType, 0)},
				Subscriptions: []ports.Subscription{{EventType: otherType, Perspective: perspective}}, Now: at(2 * time.Second),
			})
			require.NoError(t, err)
			require.Equal(t, 1, res.WorkRows, "an append registers it again too")
			a.heartbeat(t, at(2*time.Second))
			require.Equal(t, []int64{2, 3}, versionsOf(a.fetch(t, at(2*time.Second), stream).Work))
		},
		"NoOpWhenNotRetired": func(t *testing.T) {
			tb := setup(t, newBackend)
			subscribe(t, tb.backend, eventType, perspective)

			require.NoError(t, tb.backend.Admin.PerspectiveRevive(t.Context(), &ports.PerspectiveReviveParams{Perspective: perspective}))
			require.NoError(t, tb.backend.Admin.PerspectiveRevive(t.Context(), &ports.PerspectiveReviveParams{Perspective: perspective2}))

			require.Empty(t, retired(t, tb.backend))
			require.Equal(t, 1, appendEvents(t, tb.backend, newID(t), at(0), newEvent(eventType, 0)).WorkRows, "its subscriptions stay")
		},
	})

	optionalGroup(t, "PerspectivesStatus", port, implemented, map[string]func(t *testing.T){
		"CountsEachFigurePerPerspective": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			retire(t, tb.backend, "audit", false)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			subscribe(t, tb.backend, otherType, perspective)
			subscribe(t, tb.backend, "Unappended", "idle")
			streams := newIDs(t, 4)
			// streams[0] gets versions 1 and 3 now, and 2 late.
			appendEvents(t, tb.backend, streams[0], at(0), newEvent(eventType, 1), newEvent(eventType, 3))
			appendN(t, tb.backend, streams[1], at(10*time.Second), eventType, 1)
			appendN(t, tb.backend, streams[2], at(20*time.Second), otherType, 1)
			appendN(t, tb.backend, streams[3], at(0), eventType, 1)
			a.heartbeat(t, at(20*time.Second))
			work := a.fetch(t, at(20*time.Second), streams...).Work
			require.Len(t, work, 9)
			rows := func(stream uuid.UUID, name string) []ports.WorkItem {
				return ofPerspective(ofStream(work, stream), name)
			}
			completion := func(stream uuid.UUID, name string, rows ...ports.WorkItem) ports.Completion {
				last := rows[len(rows)-1]
				return ports.Completion{StreamID: stream, Perspective: name, LastEventID: last.EventID, LastVersion: last.EventVersion, WorkIDs: workIDs(rows)}
			}
			a.complete(t, at(30*time.Second),
				completion(streams[0], perspective, rows(streams[0], perspective)...),   // cursor at 3
				completion(streams[0], perspective2, rows(streams[0], perspective2)[0]), // cursor at 1, version 3 pending
				completion(streams[3], perspective, rows(streams[3], perspective)...),
				completion(streams[3], perspective2, rows(streams[3], perspective2)...),
			)
			a.fail(t, at(30*time.Second), ports.Failure{
				StreamID: streams[1], Perspective: perspective,
				FailedWorkIDs: workIDs(rows(streams[1], perspective)), Error: "boom", RetryAt: at(10 * time.Minute),
			})
			_, moved := a.deadLetter(t, at(30*time.Second), rows(streams[2], perspective)[0].WorkID)
			require.True(t, moved)
			// Below the cursor of perspective, above that of perspective2.
			late := appendEvents(t, tb.backend, streams[0], at(40*time.Second), newEvent(eventType, 2)).Events[0]
			requireRewind(t, mustCursor(t, tb.backend, streams[0], perspective), late, at(40*time.Second), at(40*time.Second))

			require.Equal(t, []ports.PerspectiveStatus{
				{Perspective: "audit", Retired: true},
				{Perspective: "idle", EventTypes: []string{"Unappended"}},
				{
					Perspective: perspective, EventTypes: []string{eventType, otherType},
					Streams: 3, CaughtUp: 1, PendingStreams: 2, Failed: 1, AwaitingRetry: 1, RewindRequired: 1,
					Pending: 2, OldestAge: 50 * time.Second, DeadLetters: 1,
				},
				{
					Perspective: perspective2, EventTypes: []string{eventType},
					Streams: 2, CaughtUp: 1, PendingStreams: 2,
					Pending: 3, OldestAge: time.Minute,
				},
			}, perspectivesStatus(t, tb.backend, at(time.Minute)))
			later := perspectivesStatus(t, tb.backend, at(11*time.Minute))
			require.Zero(t, later[2].AwaitingRetry, "the retry time passed")
			require.Equal(t, 11*time.Minute-10*time.Second, later[2].OldestAge)
		},
		"EmptyBackendHasNone": func(t *testing.T) {
			tb := setup(t, newBackend)

			require.Empty(t, perspectivesStatus(t, tb.backend, at(0)))
		},
		"RetiredKeepsItsState": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			f.a.complete(t, at(time.Second), f.completion(1, 1))
			retire(t, f.tb.backend, perspective, false)

			require.Equal(t, []ports.PerspectiveStatus{{Perspective: perspective, Retired: true, Streams: 1, CaughtUp: 1}},
				perspectivesStatus(t, f.tb.backend, at(time.Minute)), "its subscriptions and pending rows are gone, its cursor stays")

			retire(t, f.tb.backend, perspective, true)
			require.Equal(t, []ports.PerspectiveStatus{{Perspective: perspective, Retired: true}}, perspectivesStatus(t, f.tb.backend, at(time.Minute)))
		},
	})

	optionalGroup(t, "PerspectivesRetired", port, implemented, map[string]func(t *testing.T){
		"ListsThemSorted": func(t *testing.T) {
			tb := setup(t, newBackend)
			require.Empty(t, retired(t, tb.backend))

			for _, name := range []string{perspective2, perspective, "audit", perspective} {
				retire(t, tb.backend, name, false)
			}
			require.Equal(t, []string{"audit", perspective, perspective2}, retired(t, tb.backend))

			require.NoError(t, tb.backend.Admin.PerspectiveRevive(t.Context(), &ports.PerspectiveReviveParams{Perspective: perspective}))
			require.Equal(t, []string{"audit", perspective2}, retired(t, tb.backend))
		},
	})
}

// retire retires perspective, dropping its state when dropState is set, and
// returns what the call removed.
func retire(t *testing.T, b ports.Backend, perspective string, dropState bool) ports.RetireResult {
	t.Helper()
	res, err := b.Admin.PerspectiveRetire(t.Context(), &ports.PerspectiveRetireParams{Perspective: perspective, DropState: dropState})
	require.NoError(t, err)
	require.NotNil(t, res)
	return *res
}

// retired lists the retired perspectives.
func retired(t *testing.T, b ports.Backend) []string {
	t.Helper()
	names, err := b.Admin.PerspectivesRetired(t.Context())
	require.NoError(t, err)
	return names
}

// perspectivesStatus reads the state of every perspective at now.
func perspectivesStatus(t *testing.T, b ports.Backend, now time.Time) []ports.PerspectiveStatus {
	t.Helper()
	status, err := b.Admin.PerspectivesStatus(t.Context(), &ports.PerspectivesStatusParams{Now: now})
	require.NoError(t, err)
	return status
}

// needAdmin skips the case when the adapter does not implement the optional
// ports.Admin, which the case needs to set up or observe state.
func needAdmin(t *testing.T, b ports.Backend) {
	t.Helper()
	if b.Admin == nil {
		t.Skip("adapter does not implement ports.Admin")
	}
}

// instances returns the recorded instances through the optional ports.Admin;
// false when the adapter has none (the case then checks what else it can).
func instances(t *testing.T, b ports.Backend) ([]ports.Instance, bool) {
	t.Helper()
	if b.Admin == nil {
		return nil, false
	}
	list, err := b.Admin.InstancesList(t.Context())
	require.NoError(t, err)
	return list, true
}
