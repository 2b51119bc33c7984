package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"

	"github.com/vantage-go/vantage/ports"
)

// Module provides the PostgreSQL backend to an fx application: a *Store on
// the application's *pgxpool.Pool and the ports.Backend built from it (what
// app.Module consumes). Options may be supplied with
// fx.Supply(&postgres.Options{...}); without them the defaults apply.
//
// On start the module migrates Options.Schema to the latest version and then
// opens the Store's gate; SQL calls made before (by hooks that start
// earlier) wait on the gate rather than fail. Its start hook is registered
// when the Store is built, so it runs before the hooks of anything that
// depends on the backend. On stop it closes the Store. The application owns
// the pool and closes it after the fx application stopped.
var Module = fx.Module("vantage.postgres",
	fx.Provide(newModuleStore, backendOf),
)

type moduleParams struct {
	fx.In

	Lifecycle fx.Lifecycle
	Pool      *pgxpool.Pool
	Options   *Options `optional:"true"`
}

func newModuleStore(p moduleParams) (*Store, error) {
	var o Options
	if p.Options != nil {
		o = *p.Options
	}
	if o.Gate == nil {
		o.Gate = NewGate()
	}
	s, err := New(p.Pool, o)
	if err != nil {
		return nil, err
	}
	m, err := NewMigrator(nil, s.Schema())
	if err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			if err := m.Up(ctx, p.Pool); err != nil {
				err = fmt.Errorf("migrating the vantage schema: %w", err)
				s.opts.Gate.Fail(err)
				return err
			}
			s.opts.Gate.Open()
			return nil
		},
		OnStop: func(context.Context) error { return s.Close() },
	})
	return s, nil
}

func backendOf(s *Store) ports.Backend { return s.Backend() }
