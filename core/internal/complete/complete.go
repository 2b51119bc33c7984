// Package complete carries the outcomes of applies (completions and
// failures) to the backend: the completion strategy records them, two
// flushers send them in acknowledged, retried batches, and an
// acknowledgement settles exactly the items it names.
package complete

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
	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/dedup"
	"github.com/vantage-go/vantage/core/internal/faultlog"
	"github.com/vantage-go/vantage/core/internal/flush"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/core/internal/retry"
	"github.com/vantage-go/vantage/ports"
)

// The names of the two flushers, in logs and metrics.
const (
	Completions = "completions"
	Failures    = "failures"
)

// Metrics records the flushers' calls.
type Metrics interface {
	// Flushed records one call of a flusher sending n items, that took
	// took and returned err.
	Flushed(ctx context.Context, flusher string, n int, took time.Duration, err error)
	// FlushRetried counts a flush call repeated in place.
	FlushRetried(flusher string)
	// FlushGaveUp counts n items a flusher dropped.
	FlushGaveUp(flusher string, n int)
}

// Config is what a Completer reads. The callbacks may be nil.
type Config struct {
	// Cursors receives the completions and failures.
	Cursors    ports.CursorStore
	InstanceID uuid.UUID
	DebugMode  bool
	// Strategy builds the completion strategy; nil: completion.BatchedFactory.
	Strategy completion.Factory
	// Resend re-queues what was not acknowledged: both built-in
	// strategies use it (Instant keeps the outcomes it could not deliver
	// as Batched keeps every outcome).
	Resend completion.BatchedOptions
	// FlushAttempts and FlushRetry are the flushers' retries in place.
	FlushAttempts int
	FlushRetry    retry.Backoff
	Metrics       Metrics

	// OnAcknowledged is called with each acknowledged batch, of
	// completions or of failures.
	OnAcknowledged func(completions []ports.Completion, failures []ports.Failure)
	// OnFailureAcked is called per pair whose failure reached the backend;
	// OnCompleted after each acknowledged completion batch; OnGivenUp per
	// pair of an outcome given up on, to drain it again after a backoff,
	// which it returns; OnLanded per pair of an acknowledged outcome.
	OnFailureAcked func(pair.Key)
	OnCompleted    func()
	OnGivenUp      func(pair.Key) time.Duration
	OnLanded       func(pair.Key)
}

// A Completer carries the outcomes of applies (completions and failures)
// to the backend: the completion strategy records them, the flushers send
// them in acknowledged, retried batches, and an acknowledgement settles
// exactly the items it names. It starts the dedup retention of acknowledged work
// and wakes the waiters of WaitForStream. An outcome the backend refuses,
// or the strategy neither delivered nor kept, is given up on (see givenUp).
type Completer struct {
	*base.Env
	cfg         Config
	strategy    completion.Strategy
	completions *flush.Flusher[completion.Tracked[ports.Completion]]
	failures    *flush.Flusher[completion.Tracked[ports.Failure]]
	cache       *dedup.Cache

	mu sync.Mutex // serializes moving strategy items into the flushers

	// stalled holds, by pair, the rows of reports whose sending failed
	// and that are not acknowledged or given up on yet (see StalledAmong);
	// stalledRows counts them, so that drains find none without the lock.
	stalledMu   sync.Mutex
	stalled     map[dedup.Key]map[uuid.UUID]struct{}
	stalledRows atomic.Int64

	progressMu sync.Mutex
	progress   chan struct{} // closed and replaced on every acknowledged flush
}

