package postgres_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// Events and model of the drift test.
type (
	driftAdded   struct{ N int }
	driftRemoved struct{ N int }
	driftTotal   struct {
		Sum      int
		Versions []int64
	}
)

// TestSchemaRecreatedUnderARunningWorker drops a schema (a forced revert to
// version 0) and migrates it up again while a worker runs on it: the
// worker's calls fail meanwhile, and it goes on once the tables are back.
// The recreated schema has forgotten the subscriptions. Appends through a
// core.Registry carry theirs, so they still store their work rows, which
// the worker applies; a raw EventsAppend, which carries none, stores rows
// only for the subscriptions recorded since. The worker records its
// registry's subscriptions again every minute (core's resubscription loop)
// and at every start, which heals raw appends too; the checks below run
// well within that minute.
func TestSchemaRecreatedUnderARunningWorker(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	schema := freshSchema(t)
	m, err := postgres.NewMigrator(nil, schema)
	require.NoError(t, err)
	require.NoError(t, m.Up(ctx, pool))
	b := newStore(t, schema)

	reg := core.NewRegistry()
	require.NoError(t, core.RegisterEvent[driftAdded](reg, "drift.added"))
	require.NoError(t, core.RegisterEvent[driftRemoved](reg, "drift.removed"))
	p := core.NewPerspective[driftTotal]("totals")
	core.MustHandle(p, func(ctx context.Context, m driftTotal, e driftAdded) (driftTotal, error) {
		ev, _ := core.EventFromContext(ctx)
		m.Sum += e.N
		m.Versions = append(m.Versions, ev.Version)
		return m, nil
	})
	core.MustHandle(p, func(ctx context.Context, m driftTotal, e driftRemoved) (driftTotal, error) {
		ev, _ := core.EventFromContext(ctx)
		m.Sum -= e.N
		m.Versions = append(m.Versions, ev.Version)
		return m, nil
	})
	require.NoError(t, reg.AddPerspective(p))
	w, err := core.New(b.backend, reg, &core.Options{
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		Drain: core.DrainOptions{
			PollingInterval:              10 * time.Millisecond,
			NotifyHealthyPollingInterval: 10 * time.Millisecond,
			Batcher:                      core.DrainBatcherOptions{SlidingWindow: time.Millisecond, MaxWait: 5 * time.Millisecond},
		},
		Claims: core.ClaimOptions{
			Interval:              10 * time.Millisecond,
			NotifyHealthyInterval: 10 * time.Millisecond,
			HeartbeatInterval:     100 * time.Millisecond,
		},
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
	})
	waitForStream := func(stream uuid.UUID, version int64) driftTotal {
		t.Helper()
		waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		require.NoError(t, w.WaitForStream(waitCtx, stream, version), "stream %s applied up to version %d", stream, version)
		model, err := b.backend.Models.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: stream, Perspective: "totals"})
		require.NoError(t, err)
		var total driftTotal
		require.NoError(t, json.Unmarshal(model.Data, &total))
		return total
	}
	rawAppend := func(stream uuid.UUID, typ string) int {
		t.Helper()
		res, err := b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{
			StreamID: stream, Events: []ports.NewEvent{{Type: typ, Data: []byte(`{"N":1}`)}},
		})
		require.NoError(t, err)
		return res.WorkRows
	}
	count := func(table string) int {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, table}.Sanitize()).Scan(&n))
		return n
	}

	before := newUUID(t)
	_, err = reg.Append(ctx, b.backend.Events, before, ports.ExpectNoStream, driftAdded{N: 1}, driftAdded{N: 2})
	require.NoError(t, err)
	require.Equal(t, driftTotal{Sum: 3, Versions: []int64{1, 2}}, waitForStream(before, 2))

	require.ErrorIs(t, m.Down(ctx, pool, 0), postgres.ErrInstancesLive, "the worker heartbeats")
	require.NoError(t, m.Revert(ctx, pool, &postgres.RevertParams{To: 0, Force: true}))
	require.NoError(t, m.Up(ctx, pool))

	for _, table := range []string{"vantage_events", "vantage_subscriptions", "vantage_work"} {
		require.Zero(t, count(table), "%s is recreated empty", table)
	}
	require.Zero(t, rawAppend(newUUID(t), "drift.added"), "no subscription is recorded: the raw append stores no work")

	after := newUUID(t)
	res, err := reg.Append(ctx, b.backend.Events, after, ports.ExpectNoStream, driftAdded{N: 1}, driftAdded{N: 2}, driftAdded{N: 4})
	require.NoError(t, err)
	require.Equal(t, 3, res.WorkRows, "the registry's append carries its subscriptions")
	require.Equal(t, driftTotal{Sum: 7, Versions: []int64{1, 2, 3}}, waitForStream(after, 3), "the worker applied every event")

	raw := newUUID(t)
	require.Equal(t, 1, rawAppend(raw, "drift.added"), "the registry's append recorded the subscription of its type")
	require.Zero(t, rawAppend(raw, "drift.removed"), "not those of types it did not append")
	require.Equal(t, driftTotal{Sum: 1, Versions: []int64{1}}, waitForStream(raw, 1))
}
