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
		"ClaimsOnceAcrossLiveInstances": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.livePair(t, at(0))
			ids := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 3))

			require.Equal(t, ids[:2], a.claimStage(t, at(time.Second), ports.StagePostAllPerspectives, ids[:2]...))
			require.Equal(t, ids[2:], b.claimStage(t, at(2*time.Second), ports.StagePostAllPerspectives, ids[1:]...),
				"b wins only the event a did not claim: a is live")
			require.Equal(t, ids[:2], a.claimStage(t, at(3*time.Second), ports.StagePostAllPerspectives, ids...),
				"the event b claimed stays b's")
		},
		"ConcurrentClaimsHaveOneWinner": func(t *testing.T) {
			tb := setup(t, newBackend)
			const claimers = 8
			ins := tb.instances(t, claimers)
			for _, in := range ins {
				in.heartbeat(t, at(0))
			}
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
						EventIDs: orders[i], Stage: ports.StagePostLifecycle, InstanceID: in.id,
						StaleThreshold: staleThreshold, Now: at(time.Second),
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
				require.Equal(t, 1, wins[id], "event %s has exactly one winner among live claimers", id)
			}
		},
		"DuplicateIDsClaimOnce": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			a.heartbeat(t, at(0))
			ids := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 2))

			won := a.claimStage(t, at(time.Second), ports.StagePostLifecycle, ids[0], ids[1], ids[0])

			require.Equal(t, ids, won)
		},
		"EmptyListClaimsNothing": func(t *testing.T) {
			tb := setup(t, newBackend)

			require.Empty(t, tb.instance(t).claimStage(t, at(0), ports.StagePostLifecycle))
		},
		"NeverClaimsCompletedStages": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.livePair(t, at(0))
			ids := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 2))
			require.Equal(t, ids, a.claimStage(t, at(time.Second), ports.StagePostLifecycle, ids...))

			a.completeStage(t, at(2*time.Second), ports.StagePostLifecycle, ids[0])

			require.Equal(t, ids[1:], a.claimStage(t, at(3*time.Second), ports.StagePostLifecycle, ids...), "not by its claimer")
			b.heartbeat(t, at(time.Minute))
			require.Equal(t, ids[1:], b.claimStage(t, at(time.Minute), ports.StagePostLifecycle, ids...),
				"nor by anyone once its claimer is dead: the stage ran")
		},
		"PostPerspectiveIsClaimedPerPerspective": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.livePair(t, at(0))
			id := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 1))[0]
			post := ports.StagePostPerspective

			require.Equal(t, []uuid.UUID{id}, a.claimStageOf(t, at(time.Second), post, perspective, id))
			require.Equal(t, []uuid.UUID{id}, b.claimStageOf(t, at(time.Second), post, perspective2, id),
				"each perspective of the event is claimed on its own")
			require.Empty(t, b.claimStageOf(t, at(2*time.Second), post, perspective, id), "a holds perspective's")
			require.Equal(t, []uuid.UUID{id}, b.claimStage(t, at(2*time.Second), ports.StagePostAllPerspectives, id),
				"the per-event stages are apart")

			a.completeStageOf(t, at(3*time.Second), post, perspective, id)
			b.heartbeat(t, at(time.Minute))
			require.Empty(t, b.claimStageOf(t, at(time.Minute), post, perspective, id), "completed for perspective")
			require.Equal(t, []uuid.UUID{id}, b.claimStageOf(t, at(time.Minute), post, perspective2, id))
			require.Empty(t, stagesOf(t, tb.backend, id), "LifecycleStages leaves PostPerspective out")
		},
		"RejectsInvalidArguments": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.livePair(t, at(0))
			ids := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 1))
			valid := ports.LifecycleClaimParams{
				EventIDs: ids, Stage: ports.StagePostLifecycle, InstanceID: a.id, StaleThreshold: staleThreshold, Now: at(time.Second),
			}
			for name, edit := range map[string]func(p *ports.LifecycleClaimParams){
				"zero stage": func(p *ports.LifecycleClaimParams) { p.Stage = 0 },
				"combined stages": func(p *ports.LifecycleClaimParams) {
					p.Stage = ports.StagePostAllPerspectives | ports.StagePostLifecycle
				},
				"unknown stage":                 func(p *ports.LifecycleClaimParams) { p.Stage = 16 },
				"post perspective without name": func(p *ports.LifecycleClaimParams) { p.Stage = ports.StagePostPerspective },
				"perspective of a per-event stage": func(p *ports.LifecycleClaimParams) {
					p.Perspective = perspective
				},
				"nil instance":             func(p *ports.LifecycleClaimParams) { p.InstanceID = uuid.Nil },
				"nil event id":             func(p *ports.LifecycleClaimParams) { p.EventIDs = []uuid.UUID{ids[0], uuid.Nil} },
				"zero stale threshold":     func(p *ports.LifecycleClaimParams) { p.StaleThreshold = 0 },
				"negative stale threshold": func(p *ports.LifecycleClaimParams) { p.StaleThreshold = -time.Second },
			} {
				p := valid
				edit(&p)
				_, err := a.b.Lifecycle.LifecycleClaim(t.Context(), &p)
				require.ErrorIs(t, err, ports.ErrInvalidArgument, name)
			}
			require.Equal(t, ids, b.claimStage(t, at(2*time.Second), ports.StagePostLifecycle, ids...), "a rejected claim records nothing")
		},
		"ReturnsTheCallersOwnClaimsAgain": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.livePair(t, at(0))
			ids := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 2))
			require.Equal(t, ids, a.claimStage(t, at(time.Second), ports.StagePrePerspective, ids...))

			require.Equal(t, []uuid.UUID{ids[1], ids[0]}, a.claimStage(t, at(2*time.Second), ports.StagePrePerspective, ids[1], ids[0]),
				"the caller runs the stage again, as after a restart under the same id")
			require.Empty(t, b.claimStage(t, at(3*time.Second), ports.StagePrePerspective, ids...), "the claims stay a's")
		},
		"ReturnsWinnersInInputOrder": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.livePair(t, at(0))
			ids := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 4))
			b.claimStage(t, at(time.Second), ports.StagePostLifecycle, ids[1])

			won := a.claimStage(t, at(2*time.Second), ports.StagePostLifecycle, ids[3], ids[0], ids[1], ids[2])

			require.Equal(t, []uuid.UUID{ids[3], ids[0], ids[2]}, won)
		},
		"StagesAreIndependent": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			a.heartbeat(t, at(0))
			id := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 1))[0]
			stages := []ports.LifecycleStage{ports.StagePostLifecycle, ports.StagePostAllPerspectives, ports.StagePrePerspective}

			for _, stage := range stages {
				require.Equal(t, []uuid.UUID{id}, a.claimStage(t, at(time.Second), stage, id), "stage %d", stage)
				require.Empty(t, stagesOf(t, tb.backend, id), "stage %d is claimed, not completed", stage)
			}
			for i, stage := range stages {
				a.completeStage(t, at(2*time.Second), stage, id)
				for _, other := range stages[i+1:] {
					require.Equal(t, []uuid.UUID{id}, a.claimStage(t, at(2*time.Second), other, id), "stage %d after completing %d", other, stage)
				}
			}
			for _, stage := range stages {
				require.Empty(t, a.claimStage(t, at(3*time.Second), stage, id), "stage %d", stage)
			}
			require.Equal(t, map[uuid.UUID]ports.LifecycleStage{
				id: ports.StagePrePerspective | ports.StagePostAllPerspectives | ports.StagePostLifecycle,
			}, stagesOf(t, tb.backend, id))
		},
		"TakesOverClaimsOfInstancesWithoutARow": func(t *testing.T) {
			tb := setup(t, newBackend)
			ins := tb.instances(t, 3)
			never, gone, b := ins[0], ins[1], ins[2]
			gone.heartbeat(t, at(0))
			b.heartbeat(t, at(0))
			ids := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 2))
			require.Equal(t, ids[:1], never.claimStage(t, at(time.Second), ports.StagePostLifecycle, ids[0]))
			require.Equal(t, ids[1:], gone.claimStage(t, at(time.Second), ports.StagePostLifecycle, ids[1]))
			require.NoError(t, gone.b.Claimer.InstanceDeregister(t.Context(), &ports.InstanceDeregisterParams{InstanceID: gone.id}))

			require.Equal(t, ids, b.claimStage(t, at(2*time.Second), ports.StagePostLifecycle, ids...),
				"an instance that never heartbeat, or deregistered, is not live")
		},
		"TakesOverClaimsOfStaleInstances": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.livePair(t, at(0))
			id := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 1))[0]
			require.Equal(t, []uuid.UUID{id}, a.claimStage(t, at(time.Second), ports.StagePostAllPerspectives, id))
			b.heartbeat(t, at(20*time.Second))

			require.Empty(t, b.claimStage(t, at(staleThreshold-time.Second), ports.StagePostAllPerspectives, id),
				"a's heartbeat is newer than Now - StaleThreshold")
			require.Equal(t, []uuid.UUID{id}, b.claimStage(t, at(staleThreshold), ports.StagePostAllPerspectives, id),
				"a's heartbeat is exactly StaleThreshold old: a died running the stage")
			a.heartbeat(t, at(staleThreshold+time.Second))
			require.Empty(t, a.claimStage(t, at(staleThreshold+time.Second), ports.StagePostAllPerspectives, id),
				"the claim is b's now, and b is live")
		},
	})

	optionalGroup(t, "LifecycleComplete", port, implemented, map[string]func(t *testing.T){
		"CompletesUnclaimedStages": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			a.heartbeat(t, at(0))
			id := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 1))[0]

			a.completeStage(t, at(time.Second), ports.StagePrePerspective, id)

			require.Equal(t, map[uuid.UUID]ports.LifecycleStage{id: ports.StagePrePerspective}, stagesOf(t, tb.backend, id))
			require.Empty(t, a.claimStage(t, at(2*time.Second), ports.StagePrePerspective, id))
		},
		"CompletesWhoeverClaimed": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.livePair(t, at(0))
			ids := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 2))
			require.Equal(t, ids, a.claimStage(t, at(time.Second), ports.StagePostLifecycle, ids...))

			b.completeStage(t, at(2*time.Second), ports.StagePostLifecycle, ids[0])

			require.Equal(t, map[uuid.UUID]ports.LifecycleStage{ids[0]: ports.StagePostLifecycle}, stagesOf(t, tb.backend, ids...))
			require.Equal(t, ids[1:], a.claimStage(t, at(3*time.Second), ports.StagePostLifecycle, ids...),
				"the completed stage is released; the other stays a's")
		},
		"Idempotent": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			a.heartbeat(t, at(0))
			id := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 1))[0]
			a.claimStage(t, at(time.Second), ports.StagePostAllPerspectives, id)

			a.completeStage(t, at(2*time.Second), ports.StagePostAllPerspectives, id, id)
			a.completeStage(t, at(3*time.Second), ports.StagePostAllPerspectives, id)
			a.completeStageOf(t, at(3*time.Second), ports.StagePostPerspective, perspective, id)
			a.completeStageOf(t, at(4*time.Second), ports.StagePostPerspective, perspective, id)

			require.Equal(t, map[uuid.UUID]ports.LifecycleStage{id: ports.StagePostAllPerspectives}, stagesOf(t, tb.backend, id))
			require.Empty(t, a.claimStage(t, at(5*time.Second), ports.StagePostAllPerspectives, id))
			require.Empty(t, a.claimStageOf(t, at(5*time.Second), ports.StagePostPerspective, perspective, id))
		},
		"RejectsInvalidArguments": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			a.heartbeat(t, at(0))
			ids := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 1))
			valid := ports.LifecycleCompleteParams{EventIDs: ids, Stage: ports.StagePostLifecycle, InstanceID: a.id, Now: at(time.Second)}
			for name, edit := range map[string]func(p *ports.LifecycleCompleteParams){
				"zero stage": func(p *ports.LifecycleCompleteParams) { p.Stage = 0 },
				"combined stages": func(p *ports.LifecycleCompleteParams) {
					p.Stage = ports.StagePostAllPerspectives | ports.StagePostLifecycle
				},
				"unknown stage":                 func(p *ports.LifecycleCompleteParams) { p.Stage = 16 },
				"post perspective without name": func(p *ports.LifecycleCompleteParams) { p.Stage = ports.StagePostPerspective },
				"perspective of a per-event stage": func(p *ports.LifecycleCompleteParams) {
					p.Perspective = perspective
				},
				"nil instance": func(p *ports.LifecycleCompleteParams) { p.InstanceID = uuid.Nil },
				"nil event id": func(p *ports.LifecycleCompleteParams) { p.EventIDs = []uuid.UUID{ids[0], uuid.Nil} },
			} {
				p := valid
				edit(&p)
				require.ErrorIs(t, a.b.Lifecycle.LifecycleComplete(t.Context(), &p), ports.ErrInvalidArgument, name)
			}
			require.Empty(t, stagesOf(t, tb.backend, ids...), "a rejected completion records nothing")
		},
	})

	optionalGroup(t, "LifecycleStages", port, implemented, map[string]func(t *testing.T){
		"ReportsCompletedStages": func(t *testing.T) {
			tb := setup(t, newBackend)
			ins := tb.instances(t, 2)
			for _, in := range ins {
				in.heartbeat(t, at(0))
			}
			ids := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 4))
			ins[0].completeStage(t, at(time.Second), ports.StagePostAllPerspectives, ids[0])
			ins[1].completeStage(t, at(time.Second), ports.StagePostLifecycle, ids[0])
			ins[0].completeStage(t, at(time.Second), ports.StagePrePerspective, ids[1])
			ins[0].claimStage(t, at(time.Second), ports.StagePostAllPerspectives, ids[1])
			ins[1].claimStage(t, at(time.Second), ports.StagePrePerspective, ids[2])
			ins[1].completeStageOf(t, at(time.Second), ports.StagePostPerspective, perspective, ids[3])

			got := stagesOf(t, tb.backend, ids[0], ids[1], ids[2], ids[3], newID(t))

			require.Equal(t, map[uuid.UUID]ports.LifecycleStage{
				ids[0]: ports.StagePostAllPerspectives | ports.StagePostLifecycle,
				ids[1]: ports.StagePrePerspective,
			}, got, "claimed stages, PostPerspective and events without stages, known or not, are left out")
			require.Empty(t, stagesOf(t, tb.backend))
		},
		"ReportsPostPerspectiveOfTheAskedPerspective": func(t *testing.T) {
			tb := setup(t, newBackend)
			in := tb.instances(t, 1)[0]
			in.heartbeat(t, at(0))
			ids := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 3))
			in.completeStageOf(t, at(time.Second), ports.StagePostPerspective, perspective, ids[0])
			in.completeStage(t, at(time.Second), ports.StagePrePerspective, ids[0])
			in.completeStageOf(t, at(time.Second), ports.StagePostPerspective, "other", ids[1])
			in.claimStageOf(t, at(time.Second), ports.StagePostPerspective, perspective, ids[2])

			got, err := tb.backend.Lifecycle.LifecycleStages(t.Context(), &ports.LifecycleStagesParams{EventIDs: ids, Perspective: perspective})
			require.NoError(t, err)
			require.Equal(t, map[uuid.UUID]ports.LifecycleStage{
				ids[0]: ports.StagePrePerspective | ports.StagePostPerspective,
			}, got, "PostPerspective of another perspective, or only claimed, is left out")
		},
	})

	optionalGroup(t, "LifecycleReady", port, implemented, map[string]func(t *testing.T){
		"LateRowBelowTheCursorIsNotReady": func(t *testing.T) {
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
			late := appendEvents(t, tb.backend, stream, at(2*time.Second), newEvent(eventType, 2)).Events[0]
			expected := map[string][]string{eventType: {perspective}}

			require.Equal(t, eventIDs(events), ready(t, tb.backend, expected, events[0].ID, late.ID, events[1].ID),
				"the cursor is past version 2, but no rewind applied it yet")

			row := a.fetch(t, at(3*time.Second), stream).Work
			a.complete(t, at(4*time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective, LastEventID: events[1].ID, LastVersion: 3, WorkIDs: workIDs(row),
			})
			require.Equal(t, []uuid.UUID{events[0].ID, late.ID, events[1].ID}, ready(t, tb.backend, expected, events[0].ID, late.ID, events[1].ID))
		},
		"PendingRowMakesAnEventNotReady": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 1)
			a.moveCursor(t, at(time.Second), perspective, events[0])
			expected := map[string][]string{eventType: {perspective}}
			require.Empty(t, ready(t, tb.backend, expected, events[0].ID), "its row is still pending")

			a.heartbeat(t, at(2*time.Second))
			res := a.fetch(t, at(2*time.Second), stream)
			a.complete(t, at(3*time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective, LastEventID: events[0].ID, LastVersion: 1, WorkIDs: workIDs(res.Work),
			})
			require.Equal(t, eventIDs(events), ready(t, tb.backend, expected, events[0].ID))
		},
		"ReadyOnceEveryPerspectiveApplied": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			events := appendN(t, tb.backend, newID(t), at(0), eventType, 3)
			both := map[string][]string{eventType: {perspective, perspective2}}
			ids := []uuid.UUID{events[2].ID, events[0].ID, events[1].ID}
			require.Empty(t, ready(t, tb.backend, both, ids...), "no perspective has a cursor")

			a.moveCursor(t, at(time.Second), perspective, events[2])
			a.moveCursor(t, at(time.Second), perspective2, events[0])
			require.Equal(t, []uuid.UUID{events[0].ID}, ready(t, tb.backend, both, ids...), "perspective2 applied version 1 only")

			a.moveCursor(t, at(2*time.Second), perspective2, events[1])
			require.Equal(t, []uuid.UUID{events[0].ID, events[1].ID}, ready(t, tb.backend, both, ids...),
				"a cursor at the event's version applied it; in input order")
		},
		"TypesWithoutPerspectivesAreReady": func(t *testing.T) {
			tb := setup(t, newBackend)
			events := appendEvents(t, tb.backend, newID(t), at(0), newEvent(eventType, 0), newEvent(otherType, 0)).Events
			ids := eventIDs(events)

			require.Equal(t, ids, ready(t, tb.backend, nil, ids...), "no type is expected")
			require.Equal(t, ids, ready(t, tb.backend, map[string][]string{eventType: {}, otherType: nil}, ids...),
				"no perspective applies either type")
			require.Equal(t, ids[1:], ready(t, tb.backend, map[string][]string{eventType: {perspective}}, ids...))
		},
		"UnknownEventsAreNotReady": func(t *testing.T) {
			tb := setup(t, newBackend)
			id := eventIDs(appendN(t, tb.backend, newID(t), at(0), eventType, 1))[0]

			require.Equal(t, []uuid.UUID{id}, ready(t, tb.backend, nil, newID(t), id, uuid.Nil))
			require.Empty(t, ready(t, tb.backend, nil))
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
		"KeepsEventsWithOtherStagesCompleted": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			events := appendN(t, tb.backend, newID(t), at(0), eventType, 2)
			a.moveCursor(t, at(time.Second), perspective, events[1])
			a.moveCursor(t, at(time.Second), perspective2, events[1])
			a.completeStage(t, at(2*time.Second), ports.StagePrePerspective, events[0].ID)
			a.completeStage(t, at(2*time.Second), ports.StagePostAllPerspectives, events[0].ID)

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
		"OmitsPostLifecycleCompleted": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			a.heartbeat(t, at(0))
			events := appendN(t, tb.backend, newID(t), at(0), eventType, 2)
			a.moveCursor(t, at(time.Second), perspective, events[1])
			a.moveCursor(t, at(time.Second), perspective2, events[1])
			requireEvents(t, events, orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: both}))

			require.Len(t, a.claimStage(t, at(2*time.Second), ports.StagePostLifecycle, eventIDs(events)...), 2)
			requireEvents(t, events, orphans(t, tb.backend, ports.LifecycleOrphansParams{Expected: both}),
				"a claimed stage may have died with its instance")

			a.completeStage(t, at(3*time.Second), ports.StagePostLifecycle, events[0].ID)
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

