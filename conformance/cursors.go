package conformance

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// drainFixture is a stream leased to a, every work row of which was handed
// out to a.
type drainFixture struct {
	tb     *testBundle
	a      *instance
	stream uuid.UUID
	events []ports.Event
	work   []ports.WorkItem // in version order
}

// setupDrain appends n events for one perspective and has a claim and fetch
// them at(0).
func setupDrain(t *testing.T, newBackend NewBackendFunc, n int) *drainFixture {
	t.Helper()
	tb := setup(t, newBackend)
	a := tb.instance(t)
	subscribe(t, tb.backend, eventType, perspective)
	stream := newID(t)
	events := appendN(t, tb.backend, stream, at(0), eventType, n)
	a.heartbeat(t, at(0))
	require.Equal(t, []uuid.UUID{stream}, a.claim(t, at(0)))
	work := a.fetch(t, at(0), stream).Work
	require.Len(t, work, n)
	return &drainFixture{tb: tb, a: a, stream: stream, events: events, work: work}
}

// completion reports the rows of versions as applied, with the cursor moved
// to the event at last (0 for none).
func (f *drainFixture) completion(last int64, versions ...int64) ports.Completion {
	c := ports.Completion{StreamID: f.stream, Perspective: perspective, WorkIDs: []uuid.UUID{}}
	if last > 0 {
		c.LastEventID, c.LastVersion = f.events[last-1].ID, last
	}
	for _, v := range versions {
		c.WorkIDs = append(c.WorkIDs, f.work[v-1].WorkID)
	}
	return c
}

// cursor returns the perspective's cursor of the stream.
func (f *drainFixture) cursor(t *testing.T) ports.Cursor {
	t.Helper()
	return mustCursor(t, f.tb.backend, f.stream, perspective)
}

