package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/completion"
	"github.com/vantage-go/vantage/core/internal/dedup"
	"github.com/vantage-go/vantage/core/internal/faultlog"
	"github.com/vantage-go/vantage/core/internal/flush"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/core/internal/retry"
	"github.com/vantage-go/vantage/ports"
)

// completer carries the outcomes of applies (completions and failures) to
// the backend: the completion strategy records them, the flushers send them
// in acknowledged, retried batches, and an acknowledgement settles exactly
// the items it names. It starts the dedup retention of acknowledged work
// and wakes the waiters of WaitForStream. An outcome the backend refuses,
// or the strategy neither delivered nor kept, is given up on (see givenUp).
type completer struct {
	*engine
	strategy    completion.Strategy
	completions *flush.Flusher[completion.Tracked[ports.Completion]]
	failures    *flush.Flusher[completion.Tracked[ports.Failure]]
	cache       *dedup.Cache

	// onFailureAcked is called per pair whose failure reached the backend;
	// onCompleted after each acknowledged completion batch; onGivenUp per
	// pair of an outcome given up on, to drain it again after a backoff,
	// which it returns; onLanded per pair of an acknowledged outcome.
	onFailureAcked func(pair.Key)
	onCompleted    func()
	onGivenUp      func(pair.Key) time.Duration
	onLanded       func(pair.Key)

	mu sync.Mutex // serializes moving strategy items into the flushers

	// stalled holds, by pair, the rows of reports whose sending failed
	// and that are not acknowledged or given up on yet (see stalledAmong);
	// stalledRows counts them, so that drains find none without the lock.
	stalledMu   sync.Mutex
	stalled     map[dedup.Key]map[uuid.UUID]struct{}
	stalledRows atomic.Int64

	progressMu sync.Mutex
	progress   chan struct{} // closed and replaced on every acknowledged flush
}

func newCompleter(e *engine, cache *dedup.Cache) (*completer, error) {
	c := &completer{engine: e, cache: cache, progress: make(chan struct{})}
	// Both built-in strategies re-queue what was not acknowledged with
	// Options.CompletionResend: Instant keeps the outcomes it could not
	// deliver as Batched keeps every outcome.
	resend := completion.BatchedOptions{
		BaseTimeout: e.opts.CompletionResend.Initial,
		Multiplier:  e.opts.CompletionResend.Multiplier,
		MaxTimeout:  e.opts.CompletionResend.Max,
	}
	build := e.opts.Completion
	if build == nil {
		build = completion.BatchedFactory
	}
	var err error
	if c.strategy, err = build(completion.Config{Reporter: instantReporter{c}, Resend: resend}); err != nil {
		return nil, fmt.Errorf("Options.Completion: %w", err)
	}
	if c.strategy == nil {
		return nil, errors.New("Options.Completion returned no strategy")
	}
	completionRows := func(t completion.Tracked[ports.Completion]) int { return len(t.Item.WorkIDs) }
	if c.completions, err = newFlusher(e, flusherCompletions, c.flushCompletions, c.completionsAcknowledged, c.completionsRefused, completionRows, c.completionsStalled); err != nil {
		return nil, err
	}
	if c.failures, err = newFlusher(e, flusherFailures, c.flushFailures, c.failuresAcknowledged, c.failuresRefused, nil, c.failuresStalled); err != nil {
		return nil, err
	}
	return c, nil
}

// newFlusher builds the flusher of one kind of outcome: it hands batches to
// flushFn, reports acknowledged batches to acked, the items the backend
// refused to refused and the batches whose sending failed otherwise to
// stalled, and weighs items with weight (nil: one per item).
//
// A batch dropped for any other reason (its last retry failed, or the
// worker stopped) stays Sent in the strategy: ResetStale re-queues it.
func newFlusher[T any](e *engine, name string, flushFn func(context.Context, []completion.Tracked[T]) error, acked func([]completion.Tracked[T]), refused func([]completion.Tracked[T], error), weight func(completion.Tracked[T]) int, stalled func([]completion.Tracked[T])) (*flush.Flusher[completion.Tracked[T]], error) {
	return flush.New(name, flush.Options[completion.Tracked[T]]{
		MaxAttempts: e.opts.FlushRetry.MaxAttempts,
		Retry:       e.opts.FlushRetry.internal(0),
		Clock:       e.Clock,
		Logger:      e.Log,
		Faults:      flushFaults{e.Faults},
		OnFlushed:   acked,
		Weight:      weight,
		OnRetry: func(batch []completion.Tracked[T], _ int, _ error) {
			e.metrics.flushRetried(name)
			stalled(batch)
		},
		OnDropped: func(batch []completion.Tracked[T], err error) {
			e.metrics.flushGaveUp(name, len(batch))
			if retry.Permanent(err) {
				refused(batch, err)
				return
			}
			stalled(batch)
		},
	}, flushFn)
}

