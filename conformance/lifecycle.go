package conformance

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// runLifecycle verifies ports.LifecycleStore, an optional port.
func runLifecycle(t *testing.T, newBackend NewBackendFunc, implemented bool) {
	t.Helper()
	const port = "LifecycleStore"

	optionalGroup(t, "LifecycleClaim", port, implemented, map[string]func(t *testing.T){
		"ClaimsOnceAcrossInstances": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			ids := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 3))

			require.Equal(t, ids[:2], a.claimStage(t, at(time.Second), ports.StagePostAllPerspectives, ids[:2]...))
			require.Equal(t, ids[2:], b.claimStage(t, at(2*time.Second), ports.StagePostAllPerspectives, ids[1:]...),
				"b wins only the event a did not claim")
			require.Empty(t, a.claimStage(t, at(3*time.Second), ports.StagePostAllPerspectives, ids...),
				"claiming again wins nothing, whoever claimed first")
		},
		"ConcurrentClaimsHaveOneWinner": func(t *testing.T) {
			tb := setup(t, newBackend)
			const claimers = 8
			ins := tb.instances(t, claimers)
			ids := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 4))
			orders := make([][]uuid.UUID, claimers)
			won := make([][]uuid.UUID, claimers)
			errs := make([]error, claimers)
			var wg sync.WaitGroup
			for i, in := range ins {
				// Each claimer lists the events in a different order: a
				// backend that takes row locks in input order deadlocks.
				orders[i] = append(slices.Clone(ids[i%len(ids):]), ids[:i%len(ids)]...)
				wg.Go(func() {
					won[i], errs[i] = in.b.Lifecycle.LifecycleClaim(t.Context(), &ports.LifecycleClaimParams{
						EventIDs: orders[i], Stage: ports.StagePostLifecycle, InstanceID: in.id, Now: at(time.Second),
					})
				})
			}
			wg.Wait()

			wins := map[uuid.UUID]int{}
			for i := range ins {
				require.NoError(t, errs[i])
				if len(won[i]) > 0 {
					require.Equal(t, keepOnly(orders[i], won[i]), won[i], "claimer %d: winners come back in input order", i)
				}
				for _, id := range won[i] {
					wins[id]++
				}
			}
			for _, id := range ids {
				require.Equal(t, 1, wins[id], "event %s has exactly one winner", id)
			}
		},
		"DuplicateIDsClaimOnce": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			ids := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 2))

			won := a.claimStage(t, at(time.Second), ports.StagePostLifecycle, ids[0], ids[1], ids[0])

			require.Equal(t, ids, won)
		},
		"EmptyListClaimsNothing": func(t *testing.T) {
			tb := setup(t, newBackend)

			require.Empty(t, tb.instance(t).claimStage(t, at(0), ports.StagePostLifecycle))
		},
		"RejectsInvalidArguments": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			ids := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 1))
			valid := ports.LifecycleClaimParams{EventIDs: ids, Stage: ports.StagePostLifecycle, InstanceID: a.id, Now: at(time.Second)}
			for name, edit := range map[string]func(p *ports.LifecycleClaimParams){
				"zero stage": func(p *ports.LifecycleClaimParams) { p.Stage = 0 },
				"combined stages": func(p *ports.LifecycleClaimParams) {
					p.Stage = ports.StagePostAllPerspectives | ports.StagePostLifecycle
				},
				"unknown stage": func(p *ports.LifecycleClaimParams) { p.Stage = 8 },
				"nil instance":  func(p *ports.LifecycleClaimParams) { p.InstanceID = uuid.Nil },
				"nil event id":  func(p *ports.LifecycleClaimParams) { p.EventIDs = []uuid.UUID{ids[0], uuid.Nil} },
			} {
				p := valid
				edit(&p)
				_, err := a.b.Lifecycle.LifecycleClaim(t.Context(), &p)
				require.ErrorIs(t, err, ports.ErrInvalidArgument, name)
			}
			require.Empty(t, stagesOf(t, tb.backend, ids...), "a rejected claim records nothing")
		},
		"ReturnsWinnersInInputOrder": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			ids := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 4))
			a.claimStage(t, at(time.Second), ports.StagePostLifecycle, ids[1])

			won := a.claimStage(t, at(2*time.Second), ports.StagePostLifecycle, ids[3], ids[0], ids[1], ids[2])

			require.Equal(t, []uuid.UUID{ids[3], ids[0], ids[2]}, won)
		},
		"StagesAreIndependent": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			id := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 1))[0]
			stages := []ports.LifecycleStage{ports.StagePostLifecycle, ports.StagePostAllPerspectives, ports.StagePrePerspective}

			for _, stage := range stages {
				require.Equal(t, []uuid.UUID{id}, a.claimStage(t, at(time.Second), stage, id), "stage %d", stage)
			}
			for _, stage := range stages {
				require.Empty(t, a.claimStage(t, at(2*time.Second), stage, id), "stage %d", stage)
			}
			require.Equal(t, map[uuid.UUID]ports.LifecycleStage{
				id: ports.StagePrePerspective | ports.StagePostAllPerspectives | ports.StagePostLifecycle,
			}, stagesOf(t, tb.backend, id))
		},
	})

	optionalGroup(t, "LifecycleStages", port, implemented, map[string]func(t *testing.T){
		"ReportsRecordedStages": func(t *testing.T) {
			tb := setup(t, newBackend)
			ins := tb.instances(t, 2)
			ids := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 3))
			ins[0].claimStage(t, at(time.Second), ports.StagePostAllPerspectives, ids[0])
			ins[1].claimStage(t, at(time.Second), ports.StagePostLifecycle, ids[0])
			ins[0].claimStage(t, at(time.Second), ports.StagePrePerspective, ids[1])

			got := stagesOf(t, tb.backend, ids[0], ids[1], ids[2], newID(t))

			require.Equal(t, map[uuid.UUID]ports.LifecycleStage{
				ids[0]: ports.StagePostAllPerspectives | ports.StagePostLifecycle,
				ids[1]: ports.StagePrePerspective,
			}, got, "events without stages, known or not, are absent")
			require.Empty(t, stagesOf(t, tb.backend))
		},
	})

	both := map[string][]string{eventType: {perspective, perspective2}}
	optionalGroup(t, "LifecycleOrphans", port, implemented, map[string]func(t *testing.T){
		"DuplicatePerspectivesCountOnce": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			stream := newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 1)
			a.moveCursor(t, at(time.Second), perspective, events[0])

			got := orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: map[string][]string{eventType: {perspective, perspective}}})

			requireEvents(t, events, got)
		},
		"ExcludesEventsWithPendingWork": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 1)
			// The cursor is past the event but its row is still pending (a
			// late event awaiting its rewind): its lifecycle is not due.
			a.moveCursor(t, at(time.Second), perspective, events[0])
			expected := map[string][]string{eventType: {perspective}}
			require.Empty(t, orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: expected}))

			a.heartbeat(t, at(2*time.Second))
			res := a.fetch(t, at(2*time.Second), stream)
			require.Len(t, res.Work, 1)
			a.complete(t, at(3*time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective, LastEventID: events[0].ID, LastVersion: 1, WorkIDs: workIDs(res.Work),
			})
			requireEvents(t, events, orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: expected}))
		},
		"IgnoresTypesAbsentFromExpected": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			events := appendEvents(t, tb.backend, newID(t), at(0), newEvent(eventType, 0), newEvent(otherType, 0)).Events
			a.moveCursor(t, at(time.Second), perspective, events[1])

			requireEvents(t, events[:1], orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: map[string][]string{eventType: {perspective}}}))
			require.Empty(t, orphans(t, tb.backend, ports.LifecycleOrphansParams{}))
		},
		"IgnoresTypesWithoutPerspectives": func(t *testing.T) {
			tb := setup(t, newBackend)
			appendN(t, tb.backend, newID(t), at(0), eventType, 1)

			// No perspective processes such events, so no lifecycle of theirs
			// can have been interrupted.
			require.Empty(t, orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: map[string][]string{eventType: {}}}))
			require.Empty(t, orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: map[string][]string{eventType: nil}}))
		},
		"KeepsEventsWithOtherStagesClaimed": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			events := appendN(t, tb.backend, newID(t), at(0), eventType, 2)
			a.moveCursor(t, at(time.Second), perspective, events[1])
			a.moveCursor(t, at(time.Second), perspective2, events[1])
			a.claimStage(t, at(2*time.Second), ports.StagePrePerspective, events[0].ID)
			a.claimStage(t, at(2*time.Second), ports.StagePostAllPerspectives, events[0].ID)

			requireEvents(t, events, orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: both}),
				"PostAllPerspectives fired but the crash came before PostLifecycle")
		},
		"LimitKeepsOldest": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			events := appendSpaced(t, tb.backend, newID(t), 5, time.Second)
			a.moveCursor(t, at(time.Minute), perspective, events[4])
			a.moveCursor(t, at(time.Minute), perspective2, events[4])

			requireEvents(t, events[:2], orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: both, Limit: 2}))
			requireEvents(t, events, orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: both}), "zero means no limit")
		},
		"OmitsEventsAPerspectiveHasNotApplied": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			streams := newIDs(t, 2)
			first := appendN(t, tb.backend, streams[0], at(0), eventType, 1)
			second := appendN(t, tb.backend, streams[1], at(0), eventType, 2)
			// streams[0]: perspective2 has no cursor there, only on streams[1].
			a.moveCursor(t, at(time.Second), perspective, first[0])
			// streams[1]: perspective2 applied only the first event.
			a.moveCursor(t, at(time.Second), perspective, second[1])
			a.moveCursor(t, at(time.Second), perspective2, second[0])

			requireEvents(t, second[:1], orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: both}))
		},
		"OmitsPostLifecycleClaimed": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			events := appendN(t, tb.backend, newID(t), at(0), eventType, 2)
			a.moveCursor(t, at(time.Second), perspective, events[1])
			a.moveCursor(t, at(time.Second), perspective2, events[1])
			requireEvents(t, events, orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: both}))

			a.claimStage(t, at(2*time.Second), ports.StagePostLifecycle, events[0].ID)

			requireEvents(t, events[1:], orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: both}))
		},
		"OrderedByCreationThenStreamThenVersion": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			s := newIDs(t, 2)
			s1v1 := appendEvents(t, tb.backend, s[1], at(0), newEvent(eventType, 0)).Events[0]
			s1v2 := appendEvents(t, tb.backend, s[1], at(time.Second), newEvent(otherType, 0)).Events[0]
			s0 := appendEvents(t, tb.backend, s[0], at(time.Second), newEvent(eventType, 0), newEvent(otherType, 0)).Events
			a.moveCursor(t, at(2*time.Second), perspective, s1v2)
			a.moveCursor(t, at(2*time.Second), perspective, s0[1])
			expected := map[string][]string{eventType: {perspective}, otherType: {perspective}}

			want := []ports.Event{s1v1, s0[0], s0[1], s1v2}
			requireEvents(t, want, orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: expected}))
			requireEvents(t, want[:3], orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: expected, Limit: 3}),
				"the limit applies across types")
		},
		"RejectsNegativeLimit": func(t *testing.T) {
			tb := setup(t, newBackend)

			_, err := tb.backend.Lifecycle.LifecycleOrphans(t.Context(), &ports.LifecycleOrphansParams{Expected: both, Limit: -1})

			require.ErrorIs(t, err, ports.ErrInvalidArgument)
		},
		"ReturnsEventsEveryPerspectiveApplied": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			events := appendN(t, tb.backend, newID(t), at(0), eventType, 3)
			a.moveCursor(t, at(time.Second), perspective, events[2])
			a.moveCursor(t, at(time.Second), perspective2, events[1])

			requireEvents(t, events[:2], orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: both}),
				"perspective2 has not applied version 3")
		},
		"SinceIsInclusive": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			events := appendSpaced(t, tb.backend, newID(t), 3, 10*time.Second)
			a.moveCursor(t, at(time.Minute), perspective, events[2])
			a.moveCursor(t, at(time.Minute), perspective2, events[2])

			requireEvents(t, events[1:], orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: both, Since: at(10 * time.Second)}))
			requireEvents(t, events[2:], orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: both, Since: at(11 * time.Second)}))
			requireEvents(t, events, orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: both}), "a zero Since has no bound")
		},
	})
}

