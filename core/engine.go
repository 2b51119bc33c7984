package core

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// deregisterTimeout bounds the graceful deregistration at Stop, and the
// release of a rewind lock.
const deregisterTimeout = 5 * time.Second

// backendCallTimeout bounds a backend call made on behalf of several
// callers (a grouped model load or save), detached from any one caller's
// context, and the calls that take leases (see leaseCallContext).
const backendCallTimeout = 30 * time.Second

// leaseCallContext is the context of a call that takes leases or records
// the instance (a claim, a fetch, a heartbeat): detached from ctx's
// cancellation, bounded by backendCallTimeout. A call given up on by the
// caller may still commit on the server; one that committed after Stop's
// deregistration would leave rows leased to an instance that no longer
// exists, holding their pairs back for a whole lease. So Stop lets these
// calls finish before it deregisters.
func leaseCallContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), backendCallTimeout)
}

// engine is what every component of a Worker shares: the backend, the
// registry, the validated options, the clock, the instance's logger, the
// fault log, the tracer, the metric instruments and the test signals. New
// builds it once and nothing changes it afterwards (tests set their signals
// before they drive the engine), so components read it without locks.
type engine struct {
	backend ports.Backend
	reg     *Registry
	opts    Options
	clock   ports.Clock
	log     *slog.Logger
	faults  *faultLog
	signals *testSignals
	stats   *statsCache
	tracing tracing
	metrics *metrics
}

// now is the engine's time; paramNow is what it passes to the backend: its
// own time only when the host injected a Clock.
func (e *engine) now() time.Time { return e.clock.Now() }

func (e *engine) paramNow() time.Time {
	if e.opts.Clock != nil {
		return e.clock.Now()
	}
	return time.Time{}
}

// writeLimit is the bound of each write of a table projection: the bound
// of an apply, on the engine's clock.
func (e *engine) writeLimit() writeLimit {
	return writeLimit{timeout: e.opts.ApplyTimeout, clock: e.clock}
}

// savePatience is how long the writes of a table projection's shared save
// may run (see groupPatience).
func (e *engine) savePatience() time.Duration { return groupPatience(e.opts.ApplyTimeout) }

// identity are the log attributes naming this instance.
func (e *engine) identity() []any {
	attrs := []any{slog.String("service", e.opts.ServiceName), slog.String("host", e.opts.HostName)}
	if e.opts.Generation != "" {
		attrs = append(attrs, slog.String("generation", e.opts.Generation))
	}
	return attrs
}

// pairAttrs are the log attributes naming a (stream, perspective).
func pairAttrs(stream uuid.UUID, perspective string) []any {
	return []any{slog.String("stream_id", stream.String()), slog.String("perspective", perspective)}
}
