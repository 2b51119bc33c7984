// Package app wires the Vantage engine into an fx application.
//
// app.Module builds a *core.Worker from the ports.Backend that an adapter
// module provides (memory.Module or postgres.Module), the *core.Registry the
// application provides, and optional *core.Options and *slog.Logger; it
// starts the worker on application start and stops it, draining completions,
// on application stop.
//
//	fx.New(
//		memory.Module,
//		app.Module,
//		fx.Provide(newRegistry), // func() (*core.Registry, error)
//	)
//
// Everything here can be built without fx: see NewWorker and core.New.
package app

import (
	"log/slog"

	"go.uber.org/fx"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// Module provides *core.Worker and ties its Start and Stop to the fx
// lifecycle. The application must provide a ports.Backend (through an adapter
// module) and a *core.Registry; *core.Options and *slog.Logger are optional.
var Module = fx.Module("vantage",
	fx.Provide(NewWorker),
	fx.Invoke(registerLifecycle),
)

// Params are the inputs of NewWorker.
type Params struct {
	fx.In

	Backend  ports.Backend
	Registry *core.Registry
	Options  *core.Options `optional:"true"`
	Logger   *slog.Logger  `optional:"true"`
}

// NewWorker builds the worker. Options are copied; a provided Logger is used
// when Options has none.
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

// registerLifecycle starts the worker with the application and stops it with
// the application (Stop is bounded by fx's stop timeout).
func registerLifecycle(lc fx.Lifecycle, w *core.Worker) {
	lc.Append(fx.StartStopHook(w.Start, w.Stop))
}
