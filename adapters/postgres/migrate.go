package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/vantage-go/vantage/sql/migrations"
)

// SchemaDefault is the schema that holds the adapter's tables unless
// configured otherwise.
const SchemaDefault = "vantage"

// schemaMarker is replaced by the quoted schema in migration files and in the
// adapter's queries.
const schemaMarker = "/* SCHEMA */"

var (
	schemaPattern        = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	migrationFilePattern = regexp.MustCompile(`^([0-9]{3})_([a-z0-9_]+)\.(up|down)\.sql$`)
)

// ValidateSchema reports whether schema can hold the adapter's tables: 1 to 63
// characters of lower-case letters, digits and underscores, not starting with
// a digit, and not a name PostgreSQL reserves (pg_*, information_schema).
func ValidateSchema(schema string) error {
	switch {
	case !schemaPattern.MatchString(schema):
		return fmt.Errorf("schema %q must match %s (lower-case letters, digits and underscores, at most 63, not starting with a digit)", schema, schemaPattern)
	case strings.HasPrefix(schema, "pg_"), schema == "information_schema":
		return fmt.Errorf("schema %q is reserved by PostgreSQL", schema)
	}
	return nil
}

// quoteSchema returns schema quoted for SQL text.
func quoteSchema(schema string) string { return pgx.Identifier{schema}.Sanitize() }

// renderSchema replaces the schema marker in text with the quoted schema.
func renderSchema(text, schema string) string {
	return strings.ReplaceAll(text, schemaMarker, quoteSchema(schema))
}

// Beginner starts transactions: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx (whose
// Begin opens a savepoint) all qualify.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Migration is one version of the schema, read from a migrations file system.
type Migration struct {
	// Version is the file's three-digit prefix, starting at 1.
	Version int
	// Name is the snake_case part of the file name.
	Name string
	// Up and Down are the SQL texts, with the schema marker still in place.
	Up, Down string
}

// Migrator applies and reverts the embedded (or injected) migrations of one
// schema. Every version runs in its own transaction together with its row in
// vantage_migrations, under a transaction-scoped advisory lock per schema, so
// concurrent migrators (several instances starting at once) apply each
// version exactly once. Reverting refuses while engine instances are live
// unless forced (see Revert). A Migrator is immutable and safe for
// concurrent use.
type Migrator struct {
	schema     string
	migrations []Migration
}

// NewMigrator reads the migrations of fsys (migrations.FS when nil) for schema
// (SchemaDefault when empty). It fails on an invalid schema name, a file that
// does not follow NNN_name.up.sql / NNN_name.down.sql, a missing half, or
// versions that do not run 1, 2, 3, ... without gaps.
func NewMigrator(fsys fs.FS, schema string) (*Migrator, error) {
	if fsys == nil {
		fsys = migrations.FS
	}
	if schema == "" {
		schema = SchemaDefault
	}
	if err := ValidateSchema(schema); err != nil {
		return nil, err
	}
	ms, err := readMigrations(fsys)
	if err != nil {
		return nil, err
	}
	return &Migrator{schema: schema, migrations: ms}, nil
}

func readMigrations(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("reading migrations: %w", err)
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".sql" {
			continue
		}
		m := migrationFilePattern.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("reading migrations: file %q is not named NNN_snake_name.up.sql or .down.sql", e.Name())
		}
		version, _ := strconv.Atoi(m[1])
		b, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("reading migration %q: %w", e.Name(), err)
		}
		mig := byVersion[version]
		if mig == nil {
			mig = &Migration{Version: version, Name: m[2]}
			byVersion[version] = mig
		}
		if mig.Name != m[2] {
			return nil, fmt.Errorf("reading migrations: version %d has two names, %q and %q", version, mig.Name, m[2])
		}
		if m[3] == "up" {
			mig.Up = string(b)
		} else {
			mig.Down = string(b)
		}
	}
	ms := make([]Migration, 0, len(byVersion))
	for v := 1; v <= len(byVersion); v++ {
		mig := byVersion[v]
		switch {
		case mig == nil:
			return nil, fmt.Errorf("reading migrations: versions must run 1..%d without gaps, %03d is missing", len(byVersion), v)
		case mig.Up == "":
			return nil, fmt.Errorf("reading migrations: %03d_%s.up.sql is missing or empty", v, mig.Name)
		case mig.Down == "":
			return nil, fmt.Errorf("reading migrations: %03d_%s.down.sql is missing or empty", v, mig.Name)
		}
		ms = append(ms, *mig)
	}
	return ms, nil
}

