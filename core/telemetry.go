package core

import (
	"context"

	"go.opentelemetry.io/otel/metric"

	"github.com/vantage-go/vantage/core/internal/telemetry"
)

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
