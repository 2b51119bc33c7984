package conformance

import (
	"bytes"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// Deploy generations of the dead-letter cases.
const (
	gen1 = "g1"
	gen2 = "g2"
	gen3 = "g3"
)

// runDeadLetters verifies ports.DeadLetterStore.
func runDeadLetters(t *testing.T, newBackend NewBackendFunc, admin bool) {
	t.Helper()

	group(t, "DeadLetterMove", map[string]func(t *testing.T){
		"AttemptsAreTheLargerOfRowAndParams": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			for _, now := range []time.Time{at(time.Second), at(3 * time.Second)} {
				f.a.fail(t, now, ports.Failure{
					StreamID: f.stream, Perspective: perspective,
					FailedWorkIDs: workIDs(f.work[:1]), Error: "boom", RetryAt: now.Add(time.Second),
				})
				f.a.fetch(t, now.Add(time.Second), f.stream)
			}

			failed, moved := f.a.moveWith(t, ports.DeadLetterMoveParams{WorkID: f.work[0].WorkID, Attempts: 1, Now: at(5 * time.Second)})
			require.True(t, moved)
			fresh, moved := f.a.moveWith(t, ports.DeadLetterMoveParams{WorkID: f.work[1].WorkID, Attempts: 3, Now: at(5 * time.Second)})
			require.True(t, moved)

			require.Equal(t, 2, failed.Attempts, "the row recorded two failures")
			require.Equal(t, 3, fresh.Attempts, "the engine counts the apply that just failed")
		},
		"EmptyErrorKeepsRowError": func(t *testing.T) {
			f := setupDrain(t, newBackend, 1)
			f.a.fail(t, at(time.Second), ports.Failure{
				StreamID: f.stream, Perspective: perspective,
				FailedWorkIDs: workIDs(f.work), Error: "apply failed", RetryAt: at(time.Second),
			})

			dl, moved := f.a.moveWith(t, ports.DeadLetterMoveParams{WorkID: f.work[0].WorkID, Reason: ports.ReasonTimedOut, Now: at(2 * time.Second)})

			require.True(t, moved)
			require.Equal(t, "apply failed", dl.Error, "the error the row recorded")
			require.Equal(t, ports.ReasonTimedOut, dl.Reason)
		},
		"FencedToHolder": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			b := f.tb.instance(t)
			b.heartbeat(t, at(time.Second))

			_, err := b.tryMove(t, ports.DeadLetterMoveParams{WorkID: f.work[0].WorkID, Reason: ports.ReasonFailed, Now: at(time.Second)})

			require.ErrorIs(t, err, ports.ErrLeaseLost, "a holds the stream")
			require.Empty(t, listDeadLetters(t, f.tb.backend, ports.DeadLettersListParams{}), "nothing recorded")
			require.Equal(t, workIDs(f.work), workIDs(f.a.fetch(t, at(2*time.Second), f.stream).Work), "the rows are still a's")
		},
		"FencedAfterTakeover": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			work := a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: 40 * time.Second, Now: at(0)}).Work
			require.Len(t, work, 2)
			b.heartbeat(t, at(20*time.Second))
			require.Equal(t, []int{1, 1}, attemptsOf(b.fetch(t, at(45*time.Second), stream).Work), "b took the stream of dead a")

			_, err := a.tryMove(t, ports.DeadLetterMoveParams{WorkID: work[0].WorkID, Reason: ports.ReasonMaxAttemptsExceeded, Now: at(46 * time.Second)})

			require.ErrorIs(t, err, ports.ErrLeaseLost, "b may have applied the row already")
			require.Empty(t, listDeadLetters(t, tb.backend, ports.DeadLettersListParams{}), "nothing recorded")
			res := b.fetch(t, at(47*time.Second), stream)
			require.Equal(t, workIDs(work), workIDs(res.Work), "the rows are still b's")
			require.Equal(t, []int{1, 1}, attemptsOf(res.Work), "a's move counts nothing")
		},
		"FencedAfterExpiredLeaseTaken": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 1)
			a.heartbeat(t, at(0))
			b.heartbeat(t, at(0))
			work := a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: 10 * time.Second, Now: at(0)}).Work
			require.Len(t, work, 1)
			a.heartbeat(t, at(15*time.Second))
			b.heartbeat(t, at(15*time.Second))
			require.Equal(t, workIDs(work), workIDs(b.fetch(t, at(20*time.Second), stream).Work), "b took the expired lease of live a")

			_, err := a.tryMove(t, ports.DeadLetterMoveParams{WorkID: work[0].WorkID, Reason: ports.ReasonTimedOut, Now: at(21 * time.Second)})

			require.ErrorIs(t, err, ports.ErrLeaseLost)
			require.Empty(t, listDeadLetters(t, tb.backend, ports.DeadLettersListParams{}), "nothing recorded")
			require.Equal(t, workIDs(work), workIDs(b.fetch(t, at(22*time.Second), stream).Work), "the row is still b's")
		},
		"FencedAfterRelease": func(t *testing.T) {
			f := setupDrain(t, newBackend, 1)
			require.NoError(t, f.a.b.Claimer.InstanceDeregister(t.Context(), &ports.InstanceDeregisterParams{InstanceID: f.a.id}))

			_, err := f.a.tryMove(t, ports.DeadLetterMoveParams{WorkID: f.work[0].WorkID, Reason: ports.ReasonFailed, Now: at(time.Second)})

			require.ErrorIs(t, err, ports.ErrLeaseLost, "a released the stream")
			require.Empty(t, listDeadLetters(t, f.tb.backend, ports.DeadLettersListParams{}), "nothing recorded")
			b := f.tb.instance(t)
			b.heartbeat(t, at(2*time.Second))
			require.Equal(t, workIDs(f.work), workIDs(b.fetch(t, at(2*time.Second), f.stream).Work), "the row is still pending")
		},
		"MovesUnderOwnExpiredLease": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			work := a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: 10 * time.Second, Now: at(0)}).Work
			require.Len(t, work, 2)

			dl, moved := a.moveWith(t, ports.DeadLetterMoveParams{WorkID: work[0].WorkID, Reason: ports.ReasonFailed, Now: at(time.Minute)})

			require.True(t, moved, "a's lease expired and a is no longer live, but nobody took the stream")
			require.Equal(t, work[0].WorkID, dl.WorkID)
			require.Equal(t, a.id, dl.InstanceID)
			a.heartbeat(t, at(2*time.Minute))
			require.Equal(t, []int64{2}, versionsOf(a.fetch(t, at(2*time.Minute), stream).Work))
		},
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

			dl, moved := f.a.moveWith(t, ports.DeadLetterMoveParams{
				WorkID: f.work[0].WorkID, Generation: gen1, Reason: ports.ReasonFailed, Error: "boom", Attempts: 3, Now: at(time.Second),
			})

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
				Attempts:     3,
				Reason:       ports.ReasonFailed,
				Error:        "boom",
				InstanceID:   f.a.id,
				Generation:   gen1,
				Status:       ports.DeadLetterDead,
			}, dl)
			requireNoWork(t, f.a.fetch(t, at(2*time.Second), f.stream))
			listed := listDeadLetters(t, f.tb.backend, ports.DeadLettersListParams{})
			require.Len(t, listed, 1)
			require.Equal(t, dl.ID, listed[0].ID)
			require.Equal(t, f.work[0].WorkID, listed[0].WorkID)
			require.Equal(t, ports.DeadLetterDead, listed[0].Status)
		},
		"RequeuedRowUpdatesItsDeadLetter": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 1)
			first := f.dead[0]
			requeue(t, f.tb.backend, first.ID, gen2, at(2*time.Second))
			b := f.tb.instance(t)
			b.heartbeat(t, at(3*time.Second))
			require.Len(t, b.fetch(t, at(3*time.Second), f.stream).Work, 1, "b takes the stream, released when its last row was moved")

			again, moved := b.moveWith(t, ports.DeadLetterMoveParams{
				WorkID: first.WorkID, Generation: gen2, Reason: ports.ReasonUndecodable, Error: "again", Attempts: 2, Now: at(4 * time.Second),
			})

			require.True(t, moved)
			require.Equal(t, first.ID, again.ID, "the same dead letter, not a second one")
			require.Equal(t, first.WorkID, again.WorkID)
			require.Equal(t, ports.DeadLetterDead, again.Status)
			require.Equal(t, ports.ReasonUndecodable, again.Reason)
			require.Equal(t, "again", again.Error)
			require.Equal(t, 2, again.Attempts)
			require.Equal(t, b.id, again.InstanceID)
			require.Equal(t, gen2, again.Generation)
			requireTime(t, at(4*time.Second), again.DeadLetteredAt, "DeadLetteredAt")
			require.Equal(t, 1, again.Requeues)
			require.Equal(t, gen2, again.RequeueGeneration, "failed again on the generation it was requeued on")
			requireTime(t, at(2*time.Second), again.RequeuedAt, "RequeuedAt")
			require.True(t, again.ResolvedAt.IsZero())
			require.Equal(t, []ports.DeadLetter{again}, listDeadLetters(t, f.tb.backend, ports.DeadLettersListParams{}))
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

	optionalGroup(t, "DeadLetterRequeue", "Admin", admin, map[string]func(t *testing.T){
		"ConflictForRequeuedOrRecovered": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 1)
			id := f.dead[0].ID
			requeue(t, f.tb.backend, id, gen1, at(2*time.Second))

			err := f.tb.backend.Admin.DeadLetterRequeue(t.Context(), &ports.DeadLetterRequeueParams{ID: id, Now: at(3 * time.Second)})
			require.ErrorIs(t, err, ports.ErrVersionConflict, "its row is pending already")

			f.recoverAll(t, at(4*time.Second))
			err = f.tb.backend.Admin.DeadLetterRequeue(t.Context(), &ports.DeadLetterRequeueParams{ID: id, Now: at(5 * time.Second)})
			require.ErrorIs(t, err, ports.ErrVersionConflict, "its row was applied")
			require.Equal(t, 1, f.get(t, id).Requeues, "the refused requeues counted nothing")
		},
		"FlagsRewindWhenCursorPast": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			dl, moved := f.a.deadLetter(t, at(time.Second), f.work[0].WorkID)
			require.True(t, moved)
			require.Zero(t, f.a.complete(t, at(2*time.Second), f.completion(2, 2)).RewindsFlagged)
			requireNoRewind(t, f.cursor(t))

			requeue(t, f.tb.backend, dl.ID, "", at(3*time.Second))

			requireRewind(t, f.cursor(t), f.events[0], at(3*time.Second), at(3*time.Second))
		},
		"LateAtTheCursor": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			// The pair's position reached version 2, whose event was then
			// dead-lettered (a replay left it out and kept the position).
			f.a.complete(t, at(time.Second), f.completion(2, 1))
			dl, moved := f.a.deadLetter(t, at(2*time.Second), f.work[1].WorkID)
			require.True(t, moved)
			requireNoRewind(t, f.cursor(t))

			requeue(t, f.tb.backend, dl.ID, "", at(3*time.Second))

			work := f.a.fetch(t, at(4*time.Second), f.stream).Work
			require.Equal(t, []int64{2}, versionsOf(work))
			require.Equal(t, []bool{true}, lateOf(work), "the cursor stands at an event no model holds: only a rewind applies it")
			requireRewind(t, f.cursor(t), f.events[1], at(3*time.Second), at(3*time.Second))
		},
		"LateOnlyBelowTheCursor": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)
			first, moved := f.a.deadLetter(t, at(time.Second), f.work[0].WorkID)
			require.True(t, moved)
			third, moved := f.a.deadLetter(t, at(time.Second), f.work[2].WorkID)
			require.True(t, moved)
			f.a.complete(t, at(2*time.Second), f.completion(2, 2))

			requeue(t, f.tb.backend, first.ID, "", at(3*time.Second))
			requeue(t, f.tb.backend, third.ID, "", at(3*time.Second))

			work := f.a.fetch(t, at(4*time.Second), f.stream).Work
			require.Equal(t, []int64{1, 3}, versionsOf(work))
			require.Equal(t, []bool{true, false}, lateOf(work), "the cursor (at 2) is past version 1, not version 3")
		},
		"LateBelowTheHandedOutMark": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)
			dl, moved := f.a.deadLetter(t, at(time.Second), f.work[0].WorkID)
			require.True(t, moved)

			requeue(t, f.tb.backend, dl.ID, "", at(2*time.Second))

			work := f.a.fetch(t, at(3*time.Second), f.stream).Work
			require.Equal(t, []int64{1, 2, 3}, versionsOf(work))
			require.Equal(t, []bool{true, false, false}, lateOf(work), "versions 2 and 3 were handed to an apply")
			_, ok := cursorOf(t, f.tb.backend, f.stream, perspective)
			require.False(t, ok, "no cursor is flagged: none is past the event")
		},
		"NotFoundForUnknownID": func(t *testing.T) {
			tb := setup(t, newBackend)

			err := tb.backend.Admin.DeadLetterRequeue(t.Context(), &ports.DeadLetterRequeueParams{ID: newID(t), Now: at(0)})

			require.ErrorIs(t, err, ports.ErrNotFound)
		},
		"RequeuedReplayRowIsNoReplay": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)
			f.a.complete(t, at(time.Second), f.completion(3, 1, 2, 3))
			// A replay failed on version 2, applied long ago, and its row
			// was given up on: the replays after it leave the event out.
			f.a.fail(t, at(2*time.Second), ports.Failure{
				StreamID: f.stream, Perspective: perspective,
				FailedEventID: f.events[1].ID, FailedEventVersion: 2, Error: "replay failed", RetryAt: at(2 * time.Second),
			})
			work := f.a.fetch(t, at(3*time.Second), f.stream).Work
			require.Equal(t, []bool{true}, replayOf(work))
			dl, moved := f.a.deadLetter(t, at(4*time.Second), work[0].WorkID)
			require.True(t, moved)

			requeue(t, f.tb.backend, dl.ID, gen2, at(5*time.Second))

			f.a.heartbeat(t, at(6*time.Second))
			work = f.a.fetch(t, at(6*time.Second), f.stream).Work
			require.Equal(t, []uuid.UUID{dl.WorkID}, workIDs(work))
			require.Equal(t, []bool{true}, lateOf(work), "below the cursor")
			require.Equal(t, []bool{false}, replayOf(work), "the model no longer reflects the event: applying it is new")
		},
		"RequeuesIgnored": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 1)
			id := f.dead[0].ID
			ignore(t, f.tb.backend, id, at(2*time.Second))

			requeue(t, f.tb.backend, id, gen2, at(3*time.Second))

			dl := f.get(t, id)
			require.Equal(t, ports.DeadLetterRequeued, dl.Status, "an operator may change their mind")
			require.True(t, dl.ResolvedAt.IsZero(), "a requeued dead letter is not resolved, got %s", dl.ResolvedAt)
			require.Equal(t, []uuid.UUID{dl.WorkID}, workIDs(f.a.fetch(t, at(4*time.Second), f.stream).Work))
		},
		"RestoresPendingRow": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 1)
			id := f.dead[0].ID

			requeue(t, f.tb.backend, id, gen2, at(2*time.Second))

			dl := f.get(t, id)
			require.Equal(t, ports.DeadLetterRequeued, dl.Status)
			require.Equal(t, 1, dl.Requeues)
			require.Equal(t, gen2, dl.RequeueGeneration)
			requireTime(t, at(2*time.Second), dl.RequeuedAt, "RequeuedAt")
			require.Equal(t, gen1, dl.Generation, "the generation it failed on")
			require.True(t, dl.ResolvedAt.IsZero())
			require.Equal(t, []uuid.UUID{f.stream}, f.a.claim(t, at(3*time.Second)))
			work := f.a.fetch(t, at(3*time.Second), f.stream).Work
			require.Len(t, work, 1)
			require.Equal(t, dl.WorkID, work[0].WorkID, "under its original work id")
			require.Equal(t, f.events[0].ID, work[0].EventID)
			require.Equal(t, perspective, work[0].Perspective)
			require.Equal(t, int64(1), work[0].EventVersion)
			require.Zero(t, work[0].Attempts, "attempts restart from zero")
		},
		"WakesListeners": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 1)
			wakes := listen(t.Context(), t, f.tb.backend)

			requeue(t, f.tb.backend, f.dead[0].ID, gen2, at(2*time.Second))

			requireWake(t, wakes)
		},
	})

	optionalGroup(t, "DeadLettersRequeue", "Admin", admin, map[string]func(t *testing.T){
		"ConcurrentCallersRequeueOnce": func(t *testing.T) {
			const n, callers = 8, 4
			f := setupDeadLetters(t, newBackend, n)

			counts := make([]int, callers)
			errs := make([]error, callers)
			var wg sync.WaitGroup
			for i := range callers {
				b := f.tb.open(t)
				wg.Go(func() {
					counts[i], errs[i] = b.Admin.DeadLettersRequeue(t.Context(), &ports.DeadLettersRequeueParams{
						Perspective: perspective, Generation: gen2, Now: at(time.Minute),
					})
				})
			}
			wg.Wait()

			total := 0
			for i := range callers {
				require.NoError(t, errs[i])
				total += counts[i]
			}
			require.Equal(t, n, total, "every dead letter requeued once between the callers")
			for _, dl := range listDeadLetters(t, f.tb.backend, ports.DeadLettersListParams{}) {
				require.Equal(t, 1, dl.Requeues, "dead letter %s", dl.ID)
			}
		},
		"FlagsRewindWhenCursorPast": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			dl, moved := f.a.deadLetter(t, at(time.Second), f.work[0].WorkID)
			require.True(t, moved)
			f.a.complete(t, at(2*time.Second), f.completion(2, 2))

			require.Equal(t, 1, requeueMany(t, f.tb.backend, ports.DeadLettersRequeueParams{IDs: []uuid.UUID{dl.ID}, Now: at(3 * time.Second)}))

			requireRewind(t, f.cursor(t), f.events[0], at(3*time.Second), at(3*time.Second))
			work := f.a.fetch(t, at(4*time.Second), f.stream).Work
			require.Equal(t, []uuid.UUID{dl.WorkID}, workIDs(work), "under its original work id")
			require.Equal(t, []bool{true}, lateOf(work))
		},
		"RequeuesEveryDeadOneOfThePerspective": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 3)
			a.heartbeat(t, at(0))
			work := a.fetch(t, at(0), stream).Work
			var mine, theirs []ports.DeadLetter
			for i, w := range work {
				dl, moved := a.deadLetter(t, at(time.Duration(i+1)*time.Second), w.WorkID)
				require.True(t, moved)
				if w.Perspective == perspective {
					mine = append(mine, dl)
				} else {
					theirs = append(theirs, dl)
				}
			}
			require.Len(t, mine, 3)
			ignore(t, tb.backend, mine[0].ID, at(10*time.Second))

			require.Equal(t, 1, requeueMany(t, tb.backend, ports.DeadLettersRequeueParams{
				Perspective: perspective, Since: mine[2].DeadLetteredAt, Generation: gen2, Now: at(time.Minute),
			}), "only those dead-lettered since")
			require.Equal(t, 1, requeueMany(t, tb.backend, ports.DeadLettersRequeueParams{Perspective: perspective, Generation: gen2, Now: at(time.Minute)}),
				"the ignored one is left out, the requeued one is not requeued again")

			status := func(dl ports.DeadLetter) ports.DeadLetterStatus {
				t.Helper()
				got, err := tb.backend.Admin.DeadLetterGet(t.Context(), &ports.DeadLetterGetParams{ID: dl.ID})
				require.NoError(t, err)
				return got.Status
			}
			require.Equal(t, ports.DeadLetterIgnored, status(mine[0]))
			require.Equal(t, ports.DeadLetterRequeued, status(mine[1]))
			require.Equal(t, ports.DeadLetterRequeued, status(mine[2]))
			for _, dl := range theirs {
				require.Equal(t, ports.DeadLetterDead, status(dl), "another perspective's dead letters stay")
			}
			pending := ofPerspective(a.fetch(t, at(2*time.Minute), stream).Work, perspective)
			require.Equal(t, []int64{2, 3}, versionsOf(pending))
		},
		"RequeuesTheNamedOnes": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 4)
			ignore(t, f.tb.backend, f.dead[1].ID, at(10*time.Second))
			requeue(t, f.tb.backend, f.dead[2].ID, gen2, at(10*time.Second))

			n := requeueMany(t, f.tb.backend, ports.DeadLettersRequeueParams{
				IDs: []uuid.UUID{f.dead[0].ID, f.dead[1].ID, f.dead[2].ID, newID(t)}, Generation: gen3, Now: at(time.Minute),
			})

			require.Equal(t, 2, n, "the dead and the ignored one; not the requeued one, nor an unknown id")
			for _, i := range []int{0, 1} {
				dl := f.get(t, f.dead[i].ID)
				require.Equal(t, ports.DeadLetterRequeued, dl.Status)
				require.Equal(t, gen3, dl.RequeueGeneration)
				requireTime(t, at(time.Minute), dl.RequeuedAt, "RequeuedAt")
				require.Equal(t, 1, dl.Requeues)
			}
			require.Equal(t, gen2, f.get(t, f.dead[2].ID).RequeueGeneration, "left as it was")
			require.Equal(t, ports.DeadLetterDead, f.get(t, f.dead[3].ID).Status, "not named")
			f.a.heartbeat(t, at(time.Minute))
			require.Equal(t, []int64{1, 2, 3}, versionsOf(f.a.fetch(t, at(time.Minute), f.stream).Work))
			require.Zero(t, requeueMany(t, f.tb.backend, ports.DeadLettersRequeueParams{
				IDs: []uuid.UUID{f.dead[3].ID}, Perspective: perspective2, Now: at(time.Minute),
			}), "a named dead letter of another perspective is left out")
		},
		"WakesListeners": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 2)
			wakes := listen(t.Context(), t, f.tb.backend)

			require.Equal(t, 2, requeueMany(t, f.tb.backend, ports.DeadLettersRequeueParams{Perspective: perspective, Now: at(time.Minute)}))

			requireWake(t, wakes)
		},
	})

	optionalGroup(t, "DeadLetterGet", "Admin", admin, map[string]func(t *testing.T){
		"NotFoundForUnknownID": func(t *testing.T) {
			tb := setup(t, newBackend)

			_, err := tb.backend.Admin.DeadLetterGet(t.Context(), &ports.DeadLetterGetParams{ID: newID(t)})

			require.ErrorIs(t, err, ports.ErrNotFound)
		},
		"ReturnsItAsListed": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 2)
			requeue(t, f.tb.backend, f.dead[1].ID, gen2, at(10*time.Second))

			for _, id := range f.ids() {
				dl, err := f.tb.backend.Admin.DeadLetterGet(t.Context(), &ports.DeadLetterGetParams{ID: id})
				require.NoError(t, err)
				require.Equal(t, f.get(t, id), dl)
			}
			dl, err := f.tb.backend.Admin.DeadLetterGet(t.Context(), &ports.DeadLetterGetParams{ID: f.dead[1].ID})
			require.NoError(t, err)
			require.Equal(t, ports.DeadLetterRequeued, dl.Status)
			require.Equal(t, gen2, dl.RequeueGeneration)
		},
	})

	optionalGroup(t, "DeadLetterIgnore", "Admin", admin, map[string]func(t *testing.T){
		"ConflictForRequeuedOrRecovered": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 1)
			id := f.dead[0].ID
			requeue(t, f.tb.backend, id, gen1, at(2*time.Second))

			err := f.tb.backend.Admin.DeadLetterIgnore(t.Context(), &ports.DeadLetterIgnoreParams{ID: id, Now: at(3 * time.Second)})
			require.ErrorIs(t, err, ports.ErrVersionConflict, "its row is pending again")

			f.recoverAll(t, at(4*time.Second))
			err = f.tb.backend.Admin.DeadLetterIgnore(t.Context(), &ports.DeadLetterIgnoreParams{ID: id, Now: at(5 * time.Second)})
			require.ErrorIs(t, err, ports.ErrVersionConflict, "its row was applied")
			require.Equal(t, ports.DeadLetterRecovered, f.get(t, id).Status)
		},
		"MarksIgnoredIdempotently": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 1)
			id := f.dead[0].ID

			ignore(t, f.tb.backend, id, at(2*time.Second))
			ignore(t, f.tb.backend, id, at(3*time.Second))

			dl := f.get(t, id)
			require.Equal(t, ports.DeadLetterIgnored, dl.Status)
			requireTime(t, at(2*time.Second), dl.ResolvedAt, "ResolvedAt")
			require.Zero(t, dl.Requeues)
			requireNoWork(t, f.a.fetch(t, at(4*time.Second), f.stream))
		},
		"NotFoundForUnknownID": func(t *testing.T) {
			tb := setup(t, newBackend)

			err := tb.backend.Admin.DeadLetterIgnore(t.Context(), &ports.DeadLetterIgnoreParams{ID: newID(t), Now: at(0)})

			require.ErrorIs(t, err, ports.ErrNotFound)
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
		"BreaksTiesByID": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)
			var dead []ports.DeadLetter
			for _, w := range f.work {
				dl, moved := f.a.deadLetter(t, at(time.Second), w.WorkID)
				require.True(t, moved)
				dead = append(dead, dl)
			}
			slices.SortFunc(dead, func(a, b ports.DeadLetter) int { return bytes.Compare(a.ID[:], b.ID[:]) })
			oldest := idsOf(dead)
			newest := slices.Clone(oldest)
			slices.Reverse(newest)

			require.Equal(t, oldest, idsOf(listDeadLetters(t, f.tb.backend, ports.DeadLettersListParams{})), "same time: by id")
			require.Equal(t, newest, idsOf(listDeadLetters(t, f.tb.backend, ports.DeadLettersListParams{NewestFirst: true})))
			require.Equal(t, [][]uuid.UUID{{oldest[0]}, {oldest[1]}, {oldest[2]}}, pagesOf(t, f.tb.backend, ports.DeadLettersListParams{Limit: 1}))
			require.Equal(t, [][]uuid.UUID{{newest[0]}, {newest[1]}, {newest[2]}}, pagesOf(t, f.tb.backend, ports.DeadLettersListParams{NewestFirst: true, Limit: 1}))
		},
		"FiltersByStatus": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 4)
			requeue(t, f.tb.backend, f.dead[1].ID, gen2, at(10*time.Second))
			requeue(t, f.tb.backend, f.dead[2].ID, gen2, at(10*time.Second))
			ignore(t, f.tb.backend, f.dead[3].ID, at(10*time.Second))
			// Version 2's requeued row is applied: its dead letter recovers.
			f.a.heartbeat(t, at(11*time.Second))
			work := f.a.fetch(t, at(11*time.Second), f.stream).Work
			require.Equal(t, []int64{2, 3}, versionsOf(work))
			f.a.complete(t, at(12*time.Second), f.completion(2, 2))
			ids := func(status ports.DeadLetterStatus) []uuid.UUID {
				t.Helper()
				var out []uuid.UUID
				for _, dl := range listDeadLetters(t, f.tb.backend, ports.DeadLettersListParams{Status: status}) {
					require.Equal(t, status, dl.Status)
					out = append(out, dl.ID)
				}
				return out
			}

			require.Equal(t, []uuid.UUID{f.dead[0].ID}, ids(ports.DeadLetterDead))
			require.Equal(t, []uuid.UUID{f.dead[2].ID}, ids(ports.DeadLetterRequeued))
			require.Equal(t, []uuid.UUID{f.dead[1].ID}, ids(ports.DeadLetterRecovered))
			require.Equal(t, []uuid.UUID{f.dead[3].ID}, ids(ports.DeadLetterIgnored))
			require.Len(t, listDeadLetters(t, f.tb.backend, ports.DeadLettersListParams{}), 4, "no Status keeps every status")
		},
		"PagesNewestFirstSince": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 5)
			d := f.ids()
			list := func(p ports.DeadLettersListParams) []uuid.UUID {
				t.Helper()
				return idsOf(listDeadLetters(t, f.tb.backend, p))
			}

			require.Equal(t, []uuid.UUID{d[4], d[3], d[2], d[1], d[0]}, list(ports.DeadLettersListParams{NewestFirst: true}))
			require.Equal(t, [][]uuid.UUID{{d[4], d[3]}, {d[2], d[1]}, {d[0]}}, pagesOf(t, f.tb.backend, ports.DeadLettersListParams{NewestFirst: true, Limit: 2}))
			require.Equal(t, [][]uuid.UUID{{d[0], d[1]}, {d[2], d[3]}, {d[4]}}, pagesOf(t, f.tb.backend, ports.DeadLettersListParams{Limit: 2}))
			require.Equal(t, []uuid.UUID{d[4], d[3], d[2], d[1]}, list(ports.DeadLettersListParams{NewestFirst: true, Since: at(2 * time.Second)}),
				"dead-lettered at or after Since")
			require.Equal(t, []uuid.UUID{d[1], d[2], d[3], d[4]}, list(ports.DeadLettersListParams{Since: at(2 * time.Second)}))
			require.Equal(t, []uuid.UUID{d[3], d[2]}, list(ports.DeadLettersListParams{
				NewestFirst: true, Since: at(2 * time.Second), After: f.dead[4].Cursor(), Limit: 2, Perspective: perspective, Status: ports.DeadLetterDead,
			}), "every filter at once")
			require.Empty(t, list(ports.DeadLettersListParams{Since: at(6 * time.Second)}))
			require.Empty(t, list(ports.DeadLettersListParams{NewestFirst: true, Perspective: perspective2}))
		},
		"OrdersByLastDeadLettered": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 2)
			first, second := f.dead[0], f.dead[1]
			requeue(t, f.tb.backend, first.ID, gen2, at(10*time.Second))
			f.a.heartbeat(t, at(10*time.Second))
			require.Len(t, f.a.fetch(t, at(10*time.Second), f.stream).Work, 1)

			_, moved := f.a.moveWith(t, ports.DeadLetterMoveParams{WorkID: first.WorkID, Generation: gen2, Now: at(11 * time.Second)})
			require.True(t, moved)

			var ids []uuid.UUID
			for _, dl := range listDeadLetters(t, f.tb.backend, ports.DeadLettersListParams{}) {
				ids = append(ids, dl.ID)
			}
			require.Equal(t, []uuid.UUID{second.ID, first.ID}, ids, "the first one was dead-lettered again, last")
		},
	})

	group(t, "DeadLettersRecover", map[string]func(t *testing.T){
		"ConcurrentCallersRequeueOnce": func(t *testing.T) {
			const n, callers = 12, 4
			f := setupDeadLetters(t, newBackend, n)

			var mu sync.Mutex
			var recovered []uuid.UUID
			errs := make([]error, callers)
			var wg sync.WaitGroup
			for i := range callers {
				b := f.tb.open(t)
				wg.Go(func() {
					for {
						dls, err := b.DeadLetters.DeadLettersRecover(t.Context(), &ports.DeadLettersRecoverParams{Generation: gen2, Limit: 2, Now: at(time.Minute)})
						if err != nil || len(dls) == 0 {
							errs[i] = err
							return
						}
						mu.Lock()
						for _, dl := range dls {
							recovered = append(recovered, dl.ID)
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()

			for _, err := range errs {
				require.NoError(t, err)
			}
			require.ElementsMatch(t, f.ids(), recovered, "every dead letter requeued once between the callers")
			for _, dl := range listDeadLetters(t, f.tb.backend, ports.DeadLettersListParams{}) {
				require.Equal(t, 1, dl.Requeues, "dead letter %s", dl.ID)
			}
		},
		"RejectsInvalidArguments": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 1)

			for name, p := range map[string]ports.DeadLettersRecoverParams{
				"EmptyGeneration": {Limit: 1, Now: at(time.Minute)},
				"ZeroLimit":       {Generation: gen2, Now: at(time.Minute)},
				"NegativeLimit":   {Generation: gen2, Limit: -1, Now: at(time.Minute)},
			} {
				_, err := f.tb.backend.DeadLetters.DeadLettersRecover(t.Context(), &p)
				require.ErrorIs(t, err, ports.ErrInvalidArgument, name)
			}
			require.Equal(t, ports.DeadLetterDead, f.get(t, f.dead[0].ID).Status, "nothing was requeued")
		},
		"RequeuesOldestFirstUpToLimit": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 3)

			got := recoverDeadLetters(t, f.tb.backend, gen2, 2, at(time.Minute))

			require.Len(t, got, 2)
			for i, dl := range got {
				require.Equal(t, f.dead[i].ID, dl.ID, "oldest first")
				require.Equal(t, ports.DeadLetterRequeued, dl.Status, "returned as they are after the requeue")
				require.Equal(t, 1, dl.Requeues)
				require.Equal(t, gen2, dl.RequeueGeneration)
				requireTime(t, at(time.Minute), dl.RequeuedAt, "RequeuedAt")
				require.Equal(t, f.get(t, dl.ID), dl)
			}
			require.Equal(t, []uuid.UUID{f.dead[2].ID}, idsOf(recoverDeadLetters(t, f.tb.backend, gen2, 2, at(time.Minute))))
			require.Empty(t, recoverDeadLetters(t, f.tb.backend, gen2, 2, at(time.Minute)))
			f.a.heartbeat(t, at(time.Minute))
			require.Equal(t, []int64{1, 2, 3}, versionsOf(f.a.fetch(t, at(time.Minute), f.stream).Work), "the rows are pending again")
		},
		"SkipsDeadLettersOfItsGeneration": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 1)

			require.Empty(t, recoverDeadLetters(t, f.tb.backend, gen1, 10, at(time.Minute)), "it failed on this generation's code")
			require.Equal(t, f.ids(), idsOf(recoverDeadLetters(t, f.tb.backend, gen2, 10, at(time.Minute))))
		},
		"SkipsDeadLettersRequeuedOnItsGeneration": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 1)
			dl := f.dead[0]
			requeue(t, f.tb.backend, dl.ID, gen2, at(2*time.Second))
			f.a.heartbeat(t, at(3*time.Second))
			require.Len(t, f.a.fetch(t, at(3*time.Second), f.stream).Work, 1)
			// An instance still running gen1 gives up on it again.
			_, moved := f.a.moveWith(t, ports.DeadLetterMoveParams{WorkID: dl.WorkID, Generation: gen1, Now: at(4 * time.Second)})
			require.True(t, moved)

			require.Empty(t, recoverDeadLetters(t, f.tb.backend, gen2, 10, at(time.Minute)), "gen2 already retried it")
			require.Equal(t, f.ids(), idsOf(recoverDeadLetters(t, f.tb.backend, gen3, 10, at(time.Minute))))
		},
		"RequeuesOncePerGenerationAcrossThree": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 1)
			dl := f.dead[0]
			// Each of gen2 and gen3 retries it and fails on it in turn.
			for i, gen := range []string{gen2, gen3} {
				now := at(time.Duration(10*(i+1)) * time.Second)
				require.Equal(t, f.ids(), idsOf(recoverDeadLetters(t, f.tb.backend, gen, 10, now)), "%s retries it", gen)
				f.a.heartbeat(t, now)
				require.Len(t, f.a.fetch(t, now, f.stream).Work, 1)
				_, moved := f.a.moveWith(t, ports.DeadLetterMoveParams{WorkID: dl.WorkID, Generation: gen, Now: now.Add(time.Second)})
				require.True(t, moved)
			}

			require.Empty(t, recoverDeadLetters(t, f.tb.backend, gen2, 10, at(time.Minute)), "gen2 retried it before the latest requeue")
			require.Empty(t, recoverDeadLetters(t, f.tb.backend, gen3, 10, at(time.Minute)), "it failed on gen3")
			require.Equal(t, f.ids(), idsOf(recoverDeadLetters(t, f.tb.backend, gen1, 10, at(time.Minute))), "gen1 never retried it")
			require.Equal(t, 3, f.get(t, dl.ID).Requeues)
		},
		"SkipsIgnored": func(t *testing.T) {
			f := setupDeadLetters(t, newBackend, 2)
			ignore(t, f.tb.backend, f.dead[0].ID, at(2*time.Second))

			require.Equal(t, []uuid.UUID{f.dead[1].ID}, idsOf(recoverDeadLetters(t, f.tb.backend, gen2, 10, at(time.Minute))))
			require.Equal(t, ports.DeadLetterIgnored, f.get(t, f.dead[0].ID).Status)
		},
	})
}