// Schema returns the schema the migrator manages.
func (m *Migrator) Schema() string { return m.schema }

// Migrations returns the known migrations in version order.
func (m *Migrator) Migrations() []Migration { return append([]Migration(nil), m.migrations...) }

// Latest returns the highest known version (0 when there are none).
func (m *Migrator) Latest() int { return len(m.migrations) }

// Up creates the schema if needed and applies every version above the
// current one.
func (m *Migrator) Up(ctx context.Context, db Beginner) error {
	return m.migrateTo(ctx, db, m.Latest(), nil)
}

// Down reverts versions above to, newest first, refusing while engine
// instances are live: it is Revert with RevertParams{To: to}. Down(ctx, db,
// 0) drops every table of the adapter; the schema and vantage_migrations
// stay.
func (m *Migrator) Down(ctx context.Context, db Beginner, to int) error {
	return m.Revert(ctx, db, &RevertParams{To: to})
}

// LiveWithinDefault is the default of RevertParams.LiveWithin: the engine's
// default stale-instance threshold (core.StaleInstanceThresholdDefault).
const LiveWithinDefault = 30 * time.Second

// RevertParams are the inputs of Migrator.Revert.
type RevertParams struct {
	// To is the version to revert to; 0 drops every table of the adapter.
	// Must not be negative nor above the latest known version.
	To int
	// Force reverts even while instances are live. Their calls then fail
	// on the missing or changed tables (the engine retries them), and what
	// they held is lost with the tables: use it for a schema whose
	// instances are gone for good, or on a test database.
	Force bool
	// LiveWithin tells live instances from stale ones: an instance is live
	// while its last heartbeat (vantage_instances.last_heartbeat_at) is
	// newer than the database's now() minus LiveWithin. Set it to the
	// engine's Options.Claims.StaleInstanceThreshold. Defaults to
	// LiveWithinDefault. Must not be negative.
	LiveWithin time.Duration
}

// ErrInstancesLive is the error Migrator.Revert (and Down) returns, wrapped
// in a *LiveInstancesError, when it refuses to revert a schema that live
// engine instances use. Compare with errors.Is.
var ErrInstancesLive = errors.New("engine instances are live")

// LiveInstancesError reports the live instances that made Migrator.Revert
// refuse a version; versions reverted before it stay reverted. It wraps
// ErrInstancesLive. Get it with errors.As.
type LiveInstancesError struct {
	// Version is the version Revert did not revert: the schema's version.
	Version int
	// Instances are the live instances, in id order.
	Instances []uuid.UUID
	// LiveWithin is the bound a heartbeat was newer than.
	LiveWithin time.Duration
}

// liveInstancesListed bounds the ids LiveInstancesError.Error names.
const liveInstancesListed = 5

// Error names the live instances and how to revert anyway.
func (e *LiveInstancesError) Error() string {
	ids := make([]string, 0, liveInstancesListed+1)
	for i, id := range e.Instances {
		if i == liveInstancesListed {
			ids = append(ids, fmt.Sprintf("and %d more", len(e.Instances)-i))
			break
		}
		ids = append(ids, id.String())
	}
	noun := "instances are"
	if len(e.Instances) == 1 {
		noun = "instance is"
	}
	return fmt.Sprintf("refusing to revert version %d: %d %s live (heartbeat within %s: %s); stop them first, or set RevertParams.Force to revert anyway",
		e.Version, len(e.Instances), noun, e.LiveWithin, strings.Join(ids, ", "))
}

