package pgtest_test

import (
	"testing"

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
