package postgres_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// TestFlow walks one event through every port: append, heartbeat, claim,
// fetch, complete, with model save and cursor read. It is a smoke test; the
// conformance suite owns the contracts. It runs on pools of every pgx query
// exec mode, and through a PgBouncer in transaction pooling mode in the
// modes that work there, whereas the whole suite runs in the modes of
// TestConformance, TestConformanceQueryExecModes and
// TestConformanceThroughPgBouncer only.
func TestFlow(t *testing.T) {
	t.Parallel()

	for _, mode := range queryExecModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			testFlow(t, newStoreWith(t, pgtest.PoolOptions{QueryExecMode: mode.mode}, postgres.Options{Schema: pgtest.Schema(t)}))
		})
	}
	t.Run("PgBouncer", func(t *testing.T) {
		t.Parallel()
		bouncer := pgtest.RequirePgBouncer(t, pgtest.PgBouncerOptions{})
		for _, mode := range bouncerExecModes {
			t.Run(mode.name, func(t *testing.T) {
				t.Parallel()
				pool := pgtest.PoolOptions{ConnString: bouncer.ConnString(), QueryExecMode: mode.mode}
				testFlow(t, newStoreWith(t, pool, postgres.Options{Schema: pgtest.Schema(t)}))
			})
		}
	})
}

func testFlow(t *testing.T, b *testBundle) {
	ctx := t.Context()
	be := b.backend

	require.NoError(t, be.Events.SubscriptionsRegister(ctx, &ports.SubscriptionsRegisterParams{Subscriptions: []ports.Subscription{
		{EventType: "OrderPlaced", Perspective: "orders"},
		{EventType: "OrderPlaced", Perspective: "totals"},
	}}))
	stream := uuid.New()
	res, err := be.Events.EventsAppend(ctx, &ports.EventsAppendParams{
		StreamID:        stream,
		ExpectedVersion: ports.ExpectNoStream,
		Events: []ports.NewEvent{
			{Type: "OrderPlaced", Data: []byte(`{"n":1}`)},
			{Type: "OrderPlaced", Data: []byte(`{"n":2}`)},
		},
		Now: base,
	})
	require.NoError(t, err)
	require.Equal(t, 4, res.WorkRows)
	require.Equal(t, int64(1), res.Events[0].Version)
	require.Equal(t, int64(2), res.Events[1].Version)

	_, err = be.Events.EventsAppend(ctx, &ports.EventsAppendParams{
		StreamID: stream, ExpectedVersion: 1, Now: base,
		Events: []ports.NewEvent{{Type: "OrderPlaced", Data: []byte(`{}`)}},
	})
	require.ErrorIs(t, err, ports.ErrVersionConflict)

	inst := uuid.New()
	_, err = be.Claimer.WorkClaim(ctx, &ports.WorkClaimParams{InstanceID: inst, MaxStreams: 10, LeaseDuration: time.Minute, StaleThreshold: 30 * time.Second, Now: base})
	require.ErrorIs(t, err, ports.ErrInstanceNotAlive)

	_, err = be.Claimer.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{InstanceID: inst, StaleThreshold: 30 * time.Second, Now: base})
	require.NoError(t, err)
	claim, err := be.Claimer.WorkClaim(ctx, &ports.WorkClaimParams{InstanceID: inst, MaxStreams: 10, LeaseDuration: time.Minute, StaleThreshold: 30 * time.Second, Now: base})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{stream}, claim.StreamIDs)
	require.False(t, claim.HasMore)

	fetched, err := be.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
		InstanceID: inst, StreamIDs: []uuid.UUID{stream}, LeaseDuration: time.Minute, StaleThreshold: 30 * time.Second, Now: base,
	})
	require.NoError(t, err)
	require.Len(t, fetched.Work, 4)
	require.Len(t, fetched.Events, 2)
	require.JSONEq(t, `{"n":1}`, string(fetched.Events[0].Data))
	require.Empty(t, fetched.Cursors, "no pair has a cursor yet")
	for _, w := range fetched.Work {
		require.Zero(t, w.Attempts, "leasing an unleased row is no attempt")
	}

	var orders []uuid.UUID
	for _, w := range fetched.Work {
		if w.Perspective == "orders" {
			orders = append(orders, w.WorkID)
		}
	}
	require.NoError(t, be.Models.ModelSave(ctx, &ports.ModelSaveParams{
		StreamID: stream, Perspective: "orders", Data: []byte(`{"count":2}`),
		LastEventID: res.Events[1].ID, LastVersion: 2, Now: base,
	}))
	err = be.Models.ModelSave(ctx, &ports.ModelSaveParams{
		StreamID: stream, Perspective: "orders", Data: []byte(`{"count":2}`),
		LastEventID: res.Events[1].ID, LastVersion: 2, Now: base,
	})
	require.ErrorIs(t, err, ports.ErrVersionConflict)
	refetched, err := be.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
		InstanceID: inst, StreamIDs: []uuid.UUID{stream}, LeaseDuration: time.Minute, StaleThreshold: 30 * time.Second, Now: base,
	})
	require.NoError(t, err)
	require.Len(t, refetched.Work, 4)
	require.Len(t, refetched.Cursors, 1, "the saved model's cursor comes with the rows; totals has none")
	require.Equal(t, "orders", refetched.Cursors[0].Perspective)
	require.Equal(t, int64(2), refetched.Cursors[0].LastVersion)
	done, err := be.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{
		InstanceID: inst, Now: base,
		Completions: []ports.Completion{{StreamID: stream, Perspective: "orders", LastEventID: res.Events[1].ID, LastVersion: 2, WorkIDs: orders}},
	})
	require.NoError(t, err)
	require.Equal(t, 2, done.Completed)
	require.Equal(t, 0, done.RewindsFlagged)

	cursors, err := be.Cursors.CursorsGet(ctx, &ports.CursorsGetParams{StreamIDs: []uuid.UUID{stream}})
	require.NoError(t, err)
	require.Len(t, cursors, 1)
	require.Equal(t, ports.CursorCompleted, cursors[0].Status)
	require.Equal(t, int64(2), cursors[0].LastVersion)

	model, err := be.Models.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: stream, Perspective: "orders"})
	require.NoError(t, err)
	require.JSONEq(t, `{"count":2}`, string(model.Data))

	events, err := be.Fetcher.EventsReadStream(ctx, &ports.EventsReadStreamParams{StreamID: stream, AfterVersion: 1})
	require.NoError(t, err)
	require.Len(t, events, 1)
	require.Equal(t, res.Events[1].ID, events[0].ID)
}
