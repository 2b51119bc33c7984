package postgres_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// requireMigrated fails unless schema is at the latest version.
func requireMigrated(t *testing.T, schema string) {
	t.Helper()
	m, err := postgres.NewMigrator(nil, schema)
	require.NoError(t, err)
	v, err := m.Version(t.Context(), pgtest.Pool(t))
	require.NoError(t, err)
	require.Equal(t, m.Latest(), v, "started means migrated")
}

// connections counts the server's connections of application name.
func connections(t *testing.T, name string) int {
	t.Helper()
	var n int
	err := pgtest.Pool(t).QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, name).Scan(&n)
	require.NoError(t, err)
	return n
}

// newApp builds an fx application of Module and opts without starting it,
// and returns its construction error.
func newApp(opts ...fx.Option) error {
	return fx.New(append([]fx.Option{fx.NopLogger, postgres.Module, fx.Invoke(func(ports.Backend) {})}, opts...)...).Err()
}

func TestModule(t *testing.T) {
	t.Parallel()

	t.Run("FromPool", func(t *testing.T) {
		t.Parallel()
		schema := freshSchema(t)
		var backend ports.Backend
		app := fxtest.New(t,
			postgres.Module,
			fx.Supply(pgtest.Pool(t), &postgres.Options{Schema: schema, ConnString: pgtest.ConnString(t)}),
			fx.Populate(&backend),
		)
		require.NoError(t, backend.Validate())
		app.RequireStart()
		requireMigrated(t, schema)
		_, err := backend.Admin.InstancesList(t.Context())
		require.NoError(t, err)
		app.RequireStop()
		_, err = backend.Admin.InstancesList(t.Context())
		require.ErrorIs(t, err, ports.ErrClosed)
		require.NoError(t, pgtest.Pool(t).Ping(t.Context()), "the application's pool stays open")
	})

	t.Run("FromConnString", func(t *testing.T) {
		t.Parallel()
		schema := freshSchema(t)
		// The pool is the module's: the test finds its connections by
		// their application name.
		name := pgtest.NewSchemaName(t)
		cs := pgtest.ConnString(t)
		if strings.Contains(cs, "?") {
			cs += "&"
		} else {
			cs += "?"
		}
		cs += "pool_max_conns=2&application_name=" + name
		var backend ports.Backend
		app := fxtest.New(t,
			postgres.Module,
			fx.Supply(&postgres.ModuleOptions{PoolConnString: cs}, postgres.Options{Schema: schema}),
			fx.Populate(&backend),
		)
		app.RequireStart()
		requireMigrated(t, schema)
		_, err := backend.Admin.InstancesList(t.Context())
		require.NoError(t, err)
		require.Positive(t, connections(t, name), "the module's pool holds its idle connections")
		app.RequireStop()
		// The server drops a connection from pg_stat_activity when its
		// backend exits, just after the client closed it: there is no
		// signal to wait on.
		require.Eventually(t, func() bool { return connections(t, name) == 0 }, 10*time.Second, 10*time.Millisecond,
			"stopping the application closes the pool the module built")
	})

	t.Run("NeedsOnePool", func(t *testing.T) {
		t.Parallel()
		require.ErrorContains(t, newApp(), "postgres.Module needs a *pgxpool.Pool or ModuleOptions.PoolConnString")
		require.ErrorContains(t, newApp(fx.Supply(&postgres.Options{ConnString: pgtest.ConnString(t)})),
			"Options.ConnString is only the listener's")
		require.ErrorContains(t, newApp(fx.Supply(pgtest.Pool(t), postgres.ModuleOptions{PoolConnString: pgtest.ConnString(t)})),
			"provide one of them")
		require.ErrorContains(t, newApp(fx.Supply(&postgres.ModuleOptions{PoolConnString: "postgres://h:notaport/db"})),
			"ModuleOptions.PoolConnString")
	})

	t.Run("OptionsInBothFormsIsAnError", func(t *testing.T) {
		t.Parallel()
		err := newApp(fx.Supply(pgtest.Pool(t), postgres.Options{Schema: "a"}, &postgres.Options{Schema: "b"}))
		require.ErrorContains(t, err, "postgres.Options is supplied both as a value and as a pointer")
	})

	t.Run("SkipMigrations", func(t *testing.T) {
		t.Parallel()

		t.Run("FailsStartOnUnmigratedSchema", func(t *testing.T) {
			t.Parallel()
			schema := freshSchema(t)
			var backend ports.Backend
			app := fx.New(fx.NopLogger, postgres.Module,
				fx.Supply(pgtest.Pool(t), &postgres.ModuleOptions{SkipMigrations: true}, &postgres.Options{Schema: schema}),
				fx.Populate(&backend),
			)
			require.NoError(t, app.Err())
			err := app.Start(t.Context())
			require.ErrorContains(t, err, "is at version 0, and this build needs version")
			require.ErrorContains(t, err, "unset ModuleOptions.SkipMigrations")
			var exists bool
			require.NoError(t, pgtest.Pool(t).QueryRow(t.Context(),
				`SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)`, schema).Scan(&exists))
			require.False(t, exists, "the module created the schema although migrations are off")
			_, err = backend.Admin.InstancesList(t.Context())
			require.ErrorContains(t, err, "unset ModuleOptions.SkipMigrations", "SQL calls fail with the gate's reason")
		})

		t.Run("StartsOnMigratedSchema", func(t *testing.T) {
			t.Parallel()
			var backend ports.Backend
			app := fxtest.New(t, postgres.Module,
				fx.Supply(pgtest.Pool(t), &postgres.ModuleOptions{SkipMigrations: true}, &postgres.Options{Schema: pgtest.Schema(t)}),
				fx.Populate(&backend),
			)
			app.RequireStart()
			_, err := backend.Admin.InstancesList(t.Context())
			require.NoError(t, err)
			app.RequireStop()
		})
	})

	t.Run("LogsToTheFxLogger", func(t *testing.T) {
		t.Parallel()
		records := newLogRecorder(t)
		var backend ports.Backend
		app := fxtest.New(t, postgres.Module,
			fx.Supply(pgtest.Pool(t), &postgres.Options{Schema: pgtest.Schema(t)}, slog.New(records)),
			fx.Populate(&backend),
		)
		app.RequireStart()
		_, err := backend.Notifier.NotifierListen(t.Context(), nil)
		require.NoError(t, err)
		app.RequireStop() // closing the Store waits for the listener's last record
		require.NotEmpty(t, withMessage(records.all(), "listener stopped"), "the listener logs to the application's logger")
	})
}
