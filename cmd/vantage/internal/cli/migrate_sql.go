package cli

import (
	"context"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/vantage-go/vantage/adapters/postgres"
)

func (a *app) migrateSQLCommand() *cobra.Command {
	var opts scriptOptions
	cmd := &cobra.Command{
		Use:   "sql",
		Short: "Print the SQL of the migrations, without running it",
		Long: `Print the SQL that 'migrate up' (or, with --down, 'migrate down') runs,
with the schema filled in, for review or for applying with psql. Nothing
connects to a database.

Each version is one transaction, as the migrator runs it: it takes the
migrator's lock on the schema, checks that the schema is at the version the
script expects (so a script applied twice, or to another version, stops at
its first transaction), changes the tables and records the version in
vantage_migrations. The first version also creates the schema and that
table. A down script also stops while engine instances are live (see
'migrate down'), unless --force. Apply it with psql stopping at the first
error:

  vantage migrate sql > up.sql
  psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f up.sql

Without --from and --to, the up script goes from version 0 to the latest,
and the down script from the latest version down by one.`,
		Example: `  vantage migrate sql                      # the whole schema, from nothing
  vantage migrate sql --from 4             # what 'migrate up' runs on a schema at version 4
  vantage migrate sql --down --from 6 --to 4
  vantage --schema billing migrate sql | psql "$DATABASE_URL" -v ON_ERROR_STOP=1`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = a.action(func(context.Context, []string) error {
		f := cmd.Flags()
		opts.fromSet, opts.toSet = f.Changed("from"), f.Changed("to")
		return a.migrateSQL(opts)
	})
	f := cmd.Flags()
	f.IntVar(&opts.from, "from", 0, "version the script starts from (default: 0 up, the latest down)")
	f.IntVar(&opts.to, "to", 0, "version the script ends at (default: the latest up, one below --from down)")
	f.BoolVar(&opts.down, "down", false, "print the revert script")
	f.BoolVar(&opts.force, "force", false, "leave out the down script's check for live engine instances")
	f.DurationVar(&opts.liveWithin, "live-within", postgres.LiveWithinDefault, "the down script's bound for a live instance's heartbeat")
	return cmd
}

// scriptOptions are the flags of migrate sql.
type scriptOptions struct {
	from, to       int
	fromSet, toSet bool
	down, force    bool
	liveWithin     time.Duration
}

func (a *app) migrateSQL(opts scriptOptions) error {
	if a.json {
		return usageErrorf("migrate sql prints SQL: --json does not apply")
	}
	m, err := postgres.NewMigrator(nil, a.schema)
	if err != nil {
		return usageError(err)
	}
	latest := m.Latest()
	from, to := opts.from, opts.to
	if opts.down {
		if !opts.fromSet {
			from = latest
		}
		if !opts.toSet {
			to = max(from-1, 0)
		}
	} else if !opts.toSet {
		to = latest
	}
	if opts.liveWithin <= 0 {
		return usageErrorf("--live-within must be positive, got %s", opts.liveWithin)
	}
	script, err := m.Script(&postgres.ScriptParams{Down: opts.down, From: from, To: to, Force: opts.force, LiveWithin: opts.liveWithin})
	if err != nil {
		return usageError(err)
	}
	_, err = io.WriteString(a.stdout, script)
	return err
}