// runCursors verifies ports.CursorStore.
func runCursors(t *testing.T, newBackend NewBackendFunc) {
	t.Helper()

	group(t, "CursorsGet", map[string]func(t *testing.T){
		"FiltersByStreamAndPerspective": func(t *testing.T) {
			tb := setup(t, newBackend)
			streams := newIDs(t, 3)
			save := func(stream uuid.UUID, name string) {
				t.Helper()
				require.NoError(t, tb.backend.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
					StreamID: stream, Perspective: name, Data: []byte(`{}`),
					LastEventID: newID(t), LastVersion: 1, Now: at(0),
				}))
			}
			save(streams[0], perspective)
			save(streams[0], perspective2)
			save(streams[1], perspective)
			get := func(name string, ids ...uuid.UUID) []string {
				t.Helper()
				cursors, err := tb.backend.Cursors.CursorsGet(t.Context(), &ports.CursorsGetParams{StreamIDs: ids, Perspective: name})
				require.NoError(t, err)
				var got []string
				for _, c := range cursors {
					got = append(got, c.StreamID.String()+"/"+c.Perspective)
				}
				return got
			}
			key := func(stream uuid.UUID, name string) string { return stream.String() + "/" + name }

			require.ElementsMatch(t, []string{key(streams[0], perspective), key(streams[0], perspective2)}, get("", streams[0]))
			require.ElementsMatch(t, []string{key(streams[0], perspective2)}, get(perspective2, streams[0]))
			require.ElementsMatch(t, []string{key(streams[0], perspective), key(streams[1], perspective)}, get(perspective, streams...))
			require.Empty(t, get("", streams[2]), "missing cursors are absent")
		},
	})

	group(t, "WorkComplete", map[string]func(t *testing.T){
		"AdvancesCursorAndDeletesRows": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)
			_, exists := cursorOf(t, f.tb.backend, f.stream, perspective)
			require.False(t, exists)

			res := f.a.complete(t, at(time.Second), f.completion(3, 1, 2, 3))

			require.Equal(t, 3, res.Completed)
			require.Zero(t, res.RewindsFlagged)
			cur := f.cursor(t)
			require.Equal(t, f.events[2].ID, cur.LastEventID)
			require.Equal(t, int64(3), cur.LastVersion)
			require.Equal(t, ports.CursorCompleted, cur.Status)
			require.Empty(t, cur.Error)
			requireTime(t, at(time.Second), cur.UpdatedAt, "UpdatedAt")
			requireNoRewind(t, cur)
			require.Empty(t, f.a.claim(t, at(2*time.Second)))
			requireNoWork(t, f.a.fetch(t, at(2*time.Second), f.stream))
		},
		"PendingRowsAboveReportedPositionAreNotStragglers": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)
			// The engine saved the model through version 3 before the
			// completions of versions 2 and 3 arrived.
			require.NoError(t, f.tb.backend.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
				StreamID: f.stream, Perspective: perspective, Data: []byte(`{}`),
				LastEventID: f.events[2].ID, LastVersion: 3, Now: at(time.Second),
			}))

			res := f.a.complete(t, at(2*time.Second), f.completion(1, 1))

			require.Zero(t, res.RewindsFlagged, "rows 2 and 3 are applied, their completions are on their way")
			requireNoRewind(t, f.cursor(t))
			require.Equal(t, int64(3), f.cursor(t).LastVersion, "the position never moves back")

			// A completion reporting version 3 while row 2 is still pending
			// does reveal a straggler.
			res = f.a.complete(t, at(3*time.Second), f.completion(3, 3))
			require.Equal(t, 1, res.RewindsFlagged)
			requireRewind(t, f.cursor(t), f.events[1], at(3*time.Second), at(3*time.Second))
		},
		"ClearsFailure": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			f.a.fail(t, at(time.Second), ports.Failure{
				StreamID: f.stream, Perspective: perspective,
				FailedWorkIDs: workIDs(f.work[1:]), Error: "boom", RetryAt: at(time.Second),
			})
			require.True(t, f.cursor(t).Status.Has(ports.CursorFailed))

			f.a.complete(t, at(2*time.Second), f.completion(1, 1))

			cur := f.cursor(t)
			require.Equal(t, ports.CursorCompleted, cur.Status)
			require.Empty(t, cur.Error)
		},
		"ClearsRewindColumns": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendEvents(t, tb.backend, stream, at(0), newEvent(eventType, 1), newEvent(eventType, 3)).Events
			a.heartbeat(t, at(0))
			work := a.fetch(t, at(0), stream).Work
			a.complete(t, at(time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[1].ID, LastVersion: 3, WorkIDs: workIDs(work),
			})
			late := appendEvents(t, tb.backend, stream, at(2*time.Second), newEvent(eventType, 2)).Events[0]
			requireRewind(t, mustCursor(t, tb.backend, stream, perspective), late, at(2*time.Second), at(2*time.Second))

			// The rewind applied every event again, the late one included.
			lateWork := a.fetch(t, at(3*time.Second), stream).Work
			require.Equal(t, []int64{2}, versionsOf(lateWork))
			res := a.complete(t, at(4*time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[1].ID, LastVersion: 3, WorkIDs: workIDs(lateWork),
			})

			require.Equal(t, 1, res.Completed)
			require.Zero(t, res.RewindsFlagged)
			cur := mustCursor(t, tb.backend, stream, perspective)
			requireNoRewind(t, cur)
			require.Equal(t, ports.CursorCompleted, cur.Status)
		},
		"ACompletionThatChangesNothingLeavesTheCursor": func(t *testing.T) {
			f := setupDrain(t, newBackend, 4)
			f.a.complete(t, at(time.Second), f.completion(1, 1))
			// The save moves the cursor first; the completion of its rows
			// then finds it where it names, completed, without an error
			// or a rewind: a cursor that does not change is not written,
			// and its UpdatedAt stays that of the save.
			require.NoError(t, f.tb.backend.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
				StreamID: f.stream, Perspective: perspective, Data: []byte(`{}`),
				LastEventID: f.events[2].ID, LastVersion: 3, ExpectedVersion: 1, Now: at(2 * time.Second),
			}))
			saved := f.cursor(t)
			requireTime(t, at(2*time.Second), saved.UpdatedAt, "UpdatedAt of the save")

			res := f.a.complete(t, at(3*time.Second), f.completion(3, 2, 3))

			require.Equal(t, 2, res.Completed)
			require.Equal(t, saved, f.cursor(t), "unchanged")
			// One that changes something still writes it.
			f.a.complete(t, at(4*time.Second), f.completion(2))
			require.Equal(t, saved, f.cursor(t), "a position behind the cursor changes nothing")
			f.a.fail(t, at(5*time.Second), ports.Failure{
				StreamID: f.stream, Perspective: perspective, LastEventID: f.events[2].ID, LastVersion: 3,
				FailedWorkIDs: workIDs(f.work[3:]), Error: "boom", RetryAt: at(5 * time.Second),
			})
			require.True(t, f.cursor(t).Status.Has(ports.CursorFailed))
			f.a.complete(t, at(6*time.Second), f.completion(3))
			cur := f.cursor(t)
			require.Equal(t, ports.CursorCompleted, cur.Status)
			require.Empty(t, cur.Error)
			requireTime(t, at(6*time.Second), cur.UpdatedAt, "UpdatedAt of a completion that cleared a failure")
		},
		"CompletesOnlyListedRows": func(t *testing.T) {
			f := setupDrain(t, newBackend, 4)

			res := f.a.complete(t, at(time.Second), f.completion(4, 3, 4))

			require.Equal(t, 2, res.Completed)
			require.Equal(t, 1, res.RewindsFlagged, "versions 1 and 2 are pending below the cursor")
			cur := f.cursor(t)
			require.Equal(t, int64(4), cur.LastVersion)
			requireRewind(t, cur, f.events[0], at(time.Second), at(time.Second))
			require.Equal(t, []int64{1, 2}, versionsOf(f.a.fetch(t, at(2*time.Second), f.stream).Work))
		},
		"CursorMovesOnlyForward": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)
			f.a.complete(t, at(time.Second), f.completion(3, 1, 2, 3))

			f.a.complete(t, at(2*time.Second), f.completion(1))

			cur := f.cursor(t)
			require.Equal(t, int64(3), cur.LastVersion)
			require.Equal(t, f.events[2].ID, cur.LastEventID)
		},
		"DebugModeKeepsRowsInvisible": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)

			res := f.a.completeWith(t, ports.WorkCompleteParams{
				Completions: []ports.Completion{f.completion(2, 1, 2)}, DebugMode: true, Now: at(time.Second),
			})

			require.Equal(t, 2, res.Completed)
			require.Equal(t, int64(2), f.cursor(t).LastVersion)
			require.Empty(t, f.a.claim(t, at(2*time.Second)))
			requireNoWork(t, f.a.fetch(t, at(2*time.Second), f.stream))
			require.Zero(t, f.a.renew(t, at(2*time.Second), time.Minute, f.stream), "the drained stream was released")
			require.Zero(t, f.a.complete(t, at(3*time.Second), f.completion(2, 1, 2)).Completed, "processed rows are not pending")
			_, moved := f.a.deadLetter(t, at(3*time.Second), f.work[0].WorkID)
			require.False(t, moved)
		},
		"DeletesBeforeCheckingStragglers": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)

			res := f.a.complete(t, at(time.Second), f.completion(2, 2), f.completion(1, 1))

			require.Equal(t, 2, res.Completed)
			require.Zero(t, res.RewindsFlagged, "version 1 is deleted by the same call")
			cur := f.cursor(t)
			require.Equal(t, int64(2), cur.LastVersion)
			requireNoRewind(t, cur)
		},
		"EmptyListStillFlagsStragglers": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)

			res := f.a.complete(t, at(time.Second), f.completion(3))

			require.Zero(t, res.Completed)
			require.Equal(t, 1, res.RewindsFlagged)
			requireRewind(t, f.cursor(t), f.events[0], at(time.Second), at(time.Second))
			require.Equal(t, []int64{1, 2, 3}, versionsOf(f.a.fetch(t, at(2*time.Second), f.stream).Work))
		},
		"FencedAfterTakeover": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 1)
			a.heartbeat(t, at(0))
			work := a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: 40 * time.Second, Now: at(0)}).Work
			b.heartbeat(t, at(20*time.Second))
			require.Equal(t, []int{1}, attemptsOf(b.fetch(t, at(45*time.Second), stream).Work), "b took the stream of dead a")

			res := a.complete(t, at(46*time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[0].ID, LastVersion: 1, WorkIDs: workIDs(work),
			})

			require.Zero(t, res.Completed)
			require.Equal(t, workIDs(work), workIDs(b.fetch(t, at(47*time.Second), stream).Work), "the row is still b's")
		},
		"ListedRowsOfALostStreamAreNoStragglers": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			work := a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: 40 * time.Second, Now: at(0)}).Work
			b.heartbeat(t, at(20*time.Second))
			require.Len(t, b.fetch(t, at(45*time.Second), stream).Work, 2, "b took the stream of dead a")

			// a applied and saved both events before it lost the stream: its
			// completion deletes nothing, and the rows it lists were applied.
			res := a.complete(t, at(46*time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[1].ID, LastVersion: 2, WorkIDs: workIDs(work),
			})

			require.Zero(t, res.Completed)
			require.Zero(t, res.RewindsFlagged)
			requireNoRewind(t, mustCursor(t, tb.backend, stream, perspective))
			rows := b.fetch(t, at(47*time.Second), stream).Work
			require.Equal(t, workIDs(work), workIDs(rows), "the rows are still b's")
			require.Equal(t, []bool{false, false}, lateOf(rows), "their events are applied: they are no stragglers")
		},
		"FencedAfterExpiredLeaseTaken": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			b.heartbeat(t, at(0))
			work := a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: 10 * time.Second, Now: at(0)}).Work
			require.Len(t, work, 2)
			a.heartbeat(t, at(15*time.Second))
			require.Equal(t, []int{0, 0}, attemptsOf(b.fetch(t, at(20*time.Second), stream).Work), "b took the expired lease of live a")

			res := a.complete(t, at(21*time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[0].ID, LastVersion: 1, WorkIDs: workIDs(work[:1]),
			})

			require.Zero(t, res.Completed, "a's lease was taken: its completions no longer take effect")
			require.Equal(t, workIDs(work), workIDs(b.fetch(t, at(22*time.Second), stream).Work), "the rows are still b's")
		},
		"FencedToHolder": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			b := f.tb.instance(t)
			b.heartbeat(t, at(time.Second))

			res := b.complete(t, at(time.Second), f.completion(2, 1, 2))

			require.Zero(t, res.Completed)
			require.Equal(t, workIDs(f.work), workIDs(f.a.fetch(t, at(2*time.Second), f.stream).Work), "the rows are still a's")
		},
		"CompletesUnderOwnExpiredLease": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			work := a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: 10 * time.Second, Now: at(0)}).Work
			require.Len(t, work, 2)

			res := a.complete(t, at(time.Minute), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[1].ID, LastVersion: 2, WorkIDs: workIDs(work),
			})

			require.Equal(t, 2, res.Completed, "a's lease expired and a is no longer live, but nobody took the stream")
			require.Equal(t, int64(2), mustCursor(t, tb.backend, stream, perspective).LastVersion)
		},
		"FullListLeavesNoRewind": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)

			res := f.a.complete(t, at(time.Second), f.completion(3, 1, 2, 3))

			require.Equal(t, 3, res.Completed)
			require.Zero(t, res.RewindsFlagged)
			requireNoRewind(t, f.cursor(t))
		},
		"IdempotentForMissingRows": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			require.Equal(t, 2, f.a.complete(t, at(time.Second), f.completion(2, 1, 2)).Completed)

			res := f.a.complete(t, at(2*time.Second), f.completion(2, 1, 2))

			require.Zero(t, res.Completed)
			require.Zero(t, res.RewindsFlagged)
			cur := f.cursor(t)
			require.Equal(t, int64(2), cur.LastVersion)
			require.Equal(t, ports.CursorCompleted, cur.Status)
		},
		"KeepsLeaseWhileRowsPending": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			b := f.tb.instance(t)
			b.heartbeat(t, at(time.Second))
			f.a.complete(t, at(time.Second), f.completion(1, 1))
			// Version 2 fails and waits for its retry: the stream stays a's.
			f.a.fail(t, at(2*time.Second), ports.Failure{
				StreamID: f.stream, Perspective: perspective, LastEventID: f.events[0].ID, LastVersion: 1,
				FailedWorkIDs: workIDs(f.work[1:]), Error: "boom", RetryAt: at(2 * time.Second),
			})

			requireNoWork(t, b.fetch(t, at(3*time.Second), f.stream))
			require.Equal(t, workIDs(f.work[1:]), workIDs(f.a.fetch(t, at(3*time.Second), f.stream).Work), "a still holds the stream")
		},
		"MarksStragglersAfterTheCursorMovedBack": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendEvents(t, tb.backend, stream, at(0), newEvent(eventType, 1), newEvent(eventType, 5)).Events
			a.heartbeat(t, at(0))
			work := a.fetch(t, at(0), stream).Work
			a.complete(t, at(time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective, LastEventID: events[1].ID, LastVersion: 5, WorkIDs: workIDs(work[1:]),
			})
			// a stops, releasing its lease: no mark says version 5 was handed
			// out any more. A model saved back at version 1 moves the cursor
			// below version 3, which is then stored on time.
			require.NoError(t, a.b.Claimer.InstanceDeregister(t.Context(), &ports.InstanceDeregisterParams{InstanceID: a.id}))
			a.heartbeat(t, at(2*time.Second))
			require.NoError(t, tb.backend.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
				StreamID: stream, Perspective: perspective, Data: []byte(`{}`),
				LastEventID: events[0].ID, LastVersion: 1, ExpectedVersion: 5, Now: at(2 * time.Second),
			}))
			appendEvents(t, tb.backend, stream, at(3*time.Second), newEvent(eventType, 3))
			work = a.fetch(t, at(4*time.Second), stream).Work
			require.Equal(t, []int64{1, 3}, versionsOf(work))
			require.Equal(t, []bool{true, false}, lateOf(work))

			a.complete(t, at(5*time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective, LastEventID: events[1].ID, LastVersion: 5,
			})

			require.Equal(t, []bool{true, true}, lateOf(a.fetch(t, at(6*time.Second), stream).Work), "version 3 straggles below version 5")
		},
		"MarksStragglersLate": func(t *testing.T) {
			f := setupDrain(t, newBackend, 4)
			require.Equal(t, []bool{false, false, false, false}, lateOf(f.work))

			require.Equal(t, 1, f.a.complete(t, at(time.Second), f.completion(4, 3, 4)).RewindsFlagged)

			work := f.a.fetch(t, at(2*time.Second), f.stream).Work
			require.Equal(t, []int64{1, 2}, versionsOf(work))
			require.Equal(t, []bool{true, true}, lateOf(work), "both are pending below the reported position")
		},
		"MarksNoRowAboveTheReportedPositionLate": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)
			require.NoError(t, f.tb.backend.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
				StreamID: f.stream, Perspective: perspective, Data: []byte(`{}`),
				LastEventID: f.events[2].ID, LastVersion: 3, Now: at(time.Second),
			}))

			f.a.complete(t, at(2*time.Second), f.completion(1, 1))
			work := f.a.fetch(t, at(3*time.Second), f.stream).Work
			require.Equal(t, []int64{2, 3}, versionsOf(work))
			require.Equal(t, []bool{false, false}, lateOf(work), "applied rows whose completions are on their way")

			f.a.complete(t, at(4*time.Second), f.completion(3, 3))
			work = f.a.fetch(t, at(5*time.Second), f.stream).Work
			require.Equal(t, []int64{2}, versionsOf(work))
			require.Equal(t, []bool{true}, lateOf(work), "a straggler once version 3 is reported")
		},
		"NeverCompletesOtherPerspectives": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			stream := newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 1)
			a.heartbeat(t, at(0))
			work := a.fetch(t, at(0), stream).Work
			require.Len(t, work, 2)

			// The rows of both perspectives, reported by the first one.
			res := a.complete(t, at(time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[0].ID, LastVersion: 1, WorkIDs: workIDs(work),
			})

			require.Equal(t, 1, res.Completed)
			require.Equal(t, ofPerspective(work, perspective2), a.fetch(t, at(2*time.Second), stream).Work)
			_, exists := cursorOf(t, tb.backend, stream, perspective2)
			require.False(t, exists)
		},
		"NeverCompletesOtherStreams": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			streams := newIDs(t, 2)
			for _, s := range streams {
				appendN(t, tb.backend, s, at(0), eventType, 1)
			}
			a.heartbeat(t, at(0))
			other := a.fetch(t, at(0), streams[1]).Work
			require.Len(t, other, 1)

			res := a.complete(t, at(time.Second), ports.Completion{
				StreamID: streams[0], Perspective: perspective, WorkIDs: workIDs(other),
			})

			require.Zero(t, res.Completed)
			require.Equal(t, other, a.fetch(t, at(2*time.Second), streams[1]).Work)
		},
		"RecoversRequeuedDeadLetter": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 2)
			requeue(t, f.tb.backend, f.dead[0].ID, gen2, at(10*time.Second))
			require.Equal(t, []int64{1}, versionsOf(f.a.fetch(t, at(10*time.Second), f.stream).Work))

			f.a.complete(t, at(11*time.Second), f.completion(1, 1))

			dl := f.get(t, f.dead[0].ID)
			require.Equal(t, ports.DeadLetterRecovered, dl.Status, "its requeued row was applied")
			requireTime(t, at(11*time.Second), dl.ResolvedAt, "ResolvedAt")
			require.Equal(t, ports.DeadLetterDead, f.get(t, f.dead[1].ID).Status, "a dead letter that was not requeued stays dead")
		},
		"ReleasesDrainedStreams": func(t *testing.T) {
			tb := setup(t, newBackend)
			low, high := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			drained, busy := newID(t), newID(t)
			events := appendN(t, tb.backend, drained, at(0), eventType, 1)
			busyEvents := appendN(t, tb.backend, busy, at(0), eventType, 1)
			high.heartbeat(t, at(0))
			low.heartbeat(t, at(0))
			work := high.fetch(t, at(0), drained, busy).Work
			require.Len(t, work, 4)

			// Both rows of drained complete; busy keeps a pending row of
			// perspective2.
			high.complete(t, at(time.Second),
				ports.Completion{StreamID: drained, Perspective: perspective, LastEventID: events[0].ID, LastVersion: 1, WorkIDs: workIDs(ofPerspective(ofStream(work, drained), perspective))},
				ports.Completion{StreamID: drained, Perspective: perspective2, LastEventID: events[0].ID, LastVersion: 1, WorkIDs: workIDs(ofPerspective(ofStream(work, drained), perspective2))},
				ports.Completion{StreamID: busy, Perspective: perspective, LastEventID: busyEvents[0].ID, LastVersion: 1, WorkIDs: workIDs(ofPerspective(ofStream(work, busy), perspective))},
			)
			appendN(t, tb.backend, drained, at(2*time.Second), eventType, 1)
			appendN(t, tb.backend, busy, at(2*time.Second), eventType, 1)

			// high is live, but no longer holds the drained stream: with one
			// partition it is low's at once.
			require.Equal(t, []uuid.UUID{drained}, low.claimWith(t, ports.WorkClaimParams{PartitionCount: onePartition, Now: at(3 * time.Second)}).StreamIDs)
			requireNoWork(t, low.fetch(t, at(3*time.Second), busy))
			res := low.fetch(t, at(3*time.Second), drained)
			require.Equal(t, []int64{2, 2}, versionsOf(res.Work))
			require.Equal(t, []int{0, 0}, attemptsOf(res.Work))
		},
	})

	group(t, "WorkFail", map[string]func(t *testing.T){
		"CountsAnAttemptOnFailedRows": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			failV1 := func(now time.Time) {
				t.Helper()
				f.a.fail(t, now, ports.Failure{
					StreamID: f.stream, Perspective: perspective,
					FailedWorkIDs: workIDs(f.work[:1]), Error: "boom", RetryAt: now.Add(time.Second),
				})
			}

			failV1(at(time.Second))
			require.Equal(t, []uuid.UUID{f.stream}, f.a.claim(t, at(3*time.Second)))
			require.Equal(t, []int{1, 0}, attemptsOf(f.a.fetch(t, at(3*time.Second), f.stream).Work), "one failure; version 2 did not fail")
			failV1(at(4 * time.Second))
			require.Equal(t, []uuid.UUID{f.stream}, f.a.claim(t, at(6*time.Second)))
			require.Equal(t, []int{2, 0}, attemptsOf(f.a.fetch(t, at(6*time.Second), f.stream).Work), "each failure counts")
		},
		"AFailureBehindTheCursorLeavesItsStatus": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)
			// The failure of the second row, sent when the first was
			// applied, lands after the completion of all three (a retry
			// applied it meanwhile): the pair went on, and its cursor
			// says so.
			f.a.complete(t, at(time.Second), f.completion(3, 1, 2, 3))
			f.a.fail(t, at(2*time.Second), ports.Failure{
				StreamID: f.stream, Perspective: perspective,
				LastEventID: f.events[0].ID, LastVersion: 1,
				Error: "boom", RetryAt: at(3 * time.Second),
			})

			c := f.cursor(t)
			require.Equal(t, int64(3), c.LastVersion)
			require.Equal(t, ports.CursorCompleted, c.Status, "a failure behind the cursor does not mark it failed")
			require.Empty(t, c.Error)
		},
		"AFailureFromAnInstanceThatLostTheStreamLeavesItsStatus": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			b.heartbeat(t, at(0))
			work := a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: 10 * time.Second, Now: at(0)}).Work
			require.Len(t, work, 2)
			// a's apply of the first event hangs past its lease; b takes
			// the stream and applies both.
			a.heartbeat(t, at(15*time.Second))
			taken := b.fetch(t, at(20*time.Second), stream).Work
			require.Len(t, taken, 2)
			b.complete(t, at(21*time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[1].ID, LastVersion: 2, WorkIDs: workIDs(taken),
			})

			// a's failure of the pair's first event (nothing saved: no
			// position) lands last. It tells nothing of the pair now.
			a.fail(t, at(22*time.Second), ports.Failure{
				StreamID: stream, Perspective: perspective,
				FailedWorkIDs: workIDs(work[:1]), Attempt: 1, Error: "apply ran past its deadline", RetryAt: at(23 * time.Second),
			})

			c := mustCursor(t, tb.backend, stream, perspective)
			require.Equal(t, int64(2), c.LastVersion)
			require.Equal(t, ports.CursorCompleted, c.Status, "the pair went on under its new holder")
			require.Empty(t, c.Error)
		},
		"AResentFailureChargesOnce": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			failure := ports.Failure{
				StreamID: f.stream, Perspective: perspective,
				FailedWorkIDs: workIDs(f.work[:1]), Error: "boom", RetryAt: at(2 * time.Second),
			}

			// The first report took effect but its acknowledgement was
			// lost: the caller sends it again.
			f.a.fail(t, at(time.Second), failure)
			f.a.fail(t, at(time.Second+time.Millisecond), failure)

			require.Equal(t, []uuid.UUID{f.stream}, f.a.claim(t, at(3*time.Second)))
			require.Equal(t, []int{1, 0}, attemptsOf(f.a.fetch(t, at(3*time.Second), f.stream).Work),
				"one failed apply, one attempt: a row is charged only while handed out to the caller")
		},
		"AFailureResentAfterTheRowWasFetchedAgainChargesOnce": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			failure := ports.Failure{
				StreamID: f.stream, Perspective: perspective,
				FailedWorkIDs: workIDs(f.work[:1]), Attempt: 1, Error: "boom", RetryAt: at(2 * time.Second),
			}

			// The first report took effect but its acknowledgement was
			// lost; a fetch of the stream (for its other pairs, say) hands
			// the row out again once its retry time came, before the caller
			// sends the report again.
			f.a.fail(t, at(time.Second), failure)
			require.Equal(t, []int{1, 0}, attemptsOf(f.a.fetch(t, at(3*time.Second), f.stream).Work))
			f.a.fail(t, at(3*time.Second+time.Millisecond), failure)

			require.Equal(t, []int{1, 0}, attemptsOf(f.a.fetch(t, at(4*time.Second), f.stream).Work),
				"one failed apply, one attempt: the resent report names the attempt it charged")
		},
		"FailedEventAddsAttemptToItsPendingRow": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendEvents(t, tb.backend, stream, at(0), newEvent(eventType, 1), newEvent(eventType, 3)).Events
			a.heartbeat(t, at(0))
			a.complete(t, at(time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[1].ID, LastVersion: 3, WorkIDs: workIDs(a.fetch(t, at(0), stream).Work),
			})
			late := appendEvents(t, tb.backend, stream, at(2*time.Second), newEvent(eventType, 2)).Events[0]
			row := a.fetch(t, at(3*time.Second), stream).Work
			require.Equal(t, []int64{2}, versionsOf(row))
			b.heartbeat(t, at(3*time.Second))

			// A rewind replaying every event failed on the late one, which
			// has a pending row, held by a: the failure is charged to it.
			b.fail(t, at(4*time.Second), ports.Failure{
				StreamID: stream, Perspective: perspective,
				FailedEventID: late.ID, FailedEventVersion: 2, Error: "replay failed", RetryAt: at(time.Minute),
			})

			requireNoWork(t, a.fetch(t, at(5*time.Second), stream))
			a.heartbeat(t, at(61*time.Second))
			res := a.fetch(t, at(61*time.Second), stream)
			require.Equal(t, workIDs(row), workIDs(res.Work), "no second row for the event")
			require.Equal(t, []int{1}, attemptsOf(res.Work), "a failed row, whoever held it")
			require.Equal(t, []bool{false}, replayOf(res.Work), "the late event was never applied: its row is no replay")
			cur := mustCursor(t, tb.backend, stream, perspective)
			require.Equal(t, int64(3), cur.LastVersion)
			require.True(t, cur.Status.Has(ports.CursorFailed), "status %s", cur.Status)
			require.Equal(t, "replay failed", cur.Error)
			requireRewind(t, cur, late, at(4*time.Second), at(2*time.Second))
		},
		"FailedEventKeepsEarlierRewindTrigger": func(t *testing.T) {
			f := setupDrain(t, newBackend, 4)
			require.Equal(t, 1, f.a.complete(t, at(time.Second), f.completion(4, 2, 3, 4)).RewindsFlagged, "version 1 straggles")

			f.a.fail(t, at(2*time.Second), ports.Failure{
				StreamID: f.stream, Perspective: perspective,
				FailedEventID: f.events[2].ID, FailedEventVersion: 3, Error: "replay failed", RetryAt: at(time.Minute),
			})

			requireRewind(t, f.cursor(t), f.events[0], at(2*time.Second), at(time.Second))
			f.a.heartbeat(t, at(61*time.Second))
			res := f.a.fetch(t, at(61*time.Second), f.stream)
			require.Equal(t, []int64{1, 3}, versionsOf(res.Work))
			require.Equal(t, []int{0, 1}, attemptsOf(res.Work))
		},
		"FailedEventStoresRowWithoutOne": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 3)
			a.heartbeat(t, at(0))
			a.complete(t, at(time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[2].ID, LastVersion: 3, WorkIDs: workIDs(a.fetch(t, at(0), stream).Work),
			})
			requireNoRewind(t, mustCursor(t, tb.backend, stream, perspective))

			// A rewind replaying every event failed on version 2, applied long
			// ago: no pending row of the pair refers to it.
			a.fail(t, at(2*time.Second), ports.Failure{
				StreamID: stream, Perspective: perspective,
				FailedEventID: events[1].ID, FailedEventVersion: 2, Error: "replay failed", RetryAt: at(time.Minute),
			})

			cur := mustCursor(t, tb.backend, stream, perspective)
			require.Equal(t, int64(3), cur.LastVersion)
			require.True(t, cur.Status.Has(ports.CursorFailed), "status %s", cur.Status)
			requireRewind(t, cur, events[1], at(2*time.Second), at(2*time.Second))
			// The row holds the pair until its retry time, even an event
			// appended meanwhile.
			appendN(t, tb.backend, stream, at(3*time.Second), eventType, 1)
			requireNoWork(t, a.fetch(t, at(10*time.Second), stream))
			require.Empty(t, a.claim(t, at(10*time.Second)))

			// a is dead at(61s) and b, joining, abandons nobody: had a fetch
			// handed the row to a, b would take it over with a second
			// attempt.
			require.True(t, b.heartbeat(t, at(61*time.Second)).Rejoined)
			res := b.fetch(t, at(61*time.Second), stream)
			require.Equal(t, []int64{2, 4}, versionsOf(res.Work))
			require.Equal(t, events[1].ID, res.Work[0].EventID)
			require.Equal(t, []int{1, 0}, attemptsOf(res.Work), "the replay failure is charged to version 2")
			require.Equal(t, []bool{true, false}, lateOf(res.Work), "version 2 is below the cursor")
			require.Equal(t, []bool{true, false}, replayOf(res.Work),
				"the row stored for the failed replay says its event was applied; the appended one does not")
			require.Equal(t, []int64{2, 4}, []int64{res.Events[0].Version, res.Events[1].Version})
			dl, moved := b.moveWith(t, ports.DeadLetterMoveParams{WorkID: res.Work[0].WorkID, Now: at(62 * time.Second)})
			require.True(t, moved)
			require.Equal(t, "replay failed", dl.Error, "the row keeps the error")
		},
		"FailedEventBelowTheCursorMakesItsRowLate": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)
			// Every row is applied; their completions are on their way.
			require.NoError(t, f.tb.backend.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
				StreamID: f.stream, Perspective: perspective, Data: []byte(`{}`),
				LastEventID: f.events[2].ID, LastVersion: 3, Now: at(time.Second),
			}))

			f.a.fail(t, at(2*time.Second), ports.Failure{
				StreamID: f.stream, Perspective: perspective,
				FailedEventID: f.events[1].ID, FailedEventVersion: 2, Error: "replay failed", RetryAt: at(2 * time.Second),
			})

			requireRewind(t, f.cursor(t), f.events[1], at(2*time.Second), at(2*time.Second))
			work := f.a.fetch(t, at(3*time.Second), f.stream).Work
			require.Equal(t, []int64{1, 2, 3}, versionsOf(work))
			require.Equal(t, []int{0, 1, 0}, attemptsOf(work))
			require.Equal(t, []bool{false, true, false}, lateOf(work), "only the failed event's row is below a flagged cursor")
			require.Equal(t, []bool{false, false, false}, replayOf(work), "the failure was charged to the appended row, which stays as it was")
		},
		"MovingTheCursorPastPendingRowsMakesThemLate": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)

			f.a.fail(t, at(time.Second), ports.Failure{
				StreamID: f.stream, Perspective: perspective,
				LastEventID: f.events[2].ID, LastVersion: 3, AppliedWorkIDs: workIDs(f.work[2:]),
				Error: "boom", RetryAt: at(time.Second),
			})

			requireRewind(t, f.cursor(t), f.events[0], at(time.Second), at(time.Second))
			work := f.a.fetch(t, at(2*time.Second), f.stream).Work
			require.Equal(t, []int64{1, 2}, versionsOf(work))
			require.Equal(t, []bool{true, true}, lateOf(work))
		},
		"FencedToHolder": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			b := f.tb.instance(t)
			b.heartbeat(t, at(time.Second))

			b.fail(t, at(time.Second), ports.Failure{
				StreamID: f.stream, Perspective: perspective,
				AppliedWorkIDs: workIDs(f.work[:1]), FailedWorkIDs: workIDs(f.work[1:]),
				Error: "boom", RetryAt: at(time.Hour),
			})

			res := f.a.fetch(t, at(2*time.Second), f.stream)
			require.Equal(t, []int64{1, 2}, versionsOf(res.Work), "neither completed nor released")
			require.Equal(t, []int{0, 0}, attemptsOf(res.Work), "b's failure counts nothing against a's rows")
		},
		"FencedAfterTakeover": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			work := a.fetch(t, at(0), stream).Work
			require.Len(t, work, 2)
			b.heartbeat(t, at(20*time.Second))
			require.Equal(t, []int{1, 1}, attemptsOf(b.fetch(t, at(35*time.Second), stream).Work), "b took the stream of dead a")

			a.fail(t, at(36*time.Second), ports.Failure{
				StreamID: stream, Perspective: perspective,
				FailedWorkIDs: workIDs(work[:1]), Error: "boom", RetryAt: at(time.Hour),
			})

			res := b.fetch(t, at(37*time.Second), stream)
			require.Equal(t, []int64{1, 2}, versionsOf(res.Work), "version 1 is not scheduled: a's failure took no effect")
			require.Equal(t, []int{1, 1}, attemptsOf(res.Work), "a's failure counts nothing")
		},
		"AppliedRowsOfALostStreamAreNoStragglers": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 3)
			a.heartbeat(t, at(0))
			work := a.fetch(t, at(0), stream).Work
			require.Len(t, work, 3)
			b.heartbeat(t, at(20*time.Second))
			require.Len(t, b.fetch(t, at(35*time.Second), stream).Work, 3, "b took the stream of dead a")

			a.fail(t, at(36*time.Second), ports.Failure{
				StreamID: stream, Perspective: perspective, LastEventID: events[1].ID, LastVersion: 2,
				AppliedWorkIDs: workIDs(work[:2]), FailedWorkIDs: workIDs(work[2:]), Error: "boom", RetryAt: at(time.Hour),
			})

			require.False(t, mustCursor(t, tb.backend, stream, perspective).Status.Has(ports.CursorRewindRequired))
			res := b.fetch(t, at(37*time.Second), stream)
			require.Equal(t, []int64{1, 2, 3}, versionsOf(res.Work))
			require.Equal(t, []bool{false, false, false}, lateOf(res.Work), "the rows a applied are no stragglers")
		},
		"KeepsPositionWithoutLastVersion": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			f.a.complete(t, at(time.Second), f.completion(1, 1))

			f.a.fail(t, at(2*time.Second), ports.Failure{
				StreamID: f.stream, Perspective: perspective,
				FailedWorkIDs: workIDs(f.work[1:]), Error: "second failed", RetryAt: at(time.Minute),
			})

			cur := f.cursor(t)
			require.Equal(t, int64(1), cur.LastVersion)
			require.Equal(t, f.events[0].ID, cur.LastEventID)
			require.True(t, cur.Status.Has(ports.CursorFailed))
			require.Equal(t, "second failed", cur.Error)
		},
		"LowersTheHandedOutMark": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendEvents(t, tb.backend, stream, at(0), newEvent(eventType, 1), newEvent(eventType, 2), newEvent(eventType, 4)).Events
			a.heartbeat(t, at(0))
			work := a.fetch(t, at(0), stream).Work
			require.Equal(t, []int64{1, 2, 4}, versionsOf(work))

			// Version 1 applied, version 2 failed: a stops there, so version
			// 4 is no longer being applied.
			a.fail(t, at(time.Second), ports.Failure{
				StreamID: stream, Perspective: perspective, LastEventID: events[0].ID, LastVersion: 1,
				AppliedWorkIDs: workIDs(work[:1]), FailedWorkIDs: workIDs(work[1:2]), Error: "boom", RetryAt: at(time.Hour),
			})
			appendEvents(t, tb.backend, stream, at(2*time.Second), newEvent(eventType, 3))
			b.heartbeat(t, at(20*time.Second))
			require.Equal(t, []uuid.UUID{a.id}, b.heartbeat(t, at(31*time.Second)).Abandoned)

			res := b.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, Now: at(2 * time.Hour)})
			require.Equal(t, []int64{2, 3, 4}, versionsOf(res.Work))
			require.Equal(t, []int{1, 0, 0}, attemptsOf(res.Work), "the abandonment charged neither the failed row again nor the rows above it")
			require.Equal(t, []bool{false, false, false}, lateOf(res.Work), "version 3 arrived above every row still handed out")
		},
		"RecordsErrorAndSchedulesRetry": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)

			f.a.fail(t, at(time.Second), ports.Failure{
				StreamID: f.stream, Perspective: perspective,
				LastEventID: f.events[0].ID, LastVersion: 1,
				AppliedWorkIDs: workIDs(f.work[:1]), FailedWorkIDs: workIDs(f.work[1:2]),
				Error: "boom", RetryAt: at(time.Minute),
			})

			cur := f.cursor(t)
			require.Equal(t, int64(1), cur.LastVersion)
			require.Equal(t, f.events[0].ID, cur.LastEventID)
			require.True(t, cur.Status.Has(ports.CursorFailed), "status %s", cur.Status)
			require.Equal(t, "boom", cur.Error)
			requireTime(t, at(time.Second), cur.UpdatedAt, "UpdatedAt")
			requireNoWork(t, f.a.fetch(t, at(10*time.Second), f.stream))

			f.a.heartbeat(t, at(61*time.Second))
			require.Equal(t, []uuid.UUID{f.stream}, f.a.claim(t, at(61*time.Second)))
			res := f.a.fetch(t, at(61*time.Second), f.stream)
			require.Equal(t, []int64{2, 3}, versionsOf(res.Work), "version 1 completed")
			require.Equal(t, []int{1, 0}, attemptsOf(res.Work), "version 2 failed once, version 3 did not fail")
		},
	})
}
