package statuspage_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// t0 is the page's time in every test; the fixtures date everything from
// it, so that ages are known.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// ago returns t0 moved back by d.
func ago(d time.Duration) time.Time { return t0.Add(-d) }

// fixedClock is the page's clock: always t0.
type fixedClock struct{}

func (fixedClock) Now() time.Time { return t0 }

// newBackendFunc returns a fresh, empty backend for the test.
type newBackendFunc func(t *testing.T) ports.Backend

// backends are the adapters every page test runs on.
var backends = []struct {
	name string
	new  newBackendFunc
}{
	{"Memory", newMemory},
	{"Postgres", newPostgres},
}

func newMemory(*testing.T) ports.Backend {
	clock := clocktest.NewFake()
	clock.Set(t0)
	return memory.New(memory.Options{Clock: clock}).Backend()
}

// newPostgres opens the adapter on a schema of the test's own (see
// pgtest.Schema); it skips the test without a database, unless CI is set.
func newPostgres(t *testing.T) ports.Backend {
	t.Helper()
	store, err := postgres.New(pgtest.NewPool(t, 4), postgres.Options{
		Schema:   pgtest.Schema(t),
		PollOnly: true, // the page never listens
		Logger:   slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	return store.Backend()
}

// Names of the fixture.
const (
	orderSummary  = "order_summary"
	customerStats = "customer_stats"
	legacyTotals  = "legacy_totals"
	orderPlaced   = "order_placed"
	paymentFailed = "payment_failed"
	// staleNever keeps the fixture's heartbeats from abandoning each other.
	staleNever = 24 * time.Hour
)

// gatewayError is the error of the fixture's dead letter: long, on
// several lines, with characters HTML must escape.
const gatewayError = "applying payment_failed: payment gateway unreachable: dial tcp 10.0.0.7:443: i/o timeout\n" +
	"goroutine 42 [running]:\n" +
	"main.(*Gateway).Charge(<amount=\"12.00\" & currency=EUR>)\n" +
	"\t/src/orders/gateway.go:81 +0x1d"

// fixture is a backend holding known data, dated from t0:
//
//   - order_summary (order_placed, payment_failed) and customer_stats
//     (order_placed) subscribed; legacy_totals retired;
//   - stream s1: order_placed, payment_failed, order_placed, appended 10m
//     ago; customer_stats applied all of it, order_summary its first event;
//     its payment_failed dead-lettered 5m ago (10 attempts, generation
//     v42), its last event pending;
//   - stream s2: one order_placed, appended 10m ago, pending for both;
//     order_summary failed on it 4m ago and retries it in 2m;
//   - instance A (orders-7d9f-abc, pid 101) holding both streams, its last
//     heartbeat 12s ago; instance B (orders-7d9f-def, pid 102) silent for
//     2m;
//   - a rebuild of customer_stats requested 3m ago by ops@example.com,
//     running on A: 4 of 10 streams, 120 events replayed, as of 1m ago;
//   - a rebuild of order_summary requested 20m ago, failed 15m ago.
type fixture struct {
	b          ports.Backend
	a, bInst   uuid.UUID
	s1, s2     uuid.UUID
	deadLetter ports.DeadLetter
	running    ports.RebuildRequest
	failed     ports.RebuildRequest
}

func seed(t *testing.T, b ports.Backend) *fixture {
	t.Helper()
	ctx := t.Context()
	f := &fixture{b: b, a: newID(t), bInst: newID(t), s1: newID(t), s2: newID(t)}
	require.NoError(t, b.Events.SubscriptionsRegister(ctx, &ports.SubscriptionsRegisterParams{Subscriptions: []ports.Subscription{
		{EventType: orderPlaced, Perspective: orderSummary},
		{EventType: orderPlaced, Perspective: customerStats},
		{EventType: paymentFailed, Perspective: orderSummary},
	}}))
	_, err := b.Admin.PerspectiveRetire(ctx, &ports.PerspectiveRetireParams{Perspective: legacyTotals})
	require.NoError(t, err)

	appendEvents(t, b, f.s1, ago(10*time.Minute), orderPlaced, paymentFailed, orderPlaced)
	appendEvents(t, b, f.s2, ago(10*time.Minute), orderPlaced)
	heartbeat(t, b, f.a, "orders-7d9f-abc", 101, ago(10*time.Minute))
	claim, err := b.Claimer.WorkClaim(ctx, &ports.WorkClaimParams{
		InstanceID: f.a, MaxStreams: 10, LeaseDuration: time.Hour, StaleThreshold: staleNever, PartitionCount: 1, Now: ago(10 * time.Minute),
	})
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{f.s1, f.s2}, claim.StreamIDs)
	fetched, err := b.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
		InstanceID: f.a, StreamIDs: []uuid.UUID{f.s1}, LeaseDuration: time.Hour, StaleThreshold: staleNever, Now: ago(10 * time.Minute),
	})
	require.NoError(t, err)
	work := map[string]map[int64]ports.WorkItem{}
	for _, w := range fetched.Work {
		if work[w.Perspective] == nil {
			work[w.Perspective] = map[int64]ports.WorkItem{}
		}
		work[w.Perspective][w.EventVersion] = w
	}
	require.Len(t, work[orderSummary], 3)
	require.Len(t, work[customerStats], 2)
	completion := func(perspective string, last int64, versions ...int64) ports.Completion {
		c := ports.Completion{StreamID: f.s1, Perspective: perspective, LastEventID: work[perspective][last].EventID, LastVersion: last}
		for _, v := range versions {
			c.WorkIDs = append(c.WorkIDs, work[perspective][v].WorkID)
		}
		return c
	}
	_, err = b.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{InstanceID: f.a, Now: ago(9 * time.Minute), Completions: []ports.Completion{
		completion(orderSummary, 1, 1),
		completion(customerStats, 3, 1, 3),
	}})
	require.NoError(t, err)
	moved, err := b.DeadLetters.DeadLetterMove(ctx, &ports.DeadLetterMoveParams{
		WorkID: work[orderSummary][2].WorkID, InstanceID: f.a, Generation: "v42",
		Reason: ports.ReasonFailed, Error: gatewayError, Attempts: 10, Now: ago(5 * time.Minute),
	})
	require.NoError(t, err)
	require.True(t, moved.Moved)
	f.deadLetter = moved.DeadLetter

	// order_summary fails on s2's event, to be retried in 2 minutes.
	fetched, err = b.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
		InstanceID: f.a, StreamIDs: []uuid.UUID{f.s2}, LeaseDuration: time.Hour, StaleThreshold: staleNever, Now: ago(4 * time.Minute),
	})
	require.NoError(t, err)
	for _, w := range fetched.Work {
		if w.Perspective == orderSummary {
			require.NoError(t, b.Cursors.WorkFail(ctx, &ports.WorkFailParams{InstanceID: f.a, Now: ago(4 * time.Minute), Failures: []ports.Failure{{
				StreamID: f.s2, Perspective: orderSummary, FailedWorkIDs: []uuid.UUID{w.WorkID}, Error: "database is read-only", RetryAt: t0.Add(2 * time.Minute),
			}}}))
		}
	}

	f.failed = rebuildRequest(t, b, orderSummary, "", ago(20*time.Minute))
	claimed := rebuildClaim(t, b, f.a, orderSummary, ago(20*time.Minute))
	require.NoError(t, b.Rebuilds.RebuildFinish(ctx, &ports.RebuildFinishParams{
		ID: claimed.ID, InstanceID: f.a, Attempt: claimed.Attempt,
		RebuildFigures: ports.RebuildFigures{StreamsTotal: 2, StreamsDone: 1, EventsReplayed: 3},
		Error:          "replaying payment_failed, version 2 of stream " + f.s1.String() + ": payment gateway unreachable",
		Now:            ago(15 * time.Minute),
	}))
	f.running = rebuildRequest(t, b, customerStats, "ops@example.com", ago(3*time.Minute))
	claimed = rebuildClaim(t, b, f.a, customerStats, ago(3*time.Minute))
	require.NoError(t, b.Rebuilds.RebuildProgress(ctx, &ports.RebuildProgressParams{
		ID: claimed.ID, InstanceID: f.a, Attempt: claimed.Attempt,
		RebuildFigures: ports.RebuildFigures{StreamsTotal: 10, StreamsDone: 4, EventsReplayed: 120, ResumeAfter: f.s1},
		ClaimDuration:  time.Hour, Now: ago(time.Minute),
	}))

	heartbeat(t, b, f.bInst, "orders-7d9f-def", 102, ago(2*time.Minute))
	heartbeat(t, b, f.a, "orders-7d9f-abc", 101, ago(12*time.Second))
	return f
}