// livePair returns two instances, a ranked before b, both with a heartbeat
// at now.
func (tb *testBundle) livePair(t *testing.T, now time.Time) (a, b *instance) {
	t.Helper()
	a, b = tb.pair(t)
	a.heartbeat(t, now)
	b.heartbeat(t, now)
	return a, b
}

// claimStage claims a per-event stage for ids on behalf of in, with the
// default threshold, and returns the winners.
func (in *instance) claimStage(t *testing.T, now time.Time, stage ports.LifecycleStage, ids ...uuid.UUID) []uuid.UUID {
	t.Helper()
	return in.claimStageOf(t, now, stage, "", ids...)
}

// claimStageOf claims stage of perspective (empty for a per-event stage) for
// ids on behalf of in, with the default threshold, and returns the winners.
func (in *instance) claimStageOf(t *testing.T, now time.Time, stage ports.LifecycleStage, perspective string, ids ...uuid.UUID) []uuid.UUID {
	t.Helper()
	won, err := in.b.Lifecycle.LifecycleClaim(t.Context(), &ports.LifecycleClaimParams{
		EventIDs: ids, Stage: stage, Perspective: perspective, InstanceID: in.id, StaleThreshold: staleThreshold, Now: now,
	})
	require.NoError(t, err)
	return won
}

