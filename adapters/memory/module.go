package memory

import (
	"fmt"
	"reflect"

	"go.uber.org/fx"

	"github.com/vantage-go/vantage/ports"
)

// Module provides the in-memory backend to an fx application: a *Store and
// the ports.Backend built from it (what app.Module consumes). Options may be
// supplied as a value or a pointer, fx.Supply(memory.Options{...}) or
// fx.Supply(&memory.Options{...}); both at once is an error rather than a
// silent choice. Without them the defaults apply. The Store lives as long as
// the process: the module registers no hooks.
//
// Without fx, New(opts).Backend() is the same.
var Module = fx.Module("vantage.memory",
	fx.Provide(newModuleStore, backendOf),
)

// moduleParams are the inputs of Module. Options are read in both forms
// because fx matches types exactly: a value supplied where a pointer is read
// (or the other way round) is no error, just ignored.
type moduleParams struct {
	fx.In

	Options      *Options `optional:"true"`
	OptionsValue Options  `optional:"true"`
}

func newModuleStore(p moduleParams) (*Store, error) {
	if p.Options != nil && !reflect.ValueOf(p.OptionsValue).IsZero() {
		return nil, fmt.Errorf("memory.Options is supplied both as a value and as a pointer: supply one")
	}
	o := p.OptionsValue
	if p.Options != nil {
		o = *p.Options
	}
	return New(o), nil
}

func backendOf(s *Store) ports.Backend { return s.Backend() }
