package postgres

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

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
// version exactly once. A Migrator is immutable and safe for concurrent use.
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
	return m.migrateTo(ctx, db, m.Latest())
}

// Down reverts versions above to, newest first. Down(ctx, db, 0) drops every
// table of the adapter; the schema and vantage_migrations stay.
func (m *Migrator) Down(ctx context.Context, db Beginner, to int) error {
	if to < 0 {
		return fmt.Errorf("migrating schema %q down: target version %d is negative", m.schema, to)
	}
	return m.migrateTo(ctx, db, to)
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
func (m *Migrator) migrateTo(ctx context.Context, db Beginner, target int) error {
	if target > m.Latest() {
		return fmt.Errorf("migrating schema %q: target version %d is above the latest known %d", m.schema, target, m.Latest())
	}
	for {
		done, err := m.step(ctx, db, target)
		if err != nil || done {
			return err
		}
	}
}

// step applies (or reverts) one version towards target and reports whether
// the schema had already reached it.
func (m *Migrator) step(ctx context.Context, db Beginner, target int) (done bool, err error) {
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
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('vantage_migrate'), hashtext($1))`, m.schema); err != nil {
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
	_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+q+`.vantage_migrations (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`)
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
