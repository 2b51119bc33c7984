package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/cmd/vantage/internal/cli"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// migrateReport is the JSON of migrate up and down.
type migrateReport struct {
	Schema        string `json:"schema"`
	FromVersion   int    `json:"from_version"`
	Version       int    `json:"version"`
	LatestVersion int    `json:"latest_version"`
	Applied       []struct {
		Version int    `json:"version"`
		Name    string `json:"name"`
	} `json:"applied"`
	Reverted []struct {
		Version int    `json:"version"`
		Name    string `json:"name"`
	} `json:"reverted"`
}

func latest(t *testing.T) int {
	t.Helper()
	m, err := postgres.NewMigrator(nil, "")
	require.NoError(t, err)
	return m.Latest()
}

func TestMigrateStatus(t *testing.T) {
	t.Parallel()

	t.Run("Fresh", func(t *testing.T) {
		t.Parallel()
		d := freshDB(t)
		res := d.run(t, "migrate", "status")
		require.Equal(t, cli.ExitOK, res.code)
		golden(t, "migrate_status_fresh", mask(res.stdout, d.schema))
	})
	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		d := freshDB(t)
		require.Equal(t, cli.ExitOK, d.run(t, "migrate", "up").code)
		m, err := postgres.NewMigrator(nil, d.schema)
		require.NoError(t, err)
		require.NoError(t, m.Down(t.Context(), pgtest.Pool(t), 4))

		res := d.run(t, "migrate", "status", "--json")
		require.Equal(t, cli.ExitOK, res.code)
		var got struct {
			Schema        string `json:"schema"`
			Version       int    `json:"version"`
			LatestVersion int    `json:"latest_version"`
			Pending       int    `json:"pending"`
			Migrations    []struct {
				Version int    `json:"version"`
				Name    string `json:"name"`
				Applied bool   `json:"applied"`
			} `json:"migrations"`
		}
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
		require.Equal(t, d.schema, got.Schema)
		require.Equal(t, 4, got.Version)
		require.Equal(t, latest(t), got.LatestVersion)
		require.Equal(t, latest(t)-4, got.Pending)
		require.Len(t, got.Migrations, latest(t))
		for _, mig := range got.Migrations {
			require.Equal(t, mig.Version <= 4, mig.Applied, "version %d", mig.Version)
		}
		require.Equal(t, "init", got.Migrations[0].Name)
	})
}

func TestMigrateUp(t *testing.T) {
	t.Parallel()

	d := freshDB(t)
	res := d.run(t, "migrate", "up")
	require.Equal(t, cli.ExitOK, res.code)
	golden(t, "migrate_up", mask(res.stdout, d.schema))
	require.Equal(t, latest(t), d.version(t))

	res = d.run(t, "migrate", "up", "--json")
	require.Equal(t, cli.ExitOK, res.code)
	var got migrateReport
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
	require.Equal(t, latest(t), got.FromVersion)
	require.Equal(t, latest(t), got.Version)
	require.NotNil(t, got.Applied, "applied is a list, empty when nothing was applied")
	require.Empty(t, got.Applied)
}

