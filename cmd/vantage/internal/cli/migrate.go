package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/vantage-go/vantage/adapters/postgres"
)

func (a *app) migrateCommand() *cobra.Command {
	cmd := groupCommand("migrate", "Apply, revert, inspect or print the schema's migrations",
		`The Vantage tables are created and changed by versioned migrations,
embedded in this binary. Each version runs in its own transaction, under a
lock per schema, so instances migrating at the same time apply each version
once. The schema is created when missing; --schema names it.`,
		`  vantage migrate status
  vantage migrate up
  vantage migrate down --to 5 --yes
  vantage migrate sql --from 5 > upgrade.sql`)
	cmd.AddCommand(a.migrateUpCommand(), a.migrateDownCommand(), a.migrateStatusCommand(), a.migrateSQLCommand())
	return cmd
}

func (a *app) migrateUpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "up",
		Short: "Apply every migration the schema lacks",
		Long: `Apply every migration above the schema's version, creating the schema when
missing. Instances may run meanwhile: the changes are additive.

JSON: {"schema", "from_version", "version", "latest_version",
"applied": [{"version", "name"}]}.`,
		Example: `  vantage migrate up
  vantage --schema billing migrate up --json`,
		Args: cobra.NoArgs,
		RunE: a.action(func(ctx context.Context, _ []string) error { return a.migrateUp(ctx) }),
	}
}

func (a *app) migrateDownCommand() *cobra.Command {
	var (
		to         int
		force, yes bool
		liveWithin time.Duration
	)
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Revert migrations, newest first",
		Long: `Revert the schema's migrations above --to, newest first; without --to,
revert the latest applied one. Version 0 drops every Vantage table, events
included: the schema and its vantage_migrations table stay.

Reverting destroys what the reverted tables and columns hold, so it asks
for a confirmation on a terminal; without a terminal it refuses (exit 3)
unless --yes is given.

It refuses (exit 3) while engine instances are live: an instance whose
heartbeat is newer than --live-within (set it to the engines'
StaleInstanceThreshold). A stopped instance deregisters at once; a crashed
one counts until its heartbeat is that old. --force reverts anyway: the
instances' calls then fail on the missing tables, and their work is lost.
Versions reverted before a refusal stay reverted.

JSON: {"schema", "from_version", "version", "latest_version",
"reverted": [{"version", "name"}]}.`,
		Example: `  vantage migrate down              # revert the latest version
  vantage migrate down --to 4 --yes
  vantage migrate down --to 0 --force --yes   # drop every table of a test schema`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = a.action(func(ctx context.Context, _ []string) error {
		if !cmd.Flags().Changed("to") {
			to = toOneDown
		} else if to < 0 {
			return usageErrorf("--to must not be negative, got %d", to)
		}
		return a.migrateDown(ctx, to, force, yes, liveWithin)
	})
	f := cmd.Flags()
	f.IntVar(&to, "to", 0, "version to revert to (default: one below the schema's version)")
	f.BoolVar(&force, "force", false, "revert even while engine instances are live")
	f.BoolVarP(&yes, "yes", "y", false, "do not ask for a confirmation")
	f.DurationVar(&liveWithin, "live-within", postgres.LiveWithinDefault, "an instance whose heartbeat is newer is live")
	return cmd
}

func (a *app) migrateStatusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the schema's version and which migrations are applied",
		Long: `Show the schema's version against the latest this binary knows, and each
migration with whether it is applied. A schema that does not exist is at
version 0.

JSON: {"schema", "version", "latest_version", "pending",
"migrations": [{"version", "name", "applied"}]}.`,
		Example: `  vantage migrate status
  vantage migrate status --json | jq .pending`,
		Args: cobra.NoArgs,
		RunE: a.action(func(ctx context.Context, _ []string) error { return a.migrateStatus(ctx) }),
	}
}

// migrationRef names a migration in reports.
type migrationRef struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
}

func (m migrationRef) String() string { return fmt.Sprintf("%03d_%s", m.Version, m.Name) }

