package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vantage-go/vantage/core/internal/base"
)

// HealthOptions are the thresholds of Worker.Health.
type HealthOptions struct {
	// MaxPendingAge is the age of the oldest pending event (of any
	// perspective this worker runs, on any instance) past which the worker
	// reports itself lagging, not ready. Defaults to 0: lag is reported but
	// not checked.
	MaxPendingAge time.Duration
}

// HealthStatus is the outcome of one health check, or the worst outcome of
// a HealthReport.
type HealthStatus string

// The outcomes of a health check.
const (
	// HealthOK: nothing to report.
	HealthOK HealthStatus = "ok"
	// HealthWarn: worth an operator's look, but neither probe fails for it.
	HealthWarn HealthStatus = "warn"
	// HealthFailing: the worker is not ready; not live either when the
	// check is a liveness check (HealthCheck.Liveness).
	HealthFailing HealthStatus = "failing"
	// HealthSkipped: the check does not apply (the worker is not running,
	// or the backend cannot tell).
	HealthSkipped HealthStatus = "skipped"
)

// The names of the checks of a HealthReport, in the order it lists them.
// Worker.Health documents what each checks and which probe it affects.
const (
	HealthCheckRunning      = "running"
	HealthCheckHeartbeat    = "heartbeat"
	HealthCheckStartupScan  = "startup_scan"
	HealthCheckLag          = "lag"
	HealthCheckListener     = "listener"
	HealthCheckStuckApplies = "stuck_applies"
)

// HealthCheck is the outcome of one check of a HealthReport.
type HealthCheck struct {
	// Name is one of the HealthCheck* constants.
	Name string `json:"name"`
	// Status is the outcome.
	Status HealthStatus `json:"status"`
	// Liveness reports whether the check is a liveness check: failing, it
	// makes the worker not live (and not ready). Any other check, failing,
	// makes it not ready only.
	Liveness bool `json:"liveness"`
	// Message says what was found, in a short sentence for an operator.
	Message string `json:"message"`
	// Values are the figures behind the message, ready for JSON: numbers,
	// strings, booleans, times and lists of maps of them. Durations are in
	// seconds, under keys ending in _seconds. Worker.Health lists the keys
	// of each check.
	Values map[string]any `json:"values,omitempty"`
}

// HealthReport is a worker's health at one instant: what a liveness probe,
// a readiness probe and an operator need (see Worker.Health).
type HealthReport struct {
	// Live is true when no liveness check is failing: restarting the
	// process would not help.
	Live bool `json:"live"`
	// Ready is true when the worker is live and no check is failing.
	Ready bool `json:"ready"`
	// Status is the worst status of the checks: failing, else warn, else
	// ok.
	Status HealthStatus `json:"status"`
	// CheckedAt is when the report was made, on the engine's clock.
	CheckedAt time.Time `json:"checked_at"`
	// Checks are the outcomes of every check, in a fixed order.
	Checks []HealthCheck `json:"checks"`
}

// Check returns the check of the report named name (a HealthCheck*
// constant), and whether there is one.
func (r HealthReport) Check(name string) (HealthCheck, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return HealthCheck{}, false
}

// heartbeatCallBound is the longest a heartbeat call may last (see
// leaseCallContext): a heartbeat loop that works returns from a call at
// least every HeartbeatInterval plus this.
const heartbeatCallBound = base.BackendCallTimeout

// stuckAppliesListed is how many abandoned applies the message of the
// stuck_applies check names; its values list them all.
const stuckAppliesListed = 3