// flushFaults hands the flushers' failures to the engine's fault log, so
// that an outage costs a few lines per flusher rather than one per retry
// and per batch: a failing flush is logged like any background operation
// ("flushing completions failed", a summary, "recovered"), and the batches
// given up on at most once per faultlog.SummaryEvery, with how many items were
// dropped since.
type flushFaults struct{ f *faultlog.Log }

func (ff flushFaults) Fail(ctx context.Context, op string, err error, attrs ...any) {
	ff.f.Fail(ctx, op, err, attrs...)
}

func (ff flushFaults) OK(ctx context.Context, op string) { ff.f.OK(ctx, op) }

func (ff flushFaults) Drop(ctx context.Context, op, msg string, n int, err error, attrs ...any) {
	// The last call of a batch failed too: it counts as a failure of the
	// operation, unless the backend refused the items (no outage) or the
	// worker is stopping.
	if ctx.Err() == nil && !retry.Permanent(err) {
		ff.f.Fail(ctx, op, err, attrs...)
	}
	ff.f.Recur(ctx, faultlog.Recurrence{Key: op + ": " + msg, Every: faultlog.SummaryEvery, Level: slog.LevelError, Msg: msg, CountKey: "dropped_items", Op: op},
		n, append(attrs, slog.Any("error", err))...)
}

// Start launches the flushers; they run until Stop or until ctx ends.
func (c *completer) Start(ctx context.Context) error {
	return errors.Join(c.completions.Start(ctx), c.failures.Start(ctx))
}

// Stop sends every buffered outcome and waits for the flushers to drain,
// within ctx.
func (c *completer) Stop(ctx context.Context) error {
	c.flushPending(ctx)
	var errs []error
	if err := c.completions.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("draining completions: %w", err))
	}
	if err := c.failures.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("draining failures: %w", err))
	}
	return errors.Join(errs...)
}

// reportCompletion hands a completion to the strategy, which delivers it or
// keeps it until it is acknowledged. One it did neither with is given up
// on.
func (c *completer) reportCompletion(ctx context.Context, comp ports.Completion) {
	if err := c.strategy.ReportCompletion(ctx, comp); err != nil {
		c.givenUp(ctx, pair.Key{Stream: comp.StreamID, Perspective: comp.Perspective}, comp.WorkIDs, "completions", err)
	}
}

// reportFailure hands a failure to the strategy, as reportCompletion does
// a completion. Its pair is parked until the failure is acknowledged; one
// given up on is drained again after a backoff instead.
func (c *completer) reportFailure(ctx context.Context, f ports.Failure) {
	if err := c.strategy.ReportFailure(ctx, f); err != nil {
		c.givenUp(ctx, pair.Key{Stream: f.StreamID, Perspective: f.Perspective}, f.AppliedWorkIDs, "failures", err)
	}
}

// completionsStalled and failuresStalled note the rows of reports whose
// sending failed (see stalledAmong).
func (c *completer) completionsStalled(batch []completion.Tracked[ports.Completion]) {
	for _, t := range batch {
		c.noteStalled(dedup.Key{Stream: t.Item.StreamID, Perspective: t.Item.Perspective}, t.Item.WorkIDs)
	}
}

func (c *completer) failuresStalled(batch []completion.Tracked[ports.Failure]) {
	for _, t := range batch {
		c.noteStalled(dedup.Key{Stream: t.Item.StreamID, Perspective: t.Item.Perspective}, t.Item.AppliedWorkIDs)
	}
}

func (c *completer) noteStalled(k dedup.Key, rows []uuid.UUID) {
	if len(rows) == 0 {
		return
	}
	c.stalledMu.Lock()
	defer c.stalledMu.Unlock()
	if c.stalled == nil {
		c.stalled = map[dedup.Key]map[uuid.UUID]struct{}{}
	}
	set := c.stalled[k]
	if set == nil {
		set = make(map[uuid.UUID]struct{}, len(rows))
		c.stalled[k] = set
	}
	for _, id := range rows {
		if _, ok := set[id]; !ok {
			set[id] = struct{}{}
			c.stalledRows.Add(1)
		}
	}
}