// refs returns the migrations of versions lo+1 to hi, ascending.
func refs(m *postgres.Migrator, lo, hi int) []migrationRef {
	out := []migrationRef{}
	for _, mig := range m.Migrations() {
		if mig.Version > lo && mig.Version <= hi {
			out = append(out, migrationRef{Version: mig.Version, Name: mig.Name})
		}
	}
	return out
}

// migrationMove is the report of migrate up and down.
type migrationMove struct {
	Schema        string `json:"schema"`
	FromVersion   int    `json:"from_version"`
	Version       int    `json:"version"`
	LatestVersion int    `json:"latest_version"`
}

type migrateUpReport struct {
	migrationMove
	Applied []migrationRef `json:"applied"`
}

func (r *migrateUpReport) writeText(w io.Writer) {
	if len(r.Applied) == 0 {
		fmt.Fprintf(w, "schema %q is at version %d: nothing to apply\n", r.Schema, r.Version)
		return
	}
	fmt.Fprintf(w, "schema %q: version %d -> %d\n", r.Schema, r.FromVersion, r.Version)
	for _, m := range r.Applied {
		fmt.Fprintf(w, "applied %s\n", m)
	}
}

type migrateDownReport struct {
	migrationMove
	Reverted []migrationRef `json:"reverted"`
}

func (r *migrateDownReport) writeText(w io.Writer) {
	if len(r.Reverted) == 0 {
		fmt.Fprintf(w, "schema %q is at version %d: nothing to revert\n", r.Schema, r.Version)
		return
	}
	fmt.Fprintf(w, "schema %q: version %d -> %d\n", r.Schema, r.FromVersion, r.Version)
	for _, m := range r.Reverted {
		fmt.Fprintf(w, "reverted %s\n", m)
	}
}

// version reads the schema's version in a call of its own.
func (a *app) version(ctx context.Context, s *session) (int, error) {
	cctx, cancel := a.call(ctx)
	defer cancel()
	return s.migrator.Version(cctx, s.pool)
}

