package core

import (
	"context"
	"log/slog"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/completion"
	"github.com/vantage-go/vantage/ports"
)

// flushPending moves buffered completions and failures into the flushers
// (re-queueing unacknowledged ones whose timeout passed).
func (w *Worker) flushPending(ctx context.Context) {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	now := w.now()
	// Unacknowledged items are re-sent only once the flushers settled
	// everything they were given: an item still queued or being flushed
	// (a slow round trip, retries in place) is not lost, only late.
	if !w.completions.Busy() && !w.failures.Busy() {
		w.strategy.ResetStale(now)
	}
	cs := w.strategy.PendingCompletions()
	fs := w.strategy.PendingFailures()
	if len(cs) == 0 && len(fs) == 0 {
		return
	}
	ids := make([]uuid.UUID, 0, len(cs)+len(fs))
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	for _, f := range fs {
		ids = append(ids, f.ID)
	}
	w.strategy.MarkSent(ids, now)
	if len(cs) > 0 {
		if err := w.completions.Add(ctx, cs...); err != nil && ctx.Err() == nil {
			w.log.ErrorContext(ctx, "queueing completions failed; they are re-sent", slog.Any("error", err))
		}
	}
	if len(fs) > 0 {
		if err := w.failures.Add(ctx, fs...); err != nil && ctx.Err() == nil {
			w.log.ErrorContext(ctx, "queueing failures failed; they are re-sent", slog.Any("error", err))
		}
	}
}

func (w *Worker) flushCompletions(ctx context.Context, batch []completion.Tracked[ports.Completion]) error {
	items := itemsOf(batch)
	_, err := w.backend.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{
		InstanceID:  w.opts.InstanceID,
		Completions: items,
		DebugMode:   w.opts.DebugMode,
		Now:         w.paramNow(),
	})
	return err
}

func (w *Worker) flushFailures(ctx context.Context, batch []completion.Tracked[ports.Failure]) error {
	items := itemsOf(batch)
	return w.backend.Cursors.WorkFail(ctx, &ports.WorkFailParams{
		InstanceID: w.opts.InstanceID,
		Failures:   items,
		DebugMode:  w.opts.DebugMode,
		Now:        w.paramNow(),
	})
}

func (w *Worker) completionsAcknowledged(batch []completion.Tracked[ports.Completion]) {
	n := 0
	for _, t := range batch {
		n += len(t.Item.WorkIDs)
	}
	workIDs := make([]uuid.UUID, 0, n)
	for _, t := range batch {
		workIDs = append(workIDs, t.Item.WorkIDs...)
	}
	// One ActivateRetentionFor for the batch: one hold of the dedup lock
	// the drains contend for, not one per completion.
	w.acknowledge(trackingIDs(batch), workIDs)
	if w.claimHasMore.Load() {
		signal(w.claimWake) // room was freed for more of the backlog
	}
	if h := w.opts.Hooks.OnCompletionsFlushed; h != nil {
		h(CompletionsFlushed{Completions: itemsOf(batch)})
	}
}

func (w *Worker) failuresAcknowledged(batch []completion.Tracked[ports.Failure]) {
	var workIDs []uuid.UUID
	for _, t := range batch {
		f := t.Item
		workIDs = append(workIDs, f.AppliedWorkIDs...)
		w.parking.parkAcked(pairKey{stream: f.StreamID, perspective: f.Perspective})
	}
	w.acknowledge(trackingIDs(batch), workIDs)
	if h := w.opts.Hooks.OnCompletionsFlushed; h != nil {
		h(CompletionsFlushed{Failures: itemsOf(batch)})
	}
}

// acknowledge settles acknowledged items by identity and starts the dedup
// retention of their work rows.
func (w *Worker) acknowledge(trackingIDs, workIDs []uuid.UUID) {
	w.strategy.MarkAcknowledged(trackingIDs)
	w.strategy.ClearAcknowledged()
	w.cache.ActivateRetentionFor(workIDs)
	w.signalProgress()
}

func itemsOf[T any](batch []completion.Tracked[T]) []T {
	items := make([]T, len(batch))
	for i, t := range batch {
		items[i] = t.Item
	}
	return items
}

func trackingIDs[T any](batch []completion.Tracked[T]) []uuid.UUID {
	ids := make([]uuid.UUID, len(batch))
	for i, t := range batch {
		ids[i] = t.ID
	}
	return ids
}

func track[T any](items []T) []completion.Tracked[T] {
	tracked := make([]completion.Tracked[T], len(items))
	for i, it := range items {
		tracked[i] = completion.Tracked[T]{Item: it}
	}
	return tracked
}

// instantReporter is the Reporter of the Instant strategy: one backend call
// per completion or failure.
type instantReporter struct{ w *Worker }

func (r instantReporter) Complete(ctx context.Context, items []ports.Completion) error {
	tracked := track(items)
	if err := r.w.flushCompletions(ctx, tracked); err != nil {
		return err
	}
	r.w.completionsAcknowledged(tracked)
	return nil
}

func (r instantReporter) Fail(ctx context.Context, items []ports.Failure) error {
	tracked := track(items)
	if err := r.w.flushFailures(ctx, tracked); err != nil {
		return err
	}
	r.w.failuresAcknowledged(tracked)
	return nil
}