// settleStalled forgets the rows of reports acknowledged or given up on.
func (c *completer) settleStalled(k dedup.Key, rows []uuid.UUID) {
	if c.stalledRows.Load() == 0 {
		return
	}
	c.stalledMu.Lock()
	defer c.stalledMu.Unlock()
	set := c.stalled[k]
	for _, id := range rows {
		if _, ok := set[id]; ok {
			delete(set, id)
			c.stalledRows.Add(-1)
		}
	}
	if set != nil && len(set) == 0 {
		delete(c.stalled, k)
	}
}

// stalledAmong returns the rows of pair k among rows whose report failed
// and waits to be sent again. A drain lists them as applied in its own
// report, whose position is past them: reaching the backend first, it
// would otherwise take them for stragglers never applied (see
// pairRun.applied). Reports that did not fail keep their order, and rows
// are listed once.
func (c *completer) stalledAmong(k dedup.Key, rows []uuid.UUID) []uuid.UUID {
	if len(rows) == 0 || c.stalledRows.Load() == 0 {
		return nil
	}
	c.stalledMu.Lock()
	defer c.stalledMu.Unlock()
	set := c.stalled[k]
	var out []uuid.UUID
	for _, id := range rows {
		if _, ok := set[id]; ok {
			out = append(out, id)
		}
	}
	return out
}

// completionsRefused gives up on completions the backend refused: sent
// again, they would be refused again.
func (c *completer) completionsRefused(batch []completion.Tracked[ports.Completion], err error) {
	c.settleRefused(trackingIDs(batch))
	for _, t := range batch {
		c.givenUp(context.Background(), pair.Key{Stream: t.Item.StreamID, Perspective: t.Item.Perspective}, t.Item.WorkIDs, "completions", err)
	}
}

// failuresRefused gives up on failures the backend refused.
func (c *completer) failuresRefused(batch []completion.Tracked[ports.Failure], err error) {
	c.settleRefused(trackingIDs(batch))
	for _, t := range batch {
		c.givenUp(context.Background(), pair.Key{Stream: t.Item.StreamID, Perspective: t.Item.Perspective}, t.Item.AppliedWorkIDs, "failures", err)
	}
}

// settleRefused drops the tracked items the backend refused from the
// strategy, so that they are not sent again.
func (c *completer) settleRefused(ids []uuid.UUID) {
	c.strategy.MarkAcknowledged(ids)
	c.strategy.ClearAcknowledged()
}

// givenUp forgets an outcome of pair k that will never be acknowledged:
// the backend refused it, or the strategy neither delivered nor kept it.
// The rows it completes leave the dedup cache, where they would hold back
// their re-delivery for good, and the pair is drained again after a
// backoff (see parking.reportGivenUp): rows the stored model already
// reflects complete without being applied again, and a failed event (its
// pair parked until an acknowledgement that will not come) is applied
// again, never charged.
func (c *completer) givenUp(ctx context.Context, k pair.Key, rows []uuid.UUID, what string, err error) {
	c.cache.RemoveRange(k.Dedup(), rows)
	c.settleStalled(k.Dedup(), rows)
	attrs := append(pairAttrs(k.Stream, k.Perspective), slog.Any("error", err))
	if c.onGivenUp != nil {
		attrs = append(attrs, slog.Duration("retry_in", c.onGivenUp(k)))
	}
	if ctx.Err() != nil {
		return // stopping: nothing to tell
	}
	c.Faults.Recur(ctx, faultlog.Recurrence{
		Key: "giving up on " + what, Every: faultlog.SummaryEvery, Level: slog.LevelWarn, CountKey: "outcomes",
		Msg: "giving up on " + what + " that cannot be reported; their pairs are drained again",
	}, 1, attrs...)
}

// sweep drops expired dedup entries and sends buffered outcomes: before
// each batch, and when a consumer found nothing to drain.
func (c *completer) sweep(ctx context.Context) {
	c.cache.EvictExpired()
	c.flushPending(ctx)
}

// flushNow sends what is buffered and waits until the completions flusher
// sent what it holds.
func (c *completer) flushNow(ctx context.Context) error {
	c.flushPending(ctx)
	return c.completions.Flush(ctx)
}

