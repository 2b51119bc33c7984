package postgres_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/pgtest"
)

// The migration script does what the migrator does, once: applied to a
// schema at another version than it expects, it stops and changes nothing.
func TestMigratorScript(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	schema := freshSchema(t)
	m, err := postgres.NewMigrator(nil, schema)
	require.NoError(t, err)

	up, err := m.Script(&postgres.ScriptParams{From: 0, To: m.Latest()})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, up) // no arguments: the simple protocol, many statements
	require.NoError(t, err)
	v, err := m.Version(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, m.Latest(), v)
	migrated := tables(t, schema)
	require.NoError(t, m.Up(ctx, pool), "the migrator finds nothing left to do")

	_, err = pool.Exec(ctx, up)
	require.ErrorContains(t, err, "this step expects version 0", "the script applied twice stops at once")
	require.Equal(t, migrated, tables(t, schema))

	// A live instance stops the down script, unless forced.
	_, err = pool.Exec(ctx, `INSERT INTO `+schema+`.vantage_instances (instance_id, service_name, host_name, process_id, started_at, last_heartbeat_at)
		VALUES (gen_random_uuid(), 'svc', 'host', 1, now(), now())`)
	require.NoError(t, err)
	down, err := m.Script(&postgres.ScriptParams{Down: true, From: m.Latest(), To: m.Latest() - 1})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, down)
	require.ErrorContains(t, err, "engine instance(s) live")
	v, err = m.Version(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, m.Latest(), v, "nothing reverted")

	forced, err := m.Script(&postgres.ScriptParams{Down: true, From: m.Latest(), To: 0, Force: true})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, forced)
	require.NoError(t, err)
	require.Equal(t, []string{"vantage_migrations"}, tables(t, schema))
}

// Versions out of range are refused with the reason.
func TestMigratorScriptRejectsBadRanges(t *testing.T) {
	t.Parallel()
	m, err := postgres.NewMigrator(nil, "")
	require.NoError(t, err)
	latest := m.Latest()
	for name, tc := range map[string]struct {
		params postgres.ScriptParams
		want   string
	}{
		"FromAboveLatest": {postgres.ScriptParams{From: latest + 1, To: latest + 2}, "must be from 0 to"},
		"ToNegative":      {postgres.ScriptParams{Down: true, From: 1, To: -1}, "to version -1: must be from 0 to"},
		"UpDownwards":     {postgres.ScriptParams{From: 3, To: 2}, "an up script goes up"},
		"UpToItself":      {postgres.ScriptParams{From: 3, To: 3}, "an up script goes up"},
		"DownUpwards":     {postgres.ScriptParams{Down: true, From: 2, To: 4}, "a down script goes down"},
		"NegativeLive":    {postgres.ScriptParams{Down: true, From: 2, To: 1, LiveWithin: -time.Second}, "LiveWithin must not be negative"},
	} {
		_, err := m.Script(&tc.params)
		require.ErrorContains(t, err, tc.want, name)
	}
}
