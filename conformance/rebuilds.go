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

// claimDuration is the claim of the rebuild cases.
const claimDuration = 30 * time.Second

// runRebuilds verifies ports.RebuildQueue and the rebuild methods of
// ports.Admin, optional ports that go together: an operator stores
// requests through the one, engine instances carry them out through the
// other.
func runRebuilds(t *testing.T, newBackend NewBackendFunc, implemented bool) {
	t.Helper()
	const port = "RebuildQueue"

	optionalGroup(t, "RebuildRequest", port, implemented, map[string]func(t *testing.T){
		"StoresItPending": func(t *testing.T) {
			tb := setup(t, newBackend)
			streams := newIDs(t, 2)

			r := requestRebuild(t, tb.backend, ports.RebuildRequestParams{
				Perspective: perspective, StreamIDs: []uuid.UUID{streams[1], streams[0], streams[1]}, RequestedBy: "ops", Now: at(0),
			})

			require.NotEqual(t, uuid.Nil, r.ID)
			requireTime(t, at(0), r.RequestedAt, "RequestedAt")
			requireTime(t, at(0), r.UpdatedAt, "UpdatedAt")
			r.RequestedAt, r.UpdatedAt = time.Time{}, time.Time{}
			require.Equal(t, ports.RebuildRequest{
				ID: r.ID, Perspective: perspective, StreamIDs: streams, RequestedBy: "ops", Status: ports.RebuildPending,
			}, r, "sorted, without duplicates; never claimed")
			got := getRebuild(t, tb.backend, r.ID)
			got.RequestedAt, got.UpdatedAt = time.Time{}, time.Time{}
			require.Equal(t, r, got)

			all := requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective, Now: at(time.Second)})
			require.Empty(t, all.StreamIDs, "every stream")
			require.NotEqual(t, r.ID, all.ID)
		},
	})

	optionalGroup(t, "RebuildGet", port, implemented, map[string]func(t *testing.T){
		"NotFoundForUnknownID": func(t *testing.T) {
			tb := setup(t, newBackend)

			_, err := tb.backend.Admin.RebuildGet(t.Context(), &ports.RebuildGetParams{ID: newID(t)})

			require.ErrorIs(t, err, ports.ErrNotFound)
		},
	})

	optionalGroup(t, "RebuildsList", port, implemented, map[string]func(t *testing.T){
		"FiltersAndOrdersNewestFirst": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			r1 := requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective, Now: at(0)})
			r2 := requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective2, Now: at(time.Second)})
			r3 := requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective, Now: at(2 * time.Second)})
			r4 := requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective, Now: at(2 * time.Second)})
			latest := []uuid.UUID{r3.ID, r4.ID}
			slices.SortFunc(latest, func(a, b uuid.UUID) int { return bytes.Compare(b[:], a[:]) })
			claimed := a.claimRebuild(t, at(3*time.Second), perspective2)
			require.Equal(t, r2.ID, claimed.ID)

			require.Equal(t, []uuid.UUID{latest[0], latest[1], r2.ID, r1.ID}, rebuildIDs(listRebuilds(t, tb.backend, ports.RebuildsListParams{})),
				"newest first, ties by id in reverse")
			require.Equal(t, []uuid.UUID{latest[0], latest[1], r1.ID}, rebuildIDs(listRebuilds(t, tb.backend, ports.RebuildsListParams{Perspective: perspective})))
			require.Equal(t, []uuid.UUID{r2.ID}, rebuildIDs(listRebuilds(t, tb.backend, ports.RebuildsListParams{Status: ports.RebuildRunning})))
			require.Equal(t, []uuid.UUID{latest[0]}, rebuildIDs(listRebuilds(t, tb.backend, ports.RebuildsListParams{Limit: 1})))
			require.Empty(t, listRebuilds(t, tb.backend, ports.RebuildsListParams{Status: ports.RebuildDone}))
			listed := listRebuilds(t, tb.backend, ports.RebuildsListParams{Status: ports.RebuildRunning})[0]
			require.Equal(t, getRebuild(t, tb.backend, r2.ID), listed, "listed as RebuildGet returns it")
		},
	})

	optionalGroup(t, "RebuildCancel", port, implemented, map[string]func(t *testing.T){
		"CancelsPendingAndFencesRunning": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			running := requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective, Now: at(0)})
			pending := requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective, Now: at(time.Second)})
			claimed := a.claimRebuild(t, at(2*time.Second), perspective)
			require.Equal(t, running.ID, claimed.ID)

			cancelRebuild(t, tb.backend, pending.ID, at(3*time.Second))
			cancelRebuild(t, tb.backend, running.ID, at(4*time.Second))

			r := getRebuild(t, tb.backend, running.ID)
			require.Equal(t, ports.RebuildCancelled, r.Status)
			requireTime(t, at(4*time.Second), r.FinishedAt, "FinishedAt")
			require.True(t, r.ClaimExpiry.IsZero(), "no claim stands, got %s", r.ClaimExpiry)
			require.ErrorIs(t, a.progressRebuild(t, claimed, ports.RebuildFigures{StreamsDone: 1}, at(5*time.Second)), ports.ErrVersionConflict,
				"the instance running it learns it must stop")
			require.ErrorIs(t, a.finishRebuild(t, claimed, "", at(5*time.Second)), ports.ErrVersionConflict)
			require.Equal(t, ports.RebuildCancelled, getRebuild(t, tb.backend, pending.ID).Status)
			require.Nil(t, a.claimRebuild(t, at(5*time.Second), perspective), "cancelled requests are not claimed")

			cancelRebuild(t, tb.backend, pending.ID, at(6*time.Second))
			requireTime(t, at(3*time.Second), getRebuild(t, tb.backend, pending.ID).FinishedAt, "cancelling again changes nothing")
		},
		"ConflictForFinished": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective, Now: at(0)})
			r := a.claimRebuild(t, at(time.Second), perspective)
			require.NoError(t, a.finishRebuild(t, r, "", at(2*time.Second)))

			err := tb.backend.Admin.RebuildCancel(t.Context(), &ports.RebuildCancelParams{ID: r.ID, Now: at(3 * time.Second)})

			require.ErrorIs(t, err, ports.ErrVersionConflict)
			require.Equal(t, ports.RebuildDone, getRebuild(t, tb.backend, r.ID).Status)
		},
		"NotFoundForUnknownID": func(t *testing.T) {
			tb := setup(t, newBackend)

			err := tb.backend.Admin.RebuildCancel(t.Context(), &ports.RebuildCancelParams{ID: newID(t), Now: at(0)})

			require.ErrorIs(t, err, ports.ErrNotFound)
		},
	})

	optionalGroup(t, "RebuildClaim", port, implemented, map[string]func(t *testing.T){
		"ClaimsOldestOfItsPerspectives": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			first := requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective, Now: at(time.Second)})
			second := requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective2, Now: at(2 * time.Second)})
			third := requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective, Now: at(3 * time.Second)})
			requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: "other", Now: at(0)})

			require.Nil(t, a.claimRebuild(t, at(4*time.Second)), "an instance with no perspective claims nothing")
			r := a.claimRebuild(t, at(4*time.Second), perspective, perspective2)

			require.NotNil(t, r)
			require.Equal(t, first.ID, r.ID, "the oldest of its perspectives")
			require.Equal(t, ports.RebuildRunning, r.Status)
			require.Equal(t, a.id, r.InstanceID)
			require.Equal(t, 1, r.Attempt)
			requireTime(t, at(4*time.Second).Add(claimDuration), r.ClaimExpiry, "ClaimExpiry")
			requireTime(t, at(4*time.Second), r.StartedAt, "StartedAt")
			requireTime(t, at(4*time.Second), r.UpdatedAt, "UpdatedAt")
			require.Equal(t, *r, getRebuild(t, tb.backend, r.ID), "returned as stored")
			require.Equal(t, second.ID, b.claimRebuild(t, at(4*time.Second), perspective2).ID)
			require.Equal(t, third.ID, a.claimRebuild(t, at(4*time.Second), perspective, perspective2).ID)
			require.Nil(t, b.claimRebuild(t, at(4*time.Second), perspective, perspective2), "the others run under live claims")
		},
		"ExclusiveUnderConcurrentClaims": func(t *testing.T) {
			const n, callers = 6, 4
			tb := setup(t, newBackend)
			var want []uuid.UUID
			for i := range n {
				want = append(want, requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective, Now: at(time.Duration(i) * time.Second)}).ID)
			}
			var (
				mu      sync.Mutex
				claimed []uuid.UUID
				wg      sync.WaitGroup
			)
			errs := make([]error, callers)
			for i := range callers {
				in := &instance{id: newID(t), b: tb.open(t)}
				wg.Go(func() {
					for {
						res, err := in.b.Rebuilds.RebuildClaim(t.Context(), &ports.RebuildClaimParams{
							InstanceID: in.id, Perspectives: []string{perspective}, ClaimDuration: claimDuration, Now: at(time.Minute),
						})
						if err != nil || !res.Claimed {
							errs[i] = err
							return
						}
						mu.Lock()
						claimed = append(claimed, res.Request.ID)
						mu.Unlock()
					}
				})
			}
			wg.Wait()

			for _, err := range errs {
				require.NoError(t, err)
			}
			require.ElementsMatch(t, want, claimed, "every request claimed once between the callers")
		},
		"ExpiredClaimIsTakenOverAndResumed": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective, Now: at(0)})
			claimed := a.claimRebuild(t, at(0), perspective)
			figures := ports.RebuildFigures{StreamsTotal: 5, StreamsDone: 2, EventsReplayed: 7, ResumeAfter: newID(t)}
			require.NoError(t, a.progressRebuild(t, claimed, figures, at(10*time.Second)))
			require.Nil(t, b.claimRebuild(t, at(39*time.Second), perspective), "renewed until at(40s)")

			taken := b.claimRebuild(t, at(40*time.Second), perspective)

			require.NotNil(t, taken, "the claim expired at(40s)")
			require.Equal(t, claimed.ID, taken.ID)
			require.Equal(t, b.id, taken.InstanceID)
			require.Equal(t, 2, taken.Attempt)
			require.Equal(t, figures, taken.RebuildFigures, "resumed where the progress recorded last left it")
			requireTime(t, at(0), taken.StartedAt, "StartedAt stays the first claim's")
			require.ErrorIs(t, a.progressRebuild(t, claimed, ports.RebuildFigures{StreamsDone: 3}, at(41*time.Second)), ports.ErrVersionConflict,
				"the stale claimer is fenced")
			require.ErrorIs(t, a.finishRebuild(t, claimed, "", at(41*time.Second)), ports.ErrVersionConflict)
			require.Equal(t, figures, getRebuild(t, tb.backend, claimed.ID).RebuildFigures, "its calls changed nothing")
			require.NoError(t, b.progressRebuild(t, taken, ports.RebuildFigures{StreamsTotal: 5, StreamsDone: 3}, at(42*time.Second)))
		},
		"HolderGoesOnAfterExpiryUntilTakenOver": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective, Now: at(0)})
			claimed := a.claimRebuild(t, at(0), perspective)

			require.NoError(t, a.progressRebuild(t, claimed, ports.RebuildFigures{StreamsDone: 1}, at(time.Minute)), "nobody took it")

			r := getRebuild(t, tb.backend, claimed.ID)
			requireTime(t, at(time.Minute).Add(claimDuration), r.ClaimExpiry, "ClaimExpiry")
			requireTime(t, at(time.Minute), r.UpdatedAt, "UpdatedAt")
			require.Equal(t, int64(1), r.StreamsDone)
			require.Equal(t, 1, r.Attempt)
		},
		"ReleaseMakesItPendingWithItsProgress": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective, Now: at(0)})
			claimed := a.claimRebuild(t, at(0), perspective)
			figures := ports.RebuildFigures{StreamsTotal: 3, StreamsDone: 1, EventsReplayed: 4, ResumeAfter: newID(t)}

			require.NoError(t, a.b.Rebuilds.RebuildProgress(t.Context(), &ports.RebuildProgressParams{
				ID: claimed.ID, InstanceID: a.id, Attempt: claimed.Attempt, RebuildFigures: figures, Release: true, Now: at(time.Second),
			}))

			r := getRebuild(t, tb.backend, claimed.ID)
			require.Equal(t, ports.RebuildPending, r.Status)
			require.True(t, r.ClaimExpiry.IsZero(), "no claim stands, got %s", r.ClaimExpiry)
			require.Equal(t, figures, r.RebuildFigures)
			taken := b.claimRebuild(t, at(time.Second), perspective)
			require.NotNil(t, taken, "claimed again at once")
			require.Equal(t, 2, taken.Attempt)
			require.Equal(t, figures, taken.RebuildFigures)
			require.ErrorIs(t, a.progressRebuild(t, claimed, figures, at(2*time.Second)), ports.ErrVersionConflict)
		},
		"OlderClaimOfTheSameInstanceIsFenced": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective, Now: at(0)})
			first := a.claimRebuild(t, at(0), perspective)
			second := a.claimRebuild(t, at(time.Minute), perspective)
			require.NotNil(t, second, "its own claim expired")
			require.Equal(t, 2, second.Attempt)

			require.ErrorIs(t, a.progressRebuild(t, first, ports.RebuildFigures{}, at(time.Minute)), ports.ErrVersionConflict)
			require.NoError(t, a.progressRebuild(t, second, ports.RebuildFigures{}, at(time.Minute)))
		},
	})

	optionalGroup(t, "RebuildFinish", port, implemented, map[string]func(t *testing.T){
		"DoneOrFailed": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective, Now: at(0)})
			requestRebuild(t, tb.backend, ports.RebuildRequestParams{Perspective: perspective, Now: at(time.Second)})
			ok := a.claimRebuild(t, at(2*time.Second), perspective)
			bad := a.claimRebuild(t, at(2*time.Second), perspective)
			figures := ports.RebuildFigures{StreamsTotal: 2, StreamsDone: 2, EventsReplayed: 9, ResumeAfter: newID(t)}

			require.NoError(t, a.b.Rebuilds.RebuildFinish(t.Context(), &ports.RebuildFinishParams{
				ID: ok.ID, InstanceID: a.id, Attempt: ok.Attempt, RebuildFigures: figures, Now: at(3 * time.Second),
			}))
			require.NoError(t, a.finishRebuild(t, bad, "replaying version 3: boom", at(4*time.Second)))

			done := getRebuild(t, tb.backend, ok.ID)
			require.Equal(t, ports.RebuildDone, done.Status)
			require.Empty(t, done.Error)
			require.Equal(t, figures, done.RebuildFigures)
			requireTime(t, at(3*time.Second), done.FinishedAt, "FinishedAt")
			requireTime(t, at(3*time.Second), done.UpdatedAt, "UpdatedAt")
			require.True(t, done.ClaimExpiry.IsZero(), "no claim stands, got %s", done.ClaimExpiry)
			failed := getRebuild(t, tb.backend, bad.ID)
			require.Equal(t, ports.RebuildFailed, failed.Status)
			require.Equal(t, "replaying version 3: boom", failed.Error)
			requireTime(t, at(4*time.Second), failed.FinishedAt, "FinishedAt")
			require.Nil(t, a.claimRebuild(t, at(time.Hour), perspective), "finished requests are not claimed")
			require.ErrorIs(t, a.finishRebuild(t, ok, "", at(5*time.Second)), ports.ErrVersionConflict, "finished already")
			require.ErrorIs(t, a.progressRebuild(t, ok, figures, at(5*time.Second)), ports.ErrVersionConflict)
		},
		"NotFoundForUnknownID": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			unknown := &ports.RebuildRequest{ID: newID(t), Attempt: 1}

			require.ErrorIs(t, a.finishRebuild(t, unknown, "", at(0)), ports.ErrNotFound)
			require.ErrorIs(t, a.progressRebuild(t, unknown, ports.RebuildFigures{}, at(0)), ports.ErrNotFound)
		},
	})
}