// claimStage claims stage for ids on behalf of in and returns the winners.
func (in *instance) claimStage(t *testing.T, now time.Time, stage ports.LifecycleStage, ids ...uuid.UUID) []uuid.UUID {
	t.Helper()
	won, err := in.b.Lifecycle.LifecycleClaim(t.Context(), &ports.LifecycleClaimParams{
		EventIDs: ids, Stage: stage, InstanceID: in.id, Now: now,
	})
	require.NoError(t, err)
	return won
}

// moveCursor moves the cursor of (e's stream, perspective) to e through a
// completion without work rows, as if perspective applied e.
func (in *instance) moveCursor(t *testing.T, now time.Time, perspective string, e ports.Event) {
	t.Helper()
	in.complete(t, now, ports.Completion{
		StreamID: e.StreamID, Perspective: perspective, LastEventID: e.ID, LastVersion: e.Version,
	})
}

// appendSpaced appends n events of eventType to stream one at a time, the
// i-th at(i*every), so their creation times differ.
func appendSpaced(t *testing.T, b ports.Backend, stream uuid.UUID, n int, every time.Duration) []ports.Event {
	t.Helper()
	var events []ports.Event
	for i := range n {
		events = append(events, appendN(t, b, stream, at(time.Duration(i)*every), eventType, 1)...)
	}
	return events
}

