package conformance

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// runDeadLetters verifies ports.DeadLetterStore.
func runDeadLetters(t *testing.T, newBackend NewBackendFunc) {
	t.Helper()

	group(t, "DeadLetterMove", map[string]func(t *testing.T){
		"IdempotentWhenRowGone": func(t *testing.T) {
			f := setupDrain(t, newBackend, 1)
			_, moved := f.a.deadLetter(t, at(time.Second), f.work[0].WorkID)
			require.True(t, moved)

			dl, moved := f.a.deadLetter(t, at(2*time.Second), f.work[0].WorkID)

			require.False(t, moved)
			require.Equal(t, ports.DeadLetter{}, dl)
			require.Len(t, listDeadLetters(t, f.tb.backend, ports.DeadLettersListParams{}), 1)
		},
		"MovesRowAtomically": func(t *testing.T) {
			f := setupDrain(t, newBackend, 1)

			dl, moved := f.a.deadLetter(t, at(time.Second), f.work[0].WorkID)

			require.True(t, moved)
			require.NotEqual(t, uuid.Nil, dl.ID)
			requireTime(t, at(time.Second), dl.DeadLetteredAt, "DeadLetteredAt")
			dl.DeadLetteredAt = time.Time{}
			require.Equal(t, ports.DeadLetter{
				ID:           dl.ID,
				WorkID:       f.work[0].WorkID,
				StreamID:     f.stream,
				Perspective:  perspective,
				EventID:      f.events[0].ID,
				EventVersion: 1,
				Attempts:     0,
				Reason:       ports.ReasonMaxAttemptsExceeded,
				Error:        "boom",
				InstanceID:   f.a.id,
			}, dl)
			requireNoWork(t, f.a.fetch(t, at(2*time.Second), f.stream))
			listed := listDeadLetters(t, f.tb.backend, ports.DeadLettersListParams{})
			require.Len(t, listed, 1)
			require.Equal(t, dl.ID, listed[0].ID)
			require.Equal(t, f.work[0].WorkID, listed[0].WorkID)
		},
		"UnblocksLaterRows": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			f.a.fail(t, at(time.Second), ports.Failure{
				StreamID: f.stream, Perspective: perspective,
				FailedWorkIDs: workIDs(f.work[:1]), Error: "poison", RetryAt: at(time.Hour),
			})
			requireNoWork(t, f.a.fetch(t, at(2*time.Second), f.stream))

			_, moved := f.a.deadLetter(t, at(3*time.Second), f.work[0].WorkID)

			require.True(t, moved)
			require.Equal(t, []int64{2}, versionsOf(f.a.fetch(t, at(4*time.Second), f.stream).Work))
		},
	})

	group(t, "DeadLetterRequeue", map[string]func(t *testing.T){
		"FlagsRewindWhenCursorPast": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			dl, moved := f.a.deadLetter(t, at(time.Second), f.work[0].WorkID)
			require.True(t, moved)
			require.Zero(t, f.a.complete(t, at(2*time.Second), f.completion(2, 2)).RewindsFlagged)
			requireNoRewind(t, f.cursor(t))

			requeue(t, f.tb.backend, dl.ID, at(3*time.Second))

			requireRewind(t, f.cursor(t), f.events[0], at(3*time.Second), at(3*time.Second))
		},
		"NotFoundForUnknownID": func(t *testing.T) {
			tb := setup(t, newBackend)

			err := tb.backend.DeadLetters.DeadLetterRequeue(t.Context(), &ports.DeadLetterRequeueParams{ID: newID(t), Now: at(0)})

			require.ErrorIs(t, err, ports.ErrNotFound)
		},
		"RestoresPendingRow": func(t *testing.T) {
			f := setupDrain(t, newBackend, 1)
			dl, moved := f.a.deadLetter(t, at(time.Second), f.work[0].WorkID)
			require.True(t, moved)

			requeue(t, f.tb.backend, dl.ID, at(2*time.Second))

			require.Empty(t, listDeadLetters(t, f.tb.backend, ports.DeadLettersListParams{}))
			err := f.tb.backend.DeadLetters.DeadLetterRequeue(t.Context(), &ports.DeadLetterRequeueParams{ID: dl.ID, Now: at(3 * time.Second)})
			require.ErrorIs(t, err, ports.ErrNotFound, "a dead letter is requeued once")
			require.Equal(t, []uuid.UUID{f.stream}, f.a.claim(t, at(3*time.Second)))
			work := f.a.fetch(t, at(3*time.Second), f.stream).Work
			require.Len(t, work, 1)
			require.Equal(t, f.events[0].ID, work[0].EventID)
			require.Equal(t, perspective, work[0].Perspective)
			require.Equal(t, int64(1), work[0].EventVersion)
			require.Zero(t, work[0].Attempts, "attempts restart from zero")
		},
	})

	group(t, "DeadLettersList", map[string]func(t *testing.T){
		"FiltersAndOrdersOldestFirst": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			streams := newIDs(t, 2)
			for _, s := range streams {
				appendN(t, tb.backend, s, at(0), eventType, 1)
			}
			a.heartbeat(t, at(0))
			work := a.fetch(t, at(0), streams...).Work
			require.Len(t, work, 4)
			row := func(stream uuid.UUID, name string) uuid.UUID {
				for _, w := range work {
					if w.StreamID == stream && w.Perspective == name {
						return w.WorkID
					}
				}
				require.FailNow(t, "no such row")
				return uuid.Nil
			}
			s1p1, s1p2, s2p1 := row(streams[0], perspective), row(streams[0], perspective2), row(streams[1], perspective)
			for i, id := range []uuid.UUID{s2p1, s1p2, s1p1} { // recorded newest first
				_, moved := a.deadLetter(t, at(time.Duration(3-i)*time.Second), id)
				require.True(t, moved)
			}
			list := func(p ports.DeadLettersListParams) []uuid.UUID {
				t.Helper()
				var ids []uuid.UUID
				for _, dl := range listDeadLetters(t, tb.backend, p) {
					ids = append(ids, dl.WorkID)
				}
				return ids
			}

			require.Equal(t, []uuid.UUID{s1p1, s1p2, s2p1}, list(ports.DeadLettersListParams{}))
			require.Equal(t, []uuid.UUID{s1p1, s2p1}, list(ports.DeadLettersListParams{Perspective: perspective}))
			require.Equal(t, []uuid.UUID{s1p1, s1p2}, list(ports.DeadLettersListParams{StreamID: streams[0]}))
			require.Equal(t, []uuid.UUID{s1p1}, list(ports.DeadLettersListParams{Perspective: perspective, StreamID: streams[0]}))
			require.Equal(t, []uuid.UUID{s1p1, s1p2}, list(ports.DeadLettersListParams{Limit: 2}))
		},
	})
}

// listDeadLetters lists dead letters filtered by p.
func listDeadLetters(t *testing.T, b ports.Backend, p ports.DeadLettersListParams) []ports.DeadLetter {
	t.Helper()
	dls, err := b.DeadLetters.DeadLettersList(t.Context(), &p)
	require.NoError(t, err)
	return dls
}

// requeue requeues the dead letter id at now.
func requeue(t *testing.T, b ports.Backend, id uuid.UUID, now time.Time) {
	t.Helper()
	require.NoError(t, b.DeadLetters.DeadLetterRequeue(t.Context(), &ports.DeadLetterRequeueParams{ID: id, Now: now}))
}
