package core

import (
	"context"
	"log/slog"

	"github.com/vantage-go/vantage/core/internal/pair"
)

// noteAbandoned logs, counts and announces an abandoned apply.
func (e *engine) noteAbandoned(ctx context.Context, info AbandonedApply) {
	e.metrics.ApplyAbandoned(ctx, info.Perspective)
	e.Log.ErrorContext(ctx, "apply abandoned: it ran past its deadline and ignored its cancelled context; its pair is retried while it runs on",
		append(pair.Attrs(info.StreamID, info.Perspective), slog.String("event_id", info.EventID.String()), slog.Int64("version", info.Version),
			slog.Duration("elapsed", info.Elapsed), slog.Duration("apply_timeout", e.opts.ApplyTimeout))...)
	if h := e.opts.Hooks.OnApplyAbandoned; h != nil {
		h(info)
	}
}

// AbandonedApplies returns the applies the engine abandoned (see
// Options.ApplyAbandonGrace) that are still running, oldest first.
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
