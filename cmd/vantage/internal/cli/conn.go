package cli

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vantage-go/vantage/adapters/postgres"
)

// session is a command's connection to the database: a small pool and the
// migrator of the schema.
type session struct {
	pool     *pgxpool.Pool
	migrator *postgres.Migrator
}

// close releases the session's connections.
func (s *session) close() { s.pool.Close() }

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
