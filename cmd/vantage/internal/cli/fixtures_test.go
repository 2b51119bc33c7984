package cli_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// The domain of the fixtures: orders, summarised per order by
// order_summary (which cannot apply a failed payment: the poison) and
// counted per customer by customer_stats.
type (
	orderPlaced   struct{ Amount int }
	paymentFailed struct{ Reason string }
	orderSummary  struct{ Orders int }
	customerStats struct{ Events int }
)

// errGateway is what order_summary fails every failed payment with.
var errGateway = errors.New("payment gateway unreachable: dial tcp 10.0.0.7:443: i/o timeout")

// orderStream is the stream of the fixtures' events.
var orderStream = uuid.MustParse("0197a3c4-1111-7000-8000-00000000abcd")

func registry(t *testing.T) *core.Registry {
	t.Helper()
	reg := core.NewRegistry()
	require.NoError(t, core.RegisterEvent[orderPlaced](reg, "order_placed"))
	require.NoError(t, core.RegisterEvent[paymentFailed](reg, "payment_failed"))
	summary := core.NewPerspective[orderSummary]("order_summary")
	core.MustHandle(summary, func(_ context.Context, m orderSummary, _ orderPlaced) (orderSummary, error) {
		m.Orders++
		return m, nil
	})
	core.MustHandle(summary, func(context.Context, orderSummary, paymentFailed) (orderSummary, error) {
		return orderSummary{}, errGateway
	})
	require.NoError(t, reg.AddPerspective(summary))
	stats := core.NewPerspective[customerStats]("customer_stats")
	core.MustHandle(stats, func(_ context.Context, m customerStats, _ orderPlaced) (customerStats, error) {
		m.Events++
		return m, nil
	})
	require.NoError(t, reg.AddPerspective(stats))
	return reg
}

// appendOrders appends events to orderStream after version after.
func appendOrders(t *testing.T, b ports.Backend, after int64, events ...any) {
	t.Helper()
	expected := after
	if after == 0 {
		expected = ports.ExpectNoStream
	}
	_, err := registry(t).Append(t.Context(), b.Events, orderStream, expected, events...)
	require.NoError(t, err)
}

// process runs an engine instance on b until wait returns, then stops it
// (it deregisters).
func process(t *testing.T, b ports.Backend, opts core.Options, wait func()) {
	t.Helper()
	processWith(t, b, registry(t), opts, wait)
}

// processWith is process with the perspectives of reg.
func processWith(t *testing.T, b ports.Backend, reg *core.Registry, opts core.Options, wait func()) {
	t.Helper()
	opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	opts.Drain.PollingInterval = 10 * time.Millisecond
	opts.Drain.NotifyHealthyPollingInterval = 10 * time.Millisecond
	opts.Claims.Interval = 10 * time.Millisecond
	opts.Claims.NotifyHealthyInterval = 10 * time.Millisecond
	opts.Claims.HeartbeatInterval = 100 * time.Millisecond
	opts.Drain.Batcher = core.DrainBatcherOptions{SlidingWindow: time.Millisecond, MaxWait: 5 * time.Millisecond}
	w, err := core.New(b, reg, &opts)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	wait()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), waitTimeout)
	defer cancel()
	require.NoError(t, w.Stop(ctx))
}

// waitTimeout bounds every wait of the fixtures.
const waitTimeout = 30 * time.Second

