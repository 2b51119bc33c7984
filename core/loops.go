package core

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

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

// warnRetired warns about the perspectives of the registry that are retired
// in the backend: they get no work, which an operator may not expect of a
// perspective still in the code.
func (w *Worker) warnRetired(ctx context.Context) {
	if w.backend.Admin == nil {
		return
	}
	retired, err := w.backend.Admin.PerspectivesRetired(ctx)
	if err != nil {
		w.Log.WarnContext(ctx, "listing retired perspectives", slog.Any("error", err))
		return
	}
	for _, name := range retired {
		if _, ok := w.reg.perspective(name); ok {
			w.Log.WarnContext(ctx, "perspective is retired in the backend; it gets no work until revived",
				slog.String("perspective", name))
		}
	}
}

// resubscribeEvery is how often a worker registers its subscriptions again.
const resubscribeEvery = time.Minute

// resubscribeLoop registers the registry's subscriptions again now and
// then. Appends through a Registry carry their subscriptions; this heals
// the store for producers that append by other means, should its
// subscriptions have been lost (a schema dropped and recreated while
// instances ran). Retired perspectives stay retired.
func (w *Worker) resubscribeLoop(ctx context.Context) {
	base.Every(ctx, w.Clock, resubscribeEvery, func() {
		if err := w.reg.RegisterSubscriptions(ctx, w.backend.Events); err != nil {
			if ctx.Err() == nil {
				w.Faults.Fail(ctx, "registering subscriptions", err)
			}
			return
		}
		w.Faults.OK(ctx, "registering subscriptions")
	})
}

// ensureIndexesLoop hands the indexes of the registered perspectives to
// the backend's ModelQuery, at start, then again every resubscribeEvery
// for those whose indexes it failed to ensure, until it succeeds for all.
// A build may take long: the loop ends with ctx (a cancelled build leaves
// an index the next start rebuilds).
func (w *Worker) ensureIndexesLoop(ctx context.Context) {
	pending := map[string][]ports.ModelIndex{}
	for _, name := range w.reg.Perspectives() {
		p, _ := w.reg.perspective(name)
		if idx := p.Indexes(); len(idx) > 0 {
			pending[name] = idx
		}
	}
	if len(pending) == 0 {
		return
	}
	if w.backend.ModelQuery == nil {
		w.Log.InfoContext(ctx, "the backend has no ModelQuery port: declared indexes are not built")
		return
	}
	try := func() {
		for _, name := range slices.Sorted(maps.Keys(pending)) {
			start := w.Clock.Now()
			err := ensureIndexes(ctx, w.backend.ModelQuery, name, pending[name])
			if err != nil {
				if ctx.Err() == nil {
					w.Faults.Fail(ctx, "ensuring model indexes", err, slog.String("perspective", name))
				}
				continue
			}
			w.Faults.OK(ctx, "ensuring model indexes")
			w.Log.InfoContext(ctx, "model indexes ready", slog.String("perspective", name),
				slog.Int("indexes", len(pending[name])), slog.Duration("duration", w.Clock.Now().Sub(start)))
			delete(pending, name)
		}
	}
	try()
	if len(pending) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	base.Every(ctx, w.Clock, resubscribeEvery, func() {
		if try(); len(pending) == 0 {
			cancel()
		}
	})
}
