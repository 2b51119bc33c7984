package cli_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/cmd/vantage/internal/cli"
	"github.com/vantage-go/vantage/ports"
)

// TestBadInput runs command lines that are wrong, or name what does not
// exist: each fails with its exit code and a message that says what is
// wrong, prints nothing on stdout, and changes nothing (the schema stays
// at its version with no retired perspective, which the test checks after
// every case), and no rebuild requested.
func TestBadInput(t *testing.T) {
	t.Parallel()

	d := migratedDB(t)
	d.env.Getenv = func(key string) string {
		if key == cli.EnvDatabaseURL {
			return d.url
		}
		return ""
	}
	unmigrated := freshDB(t)
	b := d.backend(t)

	for _, tc := range []struct {
		name string
		args []string
		env  *cli.Env // d.env when nil
		code int
		msg  string
		out  string // what stdout holds; empty for nothing
	}{
		{"UnknownCommand", []string{"migrat"}, nil, cli.ExitUsage, `unknown command "migrat" for "vantage"`, ""},
		{"UnknownSubcommand", []string{"migrate", "sideways"}, nil, cli.ExitUsage, `unknown command "sideways" for "vantage migrate"`, ""},
		{"UnknownFlag", []string{"instances", "--verbose"}, nil, cli.ExitUsage, "unknown flag: --verbose", ""},
		{"NoDatabase", []string{"instances"}, &cli.Env{}, cli.ExitUsage, "no database: pass --database or set DATABASE_URL", ""},
		{"MalformedURL", []string{"--database", "postgres://user:secret@[::1", "instances"}, nil, cli.ExitUsage, "--database", ""},
		{"UnreachableDatabase", []string{"--database", "postgres://postgres@127.0.0.1:1/test?connect_timeout=5", "instances"}, nil, cli.ExitFailed, "connecting to the database", ""},
		{"BadSchema", []string{"--schema", "Orders-Prod", "instances"}, nil, cli.ExitUsage, `--schema: schema "Orders-Prod" must match`, ""},
		{"ReservedSchema", []string{"--schema", "pg_catalog", "migrate", "up"}, nil, cli.ExitUsage, "reserved", ""},
		{"UnmigratedSchema", []string{"--schema", unmigrated.schema, "dead-letters", "list"}, nil, cli.ExitFailed, "holds no Vantage tables", ""},
		{"NegativeTimeout", []string{"--timeout", "-1s", "instances"}, nil, cli.ExitUsage, "--timeout must not be negative", ""},
		{"BadTimeout", []string{"--timeout", "soon", "instances"}, nil, cli.ExitUsage, `invalid argument "soon"`, ""},
		{"RequeueNothing", []string{"dead-letters", "requeue"}, nil, cli.ExitUsage, "requeue takes dead letter ids, or --perspective P, or --all", ""},
		{"RequeueIDsAndPerspective", []string{"dead-letters", "requeue", "0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b", "--perspective", "order_summary"}, nil, cli.ExitUsage,
			"dead letter ids do not mix with --perspective, --all or --since", ""},
		{"RequeueIDsAndAll", []string{"dead-letters", "requeue", "--all", "0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b"}, nil, cli.ExitUsage, "do not mix", ""},
		{"RequeueIDsAndSince", []string{"dead-letters", "requeue", "0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b", "--since", "1h"}, nil, cli.ExitUsage, "do not mix", ""},
		{"RequeuePerspectiveAndAll", []string{"dead-letters", "requeue", "--perspective", "order_summary", "--all", "--yes"}, nil, cli.ExitUsage,
			"--perspective and --all exclude each other", ""},
		{"RequeueSinceAlone", []string{"dead-letters", "requeue", "--since", "1h"}, nil, cli.ExitUsage, "requeue takes dead letter ids", ""},
		{"RequeueBadSince", []string{"dead-letters", "requeue", "--all", "--since", "yesterday", "--yes"}, nil, cli.ExitUsage, `--since "yesterday" is neither`, ""},
		{"RequeueUnknownPerspective", []string{"dead-letters", "requeue", "--perspective", "orders_summary", "--yes"}, nil, cli.ExitNotFound,
			`perspective "orders_summary" is unknown`, ""},
		{"RequeueBadID", []string{"dead-letters", "requeue", "42"}, nil, cli.ExitUsage, `not a dead letter id (a UUID): "42"`, ""},
		{"IgnoreBadID", []string{"dead-letters", "ignore", "0197a3c4-zzzz"}, nil, cli.ExitUsage, "not a dead letter id", ""},
		{"RequeueUnknownID", []string{"dead-letters", "requeue", "0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b"}, nil, cli.ExitNotFound, "1 of 1 dead letter not requeued",
			"not found 0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b: no dead letter has this id\n"},
		{"ShowBadID", []string{"dead-letters", "show", "42"}, nil, cli.ExitUsage, `not a dead letter id (a UUID): "42"`, ""},
		{"ShowNoID", []string{"dead-letters", "show"}, nil, cli.ExitUsage, "takes one ID, got 0 arguments", ""},
		{"ShowUnknownID", []string{"dead-letters", "show", "0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b"}, nil, cli.ExitNotFound,
			"no dead letter has id 0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b", ""},
		{"ListBadStatus", []string{"dead-letters", "list", "--status", "lost"}, nil, cli.ExitUsage, `--status "lost" must be`, ""},
		{"ListBadSince", []string{"dead-letters", "list", "--since", "yesterday"}, nil, cli.ExitUsage, `--since "yesterday" is neither`, ""},
		{"ListNegativeLimit", []string{"dead-letters", "list", "--limit", "-1"}, nil, cli.ExitUsage, "--limit must not be negative", ""},
		{"ListBadStream", []string{"dead-letters", "list", "--stream", "orders"}, nil, cli.ExitUsage, `--stream "orders" is not a UUID`, ""},
		{"ListExtraArgument", []string{"dead-letters", "list", "order_summary"}, nil, cli.ExitUsage, `unknown command "order_summary"`, ""},
		{"RetireNoPerspective", []string{"retire"}, nil, cli.ExitUsage, "takes one PERSPECTIVE, got 0 arguments", ""},
		{"RetireEmptyPerspective", []string{"retire", "", "--yes"}, nil, cli.ExitUsage, "PERSPECTIVE must not be empty", ""},
		{"RetireTwoPerspectives", []string{"retire", "a", "b", "--yes"}, nil, cli.ExitUsage, "got 2 arguments", ""},
		{"RetireUnknownPerspective", []string{"retire", "orders_summary", "--yes"}, nil, cli.ExitNotFound, `perspective "orders_summary" is unknown`, ""},
		{"ReviveUnknownPerspective", []string{"revive", "orders_summary"}, nil, cli.ExitNotFound, `perspective "orders_summary" is unknown`, ""},
		{"RebuildNoPerspective", []string{"rebuild"}, nil, cli.ExitUsage, "takes one PERSPECTIVE, got 0 arguments", ""},
		{"RebuildUnknownPerspective", []string{"rebuild", "orders_summary"}, nil, cli.ExitNotFound, `perspective "orders_summary" is unknown`, ""},
		{"RebuildBadStream", []string{"rebuild", "order_summary", "--stream", "orders"}, nil, cli.ExitUsage, `--stream "orders" is not a UUID`, ""},
		{"RebuildNilStream", []string{"rebuild", "order_summary", "--stream", "00000000-0000-0000-0000-000000000000"}, nil, cli.ExitUsage,
			"--stream must not be the nil UUID", ""},
		{"RebuildZeroInterval", []string{"rebuild", "order_summary", "--wait", "--interval", "0s"}, nil, cli.ExitUsage, "--interval must be positive, got 0s", ""},
		{"RebuildNegativeInterval", []string{"rebuild", "order_summary", "--wait", "--interval", "-1s"}, nil, cli.ExitUsage, "--interval must be positive", ""},
		{"RebuildIntervalWithoutWait", []string{"rebuild", "order_summary", "--interval", "1s"}, nil, cli.ExitUsage, "--interval applies with --wait only", ""},
		{"RebuildListBadStatus", []string{"rebuild", "list", "--status", "stuck"}, nil, cli.ExitUsage, `--status "stuck" must be pending`, ""},
		{"RebuildListNegativeLimit", []string{"rebuild", "list", "--limit", "-1"}, nil, cli.ExitUsage, "--limit must not be negative", ""},
		{"RebuildCancelBadID", []string{"rebuild", "cancel", "42"}, nil, cli.ExitUsage, `not a rebuild request id (a UUID): "42"`, ""},
		{"RebuildCancelUnknownID", []string{"rebuild", "cancel", "0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b"}, nil, cli.ExitNotFound,
			"no rebuild request has id 0197a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b", ""},
		{"StatusZeroInterval", []string{"status", "--watch", "--interval", "0s"}, nil, cli.ExitUsage, "--interval must be positive, got 0s", ""},
		{"StatusNegativeInterval", []string{"status", "--watch", "--interval", "-2s"}, nil, cli.ExitUsage, "--interval must be positive", ""},
		{"StatusIntervalWithoutWatch", []string{"status", "--interval", "5s"}, nil, cli.ExitUsage, "--interval applies with --watch only", ""},
		{"StatusBadLiveWithin", []string{"status", "--live-within", "0s"}, nil, cli.ExitUsage, "--live-within must be positive", ""},
		{"StatusExtraArgument", []string{"status", "order_summary"}, nil, cli.ExitUsage, `unknown command "order_summary"`, ""},
		{"DownAboveLatest", []string{"migrate", "down", "--to", "99", "--yes"}, nil, cli.ExitUsage, "--to 99 is above the latest version", ""},
		{"DownNegative", []string{"migrate", "down", "--to", "-2", "--yes"}, nil, cli.ExitUsage, "--to must not be negative", ""},
		{"SQLWithJSON", []string{"migrate", "sql", "--json"}, nil, cli.ExitUsage, "--json does not apply", ""},
		{"SQLFromAboveLatest", []string{"migrate", "sql", "--from", "99"}, nil, cli.ExitUsage, "from version 99: must be from 0 to", ""},
		{"SQLDownUpwards", []string{"migrate", "sql", "--down", "--from", "2", "--to", "4"}, nil, cli.ExitUsage, "to version 4 must be below from version 2", ""},
		{"InstancesBadLiveWithin", []string{"instances", "--live-within", "0s"}, nil, cli.ExitUsage, "--live-within must be positive", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Not parallel: the cases share the schema whose state they
			// check.
			env := d.env
			if tc.env != nil {
				env = *tc.env
			}
			args := tc.args
			if len(args) == 0 || args[0] != "--schema" {
				args = append([]string{"--schema", d.schema}, args...)
			}
			res := run(t, env, args...)
			require.Equal(t, tc.code, res.code)
			require.Contains(t, res.stderr, tc.msg)
			require.Equal(t, tc.out, res.stdout)
			require.NotContains(t, res.stderr, "secret", "passwords stay out of messages")
			if tc.code == cli.ExitUsage {
				require.Contains(t, res.stderr, "--help' for usage")
			}

			require.Equal(t, latest(t), d.version(t))
			require.Zero(t, unmigrated.version(t))
			retired, err := b.Admin.PerspectivesRetired(t.Context())
			require.NoError(t, err)
			require.Empty(t, retired)
			rebuilds, err := b.Admin.RebuildsList(t.Context(), &ports.RebuildsListParams{})
			require.NoError(t, err)
			require.Empty(t, rebuilds, "no rebuild requested")
		})
	}
}
