package health_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/health"
)

// fakeReporter returns its report and keeps the deadline it was asked by.
type fakeReporter struct {
	report   core.HealthReport
	deadline chan time.Time
}

func (f *fakeReporter) Health(ctx context.Context) core.HealthReport {
	deadline, _ := ctx.Deadline()
	select {
	case f.deadline <- deadline:
	default:
	}
	return f.report
}

var checkedAt = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// report returns a report with a check of each status, live and ready as
// asked (a failing check either way, which only the flags decide here).
func report(live, ready bool) core.HealthReport {
	status := core.HealthOK
	if !ready {
		status = core.HealthFailing
	}
	return core.HealthReport{Live: live, Ready: ready, Status: status, CheckedAt: checkedAt, Checks: []core.HealthCheck{
		{Name: core.HealthCheckRunning, Status: core.HealthOK, Liveness: true, Message: "running", Values: map[string]any{"state": "running"}},
		{Name: core.HealthCheckHeartbeat, Status: core.HealthWarn, Message: "last heartbeat 12s ago,\nmore than twice the interval (5s)"},
		{Name: core.HealthCheckLag, Status: core.HealthFailing, Message: "the oldest pending event waited 2m0s",
			Values: map[string]any{"oldest_pending_age_seconds": 120.0}},
		{Name: core.HealthCheckListener, Status: core.HealthSkipped, Message: "the worker is not running"},
	}}
}

type testBundle struct {
	reporter *fakeReporter
	mux      *http.ServeMux
}

func setup(t *testing.T, live, ready bool) *testBundle {
	t.Helper()
	b := &testBundle{reporter: &fakeReporter{report: report(live, ready), deadline: make(chan time.Time, 1)}, mux: http.NewServeMux()}
	health.Register(b.mux, b.reporter)
	return b
}

func (b *testBundle) do(t *testing.T, method, target string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	b.mux.ServeHTTP(rec, req)
	return rec
}

func TestHandlers(t *testing.T) {
	t.Parallel()

	t.Run("DeadlineBoundsTheReport", func(t *testing.T) {
		t.Parallel()

		b := setup(t, true, true)
		before := time.Now()
		b.do(t, http.MethodGet, "/readyz", nil)
		deadline := <-b.reporter.deadline
		require.False(t, deadline.IsZero(), "the report is asked with a deadline")
		require.WithinDuration(t, before.Add(health.ReportTimeout), deadline, health.ReportTimeout)
	})

	t.Run("Head", func(t *testing.T) {
		t.Parallel()

		b := setup(t, true, false)
		require.Equal(t, http.StatusOK, b.do(t, http.MethodHead, "/livez", nil).Code)
		rec := b.do(t, http.MethodHead, "/readyz", nil)
		require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	})

	t.Run("JSON", func(t *testing.T) {
		t.Parallel()

		b := setup(t, true, false)
		for name, req := range map[string]struct {
			target string
			header http.Header
		}{
			"Accept":      {"/readyz", http.Header{"Accept": {"text/html;q=0.9, application/json"}}},
			"FormatQuery": {"/readyz?format=json", nil},
		} {
			rec := b.do(t, http.MethodGet, req.target, req.header)
			require.Equal(t, http.StatusServiceUnavailable, rec.Code, name)
			require.Equal(t, "application/json", rec.Header().Get("Content-Type"), name)
			require.Equal(t, "no-store", rec.Header().Get("Cache-Control"), name)
			var got core.HealthReport
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got), name)
			require.Equal(t, b.reporter.report, got, name)
		}

		// The raw keys are the documented ones.
		var raw map[string]any
		require.NoError(t, json.Unmarshal(b.do(t, http.MethodGet, "/livez?format=json", nil).Body.Bytes(), &raw))
		require.Equal(t, true, raw["live"])
		require.Equal(t, false, raw["ready"])
		require.Equal(t, "failing", raw["status"])
		require.Equal(t, "2026-01-01T12:00:00Z", raw["checked_at"])
		first := raw["checks"].([]any)[0].(map[string]any)
		require.Equal(t, map[string]any{
			"name": "running", "status": "ok", "liveness": true, "message": "running", "values": map[string]any{"state": "running"},
		}, first)
	})

	t.Run("LivezText", func(t *testing.T) {
		t.Parallel()

		b := setup(t, true, false)
		rec := b.do(t, http.MethodGet, "/livez", nil)
		require.Equal(t, http.StatusOK, rec.Code, "not ready, but live")
		require.Equal(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"))
		require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
		require.Equal(t, "[+]running ok: running\nlivez check passed\n", rec.Body.String(), "the liveness checks only")

		b = setup(t, false, false)
		rec = b.do(t, http.MethodGet, "/livez", nil)
		require.Equal(t, http.StatusServiceUnavailable, rec.Code)
		require.Equal(t, "[+]running ok: running\nlivez check failed\n", rec.Body.String())
	})

	t.Run("MethodNotAllowed", func(t *testing.T) {
		t.Parallel()

		rec := httptest.NewRecorder()
		health.Readyz(&fakeReporter{report: report(true, true)}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/readyz", nil))
		require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
		require.Equal(t, "GET, HEAD", rec.Header().Get("Allow"))
	})

	t.Run("ReadyzText", func(t *testing.T) {
		t.Parallel()

		b := setup(t, true, false)
		rec := b.do(t, http.MethodGet, "/readyz", http.Header{"Accept": {"application/json;q=0, text/plain"}})
		require.Equal(t, http.StatusServiceUnavailable, rec.Code)
		require.Equal(t, "[+]running ok: running\n"+
			"[!]heartbeat warn: last heartbeat 12s ago, more than twice the interval (5s)\n"+
			"[-]lag failing: the oldest pending event waited 2m0s\n"+
			"[ ]listener skipped: the worker is not running\n"+
			"readyz check failed\n", rec.Body.String())

		b = setup(t, true, true)
		rec = b.do(t, http.MethodGet, "/readyz?format=text", http.Header{"Accept": {"application/json"}})
		require.Equal(t, http.StatusOK, rec.Code)
		require.Equal(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"), "the query wins")
		require.Contains(t, rec.Body.String(), "\nreadyz check passed\n")
	})
}