// completeStage completes a per-event stage of ids on behalf of in.
func (in *instance) completeStage(t *testing.T, now time.Time, stage ports.LifecycleStage, ids ...uuid.UUID) {
	t.Helper()
	in.completeStageOf(t, now, stage, "", ids...)
}

// completeStageOf completes stage of perspective (empty for a per-event
// stage) of ids on behalf of in.
func (in *instance) completeStageOf(t *testing.T, now time.Time, stage ports.LifecycleStage, perspective string, ids ...uuid.UUID) {
	t.Helper()
	require.NoError(t, in.b.Lifecycle.LifecycleComplete(t.Context(), &ports.LifecycleCompleteParams{
		EventIDs: ids, Stage: stage, Perspective: perspective, InstanceID: in.id, Now: now,
	}))
}

// ready returns the events of ids LifecycleReady finds applied by the
// perspectives expected lists.
func ready(t *testing.T, b ports.Backend, expected map[string][]string, ids ...uuid.UUID) []uuid.UUID {
	t.Helper()
	got, err := b.Lifecycle.LifecycleReady(t.Context(), &ports.LifecycleReadyParams{EventIDs: ids, Expected: expected})
	require.NoError(t, err)
	return got
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

// stagesOf returns the completed stages of ids.
func stagesOf(t *testing.T, b ports.Backend, ids ...uuid.UUID) map[uuid.UUID]ports.LifecycleStage {
	t.Helper()
	stages, err := b.Lifecycle.LifecycleStages(t.Context(), &ports.LifecycleStagesParams{EventIDs: ids})
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