// deadLetterFixture is a stream whose rows were all dead-lettered by a on
// gen1, version 1 first, one second apart from at(1s).
type deadLetterFixture struct {
	*drainFixture
	dead []ports.DeadLetter // in version order
}

// setupDeadLetters appends n events for one perspective, has a fetch them
// at(0) and dead-letter them in version order.
func setupDeadLetters(t *testing.T, newBackend NewBackendFunc, n int) *deadLetterFixture {
	t.Helper()
	f := &deadLetterFixture{drainFixture: setupDrain(t, newBackend, n)}
	for i, w := range f.work {
		dl, moved := f.a.moveWith(t, ports.DeadLetterMoveParams{
			WorkID: w.WorkID, Generation: gen1, Reason: ports.ReasonFailed, Error: "boom", Now: at(time.Duration(i+1) * time.Second),
		})
		require.True(t, moved)
		f.dead = append(f.dead, dl)
	}
	return f
}

// ids returns the ids of the fixture's dead letters.
func (f *deadLetterFixture) ids() []uuid.UUID { return idsOf(f.dead) }

// get returns the dead letter id as listed.
func (f *deadLetterFixture) get(t *testing.T, id uuid.UUID) ports.DeadLetter {
	t.Helper()
	all := listDeadLetters(t, f.tb.backend, ports.DeadLettersListParams{})
	i := slices.IndexFunc(all, func(dl ports.DeadLetter) bool { return dl.ID == id })
	require.GreaterOrEqual(t, i, 0, "dead letter %s is not listed", id)
	return all[i]
}