func waitFor[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// deadLetters appends two orders and two failed payments and lets an
// engine instance dead-letter the payments (one attempt each) and apply
// the rest; it returns the dead letters, oldest first.
func deadLetters(t *testing.T, b ports.Backend) []ports.DeadLetter {
	t.Helper()
	appendOrders(t, b, 0, orderPlaced{Amount: 10}, paymentFailed{Reason: "card"}, orderPlaced{Amount: 20}, paymentFailed{Reason: "fraud"})
	dead := make(chan ports.DeadLetter, 2)
	applied := make(chan core.PerspectiveEventProcessed, 16)
	opts := core.Options{Retries: core.RetryOptions{MaxEventAttempts: 1}}
	opts.Hooks.OnDeadLettered = func(dl ports.DeadLetter) { dead <- dl }
	opts.Hooks.OnPerspectiveEventProcessed = func(e core.PerspectiveEventProcessed) { applied <- e }
	process(t, b, opts, func() {
		waitFor(t, dead, "the first dead letter")
		waitFor(t, dead, "the second dead letter")
		for stats := int64(0); stats < 3; { // customer_stats applies the orders, 1 and 3
			if e := waitFor(t, applied, "customer_stats to apply the stream"); e.Perspective == "customer_stats" {
				stats = max(stats, e.LastVersion)
			}
		}
	})
	dls, err := b.DeadLetters.DeadLettersList(t.Context(), &ports.DeadLettersListParams{})
	require.NoError(t, err)
	require.Len(t, dls, 2)
	require.True(t, slices.IsSortedFunc(dls, func(a, b ports.DeadLetter) int { return int(a.EventVersion - b.EventVersion) }))
	return dls
}

// handMadeDeadLetter stores a dead letter of perspective through the
// ports, with no engine: an event of a new stream that only perspective
// subscribes to, its work row fetched and moved to dead letters by a
// made-up instance.
func handMadeDeadLetter(t *testing.T, b ports.Backend, perspective string) ports.DeadLetter {
	t.Helper()
	ctx := t.Context()
	stream, instance := uuid.New(), uuid.New()
	eventType := perspective + "_event"
	_, err := b.Events.EventsAppend(ctx, &ports.EventsAppendParams{
		StreamID: stream, ExpectedVersion: ports.ExpectNoStream,
		Events:        []ports.NewEvent{{Type: eventType, Data: []byte(`{}`)}},
		Subscriptions: []ports.Subscription{{EventType: eventType, Perspective: perspective}},
	})
	require.NoError(t, err)
	fetched, err := b.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
		InstanceID: instance, StreamIDs: []uuid.UUID{stream}, LeaseDuration: time.Minute, StaleThreshold: time.Minute,
	})
	require.NoError(t, err)
	require.Len(t, fetched.Work, 1)
	moved, err := b.DeadLetters.DeadLetterMove(ctx, &ports.DeadLetterMoveParams{
		WorkID: fetched.Work[0].WorkID, InstanceID: instance, Reason: ports.ReasonFailed, Error: "made by hand", Attempts: 1,
	})
	require.NoError(t, err)
	require.True(t, moved.Moved)
	return moved.DeadLetter
}

// rebuildInstance is the made-up instance that claims the rebuild
// requests of the fixtures.
var rebuildInstance = uuid.MustParse("0197a3c4-0000-7000-8000-00000000000a")

// rebuildRequests stores rebuild requests in every status through the
// ports, on the tests' fixed clock, and returns them as they stand, oldest
// first:
//
//   - running: customer_stats, every stream, 2 of 5 streams done in 8
//     minutes, so 12 minutes left;
//   - done: order_summary, one stream;
//   - failed: customer_stats, at its second stream;
//   - cancelled: order_summary, before an instance claimed it;
//   - pending: customer_stats, two streams.
func rebuildRequests(t *testing.T, b ports.Backend) []ports.RebuildRequest {
	t.Helper()
	ctx := t.Context()
	at := func(ago time.Duration) time.Time { return fixedNow.Add(-ago) }
	request := func(perspective, by string, ago time.Duration, streams ...uuid.UUID) ports.RebuildRequest {
		t.Helper()
		r, err := b.Admin.RebuildRequest(ctx, &ports.RebuildRequestParams{Perspective: perspective, StreamIDs: streams, RequestedBy: by, Now: at(ago)})
		require.NoError(t, err)
		return r
	}
	claim := func(want ports.RebuildRequest, ago time.Duration) ports.RebuildRequest {
		t.Helper()
		res, err := b.Rebuilds.RebuildClaim(ctx, &ports.RebuildClaimParams{
			InstanceID: rebuildInstance, Perspectives: []string{want.Perspective}, ClaimDuration: time.Hour, Now: at(ago),
		})
		require.NoError(t, err)
		require.True(t, res.Claimed)
		require.Equal(t, want.ID, res.Request.ID)
		return res.Request
	}
	finish := func(r ports.RebuildRequest, figures ports.RebuildFigures, errText string, ago time.Duration) {
		t.Helper()
		require.NoError(t, b.Rebuilds.RebuildFinish(ctx, &ports.RebuildFinishParams{
			ID: r.ID, InstanceID: rebuildInstance, Attempt: r.Attempt, RebuildFigures: figures, Error: errText, Now: at(ago),
		}))
	}

	running := claim(request("customer_stats", "alice, INC-2291", 10*time.Minute), 9*time.Minute)
	done := claim(request("order_summary", "", 8*time.Minute, orderStream), 7*time.Minute)
	finish(done, ports.RebuildFigures{StreamsTotal: 1, StreamsDone: 1, EventsReplayed: 4, ResumeAfter: orderStream}, "", 6*time.Minute)
	failed := claim(request("customer_stats", "bob", 5*time.Minute), 5*time.Minute)
	finish(failed, ports.RebuildFigures{StreamsTotal: 5, StreamsDone: 1, EventsReplayed: 3, ResumeAfter: orderStream},
		"rebuilding stream 0197a3c4-2222-7000-8000-000000000002: applying event 3 (order_placed): amount must be positive", 4*time.Minute)
	cancelled := request("order_summary", "", 3*time.Minute)
	require.NoError(t, b.Admin.RebuildCancel(ctx, &ports.RebuildCancelParams{ID: cancelled.ID, Now: at(150 * time.Second)}))
	request("customer_stats", "", 2*time.Minute, orderStreams[1], orderStreams[0])
	require.NoError(t, b.Rebuilds.RebuildProgress(ctx, &ports.RebuildProgressParams{
		ID: running.ID, InstanceID: rebuildInstance, Attempt: running.Attempt, ClaimDuration: time.Hour, Now: at(time.Minute),
		RebuildFigures: ports.RebuildFigures{StreamsTotal: 5, StreamsDone: 2, EventsReplayed: 40, ResumeAfter: orderStreams[1]},
	}))

	list, err := b.Admin.RebuildsList(ctx, &ports.RebuildsListParams{})
	require.NoError(t, err)
	require.Len(t, list, 5)
	slices.Reverse(list)
	return list
}

