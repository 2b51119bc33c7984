package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/ports"
)

// session is a command's connection to the database: a small pool, the
// migrator of the schema and, for the commands that use the ports, the
// adapter.
type session struct {
	pool     *pgxpool.Pool
	migrator *postgres.Migrator
	// store is nil for the migrate commands, which work on a schema that
	// may not be migrated.
	store *postgres.Store
	// admin is the store's Admin port; deadLetters its DeadLetterStore;
	// events its EventFetcher, which reads the events dead letters name.
	admin       ports.Admin
	deadLetters ports.DeadLetterStore
	events      ports.EventFetcher
}

// close releases the session's connections.
func (s *session) close() {
	if s.store != nil {
		s.store.Close()
	}
	s.pool.Close()
}

// connect opens a session without the adapter. It fails as usage when no
// database is named or its connection string does not parse, and as an
// operation when the database does not answer.
func (a *app) connect(ctx context.Context) (*session, error) {
	conn := a.database
	if conn == "" {
		conn = a.env.Getenv(EnvDatabaseURL)
	}
	if conn == "" {
		return nil, usageErrorf("no database: pass --database or set %s", EnvDatabaseURL)
	}
	cfg, err := pgxpool.ParseConfig(conn)
	if err != nil {
		return nil, usageError(fmt.Errorf("--database: %w", err))
	}
	// The commands make one call at a time; the second connection serves a
	// call made while the first is being released.
	cfg.MaxConns = 2
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = ConnectTimeoutDefault
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "vantage-cli"
	}
	migrator, err := postgres.NewMigrator(nil, a.schema)
	if err != nil {
		return nil, usageError(fmt.Errorf("--schema: %w", err))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, usageError(fmt.Errorf("--database: %w", err))
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	if err := pool.Ping(cctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to the database: %w", err)
	}
	return &session{pool: pool, migrator: migrator}, nil
}

// open opens a session with the adapter on a migrated schema. A schema
// without the Vantage tables fails (a wrong --schema, most likely); one
// at another version than this binary knows gets a warning, since the
// commands may then fail or miss what the other version records.
func (a *app) open(ctx context.Context) (*session, error) {
	s, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	v, err := s.migrator.Version(cctx, s.pool)
	if err != nil {
		s.close()
		return nil, err
	}
	switch latest := s.migrator.Latest(); {
	case v == 0:
		s.close()
		return nil, errors.New(missingSchema(a.schema))
	case v < latest:
		a.warnf("schema %q is at version %d, this vantage knows %d: run 'vantage migrate up'", a.schema, v, latest)
	case v > latest:
		a.warnf("schema %q is at version %d, newer than this vantage knows (%d): install a newer vantage", a.schema, v, latest)
	}
	store, err := postgres.New(s.pool, postgres.Options{
		Schema: a.schema,
		// The commands never listen for notifications, so any connection
		// string pgx takes will do, several hosts or a pooler included.
		PollOnly: true,
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		s.close()
		return nil, err
	}
	s.store = store
	b := store.Backend()
	s.admin, s.deadLetters, s.events = b.Admin, b.DeadLetters, b.Fetcher
	return s, nil
}

// missingSchema says that a schema holds no Vantage tables.
func missingSchema(schema string) string {
	return fmt.Sprintf("schema %q holds no Vantage tables: check --schema, or create them with 'vantage migrate up'", schema)
}

// now returns the time ages are measured at: Env.Now when set, else the
// database's clock.
func (a *app) now(ctx context.Context, s *session) (time.Time, error) {
	if a.env.Now != nil {
		return a.env.Now(), nil
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	var now time.Time
	if err := s.pool.QueryRow(cctx, `SELECT now()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("reading the database's clock: %w", err)
	}
	return now, nil
}