// recoverAll has a apply and complete every pending row of the stream at
// now, recovering the requeued dead letters among them.
func (f *deadLetterFixture) recoverAll(t *testing.T, now time.Time) {
	t.Helper()
	f.a.heartbeat(t, now)
	work := f.a.fetch(t, now, f.stream).Work
	require.NotEmpty(t, work)
	last := work[len(work)-1]
	f.a.complete(t, now, ports.Completion{
		StreamID: f.stream, Perspective: perspective,
		LastEventID: last.EventID, LastVersion: last.EventVersion, WorkIDs: workIDs(work),
	})
}

// moveWith moves p.WorkID to dead letters on behalf of in, which p need not
// name.
func (in *instance) moveWith(t *testing.T, p ports.DeadLetterMoveParams) (ports.DeadLetter, bool) {
	t.Helper()
	p.InstanceID = in.id
	res, err := in.b.DeadLetters.DeadLetterMove(t.Context(), &p)
	require.NoError(t, err)
	return res.DeadLetter, res.Moved
}

// tryMove moves p.WorkID to dead letters on behalf of in, which p need not
// name, and returns the result and the error.
func (in *instance) tryMove(t *testing.T, p ports.DeadLetterMoveParams) (*ports.DeadLetterMoveResult, error) {
	t.Helper()
	p.InstanceID = in.id
	return in.b.DeadLetters.DeadLetterMove(t.Context(), &p)
}

