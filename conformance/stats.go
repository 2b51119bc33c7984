package conformance

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// runStats verifies ports.Stats, an optional port.
func runStats(t *testing.T, newBackend NewBackendFunc, implemented bool) {
	t.Helper()
	const port = "Stats"

	optionalGroup(t, "PerspectivesLag", port, implemented, map[string]func(t *testing.T){
		"AgeIsNeverNegative": func(t *testing.T) {
			tb := setup(t, newBackend)
			subscribe(t, tb.backend, eventType, perspective)
			appendN(t, tb.backend, newID(t), at(time.Minute), eventType, 2)

			require.Equal(t, []ports.PerspectiveLag{{Perspective: perspective, Pending: 2}},
				perspectivesLag(t, tb.backend, at(0)), "rows stored after Now are pending, and have not waited")
		},
		"CompletedRowsLeave": func(t *testing.T) {
			f := setupLag(t, newBackend)

			f.a.complete(t, at(30*time.Second), f.completion(2, 1, 2))

			require.Equal(t, []ports.PerspectiveLag{{Perspective: perspective, Pending: 1, OldestAge: 40 * time.Second}},
				perspectivesLag(t, f.tb.backend, at(time.Minute)), "the oldest pending row is the one appended at(20s)")
			f.a.complete(t, at(time.Minute), f.completion(3, 3))
			require.Empty(t, perspectivesLag(t, f.tb.backend, at(2*time.Minute)), "nothing is pending")
		},
		"CountsPendingRowsPerPerspective": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			// Capitalised: first in byte order, between the other two in
			// the collations of most locales.
			const returns = "Returns"
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			subscribe(t, tb.backend, otherType, returns, perspective)
			subscribe(t, tb.backend, "Unappended", "idle")
			streams := newIDs(t, 3)
			appendN(t, tb.backend, streams[0], at(10*time.Second), otherType, 2)
			appendN(t, tb.backend, streams[1], at(20*time.Second), eventType, 3)
			appendN(t, tb.backend, streams[2], at(30*time.Second), eventType, 1)
			appendN(t, tb.backend, streams[2], at(40*time.Second), otherType, 1)
			appendN(t, tb.backend, streams[2], at(50*time.Second), "Unsubscribed", 4)
			// Rows handed out to a live instance are still pending.
			a.heartbeat(t, at(50*time.Second))
			require.Len(t, a.fetch(t, at(50*time.Second), streams[1]).Work, 6)

			require.Equal(t, []ports.PerspectiveLag{
				{Perspective: returns, Pending: 3, OldestAge: 50 * time.Second},
				{Perspective: perspective, Pending: 7, OldestAge: 50 * time.Second},
				{Perspective: perspective2, Pending: 4, OldestAge: 40 * time.Second},
			}, perspectivesLag(t, tb.backend, at(time.Minute)), "ordered by the bytes of the names; no entry for a perspective without rows")
		},
		"DeadLettersDoNotCount": func(t *testing.T) {
			f := setupLag(t, newBackend)

			_, moved := f.a.deadLetter(t, at(30*time.Second), f.work[0].WorkID)
			require.True(t, moved)

			require.Equal(t, []ports.PerspectiveLag{{Perspective: perspective, Pending: 2, OldestAge: 50 * time.Second}},
				perspectivesLag(t, f.tb.backend, at(time.Minute)), "the oldest pending row is the one appended at(10s)")
		},
		"DebugModeRowsDoNotCount": func(t *testing.T) {
			f := setupLag(t, newBackend)

			f.a.completeWith(t, ports.WorkCompleteParams{
				Completions: []ports.Completion{f.completion(2, 1, 2)}, DebugMode: true, Now: at(30 * time.Second),
			})

			require.Equal(t, []ports.PerspectiveLag{{Perspective: perspective, Pending: 1, OldestAge: 40 * time.Second}},
				perspectivesLag(t, f.tb.backend, at(time.Minute)), "rows kept by debug mode are completed")
		},
		"EmptyBackendHasNone": func(t *testing.T) {
			tb := setup(t, newBackend)
			require.Empty(t, perspectivesLag(t, tb.backend, at(0)))

			subscribe(t, tb.backend, eventType, perspective)
			require.Empty(t, perspectivesLag(t, tb.backend, at(0)), "a subscription is no work")
		},
		"RequeuedRowWaitsFromItsRequeue": func(t *testing.T) {
			f := setupLag(t, newBackend)
			needAdmin(t, f.tb.backend)
			dl, moved := f.a.deadLetter(t, at(30*time.Second), f.work[0].WorkID)
			require.True(t, moved)
			f.a.complete(t, at(40*time.Second), f.completion(3, 2, 3))
			require.Empty(t, perspectivesLag(t, f.tb.backend, at(time.Minute)))

			requeue(t, f.tb.backend, dl.ID, "g2", at(2*time.Minute))

			require.Equal(t, []ports.PerspectiveLag{{Perspective: perspective, Pending: 1, OldestAge: time.Minute}},
				perspectivesLag(t, f.tb.backend, at(3*time.Minute)), "the row is pending again since its requeue, not since its append at(0)")
		},
		"RowsAwaitingRetryCount": func(t *testing.T) {
			f := setupLag(t, newBackend)

			f.a.fail(t, at(30*time.Second), ports.Failure{
				StreamID: f.stream, Perspective: perspective,
				FailedWorkIDs: workIDs(f.work[:1]), Error: "boom", RetryAt: at(10 * time.Minute),
			})

			require.Equal(t, []ports.PerspectiveLag{{Perspective: perspective, Pending: 3, OldestAge: time.Minute}},
				perspectivesLag(t, f.tb.backend, at(time.Minute)), "a failed row waits for its retry, pending since its append")
		},
	})
}

// setupLag appends one event at(0), one at(10s) and one at(20s) to a
// stream for one perspective, and has a claim and fetch them at(20s).
func setupLag(t *testing.T, newBackend NewBackendFunc) *drainFixture {
	t.Helper()
	tb := setup(t, newBackend)
	a := tb.instance(t)
	subscribe(t, tb.backend, eventType, perspective)
	stream := newID(t)
	var events []ports.Event
	for i := range 3 {
		events = append(events, appendN(t, tb.backend, stream, at(time.Duration(i)*10*time.Second), eventType, 1)...)
	}
	a.heartbeat(t, at(20*time.Second))
	require.Equal(t, []uuid.UUID{stream}, a.claim(t, at(20*time.Second)))
	work := a.fetch(t, at(20*time.Second), stream).Work
	require.Equal(t, []int64{1, 2, 3}, versionsOf(work))
	require.Equal(t, []ports.PerspectiveLag{{Perspective: perspective, Pending: 3, OldestAge: time.Minute}},
		perspectivesLag(t, tb.backend, at(time.Minute)), "every row is pending since its append")
	return &drainFixture{tb: tb, a: a, stream: stream, events: events, work: work}
}

// perspectivesLag reads the backlog figures of b at now.
func perspectivesLag(t *testing.T, b ports.Backend, now time.Time) []ports.PerspectiveLag {
	t.Helper()
	lags, err := b.Stats.PerspectivesLag(t.Context(), &ports.PerspectivesLagParams{Now: now})
	require.NoError(t, err)
	return lags
}