func TestMigrateDown(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) *db {
		t.Helper()
		d := freshDB(t)
		require.Equal(t, cli.ExitOK, d.run(t, "migrate", "up").code)
		return d
	}
	// heartbeat records an instance heartbeating now, on the database's
	// clock.
	heartbeat := func(t *testing.T, d *db) uuid.UUID {
		t.Helper()
		id := uuid.New()
		_, err := d.backend(t).Claimer.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{InstanceID: id, StaleThreshold: time.Hour})
		require.NoError(t, err)
		return id
	}

	t.Run("OneVersionByDefault", func(t *testing.T) {
		t.Parallel()
		d := setup(t)
		res := d.run(t, "migrate", "down", "--yes")
		require.Equal(t, cli.ExitOK, res.code)
		golden(t, "migrate_down", mask(res.stdout, d.schema))
		require.Equal(t, latest(t)-1, d.version(t))
	})
	t.Run("ToVersionJSON", func(t *testing.T) {
		t.Parallel()
		d := setup(t)
		res := d.run(t, "migrate", "down", "--to", "2", "--yes", "--json")
		require.Equal(t, cli.ExitOK, res.code)
		var got migrateReport
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
		require.Equal(t, latest(t), got.FromVersion)
		require.Equal(t, 2, got.Version)
		require.Len(t, got.Reverted, latest(t)-2)
		require.Equal(t, latest(t), got.Reverted[0].Version, "newest first")
		require.Equal(t, 3, got.Reverted[len(got.Reverted)-1].Version)
		require.Equal(t, 2, d.version(t))

		res = d.run(t, "migrate", "down", "--to", "2", "--yes")
		require.Equal(t, cli.ExitOK, res.code)
		require.Contains(t, res.stdout, "nothing to revert")
	})
	t.Run("AskedOnATerminal", func(t *testing.T) {
		t.Parallel()
		d := setup(t)
		d.env = cli.Env{Interactive: true, Stdin: strings.NewReader("n\n")}
		res := d.run(t, "migrate", "down", "--to", "0")
		require.Equal(t, cli.ExitRefused, res.code)
		require.Contains(t, res.stderr, "[y/N]")
		require.Contains(t, res.stderr, "not confirmed")
		require.Equal(t, latest(t), d.version(t), "declined: nothing reverted")

		d.env = cli.Env{Interactive: true, Stdin: strings.NewReader("yes\n")}
		require.Equal(t, cli.ExitOK, d.run(t, "migrate", "down", "--to", "0").code)
		require.Zero(t, d.version(t))
	})
	t.Run("RefusedWithoutTerminalOrYes", func(t *testing.T) {
		t.Parallel()
		d := setup(t)
		res := d.run(t, "migrate", "down")
		require.Equal(t, cli.ExitRefused, res.code)
		require.Contains(t, res.stderr, "pass --yes")
		require.Empty(t, res.stdout)
		require.Equal(t, latest(t), d.version(t))
	})
	t.Run("RefusedWhileInstancesAreLive", func(t *testing.T) {
		t.Parallel()
		d := setup(t)
		id := heartbeat(t, d)
		res := d.run(t, "migrate", "down", "--to", "0", "--yes")
		require.Equal(t, cli.ExitRefused, res.code)
		require.Contains(t, res.stderr, id.String())
		require.Contains(t, res.stderr, "1 engine instance is live")
		require.Contains(t, res.stderr, "--force")
		require.Empty(t, res.stdout)
		require.Equal(t, latest(t), d.version(t))

		res = d.run(t, "migrate", "down", "--to", "0", "--yes", "--force")
		require.Equal(t, cli.ExitOK, res.code)
		require.Zero(t, d.version(t))
	})
	t.Run("ToAboveTheSchemaVersion", func(t *testing.T) {
		t.Parallel()
		d := setup(t)
		m, err := postgres.NewMigrator(nil, d.schema)
		require.NoError(t, err)
		require.NoError(t, m.Down(t.Context(), pgtest.Pool(t), 2))
		res := d.run(t, "migrate", "down", "--to", "4", "--yes")
		require.Equal(t, cli.ExitUsage, res.code)
		require.Contains(t, res.stderr, "only reverts")
		require.Equal(t, 2, d.version(t), "nothing applied")
	})
}