// Health checks the worker and returns a report for a liveness probe, a
// readiness probe and an operator. It reads nothing from the backend but
// the backlog figures of the lag check, at most once per
// Options.Telemetry.StatsInterval and shared with Worker.Lag and the
// metrics; ctx bounds that read (past it the lag check warns and the report
// is made anyway). Safe for concurrent use, before Start and after Stop.
//
// Liveness asks whether restarting the process would help. It fails only
// when the worker itself is broken: it is not running (never started, or
// stopped: a Worker runs once), or its heartbeat loop stopped trying. It
// never fails because the backend is down or slow, which a restart would
// not cure and a restarting fleet would make worse: the worker retries on
// its own, and the readiness checks say that it cannot work meanwhile.
//
// Readiness asks whether the worker does its share of the work now. It
// fails when liveness fails, while the startup scan runs, when the instance
// has not heartbeat successfully for Options.Claims.StaleInstanceThreshold
// (the other instances then consider it dead and take over its streams),
// and when Options.Health.MaxPendingAge is set and the oldest pending
// event waited longer. The lag is the backend's, shared by every instance:
// past the threshold they all turn not ready together.
//
// The checks, in the order of the report:
//
//   - running (liveness): ok while the worker runs; warn while Stop drains
//     (still live, so that a probe does not cut the drain short, and
//     ready: a platform stops routing to a process it terminates on its
//     own); failing before Start, after Stop, and when the heartbeat
//     loop stalled: no heartbeat returned, successful or not, for
//     StaleInstanceThreshold plus the 30s bound of one call (a heartbeat
//     skipped while the claim loop is stalled counts as returned: the
//     loop runs, and the heartbeat check tells the rest). Values:
//     state ("not started", "running", "stopping", "stopped");
//     heartbeat_attempt_age_seconds while running.
//   - heartbeat (readiness): the age of the last successful heartbeat. Ok
//     up to twice HeartbeatInterval, warn up to StaleInstanceThreshold,
//     failing past it. Skipped unless running. Values: age_seconds,
//     interval_seconds, stale_threshold_seconds, and live_instances, the
//     instances the last heartbeat counted live (this one included), when
//     the backend counts them.
//   - startup_scan (readiness): failing until the startup reconciliation
//     and rewind scan finished (see Worker.StartupScanComplete), then ok.
//     Skipped unless running.
//   - lag (readiness): the backlog figures of Worker.Lag. Failing when
//     Options.Health.MaxPendingAge is set and the oldest pending event
//     waited longer, else ok; warn when they could not be read in time;
//     skipped when the backend has no ports.Stats. Values:
//     oldest_pending_age_seconds, pending, max_pending_age_seconds (when
//     set), read_at, and perspectives: a list of {perspective, pending,
//     oldest_age_seconds}.
//   - listener (informational): ok while notifications arrive, and when the
//     backend has no Notifier (the worker polls only, by design); warn when
//     it has one that is not delivering. Never failing: polling is the
//     correctness floor, notifications only shorten the wait. Skipped
//     unless running. Values: notifier, healthy.
//   - stuck_applies (informational): warn while applies the engine
//     abandoned (see Worker.AbandonedApplies) still run, naming their
//     pairs; ok otherwise. Never failing: the engine already retries their
//     pairs, and only the operator can tell whether the leaked goroutines
//     warrant a restart. Values: count, and applies: a list of {stream_id,
//     perspective, event_id, version, running_seconds}.
func (w *Worker) Health(ctx context.Context) HealthReport {
	now := w.Now()
	phase := w.phase()
	r := HealthReport{CheckedAt: now, Checks: []HealthCheck{
		w.runningCheck(now, phase),
		w.heartbeatCheck(now, phase),
		w.startupScanCheck(phase),
		w.lagCheck(ctx),
		w.listenerCheck(phase),
		w.stuckAppliesCheck(now),
	}}
	r.Live, r.Ready, r.Status = true, true, HealthOK
	for _, c := range r.Checks {
		switch c.Status {
		case HealthFailing:
			r.Ready, r.Status = false, HealthFailing
			if c.Liveness {
				r.Live = false
			}
		case HealthWarn:
			if r.Status == HealthOK {
				r.Status = HealthWarn
			}
		}
	}
	return r
}

// runPhase is where a worker is between New and the end of Stop.
type runPhase string

const (
	phaseNotStarted runPhase = "not started"
	phaseRunning    runPhase = "running"
	phaseStopping   runPhase = "stopping"
	phaseStopped    runPhase = "stopped"
)

func (w *Worker) phase() runPhase {
	select {
	case <-w.run.done:
		return phaseStopped
	default:
	}
	switch {
	case w.run.stopping.Load():
		return phaseStopping
	case w.run.running.Load():
		return phaseRunning
	}
	return phaseNotStarted
}

func (w *Worker) runningCheck(now time.Time, phase runPhase) HealthCheck {
	c := HealthCheck{Name: HealthCheckRunning, Liveness: true, Values: map[string]any{"state": string(phase)}}
	switch phase {
	case phaseNotStarted:
		c.Status, c.Message = HealthFailing, "not started"
	case phaseStopping:
		c.Status, c.Message = HealthWarn, "stopping: draining the work in flight"
	case phaseStopped:
		c.Status, c.Message = HealthFailing, "stopped"
	case phaseRunning:
		age := now.Sub(w.heartbeat.LastAttempt())
		c.Values["heartbeat_attempt_age_seconds"] = age.Seconds()
		if limit := w.opts.Claims.StaleInstanceThreshold + heartbeatCallBound; age > limit {
			c.Status = HealthFailing
			c.Message = fmt.Sprintf("the heartbeat loop stalled: no heartbeat returned for %s (limit %s)", short(age), limit)
		} else {
			c.Status, c.Message = HealthOK, "running"
		}
	}
	return c
}

func (w *Worker) heartbeatCheck(now time.Time, phase runPhase) HealthCheck {
	c := HealthCheck{Name: HealthCheckHeartbeat}
	if phase != phaseRunning {
		c.Status, c.Message = HealthSkipped, "the worker is not running"
		return c
	}
	at, live := w.heartbeat.Last()
	age := now.Sub(at)
	interval, stale := w.opts.Claims.HeartbeatInterval, w.opts.Claims.StaleInstanceThreshold
	c.Values = map[string]any{
		"age_seconds":             age.Seconds(),
		"interval_seconds":        interval.Seconds(),
		"stale_threshold_seconds": stale.Seconds(),
	}
	// The count includes this instance: zero means the backend does not
	// report it.
	counted := ""
	if live > 0 {
		c.Values["live_instances"] = live
		counted = "; " + plural(live, "live instance", "live instances")
	}
	switch {
	case age > stale:
		c.Status = HealthFailing
		c.Message = fmt.Sprintf("last heartbeat %s ago, past the stale threshold (%s): the other instances take over this one's streams", short(age), stale)
	case age > 2*interval:
		c.Status = HealthWarn
		c.Message = fmt.Sprintf("last heartbeat %s ago, more than twice the interval (%s)", short(age), interval)
	default:
		c.Status = HealthOK
		c.Message = fmt.Sprintf("last heartbeat %s ago%s", short(age), counted)
	}
	return c
}

