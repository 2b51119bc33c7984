package memory_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// benchBundle is a store with a registered subscription and one live
// instance, shared by the benchmarks.
type benchBundle struct {
	store    *memory.Store
	instance uuid.UUID
	now      time.Time
}

// newBenchBundle returns a store whose event type "T" fans out to the given
// perspectives, with one live instance at clocktest.Start.
func newBenchBundle(b *testing.B, perspectives ...string) *benchBundle {
	b.Helper()
	store := memory.New(memory.Options{})
	b.Cleanup(func() { _ = store.Close() })
	subs := make([]ports.Subscription, 0, len(perspectives))
	for _, p := range perspectives {
		subs = append(subs, ports.Subscription{EventType: "T", Perspective: p})
	}
	require.NoError(b, store.SubscriptionsRegister(b.Context(), &ports.SubscriptionsRegisterParams{Subscriptions: subs}))
	bb := &benchBundle{store: store, instance: uuid.New(), now: clocktest.Start}
	_, err := store.InstanceHeartbeat(b.Context(), &ports.InstanceHeartbeatParams{InstanceID: bb.instance, StaleThreshold: time.Hour, Now: bb.now})
	require.NoError(b, err)
	return bb
}

// appendStreams appends perStream events to each of n new streams and
// returns the stream ids.
func (bb *benchBundle) appendStreams(b *testing.B, n, perStream int) []uuid.UUID {
	b.Helper()
	events := make([]ports.NewEvent, perStream)
	for i := range events {
		events[i] = ports.NewEvent{Type: "T", Data: fmt.Appendf(nil, `{"i":%d}`, i)}
	}
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.New()
		_, err := bb.store.EventsAppend(b.Context(), &ports.EventsAppendParams{StreamID: ids[i], Events: events, Now: bb.now})
		require.NoError(b, err)
	}
	return ids
}

// claimParams returns the engine's claim parameters for bb's instance.
func (bb *benchBundle) claimParams(maxStreams int) *ports.WorkClaimParams {
	return &ports.WorkClaimParams{
		InstanceID: bb.instance, MaxStreams: maxStreams,
		LeaseDuration: time.Hour, StaleThreshold: time.Hour, Now: bb.now,
	}
}

// BenchmarkWorkClaimBacklog measures the steady state of a busy instance
// behind a large backlog: it already drains MaxStreams (300) streams and
// claims again while thousands of unowned streams of 30 rows wait. The call
// leases nothing and must only report HasMore, at a cost independent of the
// backlog.
func BenchmarkWorkClaimBacklog(b *testing.B) {
	for _, backlog := range []int{1000, 5000, 20000} {
		b.Run(fmt.Sprintf("streams=%d", backlog), func(b *testing.B) {
			bb := newBenchBundle(b, "p")
			bb.appendStreams(b, 300, 30)
			params := bb.claimParams(300)
			res, err := bb.store.WorkClaim(b.Context(), params)
			require.NoError(b, err)
			require.Len(b, res.StreamIDs, 300)
			bb.appendStreams(b, backlog, 30)

			for b.Loop() {
				res, err := bb.store.WorkClaim(b.Context(), params)
				if err != nil {
					b.Fatal(err)
				}
				if len(res.StreamIDs) != 300 || !res.HasMore {
					b.Fatalf("claimed %d streams, HasMore %t", len(res.StreamIDs), res.HasMore)
				}
			}
		})
	}
}

// BenchmarkEventsFetchPending measures the fetch of a busy instance: 300
// streams of 30 events fanned out to two perspectives, leased to the
// caller and fetched whole, with their work rows, cursors and events.
func BenchmarkEventsFetchPending(b *testing.B) {
	bb := newBenchBundle(b, "p1", "p2")
	bb.appendStreams(b, 300, 30)
	res, err := bb.store.WorkClaim(b.Context(), bb.claimParams(300))
	require.NoError(b, err)
	require.Len(b, res.StreamIDs, 300)
	params := &ports.EventsFetchPendingParams{
		InstanceID: bb.instance, StreamIDs: res.StreamIDs,
		LeaseDuration: time.Hour, StaleThreshold: time.Hour, Now: bb.now,
	}
	b.ReportAllocs()
	for b.Loop() {
		fetched, err := bb.store.EventsFetchPending(b.Context(), params)
		if err != nil {
			b.Fatal(err)
		}
		if len(fetched.Work) != 300*30*2 || len(fetched.Events) != 300*30 {
			b.Fatalf("fetched %d rows and %d events", len(fetched.Work), len(fetched.Events))
		}
	}
}

// BenchmarkCatchUp appends 5,000 streams of 20 events fanned out to two
// perspectives (the orders demo) and drains them the way the engine does:
// claim up to 300 streams, fetch them, complete every fetched row with its
// cursor in one call, and repeat until nothing is left. One op is the whole
// append and catch-up.
func BenchmarkCatchUp(b *testing.B) {
	const (
		streams   = 5000
		perStream = 20
		events    = streams * perStream
	)
	for b.Loop() {
		bb := newBenchBundle(b, "p1", "p2")
		bb.appendStreams(b, streams, perStream)
		completed := catchUp(b, bb)
		if completed != 2*events {
			b.Fatalf("completed %d rows, want %d", completed, 2*events)
		}
	}
	b.ReportMetric(float64(events*b.N)/b.Elapsed().Seconds(), "events/s")
}

// catchUp drains every pending row of bb as one engine instance would and
// returns how many rows it completed.
func catchUp(b *testing.B, bb *benchBundle) int {
	b.Helper()
	ctx := b.Context()
	claim := bb.claimParams(300)
	completed := 0
	for {
		res, err := bb.store.WorkClaim(ctx, claim)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.StreamIDs) == 0 {
			if res.HasMore {
				b.Fatal("HasMore without streams")
			}
			return completed
		}
		fetched, err := bb.store.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
			InstanceID: bb.instance, StreamIDs: res.StreamIDs, MaxRows: 10_000,
			LeaseDuration: time.Hour, StaleThreshold: time.Hour, Now: bb.now,
		})
		if err != nil {
			b.Fatal(err)
		}
		var completions []ports.Completion
		for _, w := range fetched.Work {
			n := len(completions)
			if n == 0 || completions[n-1].StreamID != w.StreamID || completions[n-1].Perspective != w.Perspective {
				completions = append(completions, ports.Completion{StreamID: w.StreamID, Perspective: w.Perspective})
				n++
			}
			c := &completions[n-1]
			c.WorkIDs = append(c.WorkIDs, w.WorkID)
			c.LastEventID, c.LastVersion = w.EventID, w.EventVersion
		}
		done, err := bb.store.WorkComplete(ctx, &ports.WorkCompleteParams{InstanceID: bb.instance, Completions: completions, Now: bb.now})
		if err != nil {
			b.Fatal(err)
		}
		completed += done.Completed
	}
}