func newID(t *testing.T) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	require.NoError(t, err)
	return id
}

// appendEvents appends events of the types to stream at now.
func appendEvents(t *testing.T, b ports.Backend, stream uuid.UUID, now time.Time, types ...string) {
	t.Helper()
	events := make([]ports.NewEvent, len(types))
	for i, typ := range types {
		events[i] = ports.NewEvent{Type: typ, Data: fmt.Appendf(nil, `{"n":%d}`, i+1)}
	}
	_, err := b.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{StreamID: stream, Events: events, Now: now})
	require.NoError(t, err)
}

func heartbeat(t *testing.T, b ports.Backend, id uuid.UUID, host string, pid int, now time.Time) {
	t.Helper()
	_, err := b.Claimer.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{
		InstanceID: id, ServiceName: "orders", HostName: host, ProcessID: pid, StaleThreshold: staleNever, Now: now,
	})
	require.NoError(t, err)
}

func rebuildRequest(t *testing.T, b ports.Backend, perspective, by string, now time.Time) ports.RebuildRequest {
	t.Helper()
	req, err := b.Admin.RebuildRequest(t.Context(), &ports.RebuildRequestParams{Perspective: perspective, RequestedBy: by, Now: now})
	require.NoError(t, err)
	return req
}

func rebuildClaim(t *testing.T, b ports.Backend, instance uuid.UUID, perspective string, now time.Time) ports.RebuildRequest {
	t.Helper()
	res, err := b.Rebuilds.RebuildClaim(t.Context(), &ports.RebuildClaimParams{
		InstanceID: instance, Perspectives: []string{perspective}, ClaimDuration: time.Hour, Now: now,
	})
	require.NoError(t, err)
	require.True(t, res.Claimed)
	return res.Request
}