// waitUnackedBelow sends what is buffered and waits until the completions
// handed to the flusher and not yet acknowledged (or given up on) complete
// fewer than limit work rows, or ctx ends.
func (c *completer) waitUnackedBelow(ctx context.Context, limit int) {
	c.flushPending(ctx)
	_ = c.completions.WaitBelow(ctx, limit, c.Signals.OnAckWait) // only ctx's end stops the wait
}

// afterSettled calls fn once every completion handed to the flusher so far
// is settled (see flush.Flusher.AfterSettled).
func (c *completer) afterSettled(fn func()) { c.completions.AfterSettled(fn) }

// sendHeld sends the completions handed to the flusher without waiting for
// its coalescing window: a stream waits for their acknowledgement.
func (c *completer) sendHeld() { c.completions.Hurry() }

// flushPending moves buffered completions and failures into the flushers
// (re-queueing unacknowledged ones whose timeout passed).
func (c *completer) flushPending(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.Now()
	// Unacknowledged items are re-sent only once the flushers settled
	// everything they were given: an item still queued or being flushed
	// (a slow round trip, retries in place) is not lost, only late.
	if !c.completions.Busy() && !c.failures.Busy() {
		c.strategy.ResetStale(now)
	}
	cs := c.strategy.PendingCompletions()
	fs := c.strategy.PendingFailures()
	if len(cs) == 0 && len(fs) == 0 {
		return
	}
	ids := make([]uuid.UUID, 0, len(cs)+len(fs))
	for _, t := range cs {
		ids = append(ids, t.ID)
	}
	for _, t := range fs {
		ids = append(ids, t.ID)
	}
	c.strategy.MarkSent(ids, now)
	if len(cs) > 0 {
		if err := c.completions.Add(ctx, cs...); err != nil && ctx.Err() == nil {
			c.Log.ErrorContext(ctx, "queueing completions failed; they are re-sent", slog.Any("error", err))
		}
	}
	if len(fs) > 0 {
		if err := c.failures.Add(ctx, fs...); err != nil && ctx.Err() == nil {
			c.Log.ErrorContext(ctx, "queueing failures failed; they are re-sent", slog.Any("error", err))
		}
	}
}

func (c *completer) flushCompletions(ctx context.Context, batch []completion.Tracked[ports.Completion]) error {
	start := c.Now()
	res, err := c.backend.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{
		InstanceID:  c.opts.InstanceID,
		Completions: itemsOf(batch),
		DebugMode:   c.opts.DebugMode,
		Now:         c.ParamNow(),
	})
	c.metrics.flushed(ctx, flusherCompletions, len(batch), c.Now().Sub(start), err)
	if err == nil && res != nil {
		c.releaseUnfinished(batch, res.Completed)
	}
	return err
}

// releaseUnfinished takes the rows of an acknowledged batch out of the
// dedup cache when the backend completed fewer than it listed: the stream
// of some moved to another instance before the batch landed (or a re-sent
// batch found them gone), and a row left pending must not be skipped as
// applied when this instance leases it again. Re-drained, it sits at or
// below its pair's cursor and completes without an apply.
func (c *completer) releaseUnfinished(batch []completion.Tracked[ports.Completion], completed int) {
	listed := 0
	for _, t := range batch {
		listed += len(t.Item.WorkIDs)
	}
	if completed >= listed || completed >= distinctRows(batch) {
		return
	}
	for _, t := range batch {
		k := pair.Key{Stream: t.Item.StreamID, Perspective: t.Item.Perspective}
		c.cache.RemoveRange(k.Dedup(), t.Item.WorkIDs)
	}
}

// distinctRows counts the distinct rows a batch of completions lists: a
// row applied by an earlier report that failed may be listed again by a
// later one of its pair (see stalledAmong).
func distinctRows(batch []completion.Tracked[ports.Completion]) int {
	seen := map[uuid.UUID]struct{}{}
	for _, t := range batch {
		for _, id := range t.Item.WorkIDs {
			seen[id] = struct{}{}
		}
	}
	return len(seen)
}

func (c *completer) flushFailures(ctx context.Context, batch []completion.Tracked[ports.Failure]) error {
	start := c.Now()
	err := c.backend.Cursors.WorkFail(ctx, &ports.WorkFailParams{
		InstanceID: c.opts.InstanceID,
		Failures:   itemsOf(batch),
		DebugMode:  c.opts.DebugMode,
		Now:        c.ParamNow(),
	})
	c.metrics.flushed(ctx, flusherFailures, len(batch), c.Now().Sub(start), err)
	return err
}