func (w *Worker) startupScanCheck(phase runPhase) HealthCheck {
	c := HealthCheck{Name: HealthCheckStartupScan}
	if phase != phaseRunning {
		c.Status, c.Message = HealthSkipped, "the worker is not running"
		return c
	}
	select {
	case <-w.rewind.StartupDone():
		c.Status, c.Message = HealthOK, "done"
	default:
		c.Status, c.Message = HealthFailing, "running: reconciling lifecycles and repairing interrupted rewinds"
	}
	return c
}

func (w *Worker) lagCheck(ctx context.Context) HealthCheck {
	c := HealthCheck{Name: HealthCheckLag}
	report, err := w.stats.lag(ctx)
	switch {
	case errors.Is(err, ErrNoStats):
		c.Status, c.Message = HealthSkipped, "the backend reports no backlog figures"
		return c
	case err != nil:
		c.Status, c.Message = HealthWarn, fmt.Sprintf("reading the backlog: %v", err)
		return c
	}
	oldest := report.OldestAge()
	var pending int64
	perspectives := make([]map[string]any, 0, len(report.Perspectives))
	for _, l := range report.Perspectives {
		pending += l.Pending
		perspectives = append(perspectives, map[string]any{
			"perspective": l.Perspective, "pending": l.Pending, "oldest_age_seconds": l.OldestAge.Seconds(),
		})
	}
	c.Values = map[string]any{
		"oldest_pending_age_seconds": oldest.Seconds(),
		"pending":                    pending,
		"read_at":                    report.At,
		"perspectives":               perspectives,
	}
	limit := w.opts.Health.MaxPendingAge
	if limit > 0 {
		c.Values["max_pending_age_seconds"] = limit.Seconds()
	}
	switch {
	case limit > 0 && oldest > limit:
		c.Status = HealthFailing
		c.Message = fmt.Sprintf("the oldest pending event waited %s, past Options.Health.MaxPendingAge (%s); %d pending", short(oldest), limit, pending)
	case pending == 0:
		c.Status, c.Message = HealthOK, "nothing pending"
	default:
		c.Status = HealthOK
		c.Message = fmt.Sprintf("the oldest pending event waited %s; %d pending", short(oldest), pending)
	}
	return c
}

func (w *Worker) listenerCheck(phase runPhase) HealthCheck {
	c := HealthCheck{Name: HealthCheckListener}
	if phase != phaseRunning {
		c.Status, c.Message = HealthSkipped, "the worker is not running"
		return c
	}
	notifier := w.backend.Notifier != nil
	healthy := w.listener.Healthy()
	c.Values = map[string]any{"notifier": notifier, "healthy": healthy}
	switch {
	case !notifier:
		c.Status, c.Message = HealthOK, "polling only: the backend has no notifier"
	case healthy:
		c.Status, c.Message = HealthOK, "notifications arrive"
	default:
		c.Status = HealthWarn
		c.Message = fmt.Sprintf("notifications unavailable: polling every %s", w.opts.Drain.PollingInterval)
	}
	return c
}

func (w *Worker) stuckAppliesCheck(now time.Time) HealthCheck {
	c := HealthCheck{Name: HealthCheckStuckApplies}
	stuck := w.monitor.List()
	applies := make([]map[string]any, 0, len(stuck))
	var names []string
	for _, a := range stuck {
		running := now.Sub(a.Started)
		applies = append(applies, map[string]any{
			"stream_id": a.StreamID.String(), "perspective": a.Perspective, "event_id": a.EventID.String(),
			"version": a.Version, "running_seconds": running.Seconds(),
		})
		if len(names) < stuckAppliesListed {
			names = append(names, fmt.Sprintf("%s of stream %s at version %d for %s", a.Perspective, a.StreamID, a.Version, short(running)))
		}
	}
	c.Values = map[string]any{"count": len(stuck), "applies": applies}
	if len(stuck) == 0 {
		c.Status, c.Message = HealthOK, "none"
		return c
	}
	if more := len(stuck) - len(names); more > 0 {
		names = append(names, fmt.Sprintf("%d more", more))
	}
	c.Status = HealthWarn
	c.Message = fmt.Sprintf("%s still running: %s", plural(len(stuck), "abandoned apply", "abandoned applies"), strings.Join(names, "; "))
	return c
}

// short rounds d for a message: to the millisecond below a second, to the
// tenth of a second above.
func short(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}

// plural returns n and the noun in the form n calls for.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
