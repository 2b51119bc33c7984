package app

import (
	"net/http"

	"go.uber.org/fx"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/health"
)

// HealthModule serves the worker's health next to the application's own
// routes: it registers GET /livez and GET /readyz (see package health) on
// the *http.ServeMux the application provides, and Module provides the
// worker. The application owns the mux and the server that serves it; one
// that routes with something else mounts health.Livez(worker) and
// health.Readyz(worker) itself, without this module.
//
//	fx.New(
//		memory.Module,
//		app.Module,
//		app.HealthModule,
//		fx.Provide(newRegistry, http.NewServeMux),
//		fx.Invoke(runServer), // serves the mux, e.g. from an fx.Lifecycle hook
//	)
//
// A worker starts with the application: until then /livez answers 503, so
// give the liveness probe a start-up delay.
var HealthModule = fx.Module("vantage.health",
	fx.Invoke(registerHealth),
)

func registerHealth(mux *http.ServeMux, w *core.Worker) { health.Register(mux, w) }
