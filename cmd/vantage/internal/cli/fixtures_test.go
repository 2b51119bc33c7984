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
	opts.PollingInterval = 10 * time.Millisecond
	opts.NotifyHealthyPollingInterval = 10 * time.Millisecond
	opts.ClaimInterval = 10 * time.Millisecond
	opts.ClaimNotifyHealthyInterval = 10 * time.Millisecond
	opts.HeartbeatInterval = 100 * time.Millisecond
	opts.DrainBatcher = core.DrainBatcherOptions{SlidingWindow: time.Millisecond, MaxWait: 5 * time.Millisecond}
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
	opts := core.Options{MaxPerspectiveEventAttempts: 1}
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
