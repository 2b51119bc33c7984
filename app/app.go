// Package app wires the Vantage engine into an fx application.
//
// app.Module builds a *core.Worker from the ports.Backend that an adapter
// module provides (memory.Module or postgres.Module), the *core.Registry the
// application provides, and optional core.Options and *slog.Logger (which
// the backend's listener logs to as well, through the worker); it starts
// the worker on application start and stops it, draining completions, on
// application stop. examples/fxapp is a whole program.
//
//	fx.New(
//		memory.Module,
//		app.Module,
//		fx.Provide(newRegistry), // func() (*core.Registry, error)
//	)
//
// app.HealthModule adds the worker's liveness and readiness probes to the
// application's *http.ServeMux.
//
// Everything here can be built without fx: see NewWorker and core.New.
package app

import (
	"errors"
	"log/slog"
	"reflect"

	"go.uber.org/fx"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// Module provides *core.Worker and ties its Start and Stop to the fx
// lifecycle. The application must provide a ports.Backend (through an adapter
// module) and a *core.Registry. It may provide core.Options, as a value or a
// pointer (fx.Supply(&core.Options{...}) or fx.Supply(core.Options{...}));
// both at once is an error rather than a silent choice. It may provide a
// *slog.Logger, which the worker logs to unless Options.Logger is set; the
// worker hands its logger to the backend's notifier, so a PostgreSQL
// listener logs there too, whatever postgres.Options.Logger says.
var Module = fx.Module("vantage",
	fx.Provide(newModuleWorker),
	fx.Invoke(registerLifecycle),
)

// Params are the inputs of NewWorker. Backend and Registry are required;
// Options and Logger may be nil.
type Params struct {
	fx.In

	Backend  ports.Backend
	Registry *core.Registry
	Options  *core.Options `optional:"true"`
	Logger   *slog.Logger  `optional:"true"`
}

// NewWorker builds the worker with core.New. Options are copied, never
// modified; Logger is used when Options has none, so that an application's
// logger reaches the engine without being repeated in its options.
func NewWorker(p Params) (*core.Worker, error) {
	var opts core.Options
	if p.Options != nil {
		opts = *p.Options
	}
	if opts.Logger == nil {
		opts.Logger = p.Logger
	}
	return core.New(p.Backend, p.Registry, &opts)
}

// moduleParams are the inputs of Module: Params, plus the options supplied
// as a value. fx matches types exactly, so a core.Options value supplied
// where *core.Options is read would otherwise be ignored without an error.
type moduleParams struct {
	fx.In

	Params
	OptionsValue core.Options `optional:"true"`
}

func newModuleWorker(p moduleParams) (*core.Worker, error) {
	if !reflect.ValueOf(p.OptionsValue).IsZero() {
		if p.Options != nil {
			return nil, errors.New("core.Options is supplied both as a value and as a pointer: supply one")
		}
		p.Options = &p.OptionsValue
	}
	return NewWorker(p.Params)
}

// registerLifecycle starts the worker with the application and stops it with
// the application (Stop is bounded by fx's stop timeout).
func registerLifecycle(lc fx.Lifecycle, w *core.Worker) {
	lc.Append(fx.StartStopHook(w.Start, w.Stop))
}
