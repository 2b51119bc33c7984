package postgres_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

func TestModule(t *testing.T) {
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
	m, err := postgres.NewMigrator(nil, schema)
	require.NoError(t, err)
	v, err := m.Version(t.Context(), pgtest.Pool(t))
	require.NoError(t, err)
	require.Equal(t, m.Latest(), v, "started means migrated")
	_, err = backend.Claimer.InstancesList(t.Context())
	require.NoError(t, err)
	app.RequireStop()
	_, err = backend.Claimer.InstancesList(t.Context())
	require.ErrorIs(t, err, ports.ErrClosed)
}