// stagesOf returns the recorded stages of ids.
func stagesOf(t *testing.T, b ports.Backend, ids ...uuid.UUID) map[uuid.UUID]ports.LifecycleStage {
	t.Helper()
	stages, err := b.Lifecycle.LifecycleStages(t.Context(), ids)
	require.NoError(t, err)
	return stages
}

// orphans returns the events LifecycleOrphans finds with p.
func orphans(t *testing.T, b ports.Backend, p ports.LifecycleOrphansParams) []ports.Event {
	t.Helper()
	events, err := b.Lifecycle.LifecycleOrphans(t.Context(), &p)
	require.NoError(t, err)
	return events
}

// requireEvents fails t unless got holds exactly the events of want, in order.
func requireEvents(t *testing.T, want, got []ports.Event, msgAndArgs ...any) {
	t.Helper()
	require.Equal(t, eventKeys(want), eventKeys(got), msgAndArgs...)
	for i := range want {
		requireEvent(t, want[i], got[i])
	}
}

// eventKeys names events by stream and version, for readable failures.
func eventKeys(events []ports.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = fmt.Sprintf("%s@%d", e.StreamID, e.Version)
	}
	return out
}

// keepOnly returns the ids of order that are in subset, in order's order.
func keepOnly(order, subset []uuid.UUID) []uuid.UUID {
	var out []uuid.UUID
	for _, id := range order {
		if slices.Contains(subset, id) {
			out = append(out, id)
		}
	}
	return out
}
