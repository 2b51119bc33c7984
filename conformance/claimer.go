package conformance

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// runClaimer verifies ports.WorkClaimer.
func runClaimer(t *testing.T, newBackend NewBackendFunc) {
	t.Helper()

	group(t, "InstanceDeregister", map[string]func(t *testing.T){
		"ReleasesLeases": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			require.Equal(t, []uuid.UUID{stream}, a.claim(t, at(0)))
			b.heartbeat(t, at(time.Second))

			require.NoError(t, a.b.Claimer.InstanceDeregister(t.Context(), &ports.InstanceDeregisterParams{InstanceID: a.id}))

			if list, ok := instances(t, tb.backend); ok {
				require.Len(t, list, 1)
				require.Equal(t, b.id, list[0].ID)
			}
			// a is live again: had its lease survived, it would run until
			// at(5m) and keep b out.
			a.heartbeat(t, at(2*time.Second))
			res := b.fetch(t, at(2*time.Second), stream)
			require.Equal(t, []int64{1, 2}, versionsOf(res.Work))
			requireNoWork(t, a.fetch(t, at(3*time.Second), stream))
		},
		"CountsNoAttempt": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			require.Len(t, a.fetch(t, at(0), stream).Work, 4, "every row handed out to a")
			b.heartbeat(t, at(time.Second))

			require.NoError(t, a.b.Claimer.InstanceDeregister(t.Context(), &ports.InstanceDeregisterParams{InstanceID: a.id}))

			res := b.fetch(t, at(2*time.Second), stream)
			require.Len(t, res.Work, 4)
			require.Equal(t, []int{0, 0, 0, 0}, attemptsOf(res.Work), "a shutdown that releases its streams is no takeover from a dead instance")
		},
		"UnknownInstanceIsNoOp": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			a.heartbeat(t, at(0))

			require.NoError(t, tb.backend.Claimer.InstanceDeregister(t.Context(), &ports.InstanceDeregisterParams{InstanceID: newID(t)}))

			if list, ok := instances(t, tb.backend); ok {
				require.Len(t, list, 1)
				require.Equal(t, a.id, list[0].ID)
			}
		},
	})

	group(t, "InstanceHeartbeat", map[string]func(t *testing.T){
		"AbandonsStaleInstances": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 1)
			a.heartbeat(t, at(0))
			require.Equal(t, []uuid.UUID{stream}, a.claim(t, at(0)))
			require.Len(t, a.fetch(t, at(0), stream).Work, 1)

			require.Empty(t, b.heartbeat(t, at(10*time.Second)).Abandoned, "a is still live")
			res := b.heartbeat(t, at(31*time.Second))

			require.Equal(t, []uuid.UUID{a.id}, res.Abandoned)
			if list, ok := instances(t, tb.backend); ok {
				require.Len(t, list, 1)
				require.Equal(t, b.id, list[0].ID)
			}
			// a's lease ran until at(5m); it was released with the instance.
			require.Equal(t, []uuid.UUID{stream}, b.claim(t, at(31*time.Second)))
			require.Equal(t, []int{1}, attemptsOf(b.fetch(t, at(31*time.Second), stream).Work), "the row was handed out to a, which died holding it")
		},
		"AbandonmentChargesEveryHandedOutRow": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			streams := newIDs(t, 3)
			for _, s := range streams {
				appendN(t, tb.backend, s, at(0), eventType, 2)
			}
			a.heartbeat(t, at(0))
			b.heartbeat(t, at(0))
			// a is handed every row of the first two streams, one of them
			// under a lease that has expired by the abandonment (still a's:
			// nobody took the stream); b is handed the third stream.
			require.Len(t, a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: streams[:1], LeaseDuration: 10 * time.Second, Now: at(0)}).Work, 4)
			require.Len(t, a.fetch(t, at(0), streams[1]).Work, 4)
			require.Len(t, b.fetch(t, at(0), streams[2]).Work, 4)
			b.heartbeat(t, at(20*time.Second))

			require.Equal(t, []uuid.UUID{a.id}, b.heartbeat(t, at(31*time.Second)).Abandoned)

			res := b.fetch(t, at(32*time.Second), streams...)
			require.Len(t, res.Work, 12)
			for _, w := range res.Work {
				want := 1
				if w.StreamID == streams[2] {
					want = 0 // b's own stream was not released
				}
				require.Equal(t, want, w.Attempts, "row %s/%s/%d: each row handed out to the dead holder counts one takeover", w.StreamID, w.Perspective, w.EventVersion)
			}
		},
		"AbandonmentChargesNoRowNeverHandedOut": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			claimed, fetched := newID(t), newID(t)
			appendN(t, tb.backend, claimed, at(0), eventType, 2)
			appendN(t, tb.backend, fetched, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			require.ElementsMatch(t, []uuid.UUID{claimed, fetched}, a.claim(t, at(0)), "a alone owns every partition")
			// A claim hands nothing out. The fetch is cut after the first
			// row of perspective2, and a version arrives after it.
			res := a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{fetched}, MaxRows: 3, Now: at(0)})
			require.Equal(t, []int64{1, 2}, versionsOf(ofPerspective(res.Work, perspective)))
			require.Equal(t, []int64{1}, versionsOf(ofPerspective(res.Work, perspective2)))
			appendN(t, tb.backend, fetched, at(time.Second), eventType, 1)
			b.heartbeat(t, at(10*time.Second))

			require.Equal(t, []uuid.UUID{a.id}, b.heartbeat(t, at(31*time.Second)).Abandoned)

			work := b.fetch(t, at(32*time.Second), claimed, fetched).Work
			require.Equal(t, []int{0, 0, 0, 0}, attemptsOf(ofStream(work, claimed)), "a claimed the stream but was handed none of its rows")
			got := ofStream(work, fetched)
			require.Equal(t, []int64{1, 2, 3}, versionsOf(ofPerspective(got, perspective)))
			require.Equal(t, []int{1, 1, 0}, attemptsOf(ofPerspective(got, perspective)), "version 3 arrived after the fetch")
			require.Equal(t, []int64{1, 2, 3}, versionsOf(ofPerspective(got, perspective2)))
			require.Equal(t, []int{1, 0, 0}, attemptsOf(ofPerspective(got, perspective2)), "the fetch was cut after version 1")
		},
		"ConcurrentSurvivorsAbandonOnce": func(t *testing.T) {
			tb := setup(t, newBackend)
			ins := tb.instances(t, 5)
			dead, survivors := ins[0], ins[1:]
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			streams := newIDs(t, 3)
			for _, s := range streams {
				appendN(t, tb.backend, s, at(0), eventType, 2)
			}
			dead.heartbeat(t, at(0))
			require.Len(t, dead.fetch(t, at(0), streams...).Work, 12)
			for _, in := range survivors {
				in.heartbeat(t, at(10*time.Second))
			}

			// Every survivor was live before this heartbeat, so each may
			// abandon dead; between them they must do it once.
			results := make([]*ports.InstanceHeartbeatResult, len(survivors))
			errs := make([]error, len(survivors))
			var wg sync.WaitGroup
			for i, in := range survivors {
				wg.Go(func() {
					results[i], errs[i] = in.b.Claimer.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{
						InstanceID: in.id, ServiceName: "conformance", StaleThreshold: staleThreshold, Now: at(35 * time.Second),
					})
				})
			}
			wg.Wait()

			var abandoned []uuid.UUID
			for i := range survivors {
				require.NoError(t, errs[i])
				require.False(t, results[i].Rejoined, "survivor %d was live", i)
				abandoned = append(abandoned, results[i].Abandoned...)
			}
			require.Equal(t, []uuid.UUID{dead.id}, abandoned, "abandoned once between the survivors")
			res := survivors[0].fetch(t, at(36*time.Second), streams...)
			require.Len(t, res.Work, 12)
			require.Equal(t, slices.Repeat([]int{1}, 12), attemptsOf(res.Work), "one takeover, one attempt per row")
		},
		"KeepsLiveInstances": func(t *testing.T) {
			tb := setup(t, newBackend)
			ins := tb.instances(t, 2)
			ins[0].heartbeat(t, at(0))

			res := ins[1].heartbeat(t, at(29*time.Second))

			require.Empty(t, res.Abandoned)
			if list, ok := instances(t, tb.backend); ok {
				require.Len(t, list, 2)
			}
		},
		"LiveCountsLiveInstances": func(t *testing.T) {
			tb := setup(t, newBackend)
			ins := tb.instances(t, 3)
			a, b, passive := ins[0], ins[1], ins[2]

			require.Equal(t, 1, a.heartbeat(t, at(0)).Live, "the caller alone")
			require.Equal(t, 2, b.heartbeat(t, at(10*time.Second)).Live, "a and b")
			require.Equal(t, 3, passive.heartbeatAs(t, at(15*time.Second), true).Live, "a passive instance counts itself")
			require.Equal(t, 3, a.heartbeat(t, at(20*time.Second)).Live, "and is counted by the others")
			require.Equal(t, 3, b.heartbeat(t, at(30*time.Second)).Live)

			// The passive instance is stale after at(45s), a after at(50s).
			res := b.heartbeat(t, at(46*time.Second))
			require.Equal(t, []uuid.UUID{passive.id}, res.Abandoned)
			require.Equal(t, 2, res.Live, "the abandoned instance is gone")
			res = b.heartbeat(t, at(51*time.Second))
			require.Equal(t, []uuid.UUID{a.id}, res.Abandoned)
			require.Equal(t, 1, res.Live, "b alone is left")
		},
		"LiveLeavesOutInstancesThatAreNotLive": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			a.heartbeat(t, at(0))

			// At the boundary a is no longer live, though not abandoned yet.
			res := b.heartbeat(t, at(staleThreshold))
			require.Empty(t, res.Abandoned)
			require.Equal(t, 1, res.Live, "a at the boundary is not live")

			// A rejoin abandons nobody: the stale a stays recorded, not live.
			c := tb.instance(t)
			res = c.heartbeat(t, at(40*time.Second))
			require.True(t, res.Rejoined)
			require.Empty(t, res.Abandoned)
			require.Equal(t, 2, res.Live, "b and c; a is stale")
		},
		"NextStaleAtIgnoresOwnHeartbeat": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)

			require.True(t, a.heartbeat(t, at(0)).NextStaleAt.IsZero(), "alone")
			require.True(t, a.heartbeat(t, at(10*time.Second)).NextStaleAt.IsZero(), "still alone")
			b.heartbeat(t, at(20*time.Second))
			// a's clock is behind b's: its own deadline, at(40s), comes before
			// b's, at(50s), and must not count.
			res := a.heartbeat(t, at(10*time.Second))

			requireTime(t, at(20*time.Second+staleThreshold), res.NextStaleAt, "NextStaleAt")
		},
		"NextStaleAtIsEarliestOtherDeadline": func(t *testing.T) {
			tb := setup(t, newBackend)
			ins := tb.instances(t, 3)
			a, b, c := ins[0], ins[1], ins[2]
			a.heartbeat(t, at(0))

			requireTime(t, at(staleThreshold), b.heartbeat(t, at(10*time.Second)).NextStaleAt, "b sees a")
			c.heartbeat(t, at(5*time.Second))
			requireTime(t, at(staleThreshold), b.heartbeat(t, at(15*time.Second)).NextStaleAt, "b sees a before c")
			requireTime(t, at(5*time.Second+staleThreshold), a.heartbeat(t, at(20*time.Second)).NextStaleAt, "a sees c before b")
		},
		"NextStaleAtTracksAbandonment": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			a.heartbeat(t, at(0))
			requireTime(t, at(staleThreshold), b.heartbeat(t, at(10*time.Second)).NextStaleAt, "a is live")

			// At the boundary a is no longer live but not yet abandoned: it is
			// still the next to abandon.
			res := b.heartbeat(t, at(staleThreshold))
			require.Empty(t, res.Abandoned)
			requireTime(t, at(staleThreshold), res.NextStaleAt, "a at the boundary")

			res = b.heartbeat(t, at(staleThreshold+time.Millisecond))
			require.Equal(t, []uuid.UUID{a.id}, res.Abandoned)
			require.True(t, res.NextStaleAt.IsZero(), "no other instance left, got %s", res.NextStaleAt)
		},
		"NewInstanceRejoinsWithoutAbandoning": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 1)
			a.heartbeat(t, at(0))
			require.Equal(t, []uuid.UUID{stream}, a.claim(t, at(0)))
			require.Len(t, a.fetch(t, at(0), stream).Work, 1)

			// a is stale at(40s), but b was not live before its first
			// heartbeat: it may be the first of many instances coming back
			// together, so it only registers.
			first := b.heartbeat(t, at(40*time.Second))
			require.True(t, first.Rejoined, "a first heartbeat rejoins")
			require.Empty(t, first.Abandoned)
			require.True(t, first.NextStaleAt.IsZero(), "a stale instance is not the next to go stale, got %s", first.NextStaleAt)
			if list, ok := instances(t, tb.backend); ok {
				require.Len(t, list, 2, "a is still recorded")
			}

			next := b.heartbeat(t, at(50*time.Second))
			require.False(t, next.Rejoined, "b was live since at(40s)")
			require.Equal(t, []uuid.UUID{a.id}, next.Abandoned)
			require.Equal(t, []uuid.UUID{stream}, b.claim(t, at(50*time.Second)))
			require.Equal(t, []int{1}, attemptsOf(b.fetch(t, at(50*time.Second), stream).Work), "abandoned once")
		},
		"OutageRejoinsWithoutAbandoning": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 1)
			a.heartbeat(t, at(0))
			require.Equal(t, []uuid.UUID{stream}, a.claim(t, at(0)))
			require.Len(t, a.fetch(t, at(0), stream).Work, 1)
			b.heartbeat(t, at(0))
			require.False(t, b.heartbeat(t, at(10*time.Second)).Rejoined, "b is live")

			// Nobody could heartbeat for a minute (the database was
			// unreachable). b comes back first: its own heartbeat is stale, so
			// it cannot tell a dead a from one silenced like itself.
			res := b.heartbeat(t, at(70*time.Second))
			require.True(t, res.Rejoined, "b's previous heartbeat is stale")
			require.Empty(t, res.Abandoned)

			// a re-registers within a heartbeat interval and keeps its work.
			require.True(t, a.heartbeat(t, at(75*time.Second)).Rejoined)
			res = b.heartbeat(t, at(80*time.Second))
			require.False(t, res.Rejoined)
			require.Empty(t, res.Abandoned, "a is live again")
			require.Equal(t, []uuid.UUID{stream}, a.claim(t, at(80*time.Second)))
			require.Equal(t, []int{0}, attemptsOf(a.fetch(t, at(80*time.Second), stream).Work), "a never lost its stream")
		},
		"ReleasesLeasesOfStaleInstances": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 1)
			a.heartbeat(t, at(0))
			require.Equal(t, []uuid.UUID{stream}, a.claim(t, at(0)))
			b.heartbeat(t, at(10*time.Second))
			require.Equal(t, []uuid.UUID{a.id}, b.heartbeat(t, at(31*time.Second)).Abandoned)

			// a comes back: a surviving lease (until at(5m)) would make it
			// the stream's live holder and keep b out.
			a.heartbeat(t, at(32*time.Second))
			res := b.fetch(t, at(32*time.Second), stream)

			require.Equal(t, []int64{1}, versionsOf(res.Work))
			require.Empty(t, a.claim(t, at(33*time.Second)), "b now holds the stream")
		},
	})

	group(t, "WorkClaim", map[string]func(t *testing.T){
		"CountsOnlyTakeoversAsAttempts": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 1)
			lease := time.Minute
			observe := func(in *instance, now time.Time) int {
				t.Helper()
				res := in.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: lease, Now: now})
				require.Len(t, res.Work, 1)
				return res.Work[0].Attempts
			}

			a.heartbeat(t, at(0))
			require.Equal(t, []uuid.UUID{stream}, a.claimWith(t, ports.WorkClaimParams{LeaseDuration: lease, Now: at(0)}).StreamIDs)
			require.Equal(t, 0, observe(a, at(0)), "leasing an unleased stream is no attempt")

			a.heartbeat(t, at(2*time.Minute))
			require.Equal(t, []uuid.UUID{stream}, a.claimWith(t, ports.WorkClaimParams{LeaseDuration: lease, Now: at(2 * time.Minute)}).StreamIDs)
			require.Equal(t, 0, observe(a, at(2*time.Minute)), "re-leasing its own expired lease is no attempt")

			// a's lease ends at(3m) and a is dead after at(2m30s), holding
			// the row its last fetch handed out.
			b.heartbeat(t, at(4*time.Minute))
			require.Equal(t, []uuid.UUID{stream}, b.claimWith(t, ports.WorkClaimParams{LeaseDuration: lease, Now: at(4 * time.Minute)}).StreamIDs)
			require.Equal(t, 1, observe(b, at(4*time.Minute)), "taking the stream of a dead holder is a takeover")
		},
		"DistributesOrphansByPartitionModulo": func(t *testing.T) {
			tb := setup(t, newBackend)
			ins := tb.instances(t, 3)
			subscribe(t, tb.backend, eventType, perspective)
			streams := newIDs(t, 30)
			for _, s := range streams {
				appendN(t, tb.backend, s, at(0), eventType, 1)
			}
			for _, in := range ins {
				in.heartbeat(t, at(0))
			}

			owner := make(map[uuid.UUID]uuid.UUID)
			for _, in := range ins {
				claimed := in.claim(t, at(time.Second))
				require.Less(t, len(claimed), len(streams), "the other live instances count in the distribution")
				for _, s := range claimed {
					prev, taken := owner[s]
					require.False(t, taken, "stream %s claimed by %s and %s", s, prev, in.id)
					owner[s] = in.id
				}
			}
			require.Len(t, owner, len(streams), "every orphaned stream has a claimer")
		},
		"EmptyWithoutWork": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			a.heartbeat(t, at(0))

			res := a.claimWith(t, ports.WorkClaimParams{Now: at(0)})

			require.Empty(t, res.StreamIDs)
			require.False(t, res.HasMore)
		},
		"HasMoreWhenLimitReached": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			streams := newIDs(t, 3)
			for _, s := range streams {
				appendN(t, tb.backend, s, at(0), eventType, 1)
			}
			a.heartbeat(t, at(0))

			first := a.claimWith(t, ports.WorkClaimParams{MaxStreams: 2, Now: at(0)})
			require.Len(t, first.StreamIDs, 2)
			require.True(t, first.HasMore)

			all := a.claimWith(t, ports.WorkClaimParams{MaxStreams: 5, Now: at(time.Second)})
			require.ElementsMatch(t, streams, all.StreamIDs)
			require.False(t, all.HasMore)

			held := a.claimWith(t, ports.WorkClaimParams{MaxStreams: 2, Now: at(2 * time.Second)})
			require.Len(t, held.StreamIDs, 2)
			require.True(t, held.HasMore, "a holds three streams")
		},
		"LeasesNoMoreStreamsThanItReturns": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			streams := newIDs(t, 3)
			for _, s := range streams {
				appendN(t, tb.backend, s, at(0), eventType, 1)
			}
			a.heartbeat(t, at(0))
			first := a.claimWith(t, ports.WorkClaimParams{MaxStreams: 2, Now: at(0)}).StreamIDs
			require.Len(t, first, 2)

			// a drains two streams already: claiming again leases nothing new.
			again := a.claimWith(t, ports.WorkClaimParams{MaxStreams: 2, Now: at(time.Second)})
			require.ElementsMatch(t, first, again.StreamIDs)
			require.True(t, again.HasMore)
			var left uuid.UUID
			for _, s := range streams {
				if !slices.Contains(first, s) {
					left = s
				}
			}
			b.heartbeat(t, at(2*time.Second))
			res := b.fetch(t, at(2*time.Second), left)
			require.Equal(t, []int64{1}, versionsOf(res.Work), "a did not lease the third stream")
			require.Equal(t, []int{0}, attemptsOf(res.Work), "b took an unleased stream")
		},
		"LeaseCoversEveryRowOfTheStream": func(t *testing.T) {
			tb := setup(t, newBackend)
			low, high := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			stream, control := newID(t), newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 1)
			high.heartbeat(t, at(0))
			require.Equal(t, []uuid.UUID{stream}, high.claim(t, at(0)))
			appendN(t, tb.backend, stream, at(time.Second), eventType, 1)
			appendN(t, tb.backend, control, at(time.Second), eventType, 1)
			low.heartbeat(t, at(2*time.Second))

			// With one partition every stream nobody holds is low's. high's
			// lease covers both perspectives of the stream, and the version
			// appended after the claim.
			require.Equal(t, []uuid.UUID{control}, low.claimWith(t, ports.WorkClaimParams{PartitionCount: onePartition, Now: at(3 * time.Second)}).StreamIDs)
			requireNoWork(t, low.fetch(t, at(3*time.Second), stream))

			res := high.fetch(t, at(4*time.Second), stream)
			require.Equal(t, []int64{1, 2}, versionsOf(ofPerspective(res.Work, perspective)))
			require.Equal(t, []int64{1, 2}, versionsOf(ofPerspective(res.Work, perspective2)))
			require.Equal(t, []int{0, 0, 0, 0}, attemptsOf(res.Work), "low took nothing of the stream")
		},
		"NewInstanceDoesNotStealLeasedStreams": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			streams := newIDs(t, 20)
			for _, s := range streams {
				appendN(t, tb.backend, s, at(0), eventType, 1)
			}
			a.heartbeat(t, at(0))
			require.ElementsMatch(t, streams, a.claim(t, at(0)), "a alone owns every partition")
			b.heartbeat(t, at(time.Second))

			// a is live and its leases run until at(5m): they keep b out of
			// every stream, whatever b's partitions.
			a.heartbeat(t, at(15*time.Second))
			require.Empty(t, b.claim(t, at(20*time.Second)))
			requireNoWork(t, b.fetch(t, at(20*time.Second), streams...))
			require.ElementsMatch(t, streams, a.claim(t, at(20*time.Second)))
			require.Equal(t, slices.Repeat([]int{0}, 20), attemptsOf(a.fetch(t, at(20*time.Second), streams...).Work), "a kept its streams")
		},
		"ReclaimsStreamsOfDeadInstances": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			lease := 40 * time.Second
			require.Equal(t, []uuid.UUID{stream}, a.claimWith(t, ports.WorkClaimParams{LeaseDuration: lease, Now: at(0)}).StreamIDs)
			require.Len(t, a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: lease, Now: at(0)}).Work, 2)
			b.heartbeat(t, at(20*time.Second))

			require.Empty(t, b.claim(t, at(25*time.Second)), "a is live and its lease runs until at(40s)")
			require.Equal(t, []uuid.UUID{stream}, b.claim(t, at(35*time.Second)), "a is dead: its unexpired lease is no longer live")
			require.Equal(t, []int{1, 1}, attemptsOf(b.fetch(t, at(35*time.Second), stream).Work), "handed out to a, which died holding them")
		},
		"RequiresLiveHeartbeat": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)

			_, err := a.tryClaim(t, ports.WorkClaimParams{Now: at(0)})
			require.ErrorIs(t, err, ports.ErrInstanceNotAlive, "never heartbeated")

			a.heartbeat(t, at(0))
			_, err = a.tryClaim(t, ports.WorkClaimParams{Now: at(29 * time.Second)})
			require.NoError(t, err)
			_, err = a.tryClaim(t, ports.WorkClaimParams{Now: at(31 * time.Second)})
			require.ErrorIs(t, err, ports.ErrInstanceNotAlive, "heartbeat older than the threshold")
		},
		"ReturnsHeldStreamsOnEveryCall": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))

			require.Equal(t, []uuid.UUID{stream}, a.claim(t, at(0)))
			require.Equal(t, []uuid.UUID{stream}, a.claim(t, at(time.Second)))
			require.Equal(t, []uuid.UUID{stream}, a.claim(t, at(2*time.Second)))
			require.Equal(t, []int{0, 0}, attemptsOf(a.fetch(t, at(2*time.Second), stream).Work), "held rows count nothing")
		},
		"ScheduledRetryBlocksLaterRows": func(t *testing.T) {
			tb, a, stream := setupScheduledRetry(t, newBackend)

			// Version 3 arrived after the failure. Neither a claim nor a fetch
			// may return it while version 1 waits for at(60s).
			require.Empty(t, a.claimWith(t, ports.WorkClaimParams{LeaseDuration: 20 * time.Second, Now: at(10 * time.Second)}).StreamIDs)
			requireNoWork(t, a.fetchWith(t, ports.EventsFetchPendingParams{
				StreamIDs: []uuid.UUID{stream}, LeaseDuration: 20 * time.Second, Now: at(10 * time.Second),
			}))

			// b abandons a. The failure took version 1 and the rows above it
			// off a's hands (a stops at a failure), so the abandonment
			// charges none of them.
			b := tb.instance(t)
			b.heartbeat(t, at(20*time.Second))
			require.Equal(t, []uuid.UUID{a.id}, b.heartbeat(t, at(45*time.Second)).Abandoned)
			b.heartbeat(t, at(61*time.Second))
			require.Equal(t, []uuid.UUID{stream}, b.claim(t, at(61*time.Second)))
			res := b.fetch(t, at(61*time.Second), stream)
			require.Equal(t, []int64{1, 2, 3}, versionsOf(res.Work))
			require.Equal(t, []int{1, 0, 0}, attemptsOf(res.Work), "version 1 failed once; versions 2 and 3 were not being applied when a died")
		},
		"ScheduledRetryExpiresAndUnblocks": func(t *testing.T) {
			_, a, stream := setupScheduledRetry(t, newBackend)

			a.heartbeat(t, at(61*time.Second))
			require.Equal(t, []uuid.UUID{stream}, a.claim(t, at(61*time.Second)))
			res := a.fetch(t, at(61*time.Second), stream)
			require.Equal(t, []int64{1, 2, 3}, versionsOf(res.Work))
			require.Equal(t, []int{1, 0, 0}, attemptsOf(res.Work), "the failure counted, a's own rows did not")
		},
		"ScheduledRetryLeavesTheLeaseAlone": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			lease := 40 * time.Second
			require.Equal(t, []uuid.UUID{stream}, a.claimWith(t, ports.WorkClaimParams{LeaseDuration: lease, Now: at(0)}).StreamIDs)
			work := a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: lease, Now: at(0)}).Work
			require.Len(t, work, 2)
			a.fail(t, at(time.Second), ports.Failure{
				StreamID: stream, Perspective: perspective,
				FailedWorkIDs: workIDs(work[:1]), Error: "boom", RetryAt: at(2 * time.Minute),
			})

			// The lease ends at(40s) while version 1 waits: the stream is not
			// drainable, so claims and fetches before the retry time must
			// leave its lease alone.
			a.heartbeat(t, at(45*time.Second))
			require.Empty(t, a.claimWith(t, ports.WorkClaimParams{LeaseDuration: lease, Now: at(45 * time.Second)}).StreamIDs)
			requireNoWork(t, a.fetch(t, at(45*time.Second), stream))
			a.heartbeat(t, at(90*time.Second))
			require.Empty(t, a.claimWith(t, ports.WorkClaimParams{LeaseDuration: lease, Now: at(90 * time.Second)}).StreamIDs)

			// a is live. Had it leased the stream again at(45s) or at(90s),
			// its lease would keep b out; the lease of at(0) expired long
			// ago, and b takes the stream of a live holder without charge.
			a.heartbeat(t, at(120*time.Second))
			b.heartbeat(t, at(121*time.Second))
			res := b.fetch(t, at(121*time.Second), stream)
			require.Equal(t, []int64{1, 2}, versionsOf(res.Work), "a's lease was not renewed")
			require.Equal(t, []int{1, 0}, attemptsOf(res.Work), "version 1 failed once; a lives, so nothing was taken over")
		},
		"TakesExpiredLeaseOfLiveHolderWithoutAttempt": func(t *testing.T) {
			tb := setup(t, newBackend)
			low, high := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 2)
			low.heartbeat(t, at(0))
			high.heartbeat(t, at(0))
			// A fetch applies no partition rule: high is handed the rows under
			// a 10s lease. With one partition every stream nobody holds is
			// low's.
			require.Len(t, high.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: 10 * time.Second, Now: at(0)}).Work, 2)
			claim := func(now time.Time) []uuid.UUID {
				t.Helper()
				return low.claimWith(t, ports.WorkClaimParams{PartitionCount: onePartition, Now: now}).StreamIDs
			}

			require.Empty(t, claim(at(5*time.Second)), "high's lease is live")
			high.heartbeat(t, at(15*time.Second))
			low.heartbeat(t, at(15*time.Second))
			require.Equal(t, []uuid.UUID{stream}, claim(at(20*time.Second)), "high lives, but its lease expired")

			res := low.fetch(t, at(20*time.Second), stream)
			require.Equal(t, []int64{1, 2}, versionsOf(res.Work))
			require.Equal(t, []int{0, 0}, attemptsOf(res.Work), "high did not crash: taking its expired lease is no takeover")
			requireNoWork(t, high.fetch(t, at(21*time.Second), stream))
		},
		"SmallestBacklogFirst": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			large, small, medium := newID(t), newID(t), newID(t)
			appendN(t, tb.backend, large, at(0), eventType, 5)
			appendN(t, tb.backend, small, at(0), eventType, 1)
			appendN(t, tb.backend, medium, at(0), eventType, 3)
			a.heartbeat(t, at(0))

			require.Equal(t, []uuid.UUID{small, medium, large}, a.claim(t, at(0)))
		},
	})

	group(t, "Passive", map[string]func(t *testing.T){
		"ActiveClaimsEveryStreamPassiveRankedFirst": func(t *testing.T) {
			tb := setup(t, newBackend)
			passive, active := tb.pair(t)
			requireActiveClaimsAll(t, tb, active, passive)
		},
		"ActiveClaimsEveryStreamPassiveRankedLast": func(t *testing.T) {
			tb := setup(t, newBackend)
			active, passive := tb.pair(t)
			requireActiveClaimsAll(t, tb, active, passive)
		},
		"KeepsItsHeldStreams": func(t *testing.T) {
			tb := setup(t, newBackend)
			passive, active := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			held := newID(t)
			appendN(t, tb.backend, held, at(0), eventType, 1)
			passive.heartbeatAs(t, at(0), true)
			active.heartbeat(t, at(0))
			// What a rebuild or a rewind does: fetch a stream by id.
			lease := 10 * time.Second
			res := passive.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{held}, LeaseDuration: lease, Now: at(0)})
			require.Equal(t, []int64{1}, versionsOf(res.Work))

			require.Empty(t, active.claimWith(t, ports.WorkClaimParams{PartitionCount: passivePartitions, Now: at(time.Second)}).StreamIDs, "under the passive instance's live lease")
			require.Equal(t, []uuid.UUID{held}, passive.claimWith(t, ports.WorkClaimParams{PartitionCount: passivePartitions, Now: at(time.Second)}).StreamIDs, "the passive instance drains what it holds")

			// Its lease expired; nobody took the stream, so it still holds it
			// and its claim leases it again.
			passive.heartbeatAs(t, at(15*time.Second), true)
			active.heartbeat(t, at(15*time.Second))
			require.Equal(t, []uuid.UUID{held}, passive.claimWith(t, ports.WorkClaimParams{PartitionCount: passivePartitions, Now: at(20 * time.Second)}).StreamIDs, "its own stream")
			require.Empty(t, active.claimWith(t, ports.WorkClaimParams{PartitionCount: passivePartitions, Now: at(20 * time.Second)}).StreamIDs, "under the passive instance's live lease again")
			requireNoWork(t, active.fetch(t, at(20*time.Second), held))
			require.Equal(t, []int{0}, attemptsOf(passive.fetch(t, at(20*time.Second), held).Work), "re-leased its own expired lease")
		},
		"IsAbandonedWhenStale": func(t *testing.T) {
			tb := setup(t, newBackend)
			passive, active := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			held := newID(t)
			appendN(t, tb.backend, held, at(0), eventType, 1)
			passive.heartbeatAs(t, at(0), true)
			require.Len(t, passive.fetch(t, at(0), held).Work, 1)
			active.heartbeat(t, at(10*time.Second))

			require.Equal(t, []uuid.UUID{passive.id}, active.heartbeat(t, at(31*time.Second)).Abandoned)
			require.Equal(t, []uuid.UUID{held}, active.claimWith(t, ports.WorkClaimParams{PartitionCount: passivePartitions, Now: at(31 * time.Second)}).StreamIDs)
		},
		"InstancesListReportsPassive": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			a.heartbeatAs(t, at(0), true)
			b.heartbeat(t, at(0))

			list, ok := instances(t, tb.backend)
			if !ok {
				t.Skip("adapter does not implement ports.Admin")
			}
			require.Len(t, list, 2)
			require.Equal(t, []uuid.UUID{a.id, b.id}, []uuid.UUID{list[0].ID, list[1].ID})
			require.True(t, list[0].Passive)
			require.False(t, list[1].Passive)

			a.heartbeatAs(t, at(time.Second), false)
			b.heartbeatAs(t, at(time.Second), true)
			list, _ = instances(t, tb.backend)
			require.False(t, list[0].Passive, "the latest heartbeat says")
			require.True(t, list[1].Passive, "the latest heartbeat says")
		},
		"RanksAgainWhenActive": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			first := newIDs(t, passiveStreams)
			for _, s := range first {
				appendN(t, tb.backend, s, at(0), eventType, 1)
			}
			a.heartbeat(t, at(0))
			b.heartbeatAs(t, at(0), true)
			require.ElementsMatch(t, first, claimAll(t, a, at(0)), "b is passive")

			b.heartbeatAs(t, at(time.Second), false)
			second := newIDs(t, passiveStreams)
			for _, s := range second {
				appendN(t, tb.backend, s, at(time.Second), eventType, 1)
			}
			ofA := claimAll(t, a, at(2*time.Second))
			ofB := claimAll(t, b, at(2*time.Second))

			require.Subset(t, ofA, first, "a keeps what it holds")
			require.NotEmpty(t, ofB, "b takes a rank again")
			require.Subset(t, second, ofB, "b takes none of a's streams")
			for _, s := range ofB {
				require.NotContains(t, ofA, s, "stream %s claimed by both", s)
			}
			require.Equal(t, len(first)+len(second), len(ofA)+len(ofB), "every stream has one claimer")
		},
	})

	group(t, "WorkRenewLeases", map[string]func(t *testing.T){
		"CountsLeases": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective, perspective2)
			streams := newIDs(t, 2)
			for _, s := range streams {
				appendN(t, tb.backend, s, at(0), eventType, 3)
			}
			a.heartbeat(t, at(0))
			require.Len(t, a.fetch(t, at(0), streams...).Work, 12)

			require.Equal(t, 2, a.renew(t, at(time.Second), time.Minute, streams[1], streams[0], streams[1], newID(t)),
				"one lease per stream, whatever its rows; a duplicate or unknown stream adds none")
		},
		"ExtendsOwnLeases": func(t *testing.T) {
			tb := setup(t, newBackend)
			ins := tb.instances(t, 2)
			a, c := ins[0], ins[1]
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			lease := 45 * time.Second
			require.Equal(t, []uuid.UUID{stream}, a.claimWith(t, ports.WorkClaimParams{LeaseDuration: lease, Now: at(0)}).StreamIDs)
			require.Len(t, a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: lease, Now: at(0)}).Work, 2)
			c.heartbeat(t, at(25*time.Second))

			require.Equal(t, 1, a.renew(t, at(29*time.Second), lease, stream))

			// a stays live. Without the renewal its lease would have ended
			// at(45s); with it, it runs until at(74s).
			a.heartbeat(t, at(50*time.Second))
			c.heartbeat(t, at(50*time.Second))
			requireNoWork(t, c.fetch(t, at(50*time.Second), stream))
			a.heartbeat(t, at(75*time.Second))
			c.heartbeat(t, at(75*time.Second))
			res := c.fetch(t, at(76*time.Second), stream)
			require.Equal(t, []int64{1, 2}, versionsOf(res.Work), "the renewed lease expired")
			require.Equal(t, []int{0, 0}, attemptsOf(res.Work), "a lives: nothing was taken over")
		},
		"RenewsOwnExpiredLease": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 1)
			a.heartbeat(t, at(0))
			require.Len(t, a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: 10 * time.Second, Now: at(0)}).Work, 1)
			a.heartbeat(t, at(15*time.Second))
			b.heartbeat(t, at(15*time.Second))

			require.Equal(t, 1, a.renew(t, at(20*time.Second), 10*time.Second, stream), "nobody took the expired lease: it is still a's")

			requireNoWork(t, b.fetch(t, at(25*time.Second), stream))
			require.Equal(t, []int{0}, attemptsOf(a.fetch(t, at(26*time.Second), stream).Work))
		},
		"CountsNoAttempt": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := tb.instance(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			lease := 10 * time.Second
			ids := workIDs(a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: lease, Now: at(0)}).Work)
			require.Len(t, ids, 2)

			require.Equal(t, 1, a.renew(t, at(5*time.Second), lease, stream))
			require.Equal(t, 1, a.renew(t, at(20*time.Second), lease, stream), "nobody took the expired lease over: it is still a's")

			res := a.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: lease, Now: at(21 * time.Second)})
			require.Equal(t, ids, workIDs(res.Work))
			require.Equal(t, []int{0, 0}, attemptsOf(res.Work), "renewals are no attempts")
		},
		"FencedToHolder": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			events := appendN(t, tb.backend, stream, at(0), eventType, 2)
			a.heartbeat(t, at(0))
			require.Equal(t, []uuid.UUID{stream}, a.claim(t, at(0)))
			work := a.fetch(t, at(0), stream).Work
			require.Len(t, work, 2)

			require.Zero(t, b.renew(t, at(time.Second), time.Minute, stream), "not b's stream")
			require.Zero(t, a.renew(t, at(time.Second), time.Minute, newID(t)), "unknown stream")
			a.complete(t, at(2*time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[0].ID, LastVersion: 1, WorkIDs: workIDs(work[:1]),
			})
			require.Equal(t, 1, a.renew(t, at(3*time.Second), time.Minute, stream), "version 2 is pending: a still holds the stream")
			a.complete(t, at(4*time.Second), ports.Completion{
				StreamID: stream, Perspective: perspective,
				LastEventID: events[1].ID, LastVersion: 2, WorkIDs: workIDs(work[1:]),
			})
			require.Zero(t, a.renew(t, at(5*time.Second), time.Minute, stream), "the drained stream was released")
		},
		"FencedAfterTakeover": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			subscribe(t, tb.backend, eventType, perspective)
			stream := newID(t)
			appendN(t, tb.backend, stream, at(0), eventType, 1)
			a.heartbeat(t, at(0))
			require.Equal(t, []uuid.UUID{stream}, a.claimWith(t, ports.WorkClaimParams{LeaseDuration: 40 * time.Second, Now: at(0)}).StreamIDs)
			b.heartbeat(t, at(20*time.Second))
			require.Len(t, b.fetch(t, at(45*time.Second), stream).Work, 1, "b took the stream of dead a")

			require.Zero(t, a.renew(t, at(46*time.Second), time.Minute, stream))
			a.heartbeat(t, at(47*time.Second))
			requireNoWork(t, a.fetch(t, at(48*time.Second), stream))
		},
	})
}

