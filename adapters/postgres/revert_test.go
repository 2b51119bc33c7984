package postgres_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// TestRevertRefusesWhileInstancesAreLive checks that Migrator.Down and
// Revert leave a schema alone while an engine instance heartbeats within
// RevertParams.LiveWithin, naming it in a *LiveInstancesError, and revert
// it when forced, once the instance deregistered, or once it is stale.
func TestRevertRefusesWhileInstancesAreLive(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		m      *postgres.Migrator
		schema string
		store  ports.Backend
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		schema := freshSchema(t)
		m, err := postgres.NewMigrator(nil, schema)
		require.NoError(t, err)
		require.NoError(t, m.Up(t.Context(), pgtest.Pool(t)))
		return &testBundle{m: m, schema: schema, store: newStore(t, schema).backend}
	}
	// heartbeat records a heartbeat of a new instance at now (the database
	// clock when zero) and returns the instance.
	heartbeat := func(t *testing.T, b ports.Backend, now time.Time) uuid.UUID {
		t.Helper()
		id := newUUID(t)
		_, err := b.Claimer.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{InstanceID: id, StaleThreshold: time.Minute, Now: now})
		require.NoError(t, err)
		return id
	}
	version := func(t *testing.T, m *postgres.Migrator) int {
		t.Helper()
		v, err := m.Version(t.Context(), pgtest.Pool(t))
		require.NoError(t, err)
		return v
	}

	t.Run("DeregisteredInstancesDoNotCount", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		id := heartbeat(t, tb.store, time.Time{})
		require.NoError(t, tb.store.Claimer.InstanceDeregister(t.Context(), &ports.InstanceDeregisterParams{InstanceID: id}))

		require.NoError(t, tb.m.Down(t.Context(), pgtest.Pool(t), 0))
		require.Zero(t, version(t, tb.m))
	})

	t.Run("ForceRevertsAnyway", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		heartbeat(t, tb.store, time.Time{})

		require.NoError(t, tb.m.Revert(t.Context(), pgtest.Pool(t), &postgres.RevertParams{To: 0, Force: true}))
		require.Zero(t, version(t, tb.m))
		require.Equal(t, []string{"vantage_migrations"}, tables(t, tb.schema))
	})

	t.Run("RefusesWhileLive", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		first := heartbeat(t, tb.store, time.Time{})
		second := heartbeat(t, tb.store, time.Time{})

		err := tb.m.Down(t.Context(), pgtest.Pool(t), 0)

		require.ErrorIs(t, err, postgres.ErrInstancesLive)
		var live *postgres.LiveInstancesError
		require.ErrorAs(t, err, &live)
		want := []uuid.UUID{first, second}
		if bytes.Compare(second[:], first[:]) < 0 {
			want = []uuid.UUID{second, first}
		}
		require.Equal(t, want, live.Instances, "in id order")
		require.Equal(t, tb.m.Latest(), live.Version)
		require.Equal(t, postgres.LiveWithinDefault, live.LiveWithin)
		require.ErrorContains(t, err, "2 instances are live")
		require.ErrorContains(t, err, first.String())
		require.ErrorContains(t, err, "RevertParams.Force", "the error says how to revert anyway")
		require.Equal(t, tb.m.Latest(), version(t, tb.m), "nothing is reverted")
		_, err = tb.store.Admin.InstancesList(t.Context())
		require.NoError(t, err, "the instances' tables are there")
	})

	t.Run("StaleInstancesDoNotCount", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		heartbeat(t, tb.store, time.Now().Add(-10*time.Minute))

		err := tb.m.Revert(t.Context(), pgtest.Pool(t), &postgres.RevertParams{To: 2, LiveWithin: time.Hour})
		require.ErrorIs(t, err, postgres.ErrInstancesLive, "the heartbeat is within the hour")
		require.ErrorContains(t, err, "1 instance is live")

		require.NoError(t, tb.m.Down(t.Context(), pgtest.Pool(t), 2), "the heartbeat is older than LiveWithinDefault")
		require.Equal(t, 2, version(t, tb.m))
	})

	t.Run("RejectsNegativeLiveWithin", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)

		err := tb.m.Revert(t.Context(), pgtest.Pool(t), &postgres.RevertParams{LiveWithin: -time.Second})

		require.ErrorContains(t, err, "LiveWithin")
		require.Equal(t, tb.m.Latest(), version(t, tb.m))
	})
}

