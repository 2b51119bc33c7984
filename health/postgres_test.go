package health_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/health"
	"github.com/vantage-go/vantage/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.WrapMain(m)) }

type signedUp struct {
	Email string `json:"email"`
}

type members struct {
	Count int `json:"count"`
}

// A worker on PostgreSQL, served through the handlers: ready once started,
// with the listener delivering notifications.
func TestReadyzOnPostgres(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	store, err := postgres.New(pgtest.NewPool(t, 4), postgres.Options{
		Schema:     pgtest.Schema(t),
		ConnString: pgtest.ConnString(t),
		Logger:     slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	reg := core.NewRegistry()
	require.NoError(t, core.RegisterEvent[signedUp](reg, "signed_up"))
	p := core.NewPerspective[members]("members")
	require.NoError(t, core.Handle(p, func(_ context.Context, m members, _ signedUp) (members, error) {
		m.Count++
		return m, nil
	}))
	require.NoError(t, reg.AddPerspective(p))
	w, err := core.New(store.Backend(), reg, &core.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	mux := http.NewServeMux()
	health.Register(mux, w)
	get := func(target string) (int, core.HealthReport) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, target, nil))
		var r core.HealthReport
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &r))
		return rec.Code, r
	}

	code, _ := get("/livez?format=json")
	require.Equal(t, http.StatusServiceUnavailable, code, "not started")

	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.WithoutCancel(ctx))) })
	select {
	case <-w.StartupScanComplete():
	case <-time.After(10 * time.Second):
		t.Fatal("the startup scan did not finish")
	}
	code, r := get("/readyz?format=json")
	require.Equal(t, http.StatusOK, code, "%+v", r)
	require.True(t, r.Live)
	listener, ok := r.Check(core.HealthCheckListener)
	require.True(t, ok)
	require.Equal(t, core.HealthOK, listener.Status)
	require.Equal(t, "notifications arrive", listener.Message)
	require.Equal(t, map[string]any{"notifier": true, "healthy": true}, listener.Values)
	heartbeat, _ := r.Check(core.HealthCheckHeartbeat)
	require.Equal(t, core.HealthOK, heartbeat.Status)
}