// Unwrap returns ErrInstancesLive.
func (e *LiveInstancesError) Unwrap() error { return ErrInstancesLive }

// Revert reverts versions above params.To, newest first, each in its own
// transaction. Unless params.Force is set, each version is reverted only
// when no engine instance is live (see RevertParams.LiveWithin): the
// transaction locks vantage_instances against heartbeats, so an instance
// cannot come up between the check and the revert. Otherwise it returns a
// *LiveInstancesError (wrapping ErrInstancesLive) and reverts nothing more;
// a deregistered instance has no row, and a stopped or crashed one is live
// until its heartbeat is LiveWithin old.
func (m *Migrator) Revert(ctx context.Context, db Beginner, params *RevertParams) error {
	switch {
	case params.To < 0:
		return fmt.Errorf("migrating schema %q down: target version %d is negative", m.schema, params.To)
	case params.LiveWithin < 0:
		return fmt.Errorf("migrating schema %q down: RevertParams.LiveWithin must not be negative, got %s", m.schema, params.LiveWithin)
	}
	var check revertCheck
	if !params.Force {
		liveWithin := cmp.Or(params.LiveWithin, LiveWithinDefault)
		check = func(ctx context.Context, tx pgx.Tx, current int) error {
			return m.refuseIfLive(ctx, tx, current, liveWithin)
		}
	}
	return m.migrateTo(ctx, db, params.To, check)
}

// refuseIfLive returns a *LiveInstancesError when instances heartbeat
// within liveWithin. It locks vantage_instances in SHARE mode for the rest
// of tx: heartbeats (inserts and updates) wait until the version is
// reverted, then find their tables gone or changed. A schema without the
// table (injected migrations, or version 0) has no instances.
func (m *Migrator) refuseIfLive(ctx context.Context, tx pgx.Tx, current int, liveWithin time.Duration) error {
	table := quoteSchema(m.schema) + ".vantage_instances"
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil {
		return fmt.Errorf("looking up the instances: %w", err)
	}
	if !exists {
		return nil
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+table+` IN SHARE MODE`); err != nil {
		return fmt.Errorf("locking the instances: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT instance_id FROM `+table+` WHERE last_heartbeat_at > now() - $1::interval ORDER BY instance_id`, liveWithin)
	if err != nil {
		return fmt.Errorf("listing live instances: %w", err)
	}
	live, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (uuid.UUID, error) {
		var id uuid.UUID
		return id, row.Scan(uuidDest(&id))
	})
	if err != nil {
		return fmt.Errorf("listing live instances: %w", err)
	}
	if len(live) > 0 {
		return &LiveInstancesError{Version: current, Instances: live, LiveWithin: liveWithin}
	}
	return nil
}

// Version returns the schema's current version, 0 when nothing was applied
// (or the schema does not exist).
func (m *Migrator) Version(ctx context.Context, db Beginner) (int, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading version of schema %q: %w", m.schema, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, quoteSchema(m.schema)+".vantage_migrations").Scan(&exists); err != nil {
		return 0, fmt.Errorf("reading version of schema %q: %w", m.schema, err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	err = tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+quoteSchema(m.schema)+`.vantage_migrations`).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("reading version of schema %q: %w", m.schema, err)
	}
	return v, nil
}

// migrateTo moves the schema one version per transaction until it reaches
// target. Each transaction takes the schema's advisory lock and reads the
// current version again, so a concurrent migrator's work is never repeated.
// beforeRevert, when set, runs in the transaction of each version to revert
// before its down migration, and stops the migration with its error.
func (m *Migrator) migrateTo(ctx context.Context, db Beginner, target int, beforeRevert revertCheck) error {
	if target > m.Latest() {
		return fmt.Errorf("migrating schema %q: target version %d is above the latest known %d", m.schema, target, m.Latest())
	}
	deadlocks := 0
	for {
		done, err := m.step(ctx, db, target, beforeRevert)
		if isDeadlock(err) && deadlocks < migrationDeadlockRetries {
			deadlocks++
			continue
		}
		if err != nil || done {
			return err
		}
	}
}