// TestLifecycleStagesMigration checks 003's conversion of the lifecycle
// records of 001 both ways: a stage 001 recorded fired, so it comes up
// completed; going down, 001 gets the completed per-event stages back, while
// open claims (whose instances are gone when a schema is reverted) and the
// PostPerspective stages are left out.
func TestLifecycleStagesMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	schema := freshSchema(t)
	q := pgx.Identifier{schema}.Sanitize()
	m, err := postgres.NewMigrator(nil, schema)
	require.NoError(t, err)
	require.NoError(t, m.Up(ctx, pool))
	require.NoError(t, m.Down(ctx, pool, 2))
	both, pre, claimer := newUUID(t), newUUID(t), newUUID(t)
	_, err = pool.Exec(ctx, `INSERT INTO `+q+`.vantage_lifecycle (event_id, stages, instance_id, claimed_at)
		VALUES ($1, 5, $3, $4), ($2, 1, $3, $4)`, both, pre, claimer, base)
	require.NoError(t, err)

	require.NoError(t, m.Up(ctx, pool))

	b := newStore(t, schema).backend
	stages, err := b.Lifecycle.LifecycleStages(ctx, &ports.LifecycleStagesParams{EventIDs: []uuid.UUID{both, pre}})
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID]ports.LifecycleStage{
		both: ports.StagePrePerspective | ports.StagePostLifecycle,
		pre:  ports.StagePrePerspective,
	}, stages)
	other := newUUID(t)
	claim := func(stage ports.LifecycleStage, perspective string) []uuid.UUID {
		t.Helper()
		won, err := b.Lifecycle.LifecycleClaim(ctx, &ports.LifecycleClaimParams{
			EventIDs: []uuid.UUID{both, pre}, Stage: stage, Perspective: perspective, InstanceID: other, StaleThreshold: time.Minute, Now: base,
		})
		require.NoError(t, err)
		return won
	}
	require.Equal(t, []uuid.UUID{pre}, claim(ports.StagePostLifecycle, ""), "a recorded stage is completed")
	require.Empty(t, claim(ports.StagePrePerspective, ""))
	require.NoError(t, b.Lifecycle.LifecycleComplete(ctx, &ports.LifecycleCompleteParams{
		EventIDs: []uuid.UUID{pre}, Stage: ports.StagePostAllPerspectives, InstanceID: other, Now: base.Add(time.Second),
	}))
	require.NoError(t, b.Lifecycle.LifecycleComplete(ctx, &ports.LifecycleCompleteParams{
		EventIDs: []uuid.UUID{both}, Stage: ports.StagePostPerspective, Perspective: "p", InstanceID: other, Now: base.Add(time.Second),
	}))

	require.NoError(t, m.Down(ctx, pool, 2))

	type record struct {
		stages     int16
		instanceID uuid.UUID
		claimedAt  time.Time
	}
	rows, err := pool.Query(ctx, `SELECT event_id, stages, instance_id, claimed_at FROM `+q+`.vantage_lifecycle`)
	require.NoError(t, err)
	got := map[uuid.UUID]record{}
	var (
		id uuid.UUID
		r  record
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &r.stages, &r.instanceID, &r.claimedAt}, func() error {
		r.claimedAt = r.claimedAt.UTC()
		got[id] = r
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID]record{
		both: {stages: 5, instanceID: claimer, claimedAt: base},
		pre:  {stages: 3, instanceID: other, claimedAt: base.Add(time.Second)},
	}, got, "the open PostLifecycle claim of pre and both's PostPerspective are left out")
}

// TestLateColumnRoundTrip checks that the late column goes and comes back
// with 003, rows keeping everything else.
func TestLateColumnRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	schema := freshSchema(t)
	m, err := postgres.NewMigrator(nil, schema)
	require.NoError(t, err)
	require.NoError(t, m.Up(ctx, pool))
	b := newStore(t, schema)
	subscribe(t, b, testPerspective)
	stream := newUUID(t)
	_, err = b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, Events: newEvents(2), Now: base})
	require.NoError(t, err)

	require.NoError(t, m.Down(ctx, pool, 2))
	require.Equal(t, []int64{1, 2}, workVersions(t, b, stream, testPerspective))
	require.NoError(t, m.Up(ctx, pool))

	var late []bool
	rows, err := pool.Query(ctx, `SELECT late FROM `+pgx.Identifier{schema}.Sanitize()+`.vantage_work ORDER BY event_version`)
	require.NoError(t, err)
	late, err = pgx.CollectRows(rows, pgx.RowTo[bool])
	require.NoError(t, err)
	require.Equal(t, []bool{false, false}, late, "rows stored before 003 start not late")
}

// TestPassiveColumnRoundTrip checks that 004 goes and comes back: reverted,
// the schema has no passive column and claims rank every live instance
// again; migrated anew, the instances recorded meanwhile are not passive.
func TestPassiveColumnRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	schema := freshSchema(t)
	m, err := postgres.NewMigrator(nil, schema)
	require.NoError(t, err)
	require.NoError(t, m.Up(ctx, pool))
	b := newStore(t, schema).backend
	heartbeat := func(id uuid.UUID, passive bool) {
		t.Helper()
		_, err := b.Claimer.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{InstanceID: id, StaleThreshold: time.Minute, Passive: passive})
		require.NoError(t, err)
	}
	claim := func(id uuid.UUID) error {
		t.Helper()
		_, err := b.Claimer.WorkClaim(ctx, &ports.WorkClaimParams{InstanceID: id, MaxStreams: 10, LeaseDuration: time.Minute, StaleThreshold: time.Minute})
		return err
	}
	passive := newUUID(t)
	heartbeat(passive, true)
	list, err := b.Admin.InstancesList(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.True(t, list[0].Passive)
	require.NoError(t, claim(passive), "a passive instance is live")

	require.NoError(t, m.Revert(ctx, pool, &postgres.RevertParams{To: 3, Force: true}))
	var columns int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
WHERE table_schema = $1 AND table_name = 'vantage_instances' AND column_name = 'passive'`, schema).Scan(&columns))
	require.Zero(t, columns, "the column is dropped")
	var candidates int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema}.Sanitize()+`.vantage_claim_candidates($1, now(), '1 minute', 8, 10, '{}')`, passive).Scan(&candidates),
		"the function reads no passive column")
	require.Zero(t, candidates)

	require.NoError(t, m.Up(ctx, pool))
	list, err = b.Admin.InstancesList(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.False(t, list[0].Passive, "instances recorded before 004 claim as before")
	require.NoError(t, claim(passive))
}