// instanceIDs are the instances heartbeats records.
var instanceIDs = []uuid.UUID{
	uuid.MustParse("0197a3c4-0000-7000-8000-000000000001"),
	uuid.MustParse("0197a3c4-0000-7000-8000-000000000002"),
	uuid.MustParse("0197a3c4-0000-7000-8000-000000000003"),
}

// heartbeats records instanceIDs on the tests' fixed clock: two instances
// of the orders service, one silent for 45s, and a passive one of
// billing, silent for 3m07s.
func heartbeats(t *testing.T, b ports.Backend) {
	t.Helper()
	for _, hb := range []ports.InstanceHeartbeatParams{
		{InstanceID: instanceIDs[0], ServiceName: "orders", HostName: "orders-7d9f-abc", ProcessID: 101, Now: fixedNow.Add(-2 * time.Second)},
		{InstanceID: instanceIDs[1], ServiceName: "orders", HostName: "orders-7d9f-def", ProcessID: 102, Now: fixedNow.Add(-45 * time.Second)},
		{InstanceID: instanceIDs[2], ServiceName: "billing", HostName: "billing-1", ProcessID: 7, Passive: true,
			Metadata: map[string]string{"version": "v42"}, Now: fixedNow.Add(-3*time.Minute - 7*time.Second)},
	} {
		hb.StaleThreshold = time.Hour // none abandons another
		_, err := b.Claimer.InstanceHeartbeat(t.Context(), &hb)
		require.NoError(t, err)
	}
}

// leaseStream has instance lease a new stream: an event of it that only
// shipping_eta subscribes to, fetched on the tests' fixed clock and left
// pending. It returns the event's work row.
func leaseStream(t *testing.T, b ports.Backend, instance uuid.UUID) ports.WorkItem {
	t.Helper()
	stream := uuid.New()
	_, err := b.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{
		StreamID: stream, ExpectedVersion: ports.ExpectNoStream, Now: fixedNow.Add(-30 * time.Second),
		Events:        []ports.NewEvent{{Type: "parcel_shipped", Data: []byte(`{}`)}},
		Subscriptions: []ports.Subscription{{EventType: "parcel_shipped", Perspective: "shipping_eta"}},
	})
	require.NoError(t, err)
	fetched, err := b.Fetcher.EventsFetchPending(t.Context(), &ports.EventsFetchPendingParams{
		InstanceID: instance, StreamIDs: []uuid.UUID{stream}, LeaseDuration: time.Hour, StaleThreshold: time.Hour, Now: fixedNow.Add(-10 * time.Second),
	})
	require.NoError(t, err)
	require.Len(t, fetched.Work, 1)
	return fetched.Work[0]
}
