package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// freshSchema returns an unused schema name that is dropped in t.Cleanup.
func freshSchema(t *testing.T) string {
	t.Helper()
	name := pgtest.NewSchemaName(t)
	pool := pgtest.Pool(t)
	t.Cleanup(func() {
		_, err := pool.Exec(context.WithoutCancel(t.Context()), `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`)
		require.NoError(t, err)
	})
	return name
}

// tables lists the tables of schema.
func tables(t *testing.T, schema string) []string {
	t.Helper()
	rows, err := pgtest.Pool(t).Query(t.Context(),
		`SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, schema)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

func TestMigrator(t *testing.T) {
	t.Parallel()

	t.Run("UpDownUp", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := pgtest.Pool(t)
		schema := freshSchema(t)
		m, err := postgres.NewMigrator(nil, schema)
		require.NoError(t, err)
		require.Equal(t, 15, m.Latest())

		v, err := m.Version(ctx, pool)
		require.NoError(t, err)
		require.Zero(t, v, "a missing schema is at version 0")

		require.NoError(t, m.Up(ctx, pool))
		v, err = m.Version(ctx, pool)
		require.NoError(t, err)
		require.Equal(t, m.Latest(), v)
		require.Equal(t, []string{
			"vantage_active_streams", "vantage_cursors", "vantage_dead_letters", "vantage_events",
			"vantage_instances", "vantage_lifecycle_stages", "vantage_migrations", "vantage_models",
			"vantage_rebuilds", "vantage_retired_perspectives", "vantage_snapshots", "vantage_subscriptions", "vantage_work",
		}, tables(t, schema))

		require.NoError(t, m.Up(ctx, pool), "Up is idempotent")

		require.NoError(t, m.Down(ctx, pool, 0))
		v, err = m.Version(ctx, pool)
		require.NoError(t, err)
		require.Zero(t, v)
		require.Equal(t, []string{"vantage_migrations"}, tables(t, schema))

		require.NoError(t, m.Up(ctx, pool))
		v, err = m.Version(ctx, pool)
		require.NoError(t, err)
		require.Equal(t, m.Latest(), v)

		// The round-tripped schema works.
		b := newStore(t, schema)
		_, err = b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{
			StreamID: newUUID(t), Events: []ports.NewEvent{{Type: "T", Data: []byte(`{}`)}}, Now: base,
		})
		require.NoError(t, err)
	})

	t.Run("ConcurrentMigratorsApplyEachVersionOnce", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		schema := freshSchema(t)
		const migrators = 6
		var (
			wg   sync.WaitGroup
			errs = make([]error, migrators)
		)
		for i := range migrators {
			pool := pgtest.NewPool(t, 2)
			wg.Go(func() { errs[i] = postgres.Migrate(ctx, pool, schema) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))

		var versions []int
		rows, err := pgtest.Pool(t).Query(ctx, `SELECT version FROM `+schema+`.vantage_migrations ORDER BY version`)
		require.NoError(t, err)
		versions, err = pgx.CollectRows(rows, pgx.RowTo[int])
		require.NoError(t, err)
		require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, versions)
	})

	t.Run("ReliabilityKeepsExistingDeadLettersDead", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := pgtest.Pool(t)
		schema := freshSchema(t)
		m, err := postgres.NewMigrator(nil, schema)
		require.NoError(t, err)
		require.NoError(t, m.Up(ctx, pool))
		require.NoError(t, m.Down(ctx, pool, 1))
		q := pgx.Identifier{schema}.Sanitize()
		id, workID := uuid.New(), uuid.New()
		_, err = pool.Exec(ctx, `INSERT INTO `+q+`.vantage_dead_letters
			(id, work_id, stream_id, perspective, event_id, event_version, attempts, reason, error, dead_lettered_at)
			VALUES ($1, $2, $3, 'p', $4, 1, 3, 'failed', 'boom', now())`, id, workID, uuid.New(), uuid.New())
		require.NoError(t, err)

		require.NoError(t, m.Up(ctx, pool))

		var (
			status, generation string
			requeues           int
			requeued, resolved *time.Time
			requeueGeneration  *string
		)
		require.NoError(t, pool.QueryRow(ctx, `SELECT status, generation, requeues, requeued_at, requeue_generation, resolved_at
			FROM `+q+`.vantage_dead_letters WHERE id = $1`, id).Scan(&status, &generation, &requeues, &requeued, &requeueGeneration, &resolved))
		require.Equal(t, string(ports.DeadLetterDead), status, "a dead letter recorded before 002 waits for a requeue")
		require.Empty(t, generation, "it names no generation")
		require.Zero(t, requeues)
		require.Nil(t, requeued)
		require.Nil(t, requeueGeneration, "never requeued")
		require.Nil(t, resolved)
		_, err = pool.Exec(ctx, `UPDATE `+q+`.vantage_dead_letters SET status = 'lost' WHERE id = $1`, id)
		require.Error(t, err, "statuses are checked")
	})

	t.Run("StreamLeasesKeepPendingWorkClaimable", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := pgtest.Pool(t)
		schema := freshSchema(t)
		m, err := postgres.NewMigrator(nil, schema)
		require.NoError(t, err)
		require.NoError(t, m.Up(ctx, pool))
		require.NoError(t, m.Down(ctx, pool, 4))
		q := pgx.Identifier{schema}.Sanitize()
		// Under 004: a stream with a leased row and a pin, one with an
		// unleased row and no pin, and a drained stream still pinned.
		leased, unleased, drained, holder := uuid.New(), uuid.New(), uuid.New(), uuid.New()
		_, err = pool.Exec(ctx, `
INSERT INTO `+q+`.vantage_work (work_id, stream_id, perspective, event_id, event_version, instance_id, lease_expiry, attempts)
VALUES (gen_random_uuid(), $1, 'p', gen_random_uuid(), 1, $3, now() + interval '1 hour', 2),
       (gen_random_uuid(), $2, 'p', gen_random_uuid(), 1, NULL, NULL, 0)`, leased, unleased, holder)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO `+q+`.vantage_active_streams (stream_id, instance_id, last_activity_at)
VALUES ($1, $2, now()), ($3, $2, now())`, leased, holder, drained)
		require.NoError(t, err)

		require.NoError(t, m.Up(ctx, pool))
		streams := func() map[uuid.UUID]bool {
			t.Helper()
			rows, err := pool.Query(ctx, `SELECT stream_id, instance_id IS NULL FROM `+q+`.vantage_active_streams`)
			require.NoError(t, err)
			out := map[uuid.UUID]bool{}
			var (
				id   uuid.UUID
				free bool
			)
			_, err = pgx.ForEachRow(rows, []any{&id, &free}, func() error { out[id] = free; return nil })
			require.NoError(t, err)
			return out
		}
		require.Equal(t, map[uuid.UUID]bool{leased: true, unleased: true}, streams(),
			"every stream with pending work has its row, unleased; the drained one has none")
		var attempts []int
		rows, err := pool.Query(ctx, `SELECT attempts FROM `+q+`.vantage_work ORDER BY attempts`)
		require.NoError(t, err)
		attempts, err = pgx.CollectRows(rows, pgx.RowTo[int])
		require.NoError(t, err)
		require.Equal(t, []int{0, 2}, attempts, "attempts stay")

		// And back: the rows come back unleased, the streams unpinned.
		require.NoError(t, m.Down(ctx, pool, 4))
		var held int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+q+`.vantage_work WHERE instance_id IS NOT NULL`).Scan(&held))
		require.Zero(t, held)
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+q+`.vantage_active_streams WHERE instance_id IS NOT NULL`).Scan(&held))
		require.Zero(t, held)
		require.NoError(t, m.Up(ctx, pool))
		require.Equal(t, map[uuid.UUID]bool{leased: true, unleased: true}, streams())
	})

	t.Run("PendingAgeCoversTheKeyOfPendingWork", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := pgtest.Pool(t)
		schema := freshSchema(t)
		m, err := postgres.NewMigrator(nil, schema)
		require.NoError(t, err)
		require.NoError(t, m.Up(ctx, pool))
		q := pgx.Identifier{schema}.Sanitize()
		definition := func() string {
			t.Helper()
			var def string
			require.NoError(t, pool.QueryRow(ctx, `SELECT pg_get_indexdef(($1 || '.vantage_work_pending_idx')::regclass)`, q).Scan(&def))
			return def
		}
		pending := func() int {
			t.Helper()
			var n int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+q+`.vantage_work WHERE processed_at IS NULL`).Scan(&n))
			return n
		}
		require.Contains(t, definition(), "INCLUDE (created_at)")
		_, err = pool.Exec(ctx, `INSERT INTO `+q+`.vantage_work (work_id, stream_id, perspective, event_id, event_version)
SELECT gen_random_uuid(), gen_random_uuid(), 'p', gen_random_uuid(), 1 FROM generate_series(1, 3)`)
		require.NoError(t, err)

		require.NoError(t, m.Down(ctx, pool, 5))
		def := definition()
		require.Contains(t, def, "CREATE UNIQUE INDEX vantage_work_pending_idx")
		require.NotContains(t, def, "INCLUDE", "005's key of pending work")
		require.Contains(t, def, "WHERE (processed_at IS NULL)")
		require.Equal(t, 3, pending(), "rows stay")

		require.NoError(t, m.Up(ctx, pool))
		def = definition()
		require.Contains(t, def, "CREATE UNIQUE INDEX vantage_work_pending_idx")
		require.Contains(t, def, "(stream_id, perspective, event_version) INCLUDE (created_at) WHERE (processed_at IS NULL)")
		require.Equal(t, 3, pending())
	})

	t.Run("RebuildRequestsKeepTheirClaimConsistent", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := pgtest.Pool(t)
		schema := freshSchema(t)
		m, err := postgres.NewMigrator(nil, schema)
		require.NoError(t, err)
		require.NoError(t, m.Up(ctx, pool))
		q := pgx.Identifier{schema}.Sanitize()
		insert := func(status string, expiry *time.Time) error {
			_, err := pool.Exec(ctx, `INSERT INTO `+q+`.vantage_rebuilds (id, perspective, requested_at, updated_at, status, claim_expiry)
VALUES (gen_random_uuid(), 'p', now(), now(), $1, $2)`, status, expiry)
			return err
		}
		expiry := time.Now().Add(time.Minute)

		require.NoError(t, insert("pending", nil))
		require.NoError(t, insert("running", &expiry))
		require.Error(t, insert("running", nil), "a running request has a claim")
		require.Error(t, insert("done", &expiry), "only a running one")
		require.Error(t, insert("paused", nil), "statuses are checked")

		require.NoError(t, m.Down(ctx, pool, 6))
		require.NotContains(t, tables(t, schema), "vantage_rebuilds")
		require.NoError(t, m.Up(ctx, pool))
		require.Contains(t, tables(t, schema), "vantage_rebuilds")
	})

	t.Run("ModelQueriesKeyModelsByPerspective", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := pgtest.Pool(t)
		schema := freshSchema(t)
		m, err := postgres.NewMigrator(nil, schema)
		require.NoError(t, err)
		require.NoError(t, m.Up(ctx, pool))
		q := pgx.Identifier{schema}.Sanitize()
		indexes := func() map[string]string {
			t.Helper()
			rows, err := pool.Query(ctx, `SELECT indexname::text, indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'vantage_models'`, schema)
			require.NoError(t, err)
			out := map[string]string{}
			var name, def string
			_, err = pgx.ForEachRow(rows, []any{&name, &def}, func() error { out[name] = def; return nil })
			require.NoError(t, err)
			return out
		}
		jsonTime := func(v string) *time.Time {
			t.Helper()
			var at *time.Time
			require.NoError(t, pool.QueryRow(ctx, `SELECT `+q+`.vantage_json_time($1::jsonb)`, v).Scan(&at))
			return at
		}
		// A time index a perspective declared, which the function carries.
		_, err = pool.Exec(ctx, `CREATE INDEX declared_time_idx ON `+q+`.vantage_models ((`+q+`.vantage_json_time(data -> 'at')))`)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO `+q+`.vantage_models (stream_id, perspective, data) VALUES (gen_random_uuid(), 'p', '{"at": "2026-02-30T00:00:00Z"}')`)
		require.NoError(t, err, "a time that does not exist is no error")

		defs := indexes()
		require.Contains(t, defs["vantage_models_pkey"], "(perspective, stream_id)")
		require.NotContains(t, defs, "vantage_models_updated_idx", "015 dropped it")
		require.Equal(t, time.Date(2026, 1, 1, 11, 0, 0, 123457000, time.UTC), jsonTime(`"2026-01-01T12:00:00.1234567+01:00"`).UTC())
		for _, v := range []string{`"2026-02-30T00:00:00Z"`, `"0000-01-01T00:00:00Z"`, `"2026-01-01T00:00:00+16:00"`, `"2026-01-01"`, `"2026-01-01t00:00:00z"`, `20260101`, `null`} {
			require.Nil(t, jsonTime(v), "%s is no time", v)
		}

		require.NoError(t, m.Down(ctx, pool, 14))
		require.Contains(t, indexes()["vantage_models_updated_idx"], "(perspective, updated_at, stream_id)", "008's index, back")
		require.NoError(t, m.Down(ctx, pool, 7))
		defs = indexes()
		require.Contains(t, defs["vantage_models_pkey"], "(stream_id, perspective)", "007's key")
		require.NotContains(t, defs, "vantage_models_updated_idx")
		require.NotContains(t, defs, "declared_time_idx", "dropped with the function")
		require.NoError(t, m.Up(ctx, pool))
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+q+`.vantage_models`).Scan(&n))
		require.Equal(t, 1, n, "models stay")
	})

	t.Run("InjectedMigrationsInOrder", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := pgtest.Pool(t)
		schema := freshSchema(t)
		fsys := fstest.MapFS{
			"001_a.up.sql":   {Data: []byte(`CREATE TABLE /* SCHEMA */.a (id int PRIMARY KEY);`)},
			"001_a.down.sql": {Data: []byte(`DROP TABLE /* SCHEMA */.a;`)},
			"002_b.up.sql":   {Data: []byte(`CREATE TABLE /* SCHEMA */.b (id int REFERENCES /* SCHEMA */.a (id)); INSERT INTO /* SCHEMA */.a VALUES (1);`)},
			"002_b.down.sql": {Data: []byte(`DROP TABLE /* SCHEMA */.b;`)},
			"README.md":      {Data: []byte(`ignored`)},
		}
		m, err := postgres.NewMigrator(fsys, schema)
		require.NoError(t, err)
		require.Equal(t, 2, m.Latest())
		require.NoError(t, m.Up(ctx, pool))
		require.Equal(t, []string{"a", "b", "vantage_migrations"}, tables(t, schema))
		require.NoError(t, m.Down(ctx, pool, 1))
		require.Equal(t, []string{"a", "vantage_migrations"}, tables(t, schema))
		require.Error(t, m.Down(ctx, pool, -1))
	})

	t.Run("FailedVersionRollsBackWithItsRow", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := pgtest.Pool(t)
		schema := freshSchema(t)
		fsys := fstest.MapFS{
			"001_a.up.sql":   {Data: []byte(`CREATE TABLE /* SCHEMA */.a (id int);`)},
			"001_a.down.sql": {Data: []byte(`DROP TABLE /* SCHEMA */.a;`)},
			"002_b.up.sql":   {Data: []byte(`CREATE TABLE /* SCHEMA */.b (id int); SELECT 1/0;`)},
			"002_b.down.sql": {Data: []byte(`DROP TABLE /* SCHEMA */.b;`)},
		}
		m, err := postgres.NewMigrator(fsys, schema)
		require.NoError(t, err)
		err = m.Up(ctx, pool)
		require.ErrorContains(t, err, "002_b")
		v, err := m.Version(ctx, pool)
		require.NoError(t, err)
		require.Equal(t, 1, v)
		require.Equal(t, []string{"a", "vantage_migrations"}, tables(t, schema))
	})

	t.Run("RejectsMalformedMigrationSets", func(t *testing.T) {
		t.Parallel()
		up := &fstest.MapFile{Data: []byte(`SELECT 1;`)}
		for name, fsys := range map[string]fstest.MapFS{
			"gap":          {"001_a.up.sql": up, "001_a.down.sql": up, "003_c.up.sql": up, "003_c.down.sql": up},
			"missing down": {"001_a.up.sql": up},
			"missing up":   {"001_a.down.sql": up},
			"bad name":     {"1_a.up.sql": up, "1_a.down.sql": up},
			"two names":    {"001_a.up.sql": up, "001_b.down.sql": up},
		} {
			_, err := postgres.NewMigrator(fsys, "vantage")
			require.Error(t, err, name)
		}
	})
}

func TestValidateSchema(t *testing.T) {
	t.Parallel()

	for _, name := range []string{"vantage", "_x", "svc_2", strings.Repeat("a", 63)} {
		require.NoError(t, postgres.ValidateSchema(name), name)
	}
	for _, name := range []string{"", "Vantage", "1abc", "a-b", "a b", `a"b`, strings.Repeat("a", 64), "pg_temp", "information_schema"} {
		require.Error(t, postgres.ValidateSchema(name), name)
	}
	_, err := postgres.NewMigrator(nil, "Bad-Name")
	require.ErrorContains(t, err, "Bad-Name")
	_, err = postgres.New(pgtest.Pool(t), postgres.Options{Schema: "Bad-Name"})
	require.ErrorContains(t, err, "Options.Schema")
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()

	pool := pgtest.Pool(t)
	_, err := postgres.New(nil, postgres.Options{})
	require.Error(t, err)
	_, err = postgres.New(pool, postgres.Options{ListenerMinReconnect: time.Second, ListenerMaxReconnect: time.Millisecond})
	require.ErrorContains(t, err, "ListenerMaxReconnect")
	_, err = postgres.New(pool, postgres.Options{ListenerMinReconnect: -time.Second})
	require.ErrorContains(t, err, "ListenerMinReconnect")
	s, err := postgres.New(pool, postgres.Options{})
	require.NoError(t, err)
	require.Equal(t, postgres.SchemaDefault, s.Schema())
	require.NoError(t, s.Backend().Validate())
	require.NoError(t, s.Close())
}