// Backlog shape of the passive cases: few partitions, and enough streams
// that both ranks of two instances would get some.
const (
	passivePartitions = 8
	passiveStreams    = 64
)

// requireActiveClaimsAll fails t unless, with passive live and passive,
// active's claims lease every stream of a backlog spread over
// passivePartitions partitions, and passive's claims lease none of it.
func requireActiveClaimsAll(t *testing.T, tb *testBundle, active, passive *instance) {
	t.Helper()
	subscribe(t, tb.backend, eventType, perspective)
	streams := newIDs(t, passiveStreams)
	for _, s := range streams {
		appendN(t, tb.backend, s, at(0), eventType, 1)
	}
	active.heartbeat(t, at(0))
	passive.heartbeatAs(t, at(0), true)

	res := passive.claimWith(t, ports.WorkClaimParams{PartitionCount: passivePartitions, Now: at(time.Second)})
	require.Empty(t, res.StreamIDs, "a passive instance takes no stream nobody holds")
	require.False(t, res.HasMore, "no candidate is the passive instance's")

	require.ElementsMatch(t, streams, claimAll(t, active, at(time.Second)), "the only active instance owns every partition")
	res2 := active.fetch(t, at(time.Second), streams...)
	require.Len(t, res2.Work, len(streams))
	require.Equal(t, slices.Repeat([]int{0}, len(streams)), attemptsOf(res2.Work), "nobody leased the rows before")
}

