package core

import (
	"log/slog"
	"time"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/modelstore"
	"github.com/vantage-go/vantage/core/internal/telemetry"
	"github.com/vantage-go/vantage/ports"
)

// deregisterTimeout bounds the graceful deregistration at Stop, and the
// release of a rewind lock.
const deregisterTimeout = 5 * time.Second

// engine is what every component of a Worker shares: the service
// environment (clock, logger, fault log, test signals), the backend, the
// registry, the validated options, the tracer and the metric instruments. New
// builds it once and nothing changes it afterwards (tests set their signals
// before they drive the engine), so components read it without locks.
type engine struct {
	*base.Env
	backend ports.Backend
	reg     *Registry
	opts    Options
	stats   *statsCache
	tracing telemetry.Tracing
	metrics *telemetry.Metrics
}

// writeLimit is the bound of each write of a table projection: the bound
// of an apply, on the engine's clock.
func (e *engine) writeLimit() modelstore.WriteLimit {
	return modelstore.WriteLimit{Timeout: e.opts.Drain.ApplyTimeout, Clock: e.Clock}
}

// savePatience is how long the writes of a table projection's shared save
// may run (see modelstore.GroupPatience).
func (e *engine) savePatience() time.Duration {
	return modelstore.GroupPatience(e.opts.Drain.ApplyTimeout)
}

// identity are the log attributes naming this instance.
func (e *engine) identity() []any {
	attrs := []any{slog.String("service", e.opts.ServiceName), slog.String("host", e.opts.HostName)}
	if e.opts.Generation != "" {
		attrs = append(attrs, slog.String("generation", e.opts.Generation))
	}
	return attrs
}
