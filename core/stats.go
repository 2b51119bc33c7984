package core

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"log/slog"

	"go.opentelemetry.io/otel/metric"

	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/core/internal/telemetry"
	"github.com/vantage-go/vantage/ports"
)

// ErrNoStats is returned by Worker.Lag when the backend has no Stats port.
var ErrNoStats = errors.New("vantage: the backend reports no backlog figures (no ports.Stats)")

// statsReadTimeout bounds one read of the backlog figures.
const statsReadTimeout = 5 * time.Second

// Lag is the backlog of one perspective, as read from the backend at At.
type Lag struct {
	Perspective string
	// Pending counts the perspective's pending work rows, on every
	// instance.
	Pending int64
	// OldestAge is how long its oldest pending event has waited (zero when
	// none is pending).
	OldestAge time.Duration
}

// LagReport is the backlog of every perspective this worker runs.
type LagReport struct {
	// At is when the figures were read.
	At time.Time
	// Perspectives has one entry per registered perspective, pending or
	// not, sorted by name.
	Perspectives []Lag
}

// OldestAge is the greatest OldestAge of the report.
func (r LagReport) OldestAge() time.Duration {
	var oldest time.Duration
	for _, l := range r.Perspectives {
		oldest = max(oldest, l.OldestAge)
	}
	return oldest
}

// statsCache serves the backend's backlog figures, read at most once per
// interval and only when asked: metrics callbacks and health checks share
// one read, and an instance nobody watches reads nothing.
type statsCache struct {
	engine *engine
	group  singleflight.Group

	mu   sync.Mutex
	last LagReport
	read bool // last holds a successful read
}

func newStatsCache(e *engine) *statsCache { return &statsCache{engine: e} }

// lag returns figures at most Options.Telemetry.StatsInterval old, reading
// them from the backend when the kept ones are older. Concurrent callers
// share one read.
func (c *statsCache) lag(ctx context.Context) (LagReport, error) {
	stats := c.engine.backend.Stats
	if stats == nil {
		return LagReport{}, ErrNoStats
	}
	now := c.engine.Now()
	c.mu.Lock()
	if c.read && now.Sub(c.last.At) < c.engine.opts.Telemetry.StatsInterval {
		report := c.last
		c.mu.Unlock()
		return report, nil
	}
	c.mu.Unlock()
	ch := c.group.DoChan("lag", func() (any, error) {
		// The read outlives a caller that gives up, so that the next one
		// finds it done.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statsReadTimeout)
		defer cancel()
		lags, err := stats.PerspectivesLag(rctx, &ports.PerspectivesLagParams{Now: c.engine.ParamNow()})
		if err != nil {
			return LagReport{}, err
		}
		report := c.engine.lagReport(c.engine.Now(), lags)
		c.mu.Lock()
		c.last, c.read = report, true
		c.mu.Unlock()
		return report, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return LagReport{}, res.Err
		}
		return res.Val.(LagReport), nil
	case <-ctx.Done():
		return LagReport{}, ctx.Err()
	}
}

// lagReport keeps the figures of the registered perspectives, with a zero
// entry for each that has nothing pending.
func (e *engine) lagReport(at time.Time, lags []ports.PerspectiveLag) LagReport {
	byName := make(map[string]ports.PerspectiveLag, len(lags))
	for _, l := range lags {
		byName[l.Perspective] = l
	}
	names := e.reg.Perspectives()
	report := LagReport{At: at, Perspectives: make([]Lag, 0, len(names))}
	for _, name := range names {
		l := byName[name]
		report.Perspectives = append(report.Perspectives, Lag{Perspective: name, Pending: l.Pending, OldestAge: max(l.OldestAge, 0)})
	}
	return report
}

// Lag returns the backlog of every perspective of the registry: pending
// work rows and the age of the oldest pending event, across all instances.
// The figures are read from the backend at most once per
// Options.Telemetry.StatsInterval (see ports.Stats); it returns ErrNoStats
// when the backend has none. Lag works whether or not the worker runs.
func (w *Worker) Lag(ctx context.Context) (LagReport, error) { return w.stats.lag(ctx) }

// observeGauges registers the callback of the worker's observable
// instruments: live instances and heartbeat age, listener health, stuck
// applies and, when the backend has a Stats port, the lag of each
// perspective.
func (w *Worker) observeGauges() metric.Registration {
	src := telemetry.GaugeSources{
		Heartbeat: w.heartbeat.Last,
		Listening: w.listener.Healthy,
		Stuck:     func() int { return len(w.monitor.List()) },
	}
	if w.backend.Stats != nil {
		src.Lag = func(ctx context.Context) ([]telemetry.Lag, error) {
			report, err := w.stats.lag(ctx)
			if err != nil {
				return nil, err
			}
			lags := make([]telemetry.Lag, len(report.Perspectives))
			for i, l := range report.Perspectives {
				lags[i] = telemetry.Lag{Perspective: l.Perspective, Pending: l.Pending, OldestAge: l.OldestAge}
			}
			return lags, nil
		}
	}
	return w.metrics.Observe(src)
}

// noteAbandoned logs, counts and announces an abandoned apply.
func (e *engine) noteAbandoned(ctx context.Context, info AbandonedApply) {
	e.metrics.ApplyAbandoned(ctx, info.Perspective)
	e.Log.ErrorContext(ctx, "apply abandoned: it ran past its deadline and ignored its cancelled context; its pair is retried while it runs on",
		append(pair.Attrs(info.StreamID, info.Perspective), slog.String("event_id", info.EventID.String()), slog.Int64("version", info.Version),
			slog.Duration("elapsed", info.Elapsed), slog.Duration("apply_timeout", e.opts.Drain.ApplyTimeout))...)
	if h := e.opts.Hooks.OnApplyAbandoned; h != nil {
		h(info)
	}
}

// AbandonedApplies returns the applies the engine abandoned (see
// Options.Drain.ApplyAbandonGrace) that are still running, oldest first.
func (w *Worker) AbandonedApplies() []AbandonedApply {
	list := w.monitor.List()
	out := make([]AbandonedApply, len(list))
	for i, a := range list {
		out[i] = AbandonedApply(a)
	}
	return out
}

// AbandonedAppliesTotal returns how many applies this worker abandoned since
// it started.
func (w *Worker) AbandonedAppliesTotal() int64 { return w.monitor.AbandonedTotal() }
