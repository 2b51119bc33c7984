// Package health serves a Vantage worker's health over HTTP: /livez for a
// liveness probe, /readyz for a readiness probe, and both for an operator
// with curl. Mount them on the application's mux:
//
//	mux := http.NewServeMux()
//	health.Register(mux, worker) // GET /livez and GET /readyz
//
// or mount [Livez] and [Readyz] wherever the application's router wants
// them. Under fx, app.HealthModule registers them on the application's
// *http.ServeMux.
//
// # Answers
//
// /livez answers 200 OK while the worker is live (core.HealthReport.Live)
// and 503 Service Unavailable otherwise; /readyz answers the same for
// readiness (core.HealthReport.Ready). core.Worker.Health says which check
// decides which probe, and why: in short, liveness fails only when a
// restart would help (the worker is not running, or its heartbeat loop
// stalled), never because the database is down; readiness also fails
// while the startup scan runs, when the instance has not heartbeat for the
// stale threshold, and when the backlog is older than
// core.HealthOptions.MaxPendingAge.
//
// The body is plain text by default, one line per check and a verdict,
// like the verbose output of Kubernetes' own probes; /livez lists the
// liveness checks, /readyz every check:
//
//	[+]running ok: running
//	[+]heartbeat ok: last heartbeat 1.2s ago; 3 live instances
//	[+]startup_scan ok: done
//	[-]lag failing: the oldest pending event waited 2m0s, past Options.Health.MaxPendingAge (1m0s); 812 pending
//	[!]listener warn: notifications unavailable: polling every 1s
//	[+]stuck_applies ok: none
//	readyz check failed
//
// [+] is ok, [!] a warning, [-] failing, [ ] skipped. A request with
// ?format=json, or that accepts application/json, gets the whole
// core.HealthReport as JSON instead, with every check's figures, whichever
// the endpoint. ?format=text forces the plain text. Responses are never
// cached (Cache-Control: no-store).
//
// # Probes
//
// A handler waits at most [ReportTimeout] for the report: the backlog
// figures, the only part read from the database, are then reported as not
// read (a warning), so a slow database never makes a probe time out. A
// worker answers 503 on /livez until it has started: give the liveness
// probe a start-up delay (or a startupProbe on /readyz) as long as the
// application takes to start. The endpoints reveal the worker's state and
// the ids of streams whose applies hang: serve them where only the
// orchestrator and operators reach them.
package health

import (
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/vantage-go/vantage/core"
)

// ReportTimeout is the longest a handler waits for a report, below the one
// second a Kubernetes probe waits by default.
const ReportTimeout = 500 * time.Millisecond

// Reporter reports a worker's health. *core.Worker implements it.
type Reporter interface {
	// Health returns the report; ctx bounds any read it makes.
	Health(ctx context.Context) core.HealthReport
}

// Livez returns the handler of a liveness probe: 200 while r reports
// itself live, 503 otherwise.
func Livez(r Reporter) http.Handler { return &handler{reporter: r, probe: probeLive} }

// Readyz returns the handler of a readiness probe: 200 while r reports
// itself ready, 503 otherwise.
func Readyz(r Reporter) http.Handler { return &handler{reporter: r, probe: probeReady} }

// Register mounts Livez on GET /livez and Readyz on GET /readyz of mux
// (HEAD requests included). It panics, as mux.Handle does, if mux already
// has a handler for either pattern.
func Register(mux *http.ServeMux, r Reporter) {
	mux.Handle("GET /livez", Livez(r))
	mux.Handle("GET /readyz", Readyz(r))
}

// probe is the question a handler answers, named as its verdict line.
type probe string

const (
	probeLive  probe = "livez"
	probeReady probe = "readyz"
)

type handler struct {
	reporter Reporter
	probe    probe
}

func (h *handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), ReportTimeout)
	defer cancel()
	report := h.reporter.Health(ctx)
	pass := report.Ready
	if h.probe == probeLive {
		pass = report.Live
	}
	code := http.StatusOK
	if !pass {
		code = http.StatusServiceUnavailable
	}

	header := w.Header()
	header.Set("Cache-Control", "no-store")
	header.Set("X-Content-Type-Options", "nosniff")
	if wantsJSON(req) {
		header.Set("Content-Type", "application/json")
		w.WriteHeader(code)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(report) // the client went away: nobody to tell
		return
	}
	header.Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, h.text(report, pass))
}

// text renders the checks the probe counts, one a line, then the verdict.
func (h *handler) text(r core.HealthReport, pass bool) string {
	var b strings.Builder
	for _, c := range r.Checks {
		if h.probe == probeLive && !c.Liveness {
			continue
		}
		b.WriteString(marks[c.Status])
		b.WriteString(c.Name)
		b.WriteByte(' ')
		b.WriteString(string(c.Status))
		if c.Message != "" {
			b.WriteString(": ")
			b.WriteString(strings.Join(strings.Fields(c.Message), " ")) // one line, whatever an error said
		}
		b.WriteByte('\n')
	}
	b.WriteString(string(h.probe))
	if pass {
		b.WriteString(" check passed\n")
	} else {
		b.WriteString(" check failed\n")
	}
	return b.String()
}

var marks = map[core.HealthStatus]string{
	core.HealthOK:      "[+]",
	core.HealthWarn:    "[!]",
	core.HealthFailing: "[-]",
	core.HealthSkipped: "[ ]",
}

// wantsJSON reports whether req asks for JSON: ?format=json, or an Accept
// header naming application/json (unless ?format=text).
func wantsJSON(req *http.Request) bool {
	switch req.URL.Query().Get("format") {
	case "json":
		return true
	case "text":
		return false
	}
	for _, part := range strings.Split(req.Header.Get("Accept"), ",") {
		mediaType, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || mediaType != "application/json" {
			continue
		}
		if q, err := strconv.ParseFloat(params["q"], 64); err == nil && q == 0 {
			continue // q=0: explicitly not acceptable
		}
		return true
	}
	return false
}
