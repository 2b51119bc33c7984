package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"

	"github.com/vantage-go/vantage/ports"
)

// Module provides the PostgreSQL backend to an fx application: a *Store and
// the ports.Backend built from it (what app.Module consumes).
//
// The pool comes from one of two places, and whoever made it owns it:
//
//   - a *pgxpool.Pool the application provides: the application closes it,
//     after the fx application stopped;
//   - ModuleOptions.PoolConnString, when the application provides no pool:
//     the module builds the pool with the Store and closes it on stop, after
//     the Store. pgxpool dials nothing until the first query, but it does
//     start its health check, so an application that is built and never
//     started leaves that pool open: fx gives a module no hook for it.
//
// Providing both, or neither, fails the application's construction.
//
// The module reads, when provided: ModuleOptions and the Store's Options,
// each supplied as a value or a pointer (fx.Supply(&postgres.Options{...})
// or fx.Supply(postgres.Options{...}); both forms of one type at once is an
// error rather than a silent choice), and the application's *slog.Logger,
// which the Store and its listener log to unless Options.Logger is set (a
// worker's listener logs to the worker's logger).
// Without them the defaults apply.
//
// On start the module migrates Options.Schema to the latest version (unless
// ModuleOptions.SkipMigrations) and then opens the Store's gate: SQL calls
// made before, by hooks that start earlier, wait on the gate rather than
// fail on missing tables. Its start hook is registered when the Store is
// built, so it runs before the hooks of anything that depends on the
// backend. On stop it closes the Store.
//
// Without fx, do the same by hand: pgxpool.New, Migrate, New, and Store.Close
// before the pool's Close.
var Module = fx.Module("vantage.postgres",
	fx.Provide(newModuleStore, backendOf),
)

// ModuleOptions configure Module beyond the Store's Options. The zero value
// is valid when the application provides a *pgxpool.Pool.
type ModuleOptions struct {
	// PoolConnString is the connection string (pgx syntax: a URL or
	// key=value pairs, pool_max_conns and the other pool_* settings
	// included) of the pool the module builds and owns when the application
	// provides no *pgxpool.Pool. Must be empty when it does, so that the
	// module never silently uses another database than the one named here.
	// The listener dials it too unless Options.ConnString or
	// Options.PollOnly is set.
	PoolConnString string
	// SkipMigrations turns off migrating Options.Schema on start, for hosts
	// that migrate in a deploy step of their own (Migrate, Migrator.Up).
	// The start hook then only checks that the schema is at the version this
	// build of the adapter works with, and fails the start, saying so, when
	// it is not; tables missing at run time would otherwise surface as
	// failed SQL calls in the engine's logs. Defaults to false: the module
	// migrates.
	SkipMigrations bool
}

// moduleParams are the inputs of Module. Each options type is read in both
// forms because fx matches types exactly: a value supplied where a pointer
// is read is never an error, just ignored, and the Store would quietly run
// on another schema than the one configured.
type moduleParams struct {
	fx.In

	Lifecycle          fx.Lifecycle
	Pool               *pgxpool.Pool  `optional:"true"`
	ModuleOptions      *ModuleOptions `optional:"true"`
	ModuleOptionsValue ModuleOptions  `optional:"true"`
	Options            *Options       `optional:"true"`
	OptionsValue       Options        `optional:"true"`
	Logger             *slog.Logger   `optional:"true"`
}

func newModuleStore(p moduleParams) (*Store, error) {
	mo, err := supplied(p.ModuleOptions, p.ModuleOptionsValue, "postgres.ModuleOptions")
	if err != nil {
		return nil, err
	}
	o, err := supplied(p.Options, p.OptionsValue, "postgres.Options")
	if err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = p.Logger
	}
	if o.Gate == nil {
		o.Gate = NewGate()
	}
	m, err := NewMigrator(nil, o.Schema)
	if err != nil {
		return nil, fmt.Errorf("Options.Schema: %w", err)
	}
	pool, owned, err := modulePool(p.Pool, mo.PoolConnString, o.ConnString)
	if err != nil {
		return nil, err
	}
	s, err := New(pool, o)
	if err != nil {
		if owned {
			pool.Close()
		}
		return nil, err
	}
	if owned {
		// Appended before the Store's hook, so fx stops it after the Store:
		// the listener and the wake publisher are done with the pool by then.
		p.Lifecycle.Append(fx.StopHook(pool.Close))
	}
	prepare := m.Up
	if mo.SkipMigrations {
		prepare = func(ctx context.Context, db Beginner) error { return checkVersion(ctx, m, db) }
	}
	gate := s.opts.Gate
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			if err := prepare(ctx, pool); err != nil {
				err = fmt.Errorf("preparing the vantage schema: %w", err)
				gate.Fail(err)
				return err
			}
			gate.Open()
			return nil
		},
		OnStop: func(context.Context) error { return s.Close() },
	})
	return s, nil
}

// modulePool returns the application's pool, or builds one from connString
// and reports that the module owns it. listenerConnString is only used to
// tell a user who set it, expecting a pool from it, which field they meant.
func modulePool(pool *pgxpool.Pool, connString, listenerConnString string) (_ *pgxpool.Pool, owned bool, _ error) {
	switch {
	case pool != nil && connString != "":
		return nil, false, errors.New("postgres.Module: the application provides a *pgxpool.Pool and ModuleOptions.PoolConnString is set: provide one of them")
	case pool != nil:
		return pool, false, nil
	case connString == "" && listenerConnString != "":
		return nil, false, errors.New("postgres.Module needs a *pgxpool.Pool or ModuleOptions.PoolConnString; Options.ConnString is only the listener's")
	case connString == "":
		return nil, false, errors.New("postgres.Module needs a *pgxpool.Pool or ModuleOptions.PoolConnString")
	}
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, false, fmt.Errorf("ModuleOptions.PoolConnString: %w", err)
	}
	// pgxpool uses the context for the values of the connections it makes
	// in the background (none unless pool_min_conns asks for them), never
	// for their cancellation.
	pool, err = pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, false, fmt.Errorf("building the pool of ModuleOptions.PoolConnString: %w", err)
	}
	return pool, true, nil
}

// checkVersion fails unless the schema is at m's latest version: with
// migrations off the host migrates, and a schema behind or ahead of this
// build would fail SQL calls later instead of the start now.
func checkVersion(ctx context.Context, m *Migrator, db Beginner) error {
	v, err := m.Version(ctx, db)
	switch {
	case err != nil:
		return err
	case v < m.Latest():
		return fmt.Errorf("schema %q is at version %d, and this build needs version %d: migrate it (postgres.Migrate) or unset ModuleOptions.SkipMigrations", m.Schema(), v, m.Latest())
	case v > m.Latest():
		return fmt.Errorf("schema %q is at version %d, newer than the latest this build knows (%d): run a newer build", m.Schema(), v, m.Latest())
	}
	return nil
}

// supplied returns the options fx supplied as a pointer or as a value;
// both at once is an error, since one of them would be silently lost.
func supplied[T any](ptr *T, val T, name string) (T, error) {
	if ptr != nil && !reflect.ValueOf(&val).Elem().IsZero() {
		return val, fmt.Errorf("%s is supplied both as a value and as a pointer: supply one", name)
	}
	if ptr != nil {
		return *ptr, nil
	}
	return val, nil
}

func backendOf(s *Store) ports.Backend { return s.Backend() }