// TestNewValidatesListenerConnString checks that New refuses a listener
// connection string that lib/pq cannot dial, or that lists several hosts,
// whether given or derived from the pool, naming the problem and the
// option to set.
func TestNewValidatesListenerConnString(t *testing.T) {
	t.Parallel()

	pool := pgtest.Pool(t)
	for cs, want := range map[string]string{
		`host='unterminated`:                            "unterminated",
		`postgres://user:secret@%zz/db`:                 `invalid URL escape "%zz"`,
		`host=a,b dbname=test`:                          "2 hosts (a, b)",
		`postgres://a,b/test`:                           "2 hosts (a, b)",
		`postgres://u@h/test?pool_max_conns=3`:          "pool_max_conns",
		`host=h dbname=test statement_cache_capacity=0`: "statement_cache_capacity",
	} {
		_, err := postgres.New(pool, postgres.Options{ConnString: cs})
		require.ErrorContains(t, err, "Options.ConnString", cs)
		require.ErrorContains(t, err, want, cs)
		require.NotContains(t, err.Error(), "secret", "the error does not repeat the password")
	}

	// pgx accepts several hosts; the listener derived from such a pool
	// would dial one of them, not necessarily the one the pool writes to.
	for _, cs := range []string{
		"postgres://postgres@127.0.0.1:5432,127.0.0.2:5432/test?sslmode=disable",
		"host=127.0.0.1,127.0.0.2 user=postgres dbname=test sslmode=disable",
	} {
		cfg, err := pgxpool.ParseConfig(cs)
		require.NoError(t, err)
		multi, err := pgxpool.NewWithConfig(t.Context(), cfg) // connects lazily
		require.NoError(t, err)
		t.Cleanup(multi.Close)
		_, err = postgres.New(multi, postgres.Options{})
		require.ErrorContains(t, err, "2 hosts", cs)
		require.ErrorContains(t, err, "set Options.ConnString", cs)
		s, err := postgres.New(multi, postgres.Options{ConnString: pgtest.ConnString(t)})
		require.NoError(t, err, "a single-host listener string fixes it")
		require.NoError(t, s.Close())
	}
}