func (a *app) migrateUp(ctx context.Context) error {
	s, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	from, err := a.version(ctx, s)
	if err != nil {
		return err
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	upErr := s.migrator.Up(cctx, s.pool)
	// Versions applied before a failure stay applied: report them.
	to, err := a.version(context.WithoutCancel(ctx), s)
	if err != nil {
		return errors.Join(upErr, err)
	}
	r := &migrateUpReport{
		migrationMove: migrationMove{Schema: a.schema, FromVersion: from, Version: to, LatestVersion: s.migrator.Latest()},
		Applied:       refs(s.migrator, from, to),
	}
	if upErr != nil && len(r.Applied) == 0 {
		return upErr
	}
	return errors.Join(a.print(r), upErr)
}

// toOneDown is the target of migrate down without --to: one version below
// the schema's.
const toOneDown = -1

func (a *app) migrateDown(ctx context.Context, to int, force, yes bool, liveWithin time.Duration) error {
	latest := a.latest()
	switch {
	case to > latest:
		return usageErrorf("--to %d is above the latest version this vantage knows (%d)", to, latest)
	case liveWithin <= 0:
		return usageErrorf("--live-within must be positive, got %s", liveWithin)
	}
	s, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	from, err := a.version(ctx, s)
	if err != nil {
		return err
	}
	if to == toOneDown {
		to = max(from-1, 0)
	}
	switch {
	case from > latest:
		return fmt.Errorf("schema %q is at version %d, newer than this vantage knows (%d): revert it with the vantage that applied it", a.schema, from, latest)
	case to > from:
		return usageErrorf("--to %d is above the schema's version %d: migrate down only reverts (see 'vantage migrate up')", to, from)
	}
	r := &migrateDownReport{
		migrationMove: migrationMove{Schema: a.schema, FromVersion: from, Version: from, LatestVersion: latest},
		Reverted:      []migrationRef{},
	}
	if to == from {
		return a.print(r)
	}
	reverting := refs(s.migrator, to, from)
	names := make([]string, len(reverting))
	for i, m := range reverting {
		names[len(reverting)-1-i] = m.String()
	}
	question := fmt.Sprintf("Revert schema %q from version %d to %d (%s)? What the reverted tables and columns hold is lost.",
		a.schema, from, to, strings.Join(names, ", "))
	if err := a.confirm(yes, "migrate down", question); err != nil {
		return err
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	downErr := s.migrator.Revert(cctx, s.pool, &postgres.RevertParams{To: to, Force: force, LiveWithin: liveWithin})
	if live := (*postgres.LiveInstancesError)(nil); errors.As(downErr, &live) {
		downErr = refusedErrorf("%s", liveMessage(a.schema, live))
	}
	now, err := a.version(context.WithoutCancel(ctx), s)
	if err != nil {
		return errors.Join(downErr, err)
	}
	r.Version = now
	for _, m := range refs(s.migrator, now, from) {
		r.Reverted = append([]migrationRef{m}, r.Reverted...)
	}
	if downErr != nil && len(r.Reverted) == 0 {
		return downErr
	}
	return errors.Join(a.print(r), downErr)
}

// liveInstancesListed bounds the instance ids a refusal names.
const liveInstancesListed = 5

// liveMessage explains a refusal to revert in the command's terms.
func liveMessage(schema string, e *postgres.LiveInstancesError) string {
	ids := make([]string, 0, liveInstancesListed+1)
	for i, id := range e.Instances {
		if i == liveInstancesListed {
			ids = append(ids, fmt.Sprintf("and %d more", len(e.Instances)-i))
			break
		}
		ids = append(ids, id.String())
	}
	return fmt.Sprintf("refusing to revert version %d of schema %q: %s live (heartbeat within %s: %s); stop them first ('vantage instances' lists them), or pass --force",
		e.Version, schema, instancesAre(e.Instances), e.LiveWithin, strings.Join(ids, ", "))
}

func instancesAre(ids []uuid.UUID) string {
	if len(ids) == 1 {
		return "1 engine instance is"
	}
	return fmt.Sprintf("%d engine instances are", len(ids))
}

// latest is the latest version this binary knows.
func (a *app) latest() int {
	m, err := postgres.NewMigrator(nil, a.schema)
	if err != nil {
		return 0 // the schema was validated before any command ran
	}
	return m.Latest()
}

type migrationStatus struct {
	migrationRef
	Applied bool `json:"applied"`
}

type migrateStatusReport struct {
	Schema        string            `json:"schema"`
	Version       int               `json:"version"`
	LatestVersion int               `json:"latest_version"`
	Pending       int               `json:"pending"`
	Migrations    []migrationStatus `json:"migrations"`
}

func (r *migrateStatusReport) writeText(w io.Writer) {
	switch {
	case r.Version > r.LatestVersion:
		fmt.Fprintf(w, "schema %q: version %d, newer than this vantage knows (%d)\n", r.Schema, r.Version, r.LatestVersion)
	case r.Pending == 0:
		fmt.Fprintf(w, "schema %q: version %d of %d, up to date\n", r.Schema, r.Version, r.LatestVersion)
	default:
		fmt.Fprintf(w, "schema %q: version %d of %d, %s pending: run 'vantage migrate up'\n",
			r.Schema, r.Version, r.LatestVersion, plural(r.Pending, "migration"))
	}
	rows := make([][]string, len(r.Migrations))
	for i, m := range r.Migrations {
		rows[i] = []string{fmt.Sprintf("%03d", m.Version), m.Name, yesNo(m.Applied)}
	}
	writeTable(w, []string{"VERSION", "NAME", "APPLIED"}, rows)
}

func (a *app) migrateStatus(ctx context.Context) error {
	s, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	v, err := a.version(ctx, s)
	if err != nil {
		return err
	}
	r := &migrateStatusReport{Schema: a.schema, Version: v, LatestVersion: s.migrator.Latest(), Pending: max(s.migrator.Latest()-v, 0)}
	for _, m := range s.migrator.Migrations() {
		r.Migrations = append(r.Migrations, migrationStatus{
			migrationRef: migrationRef{Version: m.Version, Name: m.Name},
			Applied:      m.Version <= v,
		})
	}
	return a.print(r)
}