func (c *completer) completionsAcknowledged(batch []completion.Tracked[ports.Completion]) {
	ranges := make([]dedup.Range, len(batch))
	for i, t := range batch {
		ranges[i] = dedup.Range{Key: dedup.Key{Stream: t.Item.StreamID, Perspective: t.Item.Perspective}, IDs: t.Item.WorkIDs}
	}
	// One ActivateRetentionFor for the batch: one hold of the dedup lock
	// the drains contend for, not one per completion.
	c.acknowledge(trackingIDs(batch), ranges)
	if c.onCompleted != nil {
		c.onCompleted()
	}
	if h := c.opts.Hooks.OnCompletionsFlushed; h != nil {
		h(CompletionsFlushed{Completions: itemsOf(batch)})
	}
}

func (c *completer) failuresAcknowledged(batch []completion.Tracked[ports.Failure]) {
	ranges := make([]dedup.Range, 0, len(batch))
	for _, t := range batch {
		f := t.Item
		k := pair.Key{Stream: f.StreamID, Perspective: f.Perspective}
		ranges = append(ranges, dedup.Range{Key: k.Dedup(), IDs: f.AppliedWorkIDs})
		if c.onFailureAcked != nil {
			c.onFailureAcked(k)
		}
	}
	c.acknowledge(trackingIDs(batch), ranges)
	if h := c.opts.Hooks.OnCompletionsFlushed; h != nil {
		h(CompletionsFlushed{Failures: itemsOf(batch)})
	}
}

// acknowledge settles acknowledged items by identity and starts the dedup
// retention of their work rows.
func (c *completer) acknowledge(trackingIDs []uuid.UUID, rows []dedup.Range) {
	c.strategy.MarkAcknowledged(trackingIDs)
	c.strategy.ClearAcknowledged()
	c.cache.ActivateRetentionFor(rows)
	for _, r := range rows {
		c.settleStalled(r.Key, r.IDs)
	}
	if c.onLanded != nil {
		for _, r := range rows {
			c.onLanded(pair.Key{Stream: r.Key.Stream, Perspective: r.Key.Perspective})
		}
	}
	c.signalProgress()
}

// progressed returns a channel closed at the next acknowledged flush or
// saved model.
func (c *completer) progressed() <-chan struct{} {
	c.progressMu.Lock()
	defer c.progressMu.Unlock()
	return c.progress
}

func (c *completer) signalProgress() {
	c.progressMu.Lock()
	close(c.progress)
	c.progress = make(chan struct{})
	c.progressMu.Unlock()
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
// per completion or failure. It records each call in the fault log
// ("reporting completions", "reporting failures"), as the flushers record
// theirs: the strategy decides what becomes of an outcome whose call
// failed, and the engine hears of that through the strategy's result.
type instantReporter struct{ c *completer }

func (r instantReporter) Complete(ctx context.Context, items []ports.Completion) error {
	tracked := track(items)
	err := r.c.flushCompletions(ctx, tracked)
	r.c.reported(ctx, "reporting completions", err, len(items), func() []any { return pairAttrs(items[0].StreamID, items[0].Perspective) })
	if err != nil {
		r.c.completionsStalled(tracked)
		return err
	}
	r.c.completionsAcknowledged(tracked)
	return nil
}

func (r instantReporter) Fail(ctx context.Context, items []ports.Failure) error {
	tracked := track(items)
	err := r.c.flushFailures(ctx, tracked)
	r.c.reported(ctx, "reporting failures", err, len(items), func() []any { return pairAttrs(items[0].StreamID, items[0].Perspective) })
	if err != nil {
		r.c.failuresStalled(tracked)
		return err
	}
	r.c.failuresAcknowledged(tracked)
	return nil
}

// reported records the outcome of a report of n items in the fault log,
// naming the pair of a single item (attrs); a call cut short by the end of
// ctx is no failure of the backend.
func (c *completer) reported(ctx context.Context, op string, err error, n int, attrs func() []any) {
	switch {
	case err == nil:
		c.Faults.OK(ctx, op)
	case ctx.Err() != nil:
	case n == 1:
		c.Faults.Fail(ctx, op, err, attrs()...)
	default:
		c.Faults.Fail(ctx, op, err, slog.Int("items", n))
	}
}