// gatedStore returns a fresh schema, not migrated yet, and a Store on a
// pool of conns connections whose calls wait for the returned gate.
func gatedStore(t *testing.T, conns int32) (string, *postgres.Gate, *pgxpool.Pool, *postgres.Store) {
	t.Helper()
	schema := freshSchema(t)
	gate := postgres.NewGate()
	pool := pgtest.NewPool(t, conns)
	store, err := postgres.New(pool, postgres.Options{Schema: schema, Gate: gate, ConnString: pgtest.ConnString(t), Logger: testLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	return schema, gate, pool, store
}

func TestGate(t *testing.T) {
	t.Parallel()

	t.Run("HoldsCallsUntilMigrated", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		schema, gate, pool, store := gatedStore(t, 2)

		shortCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := store.InstancesList(shortCtx)
		require.ErrorIs(t, err, context.DeadlineExceeded, "calls wait while the gate is closed")

		listed := make(chan error, 1)
		go func() {
			_, err := store.InstancesList(ctx)
			listed <- err
		}()
		require.NoError(t, postgres.Migrate(ctx, pool, schema))
		gate.Open()
		require.NoError(t, wait(t, listed, "the held call"))
		require.True(t, gate.Ready())
	})

	t.Run("HeldAppendTakesNoConnection", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		schema, gate, pool, store := gatedStore(t, 1)

		appended := make(chan error, 1)
		go func() {
			_, err := store.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: uuid.New(), Events: newEvents(1)})
			appended <- err
		}()
		// The migration needs the pool's only connection: an append
		// waiting for the gate must not hold it.
		mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, postgres.Migrate(mctx, pool, schema), "the migration got the connection")
		gate.Open()
		require.NoError(t, wait(t, appended, "the held append"))
	})

	t.Run("FailReleasesWaitersWithTheError", func(t *testing.T) {
		t.Parallel()
		gate := postgres.NewGate()
		boom := errors.New("boom")
		gate.Fail(boom)
		gate.Open() // the first outcome wins
		require.ErrorIs(t, gate.Wait(t.Context()), boom)
		require.False(t, gate.Ready())
	})
}

// TestPendingWorkIsUniquePerEvent checks the key of pending work: a second
// pending row for the same (stream, perspective, version) is refused by
// vantage_work_pending_idx (the version stands for the event, whatever id
// the row names), while a row kept processed by debug mode does not count.
func TestPendingWorkIsUniquePerEvent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	s := pgx.Identifier{b.schema}.Sanitize()
	stream := uuid.New()
	insert := func(processed bool) error {
		var at any
		if processed {
			at = time.Now()
		}
		_, err := b.pool.Exec(ctx, `INSERT INTO `+s+`.vantage_work (work_id, stream_id, perspective, event_id, event_version, processed_at)
			VALUES ($1, $2, 'p', $3, 1, $4)`, uuid.New(), stream, uuid.New(), at)
		return err
	}

	require.NoError(t, insert(true), "a processed row kept by debug mode")
	require.NoError(t, insert(false))
	var pgErr *pgconn.PgError
	require.ErrorAs(t, insert(false), &pgErr, "a second pending row for the version")
	require.Equal(t, "23505", pgErr.Code)
	require.Equal(t, "vantage_work_pending_idx", pgErr.ConstraintName)
}