// listDeadLetters lists dead letters filtered by p.
func listDeadLetters(t *testing.T, b ports.Backend, p ports.DeadLettersListParams) []ports.DeadLetter {
	t.Helper()
	dls, err := b.DeadLetters.DeadLettersList(t.Context(), &p)
	require.NoError(t, err)
	return dls
}

// requeue requeues the dead letter id on generation at now.
func requeue(t *testing.T, b ports.Backend, id uuid.UUID, generation string, now time.Time) {
	t.Helper()
	needAdmin(t, b)
	require.NoError(t, b.Admin.DeadLetterRequeue(t.Context(), &ports.DeadLetterRequeueParams{ID: id, Generation: generation, Now: now}))
}

// requeueMany requeues the dead letters p selects and returns how many.
func requeueMany(t *testing.T, b ports.Backend, p ports.DeadLettersRequeueParams) int {
	t.Helper()
	needAdmin(t, b)
	n, err := b.Admin.DeadLettersRequeue(t.Context(), &p)
	require.NoError(t, err)
	return n
}

// ignore ignores the dead letter id at now.
func ignore(t *testing.T, b ports.Backend, id uuid.UUID, now time.Time) {
	t.Helper()
	needAdmin(t, b)
	require.NoError(t, b.Admin.DeadLetterIgnore(t.Context(), &ports.DeadLetterIgnoreParams{ID: id, Now: now}))
}

// recoverDeadLetters recovers up to limit dead letters on generation at now.
func recoverDeadLetters(t *testing.T, b ports.Backend, generation string, limit int, now time.Time) []ports.DeadLetter {
	t.Helper()
	dls, err := b.DeadLetters.DeadLettersRecover(t.Context(), &ports.DeadLettersRecoverParams{Generation: generation, Limit: limit, Now: now})
	require.NoError(t, err)
	return dls
}

// pagesOf lists dead letters filtered by p page by page, each page
// continuing after the last dead letter of the one before, and returns the
// ids of each page.
func pagesOf(t *testing.T, b ports.Backend, p ports.DeadLettersListParams) [][]uuid.UUID {
	t.Helper()
	var pages [][]uuid.UUID
	for {
		page := listDeadLetters(t, b, p)
		if len(page) == 0 {
			return pages
		}
		require.LessOrEqual(t, len(page), p.Limit)
		pages = append(pages, idsOf(page))
		p.After = page[len(page)-1].Cursor()
	}
}

// idsOf returns the ids of dls.
func idsOf(dls []ports.DeadLetter) []uuid.UUID {
	out := make([]uuid.UUID, len(dls))
	for i, dl := range dls {
		out[i] = dl.ID
	}
	return out
}
