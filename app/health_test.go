package app_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/app"
	"github.com/vantage-go/vantage/core"
)

func TestHealthModule(t *testing.T) {
	t.Parallel()

	var (
		mux    *http.ServeMux
		worker *core.Worker
	)
	fxApp := fxtest.New(t,
		memory.Module,
		app.Module,
		app.HealthModule,
		fx.Provide(newRegistry, http.NewServeMux),
		fx.Supply(slog.New(slog.DiscardHandler)),
		fx.Populate(&mux, &worker),
	)
	probe := func(path string) int {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil))
		return rec.Code
	}
	require.Equal(t, http.StatusServiceUnavailable, probe("/livez"), "the worker starts with the application")

	fxApp.RequireStart()
	select {
	case <-worker.StartupScanComplete():
	case <-time.After(10 * time.Second):
		t.Fatal("the startup scan did not finish")
	}
	require.Equal(t, http.StatusOK, probe("/livez"))
	require.Equal(t, http.StatusOK, probe("/readyz"))

	fxApp.RequireStop()
	require.Equal(t, http.StatusServiceUnavailable, probe("/livez"), "a stopped worker is not live")
}

func TestHealthModuleNeedsTheApplicationsMux(t *testing.T) {
	t.Parallel()

	err := fx.New(fx.NopLogger, memory.Module, app.Module, app.HealthModule, fx.Provide(newRegistry)).Err()
	require.ErrorContains(t, err, "*http.ServeMux")
}