// New builds a Completer that keeps the rows of its outcomes in cache
// until they are acknowledged (then for the cache's retention).
func New(env *base.Env, cache *dedup.Cache, cfg Config) (*Completer, error) {
	c := &Completer{Env: env, cfg: cfg, cache: cache, progress: make(chan struct{})}
	build := cfg.Strategy
	if build == nil {
		build = completion.BatchedFactory
	}
	var err error
	if c.strategy, err = build(completion.Config{Reporter: instantReporter{c}, Resend: cfg.Resend}); err != nil {
		return nil, fmt.Errorf("Options.Completion: %w", err)
	}
	if c.strategy == nil {
		return nil, errors.New("Options.Completion returned no strategy")
	}
	completionRows := func(t completion.Tracked[ports.Completion]) int { return len(t.Item.WorkIDs) }
	if c.completions, err = newFlusher(c, Completions, c.flushCompletions, c.completionsAcknowledged, c.completionsRefused, completionRows, c.completionsStalled); err != nil {
		return nil, err
	}
	if c.failures, err = newFlusher(c, Failures, c.flushFailures, c.failuresAcknowledged, c.failuresRefused, nil, c.failuresStalled); err != nil {
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
func newFlusher[T any](c *Completer, name string, flushFn func(context.Context, []completion.Tracked[T]) error, acked func([]completion.Tracked[T]), refused func([]completion.Tracked[T], error), weight func(completion.Tracked[T]) int, stalled func([]completion.Tracked[T])) (*flush.Flusher[completion.Tracked[T]], error) {
	return flush.New(name, flush.Options[completion.Tracked[T]]{
		MaxAttempts: c.cfg.FlushAttempts,
		Retry:       c.cfg.FlushRetry,
		Clock:       c.Clock,
		Logger:      c.Log,
		Faults:      flushFaults{c.Faults},
		OnFlushed:   acked,
		Weight:      weight,
		OnRetry: func(batch []completion.Tracked[T], _ int, _ error) {
			c.cfg.Metrics.FlushRetried(name)
			stalled(batch)
		},
		OnDropped: func(batch []completion.Tracked[T], err error) {
			c.cfg.Metrics.FlushGaveUp(name, len(batch))
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
func (c *Completer) Start(ctx context.Context) error {
	return errors.Join(c.completions.Start(ctx), c.failures.Start(ctx))
}

// Stop sends every buffered outcome and waits for the flushers to drain,
// within ctx.
func (c *Completer) Stop(ctx context.Context) error {
	c.FlushPending(ctx)
	var errs []error
	if err := c.completions.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("draining completions: %w", err))
	}
	if err := c.failures.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("draining failures: %w", err))
	}
	return errors.Join(errs...)
}

// ReportCompletion hands a completion to the strategy, which delivers it or
// keeps it until it is acknowledged. One it did neither with is given up
// on.
func (c *Completer) ReportCompletion(ctx context.Context, comp ports.Completion) {
	if err := c.strategy.ReportCompletion(ctx, comp); err != nil {
		c.givenUp(ctx, pair.Key{Stream: comp.StreamID, Perspective: comp.Perspective}, comp.WorkIDs, "completions", err)
	}
}

// ReportFailure hands a failure to the strategy, as ReportCompletion does
// a completion. Its pair is parked until the failure is acknowledged; one
// given up on is drained again after a backoff instead.
func (c *Completer) ReportFailure(ctx context.Context, f ports.Failure) {
	if err := c.strategy.ReportFailure(ctx, f); err != nil {
		c.givenUp(ctx, pair.Key{Stream: f.StreamID, Perspective: f.Perspective}, f.AppliedWorkIDs, "failures", err)
	}
}

// completionsStalled and failuresStalled note the rows of reports whose
// sending failed (see StalledAmong).
func (c *Completer) completionsStalled(batch []completion.Tracked[ports.Completion]) {
	for _, t := range batch {
		c.noteStalled(dedup.Key{Stream: t.Item.StreamID, Perspective: t.Item.Perspective}, t.Item.WorkIDs)
	}
}

func (c *Completer) failuresStalled(batch []completion.Tracked[ports.Failure]) {
	for _, t := range batch {
		c.noteStalled(dedup.Key{Stream: t.Item.StreamID, Perspective: t.Item.Perspective}, t.Item.AppliedWorkIDs)
	}
}

func (c *Completer) noteStalled(k dedup.Key, rows []uuid.UUID) {
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
func (c *Completer) settleStalled(k dedup.Key, rows []uuid.UUID) {
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

// StalledAmong returns the rows of pair k among rows whose report failed
// and waits to be sent again. A drain lists them as applied in its own
// report, whose position is past them: reaching the backend first, it
// would otherwise take them for stragglers never applied. Reports that
// did not fail keep their order, and rows are listed once.
func (c *Completer) StalledAmong(k dedup.Key, rows []uuid.UUID) []uuid.UUID {
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
func (c *Completer) completionsRefused(batch []completion.Tracked[ports.Completion], err error) {
	c.settleRefused(trackingIDs(batch))
	for _, t := range batch {
		c.givenUp(context.Background(), pair.Key{Stream: t.Item.StreamID, Perspective: t.Item.Perspective}, t.Item.WorkIDs, "completions", err)
	}
}

// failuresRefused gives up on failures the backend refused.
func (c *Completer) failuresRefused(batch []completion.Tracked[ports.Failure], err error) {
	c.settleRefused(trackingIDs(batch))
	for _, t := range batch {
		c.givenUp(context.Background(), pair.Key{Stream: t.Item.StreamID, Perspective: t.Item.Perspective}, t.Item.AppliedWorkIDs, "failures", err)
	}
}

// settleRefused drops the tracked items the backend refused from the
// strategy, so that they are not sent again.
func (c *Completer) settleRefused(ids []uuid.UUID) {
	c.strategy.MarkAcknowledged(ids)
	c.strategy.ClearAcknowledged()
}

// givenUp forgets an outcome of pair k that will never be acknowledged:
// the backend refused it, or the strategy neither delivered nor kept it.
// The rows it completes leave the dedup cache, where they would hold back
// their re-delivery for good, and the pair is drained again after a
// backoff (Config.OnGivenUp): rows the stored model already
// reflects complete without being applied again, and a failed event (its
// pair parked until an acknowledgement that will not come) is applied
// again, never charged.
func (c *Completer) givenUp(ctx context.Context, k pair.Key, rows []uuid.UUID, what string, err error) {
	c.cache.RemoveRange(k.Dedup(), rows)
	c.settleStalled(k.Dedup(), rows)
	attrs := append(pair.Attrs(k.Stream, k.Perspective), slog.Any("error", err))
	if c.cfg.OnGivenUp != nil {
		attrs = append(attrs, slog.Duration("retry_in", c.cfg.OnGivenUp(k)))
	}
	if ctx.Err() != nil {
		return // stopping: nothing to tell
	}
	c.Faults.Recur(ctx, faultlog.Recurrence{
		Key: "giving up on " + what, Every: faultlog.SummaryEvery, Level: slog.LevelWarn, CountKey: "outcomes",
		Msg: "giving up on " + what + " that cannot be reported; their pairs are drained again",
	}, 1, attrs...)
}

// Sweep drops expired dedup entries and sends buffered outcomes: before
// each batch, and when a consumer found nothing to drain.
func (c *Completer) Sweep(ctx context.Context) {
	c.cache.EvictExpired()
	c.FlushPending(ctx)
}

// FlushNow sends what is buffered and waits until the completions flusher
// sent what it holds.
func (c *Completer) FlushNow(ctx context.Context) error {
	c.FlushPending(ctx)
	return c.completions.Flush(ctx)
}

// WaitUnackedBelow sends what is buffered and waits until the completions
// handed to the flusher and not yet acknowledged (or given up on) complete
// fewer than limit work rows, or ctx ends.
func (c *Completer) WaitUnackedBelow(ctx context.Context, limit int) {
	c.FlushPending(ctx)
	_ = c.completions.WaitBelow(ctx, limit, c.Signals.OnAckWait) // only ctx's end stops the wait
}

// AfterSettled calls fn once every completion handed to the flusher so far
// is settled (see flush.Flusher.AfterSettled).
func (c *Completer) AfterSettled(fn func()) { c.completions.AfterSettled(fn) }

// Coalesce is how long the completions flusher gathers completions
// before it sends a batch.
func (c *Completer) Coalesce() time.Duration { return c.completions.Coalesce() }

// Flush sends what the flushers hold, without the buffered outcomes, and
// waits until both sent it.
func (c *Completer) Flush(ctx context.Context) error {
	return errors.Join(c.completions.Flush(ctx), c.failures.Flush(ctx))
}

// Strategy returns the completion strategy.
func (c *Completer) Strategy() completion.Strategy { return c.strategy }

// SendHeld sends the completions handed to the flusher without waiting for
// its coalescing window: a stream waits for their acknowledgement.
func (c *Completer) SendHeld() { c.completions.Hurry() }

// FlushPending moves buffered completions and failures into the flushers
// (re-queueing unacknowledged ones whose timeout passed).
func (c *Completer) FlushPending(ctx context.Context) {
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

func (c *Completer) flushCompletions(ctx context.Context, batch []completion.Tracked[ports.Completion]) error {
	start := c.Now()
	res, err := c.cfg.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{
		InstanceID:  c.cfg.InstanceID,
		Completions: itemsOf(batch),
		DebugMode:   c.cfg.DebugMode,
		Now:         c.ParamNow(),
	})
	c.cfg.Metrics.Flushed(ctx, Completions, len(batch), c.Now().Sub(start), err)
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
func (c *Completer) releaseUnfinished(batch []completion.Tracked[ports.Completion], completed int) {
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
// later one of its pair (see StalledAmong).
func distinctRows(batch []completion.Tracked[ports.Completion]) int {
	seen := map[uuid.UUID]struct{}{}
	for _, t := range batch {
		for _, id := range t.Item.WorkIDs {
			seen[id] = struct{}{}
		}
	}
	return len(seen)
}

func (c *Completer) flushFailures(ctx context.Context, batch []completion.Tracked[ports.Failure]) error {
	start := c.Now()
	err := c.cfg.Cursors.WorkFail(ctx, &ports.WorkFailParams{
		InstanceID: c.cfg.InstanceID,
		Failures:   itemsOf(batch),
		DebugMode:  c.cfg.DebugMode,
		Now:        c.ParamNow(),
	})
	c.cfg.Metrics.Flushed(ctx, Failures, len(batch), c.Now().Sub(start), err)
	return err
}

func (c *Completer) completionsAcknowledged(batch []completion.Tracked[ports.Completion]) {
	ranges := make([]dedup.Range, len(batch))
	for i, t := range batch {
		ranges[i] = dedup.Range{Key: dedup.Key{Stream: t.Item.StreamID, Perspective: t.Item.Perspective}, IDs: t.Item.WorkIDs}
	}
	// One ActivateRetentionFor for the batch: one hold of the dedup lock
	// the drains contend for, not one per completion.
	c.acknowledge(trackingIDs(batch), ranges)
	if c.cfg.OnCompleted != nil {
		c.cfg.OnCompleted()
	}
	if h := c.cfg.OnAcknowledged; h != nil {
		h(itemsOf(batch), nil)
	}
}

func (c *Completer) failuresAcknowledged(batch []completion.Tracked[ports.Failure]) {
	ranges := make([]dedup.Range, 0, len(batch))
	for _, t := range batch {
		f := t.Item
		k := pair.Key{Stream: f.StreamID, Perspective: f.Perspective}
		ranges = append(ranges, dedup.Range{Key: k.Dedup(), IDs: f.AppliedWorkIDs})
		if c.cfg.OnFailureAcked != nil {
			c.cfg.OnFailureAcked(k)
		}
	}
	c.acknowledge(trackingIDs(batch), ranges)
	if h := c.cfg.OnAcknowledged; h != nil {
		h(nil, itemsOf(batch))
	}
}

// acknowledge settles acknowledged items by identity and starts the dedup
// retention of their work rows.
func (c *Completer) acknowledge(trackingIDs []uuid.UUID, rows []dedup.Range) {
	c.strategy.MarkAcknowledged(trackingIDs)
	c.strategy.ClearAcknowledged()
	c.cache.ActivateRetentionFor(rows)
	for _, r := range rows {
		c.settleStalled(r.Key, r.IDs)
	}
	if c.cfg.OnLanded != nil {
		for _, r := range rows {
			c.cfg.OnLanded(pair.Key{Stream: r.Key.Stream, Perspective: r.Key.Perspective})
		}
	}
	c.SignalProgress()
}

// Progressed returns a channel closed at the next acknowledged flush or
// saved model.
func (c *Completer) Progressed() <-chan struct{} {
	c.progressMu.Lock()
	defer c.progressMu.Unlock()
	return c.progress
}

func (c *Completer) SignalProgress() {
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
type instantReporter struct{ c *Completer }

func (r instantReporter) Complete(ctx context.Context, items []ports.Completion) error {
	tracked := track(items)
	err := r.c.flushCompletions(ctx, tracked)
	r.c.reported(ctx, "reporting completions", err, len(items), func() []any { return pair.Attrs(items[0].StreamID, items[0].Perspective) })
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
	r.c.reported(ctx, "reporting failures", err, len(items), func() []any { return pair.Attrs(items[0].StreamID, items[0].Perspective) })
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
func (c *Completer) reported(ctx context.Context, op string, err error, n int, attrs func() []any) {
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