// claimAll claims at now with passivePartitions until the claim reports no
// more, and returns the streams of the last claim: all in drains.
func claimAll(t *testing.T, in *instance, now time.Time) []uuid.UUID {
	t.Helper()
	var res *ports.WorkClaimResult
	for range 10 {
		res = in.claimWith(t, ports.WorkClaimParams{PartitionCount: passivePartitions, MaxStreams: 4 * passiveStreams, Now: now})
		if !res.HasMore {
			break
		}
	}
	require.False(t, res.HasMore, "claims keep reporting more")
	return res.StreamIDs
}

// runTransient verifies that the adapter reports a lost connection as
// ports.ErrTransient, and recovers from it, with calls that change nothing
// the case depends on, so the failure is all it observes.
func runTransient(t *testing.T, newBackend NewBackendFunc, breakConnections func(t *testing.T, b ports.Backend)) {
	t.Helper()
	const name = "ErrTransient"
	if breakConnections == nil {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Skip("Features.BreakConnections is nil: the adapter has no connection to lose")
		})
		return
	}

	group(t, name, map[string]func(t *testing.T){
		"LostConnectionOnHeartbeat": func(t *testing.T) {
			tb := setup(t, newBackend)
			a := &instance{id: newID(t), b: tb.backend}
			a.heartbeat(t, at(0))

			breakConnections(t, tb.backend)
			_, err := a.b.Claimer.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{
				InstanceID: a.id, ServiceName: "conformance", StaleThreshold: staleThreshold, Now: at(time.Second),
			})
			require.ErrorIs(t, err, ports.ErrTransient, "a lost connection may pass: the engine retries, never charging an event")

			a.heartbeat(t, at(2*time.Second))
		},
		"LostConnectionOnRead": func(t *testing.T) {
			tb := setup(t, newBackend)
			list := func() error {
				_, err := tb.backend.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: newID(t)})
				return err
			}
			require.NoError(t, list())

			breakConnections(t, tb.backend)
			require.ErrorIs(t, list(), ports.ErrTransient, "a lost connection may pass: the engine retries, never charging an event")

			require.NoError(t, list(), "the next call reconnects")
		},
	})
}

// setupScheduledRetry prepares a stream leased to a (until at(5m)) whose
// versions 1 and 2 were handed out to a, whose version 1 then failed and is
// scheduled for at(60s), and whose version 3 arrived after the failure.
func setupScheduledRetry(t *testing.T, newBackend NewBackendFunc) (*testBundle, *instance, uuid.UUID) {
	t.Helper()
	tb := setup(t, newBackend)
	a := tb.instance(t)
	subscribe(t, tb.backend, eventType, perspective)
	stream := newID(t)
	appendN(t, tb.backend, stream, at(0), eventType, 2)
	a.heartbeat(t, at(0))
	require.Equal(t, []uuid.UUID{stream}, a.claim(t, at(0)))
	work := a.fetch(t, at(0), stream).Work
	require.Len(t, work, 2)
	a.fail(t, at(time.Second), ports.Failure{
		StreamID: stream, Perspective: perspective,
		FailedWorkIDs: workIDs(work[:1]), Error: "boom", RetryAt: at(60 * time.Second),
	})
	appendN(t, tb.backend, stream, at(2*time.Second), eventType, 1)
	return tb, a, stream
}
