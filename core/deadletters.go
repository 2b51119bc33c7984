package core

import (
	"context"
	"log/slog"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/ports"
)

// deadLetterRecovery requeues, while the worker runs, the dead letters that
// failed on generations other than this instance's (see
// Options.Generation): DeadLetterRecovery.BatchSize every Interval, each
// once per generation, so that a deploy which fixed a handler retries what
// the old code gave up on without flooding the pairs it concerns. An
// instance without a Generation, or with the recovery disabled, does
// nothing. What becomes of each requeued event is recorded on its dead
// letter by the backend: recovered once it completes, dead again (on this
// generation) if it fails for good.
func (w *Worker) deadLetterRecovery(ctx context.Context) {
	o := w.opts.DeadLetterRecovery
	if w.opts.Generation == "" || o.Disabled {
		return
	}
	base.Every(ctx, w.Clock, o.Interval, func() { w.recoverDeadLetters(ctx) })
}

// recoverDeadLetters requeues one batch of dead letters for a retry on this
// generation and returns how many it requeued.
func (w *Worker) recoverDeadLetters(ctx context.Context) int {
	dls, err := w.backend.DeadLetters.DeadLettersRecover(ctx, &ports.DeadLettersRecoverParams{
		Generation: w.opts.Generation,
		Limit:      w.opts.DeadLetterRecovery.BatchSize,
		Now:        w.ParamNow(),
	})
	if err != nil {
		if ctx.Err() == nil {
			w.Faults.Fail(ctx, "requeueing dead letters for the new generation", err)
		}
		return 0
	}
	w.Faults.OK(ctx, "requeueing dead letters for the new generation")
	for _, dl := range dls {
		w.Log.InfoContext(ctx, "dead letter requeued for a retry on this generation",
			append(pair.Attrs(dl.StreamID, dl.Perspective), slog.Int64("version", dl.EventVersion), slog.String("event_id", dl.EventID.String()),
				slog.String("failed_on", dl.Generation), slog.String("generation", w.opts.Generation), slog.String("error", dl.Error))...)
	}
	if len(dls) > 0 {
		w.RequestImmediatePoll()
		if h := w.opts.Hooks.OnDeadLettersRequeued; h != nil {
			h(dls)
		}
	}
	return len(dls)
}