// TestMigrateSQL applies the scripts of migrate sql with psql and checks
// that they leave the schema as the migrator does: the same tables,
// columns, indexes, constraints and functions (pg_dump --schema-only, with
// the schema's name normalised), and the same recorded versions.
func TestMigrateSQL(t *testing.T) {
	t.Parallel()

	for _, tool := range []string{"psql", "pg_dump"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not on PATH: the scripts cannot be applied", tool)
		}
	}
	byScript, byMigrator := freshDB(t), freshDB(t)
	m, err := postgres.NewMigrator(nil, byMigrator.schema)
	require.NoError(t, err)

	// script prints the SQL of migrate sql with args, on no database.
	script := func(t *testing.T, args ...string) string {
		t.Helper()
		res := run(t, cli.Env{}, append([]string{"--schema", byScript.schema, "migrate", "sql"}, args...)...)
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		return res.stdout
	}
	compare := func(t *testing.T, what string) {
		t.Helper()
		require.Equal(t, dump(t, byMigrator.schema), dump(t, byScript.schema), what)
		require.Equal(t, versions(t, byMigrator.schema), versions(t, byScript.schema), what)
	}

	// The whole schema, from nothing.
	psql(t, script(t))
	require.NoError(t, m.Up(t.Context(), pgtest.Pool(t)))
	compare(t, "migrate sql against migrate up")
	require.Equal(t, latest(t), byScript.version(t))

	// Back to version 2, then up again in two steps.
	psql(t, script(t, "--down", "--to", "2"))
	require.NoError(t, m.Down(t.Context(), pgtest.Pool(t), 2))
	compare(t, "migrate sql --down --to 2 against migrate down --to 2")
	psql(t, script(t, "--from", "2", "--to", "4"))
	psql(t, script(t, "--from", "4"))
	require.NoError(t, m.Up(t.Context(), pgtest.Pool(t)))
	compare(t, "migrate sql in steps against migrate up")

	// A script applied at the wrong version stops at its first step.
	out, err := psqlErr(t, script(t, "--from", "4"))
	require.Error(t, err)
	require.Contains(t, out, "this step expects version 4")
	compare(t, "a refused script changes nothing")

	// The down script refuses while an instance is live, unless --force.
	_, err = byScript.backend(t).Claimer.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{InstanceID: uuid.New(), StaleThreshold: time.Hour})
	require.NoError(t, err)
	out, err = psqlErr(t, script(t, "--down", "--to", "0"))
	require.Error(t, err)
	require.Contains(t, out, "engine instance(s) live")
	require.Equal(t, latest(t), byScript.version(t))
	psql(t, script(t, "--down", "--to", "0", "--force"))
	require.NoError(t, m.Down(t.Context(), pgtest.Pool(t), 0))
	compare(t, "migrate sql --down --to 0 --force against migrate down --to 0")
}

// psql applies sql to the test database, stopping at the first error.
func psql(t *testing.T, sql string) {
	t.Helper()
	out, err := psqlErr(t, sql)
	require.NoError(t, err, out)
}

func psqlErr(t *testing.T, sql string) (string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.sql")
	require.NoError(t, os.WriteFile(path, []byte(sql), 0o600))
	out, err := exec.CommandContext(t.Context(), "psql", pgtest.ConnString(t), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", path).CombinedOutput()
	return string(out), err
}

// dump returns the definition of schema's objects, its name replaced.
func dump(t *testing.T, schema string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "pg_dump", "--schema-only", "--no-owner", "--no-privileges",
		"--schema", schema, "--dbname", pgtest.ConnString(t)).Output()
	require.NoError(t, err)
	var lines []string
	for line := range strings.Lines(string(out)) {
		switch {
		case strings.HasPrefix(line, "-- Dumped"): // the versions of the server and of pg_dump
			continue
		case strings.HasPrefix(line, `\restrict `), strings.HasPrefix(line, `\unrestrict `): // a random key per dump
			continue
		}
		lines = append(lines, line)
	}
	return strings.ReplaceAll(strings.Join(lines, ""), schema, "SCHEMA")
}

// versions returns the versions and names recorded in schema.
func versions(t *testing.T, schema string) []string {
	t.Helper()
	rows, err := pgtest.Pool(t).Query(context.WithoutCancel(t.Context()),
		`SELECT version || ' ' || name FROM `+schema+`.vantage_migrations ORDER BY version`)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}
