package conformance

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// runFetcher verifies ports.EventFetcher.
func runFetcher(t *testing.T, newBackend NewBackendFunc) {
	t.Helper()

	group(t, "EventsFetchPending", map[string]func(t *testing.T){
		"BoundsRowsByMaxRows": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 5)
			a.heartbeat(t, at(0))

			res := a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, MaxRows: 2, Now: at(0)})
			require.Equal(t, []int64{1, 2}, versionsOf(res.Work))
			require.Equal(t, []uuid.UUID{events[0].ID, events[1].ID}, eventIDs(res.Events))

			// The rest stayed pending, under a's lease.
			all := a.fetch(t, at(time.Second), stream)
			require.Equal(t, []int64{1, 2, 3, 4, 5}, versionsOf(all.Work))
			require.Equal(t, []int{0, 0, 0, 0, 0}, attemptsOf(all.Work))
		},
		"EndsPrefixAtScheduledRow": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 3)
			a.heartbeat(t, at(0))
			work := a.fetch(t, at(0), stream).Work
			require.Len(t, work, 3)
			a.fail(t, at(time.Second), ports.Failure{
				StreamID: stream, Perspective: perspective,
				FailedWorkIDs: workIDs(work[1:2]), Error: "boom", RetryAt: at(time.Hour),
			})

			res := a.fetch(t, at(2*time.Second), stream)
			require.Equal(t, []int64{1}, versionsOf(res.Work), "version 3 is a's but waits behind version 2")
			require.Equal(t, []uuid.UUID{events[0].ID}, eventIDs(res.Events))

			a.complete(t, at(3*time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[0].ID, LastVersion: 1, WorkIDs: workIDs(work[:1]),
			})
			requireNoWork(t, a.fetch(t, at(4*time.Second), stream))
		},
		"ExtendsOwnLeaseWithoutAttempt": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 1)
			a.heartbeat(t, at(0))
			b.heartbeat(t, at(0))
			fetch := func(in *instance, now time.Time) []ports.WorkItem {
				t.Helper()
				return in.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: 20 * time.Second, Now: now}).Work
			}

			require.Equal(t, []int{0}, attemptsOf(fetch(a, at(0))))
			require.Equal(t, []int{0}, attemptsOf(fetch(a, at(15*time.Second))), "extending a live lease is no attempt")

			// a stays live; the first lease ended at(20s), the extended one
			// ends at(35s).
			a.heartbeat(t, at(20*time.Second))
			b.heartbeat(t, at(20*time.Second))
			require.Empty(t, fetch(b, at(22*time.Second)))
			require.Equal(t, []int{0}, attemptsOf(fetch(b, at(36*time.Second))), "b took the expired lease of live a: no takeover")
		},
		"ExtendsOwnLeaseOnlyPastHalf": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			streams := newIDs(t, 2)
			appendN(t, tb.backend, streams[0], at(0), eventType, 1)
			appendN(t, tb.backend, streams[1], at(0), eventType, 1)
			a.heartbeat(t, at(0))
			fetch := func(in *instance, now time.Time, stream uuid.UUID) []ports.WorkItem {
				t.Helper()
				return in.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: 28 * time.Second, Now: now}).Work
			}
			require.Len(t, fetch(a, at(0), streams[0]), 1)
			require.Len(t, fetch(a, at(0), streams[1]), 1)

			// With more than half of the lease left a fetch returns the rows
			// and leaves the lease as it is (ends at(28s)); with less than
			// half left it extends it (ends at(48s)).
			require.Equal(t, []int{0}, attemptsOf(fetch(a, at(13*time.Second), streams[0])))
			require.Equal(t, []int{0}, attemptsOf(fetch(a, at(20*time.Second), streams[1])))

			// a stays live.
			a.heartbeat(t, at(25*time.Second))
			b.heartbeat(t, at(25*time.Second))
			require.Equal(t, []int{0}, attemptsOf(fetch(b, at(31*time.Second), streams[0])), "the lease was not extended at(13s)")
			require.Empty(t, fetch(b, at(31*time.Second), streams[1]), "the lease was extended at(20s)")
		},
		"IgnoresUnknownStreams": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			a.heartbeat(t, at(0))

			requireNoWork(t, a.fetch(t, at(0), newID(t)))
		},
		"LateStaysSetUntilTheRowCompletes": func(t *testing.T) {
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
			row := a.fetch(t, at(3*time.Second), stream).Work
			require.Equal(t, []bool{true}, lateOf(row))

			a.fail(t, at(4*time.Second), ports.Failure{
				StreamID: stream, Perspective: perspective,
				FailedWorkIDs: workIDs(row), Error: "boom", RetryAt: at(5 * time.Second),
			})
			again := a.fetch(t, at(6*time.Second), stream).Work
			require.Equal(t, workIDs(row), workIDs(again))
			require.Equal(t, []int{1}, attemptsOf(again))
			require.Equal(t, []bool{true}, lateOf(again), "a failure does not make the event applied")

			require.Equal(t, 1, a.complete(t, at(7*time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[1].ID, LastVersion: 3, WorkIDs: workIDs(again),
			}).Completed)
			requireNoWork(t, a.fetch(t, at(8*time.Second), stream))
		},
		"LeasesWithoutClaim": func(t *testing.T) {
			tb := setup(t, newBackend)
			low, high := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 2)
			high.heartbeat(t, at(0))
			low.heartbeat(t, at(0))

			res := high.fetch(t, at(0), stream)
			require.Equal(t, []int64{1, 2}, versionsOf(res.Work))
			require.Equal(t, []int{0, 0}, attemptsOf(res.Work))

			// With one partition the stream would be low's, had high's fetch
			// not leased it.
			require.Empty(t, low.claimWith(t, ports.WorkClaimParams{PartitionCount: onePartition, Now: at(time.Second)}).StreamIDs)
			requireNoWork(t, low.fetch(t, at(time.Second), stream))
			require.Equal(t, []uuid.UUID{stream}, high.claim(t, at(2*time.Second)), "the stream high holds, whatever its partition")
			require.Equal(t, []int64{1, 2}, versionsOf(high.fetch(t, at(2*time.Second), stream).Work))
		},
		"OrdersWorkAndEvents": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			streams := newIDs(t, 2)
			first := appendN(t, tb.backend, streams[0], at(0), eventType, 2)
			second := appendN(t, tb.backend, streams[1], at(0), eventType, 2)
			a.heartbeat(t, at(0))

			res := a.fetch(t, at(0), streams[1], streams[0], streams[1])

			type key struct {
				stream      uuid.UUID
				perspective string
				version     int64
			}
			var got []key
			for _, w := range res.Work {
				got = append(got, key{w.StreamID, w.Perspective, w.EventVersion})
			}
			require.Equal(t, []key{
				{streams[0], perspective, 1}, {streams[0], perspective, 2},
				{streams[0], perspective2, 1}, {streams[0], perspective2, 2},
				{streams[1], perspective, 1}, {streams[1], perspective, 2},
				{streams[1], perspective2, 1}, {streams[1], perspective2, 2},
			}, got)
			byVersion := map[uuid.UUID][]ports.Event{streams[0]: first, streams[1]: second}
			for _, w := range res.Work {
				require.Equal(t, byVersion[w.StreamID][w.EventVersion-1].ID, w.EventID)
				require.NotEqual(t, uuid.Nil, w.WorkID)
			}
			want := append(append([]ports.Event{}, first...), second...)
			require.Len(t, res.Events, len(want), "each event once")
			for i := range want {
				requireEvent(t, want[i], res.Events[i])
			}
		},
		"ReleasesHeldStreamWithoutPendingRows": func(t *testing.T) {
			tb := setup(t, newBackend)
			low, high := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 1)
			high.heartbeat(t, at(0))
			low.heartbeat(t, at(0))
			work := high.fetch(t, at(0), stream).Work
			require.Len(t, work, 1)
			_, moved := high.deadLetter(t, at(time.Second), work[0].WorkID)
			require.True(t, moved)

			// Whatever the move did with the lease, a fetch of a stream the
			// caller holds and that has nothing pending leaves it free.
			requireNoWork(t, high.fetch(t, at(2*time.Second), stream))
			appendN(t, tb.backend, stream, at(3*time.Second), eventType, 1)
			require.Equal(t, []uuid.UUID{stream}, low.claimWith(t, ports.WorkClaimParams{PartitionCount: onePartition, Now: at(4 * time.Second)}).StreamIDs,
				"with one partition a stream nobody holds is low's")
		},
		"RetakesOwnExpiredLeaseWithoutAttempt": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 1)
			a.heartbeat(t, at(0))
			fetch := func(now time.Time) []ports.WorkItem {
				t.Helper()
				return a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: 10 * time.Second, Now: now}).Work
			}

			require.Equal(t, []int{0}, attemptsOf(fetch(at(0))), "an unleased stream is no attempt")
			a.heartbeat(t, at(20*time.Second))
			require.Equal(t, []int{0}, attemptsOf(fetch(at(20*time.Second))), "a slow instance re-leasing its own stream is no attempt")
		},
		"TakesStreamOfDeadHolderWithAttemptOnHandedOutRows": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			expired, live := newID(t), newID(t)
			appendN(t, tb.backend, expired, at(0), eventType, 2)
			appendN(t, tb.backend, live, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			require.Equal(t, []int{0, 0, 0, 0}, attemptsOf(a.fetchWith(t, ports.EventsFetchPendingParams{
				StreamIDs: []uuid.UUID{expired}, LeaseDuration: 10 * time.Second, Now: at(0),
			}).Work))
			// The second fetch is cut after the first row of perspective2,
			// and a version arrives after it: neither was handed out.
			res := a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{live}, MaxRows: 3, Now: at(0)})
			require.Len(t, res.Work, 3)
			appendN(t, tb.backend, live, at(time.Second), eventType, 1)
			b.heartbeat(t, at(20*time.Second))

			// a is dead from at(30s); one lease expired at(10s), the other
			// runs until at(5m).
			res = b.fetch(t, at(31*time.Second), expired, live)

			require.Equal(t, []int{1, 1, 1, 1}, attemptsOf(ofStream(res.Work, expired)), "each row handed out to dead a counts one takeover")
			got := ofStream(res.Work, live)
			require.Equal(t, []int64{1, 2, 3}, versionsOf(ofPerspective(got, perspective)))
			require.Equal(t, []int{1, 1, 0}, attemptsOf(ofPerspective(got, perspective)), "version 3 arrived after the fetch")
			require.Equal(t, []int64{1, 2, 3}, versionsOf(ofPerspective(got, perspective2)))
			require.Equal(t, []int{1, 0, 0}, attemptsOf(ofPerspective(got, perspective2)), "the fetch was cut after version 1")
			require.Equal(t, attemptsOf(res.Work), attemptsOf(b.fetch(t, at(32*time.Second), expired, live).Work), "b's own lease counts nothing more")
		},
		"TakesExpiredLeaseOfLiveHolderWithoutAttempt": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			b.heartbeat(t, at(0))
			require.Len(t, a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: 10 * time.Second, Now: at(0)}).Work, 4)

			requireNoWork(t, b.fetch(t, at(5*time.Second), stream))
			a.heartbeat(t, at(15*time.Second))
			res := b.fetch(t, at(20*time.Second), stream)

			require.Len(t, res.Work, 4)
			require.Equal(t, []int{0, 0, 0, 0}, attemptsOf(res.Work), "a lives: its expired lease is taken without charge")
			requireNoWork(t, a.fetch(t, at(21*time.Second), stream))
		},
		"ReturnsCursorsOfWorkPairs": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			stream, other := newID(t), newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 3)
			a.heartbeat(t, at(0))
			work := a.fetch(t, at(0), stream).Work
			// Version 2 completes before version 1: a straggler flags the
			// cursor, which stays at version 2.
			a.complete(t, at(time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[1].ID, LastVersion: 2, WorkIDs: workIDs(ofPerspective(work, perspective)[1:2]),
			})
			// Cursors of a pair with no work and of a stream not fetched.
			for _, k := range []ports.Pair{{StreamID: stream, Perspective: "billing"}, {StreamID: other, Perspective: perspective}} {
				require.NoError(t, tb.backend.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
					StreamID: k.StreamID, Perspective: k.Perspective, Data: []byte(`{}`),
					LastEventID: newID(t), LastVersion: 1, Now: at(time.Second),
				}))
			}

			res := a.fetch(t, at(2*time.Second), stream)

			require.Equal(t, []int64{1, 3}, versionsOf(ofPerspective(res.Work, perspective)))
			require.Equal(t, []int64{1, 2, 3}, versionsOf(ofPerspective(res.Work, perspective2)))
			cur := mustCursor(t, tb.backend, stream, perspective)
			require.Equal(t, []ports.Cursor{cur}, res.Cursors, "only the pairs of Work, and only those with a cursor")
			require.Equal(t, int64(2), res.Cursors[0].LastVersion, "the position the stored model is at")
			requireRewind(t, res.Cursors[0], events[0], at(time.Second), at(time.Second))
		},
		"ReturnsTheEpochOfCursors": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			require.Len(t, a.fetch(t, at(0), stream).Work, 2)
			// The first event is saved, then the pair replayed twice.
			save := modelParams(stream, perspective, 0, events[0].ID, 1, `{"n":1}`)
			require.NoError(t, tb.backend.Models.ModelSave(t.Context(), save))
			for epoch := range int64(2) {
				save = withEpoch(modelParams(stream, perspective, 1, events[0].ID, 1, `{"n":1}`), epoch, true)
				require.NoError(t, tb.backend.Models.ModelSave(t.Context(), save))
			}

			res := a.fetch(t, at(time.Second), stream)

			require.Len(t, res.Cursors, 1)
			require.Equal(t, int64(1), res.Cursors[0].LastVersion)
			require.Equal(t, int64(2), res.Cursors[0].Epoch, "a drain tells a model cached before a replay by its epoch")
		},
		"ReturnsNoCursorOfPairsWithoutWork": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 1)
			a.heartbeat(t, at(0))
			work := a.fetch(t, at(0), stream).Work
			a.fail(t, at(time.Second), ports.Failure{
				StreamID: stream, Perspective: perspective,
				FailedWorkIDs: workIDs(ofPerspective(work, perspective)), Error: "boom", RetryAt: at(time.Hour),
			})
			require.True(t, mustCursor(t, tb.backend, stream, perspective).Status.Has(ports.CursorFailed))

			res := a.fetch(t, at(2*time.Second), stream)

			require.Equal(t, ofPerspective(work, perspective2), res.Work, "the failed pair waits for its retry")
			require.Empty(t, res.Cursors, "the failed pair has no work in the result; the other pair has no cursor")
		},
		"ReturnsPrefixPerPerspective": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			work := a.fetch(t, at(0), stream).Work
			require.Len(t, work, 4)
			a.fail(t, at(time.Second), ports.Failure{
				StreamID: stream, Perspective: perspective,
				FailedWorkIDs: workIDs(ofPerspective(work, perspective)[:1]), Error: "boom", RetryAt: at(time.Hour),
			})

			res := a.fetch(t, at(2*time.Second), stream)

			require.Equal(t, ofPerspective(work, perspective2), res.Work, "a poison event parks only its own perspective")
			require.Len(t, res.Events, 2)
		},
		"SkipsStreamsUnderAnothersLiveLease": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 1)
			a.heartbeat(t, at(0))
			require.Equal(t, []uuid.UUID{stream}, a.claim(t, at(0)))
			b.heartbeat(t, at(time.Second))

			requireNoWork(t, b.fetch(t, at(2*time.Second), stream))
			require.Equal(t, []int64{1}, versionsOf(a.fetch(t, at(3*time.Second), stream).Work), "b changed nothing")
		},
	})

	group(t, "EventsReadStream", map[string]func(t *testing.T){
		"AppliesAfterVersionAndLimit": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 5)
			read := func(after int64, limit int) []uuid.UUID {
				t.Helper()
				got, err := tb.backend.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream, AfterVersion: after, Limit: limit})
				require.NoError(t, err)
				return eventIDs(got)
			}

			require.Equal(t, eventIDs(events), read(0, 0))
			require.Equal(t, eventIDs(events[2:]), read(2, 0))
			require.Equal(t, eventIDs(events[2:4]), read(2, 2))
			require.Empty(t, read(5, 0))
		},
		"ReturnsVersionOrder": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			appendEvents(t, tb.backend, stream, at(0), newEvent(eventType, 4))
			appendEvents(t, tb.backend, stream, at(time.Second), newEvent(eventType, 2), newEvent(eventType, 0))
			appendEvents(t, tb.backend, stream, at(2*time.Second), newEvent(eventType, 1))

			got, err := tb.backend.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream})

			require.NoError(t, err)
			var versions []int64
			for _, e := range got {
				versions = append(versions, e.Version)
			}
			require.Equal(t, []int64{1, 2, 4, 5}, versions)
		},
		"UnknownStreamIsEmpty": func(t *testing.T) {
			tb := setup(t, newBackend)

			got, err := tb.backend.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: newID(t)})

			require.NoError(t, err)
			require.Empty(t, got)
		},
	})
}

// eventIDs returns the ids of events.
func eventIDs(events []ports.Event) []uuid.UUID {
	out := make([]uuid.UUID, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}

// requireEvent fails t unless got is want as stored: JSON payloads compare
// by value, since backends may normalize their encoding.
func requireEvent(t *testing.T, want, got ports.Event) {
	t.Helper()
	require.Equal(t, want.ID, got.ID)
	require.Equal(t, want.StreamID, got.StreamID)
	require.Equal(t, want.Type, got.Type)
	require.Equal(t, want.Version, got.Version)
	require.JSONEq(t, string(want.Data), string(got.Data))
	require.Equal(t, want.Metadata, got.Metadata)
	requireTime(t, want.CreatedAt, got.CreatedAt, "CreatedAt")
}
