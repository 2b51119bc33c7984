package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// Benchmarks of the work statements against long backlogs. Each iteration
// seeds a fresh schema through EventsAppend (untimed), then drains it the
// way the engine does: claim, fetch the claimed streams, complete what was
// fetched, until nothing is left. Besides the drain time (ns/op) they report
// the mean latency of each statement, and the first claim on its own, which
// leases the whole backlog of the streams it selects.
//
//	go test -run '^$' -bench 'StreamBacklog|CatchUp' -benchtime 1x ./adapters/postgres/

// BenchmarkStreamBacklog drains one stream whose two perspectives hold rows
// pending rows between them (rows/2 events), with the engine's default
// limits and with fetches of 1,000 rows.
func BenchmarkStreamBacklog(b *testing.B) {
	for _, rows := range []int{10_000, 50_000} {
		for _, maxRows := range []int{1000, 10_000} {
			b.Run(fmt.Sprintf("rows=%d/max_rows=%d", rows, maxRows), func(b *testing.B) {
				benchDrain(b, 1, rows/2, drainLimits{maxStreams: 300, maxRows: maxRows})
			})
		}
	}
}

// BenchmarkCatchUp drains 1,000 streams of 200 events each, two perspectives
// (400,000 pending rows), with the engine's default limits.
func BenchmarkCatchUp(b *testing.B) {
	benchDrain(b, 1000, 200, drainLimits{maxStreams: 300, maxRows: 10_000})
}

// drainLimits are the claim and fetch bounds of a drain.
type drainLimits struct {
	maxStreams int
	maxRows    int
}

// statementTimes accumulates the latencies of one statement.
type statementTimes struct {
	total time.Duration
	calls int
}

// time runs f and records how long it took, which it returns.
func (s *statementTimes) time(f func()) time.Duration {
	start := time.Now()
	f()
	d := time.Since(start)
	s.total += d
	s.calls++
	return d
}

func (s *statementTimes) report(b *testing.B, unit string) {
	if s.calls > 0 {
		b.ReportMetric(float64(s.total.Microseconds())/1000/float64(s.calls), unit)
	}
}

// benchDrain seeds streams streams of events events each, subscribed by two
// perspectives, and drains them through the ports, b.N times.
func benchDrain(b *testing.B, streams, events int, limits drainLimits) {
	ctx := b.Context()
	perspectives := []string{"alpha", "beta"}
	var (
		appendT, claimT, fetchT, completeT statementTimes
		firstClaim                         time.Duration
	)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		store, err := postgres.New(pgtest.Pool(b), postgres.Options{Schema: pgtest.Schema(b)})
		require.NoError(b, err)
		backend := store.Backend()
		var subs []ports.Subscription
		for _, p := range perspectives {
			subs = append(subs, ports.Subscription{EventType: "tick", Perspective: p})
		}
		require.NoError(b, backend.Events.SubscriptionsRegister(ctx, &ports.SubscriptionsRegisterParams{Subscriptions: subs}))
		for range streams {
			stream := uuid.New()
			for done := 0; done < events; {
				n := min(1000, events-done)
				evs := make([]ports.NewEvent, n)
				for i := range evs {
					evs[i] = ports.NewEvent{Type: "tick", Data: []byte(`{"n":1}`)}
				}
				appendT.time(func() {
					_, err = backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, Events: evs})
				})
				require.NoError(b, err)
				done += n
			}
		}
		instance := uuid.New()
		_, err = backend.Claimer.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{InstanceID: instance, StaleThreshold: time.Hour})
		require.NoError(b, err)
		b.StartTimer()

		type pair struct {
			stream      uuid.UUID
			perspective string
		}
		last := map[pair]int64{} // highest completed version per pair
		processed := 0
		for round := 0; ; round++ {
			var claim *ports.WorkClaimResult
			took := claimT.time(func() {
				claim, err = backend.Claimer.WorkClaim(ctx, &ports.WorkClaimParams{
					InstanceID: instance, MaxStreams: limits.maxStreams, LeaseDuration: time.Hour, StaleThreshold: time.Hour,
				})
			})
			require.NoError(b, err)
			if round == 0 {
				firstClaim += took
			}
			if len(claim.StreamIDs) == 0 {
				require.False(b, claim.HasMore)
				break
			}
			var fetched *ports.EventsFetchPendingResult
			fetchT.time(func() {
				fetched, err = backend.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
					InstanceID: instance, StreamIDs: claim.StreamIDs, LeaseDuration: time.Hour, StaleThreshold: time.Hour,
					MaxRows: limits.maxRows,
				})
			})
			require.NoError(b, err)
			require.NotEmpty(b, fetched.Work, "claimed streams have work to fetch")

			// Each pair's rows continue where its last completion ended.
			var completions []ports.Completion
			index := map[pair]int{}
			for _, w := range fetched.Work {
				k := pair{w.StreamID, w.Perspective}
				require.Equal(b, last[k]+1, w.EventVersion, "rows of %v in version order, none skipped", k)
				last[k] = w.EventVersion
				i, ok := index[k]
				if !ok {
					i = len(completions)
					index[k] = i
					completions = append(completions, ports.Completion{StreamID: w.StreamID, Perspective: w.Perspective})
				}
				c := &completions[i]
				c.LastEventID, c.LastVersion = w.EventID, w.EventVersion
				c.WorkIDs = append(c.WorkIDs, w.WorkID)
			}
			var done *ports.WorkCompleteResult
			completeT.time(func() {
				done, err = backend.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{InstanceID: instance, Completions: completions})
			})
			require.NoError(b, err)
			require.Equal(b, len(fetched.Work), done.Completed)
			require.Zero(b, done.RewindsFlagged)
			processed += done.Completed
		}
		require.Equal(b, streams*events*len(perspectives), processed)

		b.StopTimer()
		require.NoError(b, store.Close())
		b.StartTimer()
	}
	b.StopTimer()
	firstClaim /= time.Duration(b.N)
	b.ReportMetric(float64(firstClaim.Microseconds())/1000, "first-claim-ms")
	claimT.report(b, "claim-ms")
	fetchT.report(b, "fetch-ms")
	completeT.report(b, "complete-ms")
	appendT.report(b, "append-ms")
	b.ReportMetric(float64(claimT.calls)/float64(b.N), "claims/op")
}
