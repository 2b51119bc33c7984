// Package base holds what every service of the engine shares: the clock,
// the instance's logger and fault log, the points at which tests steer the
// engine, and the timing helpers of the services' loops.
package base

import (
	"context"
	"log/slog"
	"time"

	"github.com/vantage-go/vantage/core/internal/faultlog"
	"github.com/vantage-go/vantage/ports"
)

// BackendCallTimeout bounds a backend call made on behalf of several
// callers (a grouped model load or save), detached from any one caller's
// context, and the calls that take leases (see LeaseCallContext).
const BackendCallTimeout = 30 * time.Second

// Env is what every service of a Worker shares. The Worker builds it once
// and nothing changes it afterwards (tests set their signals before they
// drive the engine), so services read it without locks.
type Env struct {
	// Clock is the engine's clock. InjectedClock tells whether the host
	// injected it: only then does the engine pass its time to the backend
	// (see ParamNow).
	Clock         ports.Clock
	InjectedClock bool
	// Log names the instance and the worker's component.
	Log *slog.Logger
	// Faults logs the failures of background operations once.
	Faults *faultlog.Log
	// Signals are the points at which tests watch or steer the engine.
	Signals *Signals
}

// NewEnv returns the Env of services on clock (injected: given by the
// host, see ParamNow) logging to log, with a fault log on log and no test
// signals set.
func NewEnv(clock ports.Clock, injected bool, log *slog.Logger) *Env {
	return &Env{Clock: clock, InjectedClock: injected, Log: log, Faults: faultlog.New(log, clock), Signals: &Signals{}}
}

// Now is the engine's time.
func (e *Env) Now() time.Time { return e.Clock.Now() }

// ParamNow is the time the engine passes to the backend: its own only when
// the host injected a Clock, else zero (the backend's own time).
func (e *Env) ParamNow() time.Time {
	if e.InjectedClock {
		return e.Clock.Now()
	}
	return time.Time{}
}

// LeaseCallContext is the context of a call that takes leases or records
// the instance (a claim, a fetch, a heartbeat): detached from ctx's
// cancellation, bounded by BackendCallTimeout. A call given up on by the
// caller may still commit on the server; one that committed after Stop's
// deregistration would leave rows leased to an instance that no longer
// exists, holding their pairs back for a whole lease. So Stop lets these
// calls finish before it deregisters.
func LeaseCallContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), BackendCallTimeout)
}