// migrationDeadlockRetries bounds the retries of a version whose transaction
// deadlocked. A version's DDL locks its tables one after the other, and a
// running instance's transaction (a forced revert) may hold one of them
// while it waits for another the migration holds already: PostgreSQL then
// aborts one of the two, and the version, rolled back whole, can run again.
const migrationDeadlockRetries = 5

// isDeadlock reports whether err is PostgreSQL's deadlock_detected.
func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgDeadlockDetected
}

// revertCheck vets the revert of version current in tx.
type revertCheck func(ctx context.Context, tx pgx.Tx, current int) error

// step applies (or reverts) one version towards target and reports whether
// the schema had already reached it.
func (m *Migrator) step(ctx context.Context, db Beginner, target int, beforeRevert revertCheck) (done bool, err error) {
	err = withTx(ctx, db, func(tx pgx.Tx) error {
		current, err := m.lockAndRead(ctx, tx)
		if err != nil {
			return err
		}
		switch {
		case current == target:
			done = true
			return nil
		case current > m.Latest():
			return fmt.Errorf("schema %q is at version %d, newer than the latest known %d", m.schema, current, m.Latest())
		case current < target:
			mig := m.migrations[current] // version current+1
			if _, err := tx.Exec(ctx, renderSchema(mig.Up, m.schema)); err != nil {
				return fmt.Errorf("applying %03d_%s: %w", mig.Version, mig.Name, err)
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+quoteSchema(m.schema)+`.vantage_migrations (version, name) VALUES ($1, $2)`, mig.Version, mig.Name)
			return err
		default:
			mig := m.migrations[current-1]
			if beforeRevert != nil {
				if err := beforeRevert(ctx, tx, current); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, renderSchema(mig.Down, m.schema)); err != nil {
				return fmt.Errorf("reverting %03d_%s: %w", mig.Version, mig.Name, err)
			}
			_, err := tx.Exec(ctx, `DELETE FROM `+quoteSchema(m.schema)+`.vantage_migrations WHERE version = $1`, mig.Version)
			return err
		}
	})
	if err != nil {
		return false, fmt.Errorf("migrating schema %q: %w", m.schema, err)
	}
	return done, nil
}

// lockAndRead serialises migrators of the schema for the rest of tx, creates
// the schema and the version table when missing, and returns the version.
func (m *Migrator) lockAndRead(ctx context.Context, tx pgx.Tx) (int, error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))`, migrationLock, m.schema); err != nil {
		return 0, fmt.Errorf("taking the migration lock: %w", err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)`, m.schema).Scan(&exists); err != nil {
		return 0, fmt.Errorf("looking up the schema: %w", err)
	}
	q := quoteSchema(m.schema)
	if !exists {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA `+q); err != nil {
			return 0, fmt.Errorf("creating the schema: %w", err)
		}
	}
	_, err := tx.Exec(ctx, fmt.Sprintf(versionTableDDL, q))
	if err != nil {
		return 0, fmt.Errorf("creating the version table: %w", err)
	}
	var current int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+q+`.vantage_migrations`).Scan(&current); err != nil {
		return 0, fmt.Errorf("reading the version: %w", err)
	}
	return current, nil
}

// Migrate applies every embedded migration to schema (SchemaDefault when
// empty), creating it if needed. It is NewMigrator(nil, schema) followed by Up.
// Its errors name the schema, so callers need not repeat it.
func Migrate(ctx context.Context, db Beginner, schema string) error {
	m, err := NewMigrator(nil, schema)
	if err != nil {
		return err
	}
	return m.Up(ctx, db)
}

// withTx runs fn in a transaction of db and commits, or rolls back and joins
// the rollback error when fn or the commit fails.
func withTx(ctx context.Context, db Beginner, fn func(tx pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	if err := fn(tx); err != nil {
		if rbErr := tx.Rollback(context.WithoutCancel(ctx)); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) {
			return errors.Join(err, fmt.Errorf("rolling back: %w", rbErr))
		}
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}
