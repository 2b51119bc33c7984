package memory

import (
	"go.uber.org/fx"

	"github.com/vantage-go/vantage/ports"
)

// Module provides the in-memory backend to an fx application: a *Store and
// the ports.Backend built from it (what app.Module consumes). Options may be
// supplied with fx.Supply(memory.Options{...}); without them the defaults
// apply.
var Module = fx.Module("vantage.memory",
	fx.Provide(newModuleStore, backendOf),
)

type moduleParams struct {
	fx.In

	Options *Options `optional:"true"`
}

func newModuleStore(p moduleParams) *Store {
	var o Options
	if p.Options != nil {
		o = *p.Options
	}
	return New(o)
}

func backendOf(s *Store) ports.Backend { return s.Backend() }