// requestRebuild stores a rebuild request.
func requestRebuild(t *testing.T, b ports.Backend, p ports.RebuildRequestParams) ports.RebuildRequest {
	t.Helper()
	r, err := b.Admin.RebuildRequest(t.Context(), &p)
	require.NoError(t, err)
	return r
}

// getRebuild returns the request id as it stands.
func getRebuild(t *testing.T, b ports.Backend, id uuid.UUID) ports.RebuildRequest {
	t.Helper()
	r, err := b.Admin.RebuildGet(t.Context(), &ports.RebuildGetParams{ID: id})
	require.NoError(t, err)
	return r
}

// listRebuilds lists the requests p selects.
func listRebuilds(t *testing.T, b ports.Backend, p ports.RebuildsListParams) []ports.RebuildRequest {
	t.Helper()
	rs, err := b.Admin.RebuildsList(t.Context(), &p)
	require.NoError(t, err)
	return rs
}

// cancelRebuild cancels the request id at now.
func cancelRebuild(t *testing.T, b ports.Backend, id uuid.UUID, now time.Time) {
	t.Helper()
	require.NoError(t, b.Admin.RebuildCancel(t.Context(), &ports.RebuildCancelParams{ID: id, Now: now}))
}

// rebuildIDs returns the ids of rs.
func rebuildIDs(rs []ports.RebuildRequest) []uuid.UUID {
	out := make([]uuid.UUID, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

// claimRebuild claims a request of perspectives for claimDuration at now;
// nil when none was claimed.
func (in *instance) claimRebuild(t *testing.T, now time.Time, perspectives ...string) *ports.RebuildRequest {
	t.Helper()
	res, err := in.b.Rebuilds.RebuildClaim(t.Context(), &ports.RebuildClaimParams{
		InstanceID: in.id, Perspectives: perspectives, ClaimDuration: claimDuration, Now: now,
	})
	require.NoError(t, err)
	require.NotNil(t, res)
	if !res.Claimed {
		require.Equal(t, ports.RebuildRequest{}, res.Request)
		return nil
	}
	return &res.Request
}

// progressRebuild records figures under the claim r and renews it for
// claimDuration at now.
func (in *instance) progressRebuild(t *testing.T, r *ports.RebuildRequest, figures ports.RebuildFigures, now time.Time) error {
	t.Helper()
	return in.b.Rebuilds.RebuildProgress(t.Context(), &ports.RebuildProgressParams{
		ID: r.ID, InstanceID: in.id, Attempt: r.Attempt, RebuildFigures: figures, ClaimDuration: claimDuration, Now: now,
	})
}

// finishRebuild finishes the request of the claim r at now, failed with
// errText when it is set.
func (in *instance) finishRebuild(t *testing.T, r *ports.RebuildRequest, errText string, now time.Time) error {
	t.Helper()
	return in.b.Rebuilds.RebuildFinish(t.Context(), &ports.RebuildFinishParams{
		ID: r.ID, InstanceID: in.id, Attempt: r.Attempt, RebuildFigures: r.RebuildFigures, Error: errText, Now: now,
	})
}