// deadLetters appends n failing events to a stream of their own and
// moves each to dead letters, the i-th (from 0) i minutes after an hour
// ago; it returns them oldest first.
func deadLetters(t *testing.T, b ports.Backend, n int) []ports.DeadLetter {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, b.Events.SubscriptionsRegister(ctx, &ports.SubscriptionsRegisterParams{Subscriptions: []ports.Subscription{
		{EventType: paymentFailed, Perspective: orderSummary},
	}}))
	stream, inst := newID(t), newID(t)
	types := make([]string, n)
	for i := range types {
		types[i] = paymentFailed
	}
	appendEvents(t, b, stream, ago(time.Hour), types...)
	heartbeat(t, b, inst, "orders-1", 1, ago(time.Hour))
	_, err := b.Claimer.WorkClaim(ctx, &ports.WorkClaimParams{
		InstanceID: inst, MaxStreams: 10, LeaseDuration: time.Hour, StaleThreshold: staleNever, PartitionCount: 1, Now: ago(time.Hour),
	})
	require.NoError(t, err)
	fetched, err := b.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
		InstanceID: inst, StreamIDs: []uuid.UUID{stream}, LeaseDuration: time.Hour, StaleThreshold: staleNever, Now: ago(time.Hour),
	})
	require.NoError(t, err)
	require.Len(t, fetched.Work, n)
	out := make([]ports.DeadLetter, n)
	for i, w := range fetched.Work {
		res, err := b.DeadLetters.DeadLetterMove(ctx, &ports.DeadLetterMoveParams{
			WorkID: w.WorkID, InstanceID: inst, Reason: ports.ReasonFailed,
			Error: fmt.Sprintf("failure %d", w.EventVersion), Attempts: 3, Now: ago(time.Hour - time.Duration(i)*time.Minute),
		})
		require.NoError(t, err)
		require.True(t, res.Moved)
		out[i] = res.DeadLetter
	}
	return out
}
