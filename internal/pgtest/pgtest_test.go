package pgtest_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.WrapMain(m))
}

func TestSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	var schema string
	t.Run("HandsOutAMigratedSchema", func(t *testing.T) {
		schema = pgtest.Schema(t)
		require.NoError(t, postgres.ValidateSchema(schema))
		m, err := postgres.NewMigrator(nil, schema)
		require.NoError(t, err)
		v, err := m.Version(ctx, pool)
		require.NoError(t, err)
		require.Equal(t, m.Latest(), v)
		_, err = pool.Exec(ctx, `INSERT INTO `+schema+`.vantage_subscriptions (event_type, perspective) VALUES ('T', 'p')`)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `CREATE TABLE `+schema+`.extra (id int)`)
		require.NoError(t, err)
	})
	t.Run("ReusesItEmptied", func(t *testing.T) {
		again := pgtest.Schema(t)
		require.Equal(t, schema, again, "the pooled schema is handed out again")
		var subs, extra int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+again+`.vantage_subscriptions`).Scan(&subs))
		require.Zero(t, subs, "rows are gone")
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'extra'`, again).Scan(&extra))
		require.Zero(t, extra, "tables the test created are dropped")
	})
}

func TestPools(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	require.NotEmpty(t, pgtest.ConnString(t))
	pool := pgtest.NewPool(t, 2)
	require.NoError(t, pool.Ping(ctx))
	var path string
	require.NoError(t, pool.QueryRow(ctx, `SHOW search_path`).Scan(&path))
	require.Empty(t, path, "an empty search_path makes a missing schema qualifier fail")
}

func TestNewSchemaNameIsUniqueAndValid(t *testing.T) {
	t.Parallel()
	a, b := pgtest.NewSchemaName(t), pgtest.NewSchemaName(t)
	require.NotEqual(t, a, b)
	require.NoError(t, postgres.ValidateSchema(a))
}

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := pgtest.RequireCluster(t, pgtest.ClusterOptions{Settings: map[string]string{
		"synchronous_commit": "on",
		"log_line_prefix":    "%m [%p] it's ",
	}})
	require.NotZero(t, c.Port())
	require.DirExists(t, c.DataDir())
	require.Contains(t, c.ConnString(), fmt.Sprintf(":%d/", c.Port()))

	// connect opens a new connection each time: a restart breaks the
	// previous ones.
	connect := func() *pgx.Conn {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.ConnString())
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	query := func(sql string) string {
		t.Helper()
		var out string
		require.NoError(t, connect().QueryRow(ctx, sql).Scan(&out))
		return out
	}
	exec := func(sql string) {
		t.Helper()
		_, err := connect().Exec(ctx, sql)
		require.NoError(t, err)
	}
	require.Equal(t, "on", query(`SHOW synchronous_commit`), "settings override the defaults")
	require.Equal(t, "off", query(`SHOW fsync`), "the other defaults stay")
	require.Equal(t, "%m [%p] it's ", query(`SHOW log_line_prefix`), "values are quoted for pg_ctl's shell")
	exec(`CREATE TABLE kept (v text)`)
	exec(`INSERT INTO kept VALUES ('before')`)

	for _, mode := range []pgtest.ShutdownMode{pgtest.ShutdownFast, pgtest.ShutdownImmediate} {
		require.NoError(t, c.Restart(ctx, mode), mode)
		require.Equal(t, "before", query(`SELECT v FROM kept`), "data survives a %s restart", mode)
	}
	log, err := os.ReadFile(c.LogPath())
	require.NoError(t, err)
	require.Contains(t, string(log), "database system was interrupted", "the immediate restart ran crash recovery")

	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close is idempotent")
	require.NoDirExists(t, c.DataDir())
	require.Error(t, c.Restart(ctx, pgtest.ShutdownFast), "a closed cluster does not restart")
}

func TestPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// One server connection: every client of the PgBouncer shares it.
	b := pgtest.RequirePgBouncer(t, pgtest.PgBouncerOptions{Settings: map[string]string{"default_pool_size": "1"}})
	require.Contains(t, b.ConnString(), fmt.Sprintf("127.0.0.1:%d/", b.Port()))

	connect := func() *pgx.Conn {
		t.Helper()
		conn, err := pgx.Connect(ctx, b.ConnString())
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	first, second := connect(), connect()
	var db string
	require.NoError(t, first.QueryRow(ctx, `SELECT current_database()`).Scan(&db))
	require.Equal(t, "test", db, "the PgBouncer forwards the test database")

	// In transaction pooling mode, session state set by one client is
	// seen by the next client lent the same server connection.
	_, err := first.Exec(ctx, `SET vantage.probe = 'set-by-first'`, pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	var name string
	require.NoError(t, second.QueryRow(ctx, `SHOW vantage.probe`, pgx.QueryExecModeSimpleProtocol).Scan(&name))
	require.Equal(t, "set-by-first", name, "the clients share a server connection between transactions")

	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "Close is idempotent")
	require.NoFileExists(t, b.LogPath())
	_, err = pgx.Connect(ctx, b.ConnString())
	require.Error(t, err, "a closed PgBouncer accepts no connection")
}
