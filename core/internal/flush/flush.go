// Package flush implements the engine's BatchFlusher: a bounded FIFO buffer
// drained by one goroutine that hands items to a flush function in batches,
// retrying a failing batch in place before giving up on it.
//
// # Batching
//
// Once the loop sees a first item it coalesces more until the batch reaches
// ImmediateAt items (or MaxBatch), or until the Coalesce window elapses,
// whichever comes first; Flush and Close end the window at once. A batch
// holds at most MaxBatch items, and items keep their Add order across
// batches.
//
// # Failures
//
// A failing flush is called again with the same batch, in the same order,
// after the exponential backoff of Options.Retry, up to MaxAttempts calls
// in all. The next batch waits meanwhile, so nothing is reordered. After
// the last failure the batch is dropped: OnDropped is called and an Error
// is logged (each retry and each drop goes to Options.Faults when set, so
// that the owner logs them rate-limited). A permanent error (retry.Permanent: the backend refused the
// batch as invalid) is not retried, since the same batch would be refused
// again: a batch of several items is halved, and each half flushed in turn,
// so that only the items the backend refuses are dropped, each after its
// own call, and the others land. For the engine a drop is safe but slow: the
// rows stay leased until their lease expires and are then re-delivered, so
// flush functions must be idempotent.
//
// # Lifecycle
//
// New is inert. Start launches the loop; Close stops accepting items, drains
// what is queued within DrainTimeout and then cancels the flush in progress,
// dropping what is left. Every wait (coalescing, backoff, drain) uses the
// injected ports.Clock.
package flush

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/vantage-go/vantage/core/internal/retry"
	"github.com/vantage-go/vantage/ports"
)

// Defaults of Options, those of the engine's completion flusher.
const (
	MaxBatchDefault     = 1000
	CoalesceDefault     = 25 * time.Millisecond
	ImmediateAtDefault  = 500
	CapacityDefault     = 20_000
	MaxAttemptsDefault  = 5
	DrainTimeoutDefault = 5 * time.Second
)

// RetryDefault is the default of Options.Retry: 100ms, doubling, at most
// 5s.
var RetryDefault = retry.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2}

// ErrDrainTimeout is returned by Close when queued items could not be
// flushed within Options.DrainTimeout; they were dropped.
var ErrDrainTimeout = errors.New("drain timeout")

// Options configure a Flusher of items of type T. The zero value is valid:
// every zero field takes its default. Negative values are rejected by New.
type Options[T any] struct {
	// MaxBatch is the most items handed to one flush call. Defaults to
	// MaxBatchDefault.
	MaxBatch int
	// Coalesce is how long the loop waits for more items after the first
	// one of a batch. Defaults to CoalesceDefault.
	Coalesce time.Duration
	// ImmediateAt ends the coalescing window as soon as this many items are
	// queued; a value above MaxBatch acts as MaxBatch. Defaults to
	// ImmediateAtDefault.
	ImmediateAt int
	// Capacity bounds the items queued and not yet taken into a batch; Add
	// blocks while the buffer is full. Defaults to CapacityDefault.
	Capacity int
	// MaxAttempts is how many times one batch is handed to flush before it
	// is dropped; 1 disables retries. A flush that fails with a permanent
	// error (see retry.Permanent) is never retried, whatever MaxAttempts
	// is: the batch is halved until the refused items are alone, and those
	// are dropped. Defaults to MaxAttemptsDefault.
	MaxAttempts int
	// Retry is the wait between the sends of a failed batch. Its zero
	// Initial, Max and Multiplier default to RetryDefault's.
	Retry retry.Backoff
	// DrainTimeout bounds how long Close lets the loop flush queued items
	// before cancelling it. Defaults to DrainTimeoutDefault.
	DrainTimeout time.Duration
	// Clock drives the coalescing window, the retry backoff and the drain
	// timeout. Defaults to ports.SystemClock.
	Clock ports.Clock
	// Logger receives retry warnings, drop errors (unless Faults is set)
	// and debug lifecycle messages, each with the attribute
	// flusher=<name>; it names the component itself, since a JSON line
	// carrying a key twice loses one of the values downstream. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// Faults, when set, is told of every failed flush call that is
	// retried, every batch dropped and every flush call that succeeded, in
	// place of the retry warnings and drop errors logged to Logger, so
	// that the owner logs them with its other background failures: once,
	// then summed up, and their recovery. Defaults to logging each retry
	// and drop to Logger.
	Faults Faults
	// OnFlushed, when set, is called with every batch flush accepted. It
	// runs on the loop goroutine before the next batch starts, so it must
	// be quick, and must not call Close.
	OnFlushed func(batch []T)
	// OnDropped, when set, is called with every batch given up on, with the
	// last error. It runs on the loop goroutine like OnFlushed.
	OnDropped func(batch []T, err error)
	// Weight, when set, weighs an item for WaitBelow (the rows a completion
	// settles, say). Defaults to 1 per item.
	Weight func(item T) int
	// OnRetry, when set, is called before each retry of a failed batch,
	// with the batch, the number of the attempt that failed and its error.
	// It runs on the loop goroutine like OnFlushed.
	OnRetry func(batch []T, attempt int, err error)
}

// Faults is told what goes wrong in a Flusher (see Options.Faults). Its
// methods are called on the loop goroutine, so they must be quick. op names
// the flusher's operation: "flushing <name>"; attrs start with
// flusher=<name>.
type Faults interface {
	// Fail is told of a failed flush call whose batch is tried again;
	// attrs describe the attempt (attempt, max_attempts, batch_size,
	// retry_in).
	Fail(ctx context.Context, op string, err error, attrs ...any)
	// OK is told of every flush call that succeeded.
	OK(ctx context.Context, op string)
	// Drop is told of a batch of n items given up on after err (the error
	// of its last call, or the cause of the flusher's stop); msg says what
	// becomes of the items, and attrs describe the batch.
	Drop(ctx context.Context, op, msg string, n int, err error, attrs ...any)
}

// logFaults is the Faults of a Flusher without Options.Faults: every retry
// is logged at Warn and every drop at Error, to Options.Logger (the attrs
// name the flusher).
type logFaults struct{ logger *slog.Logger }

func (l logFaults) Fail(ctx context.Context, _ string, err error, attrs ...any) {
	l.logger.WarnContext(ctx, "flush failed; retrying the same batch", append(attrs, slog.String("error", err.Error()))...)
}

func (l logFaults) OK(context.Context, string) {}

func (l logFaults) Drop(ctx context.Context, _, msg string, _ int, err error, attrs ...any) {
	l.logger.ErrorContext(ctx, msg, append(attrs, slog.String("error", err.Error()))...)
}

// Flusher buffers items and flushes them in batches on one goroutine. The
// zero value is not usable; call New. Safe for concurrent use.
type Flusher[T any] struct {
	name    string
	op      string     // "flushing <name>", for Faults
	opts    Options[T] // defaults applied
	backoff retry.Backoff
	flush   func(ctx context.Context, batch []T) error
	logger  *slog.Logger
	faults  Faults
	// threshold ends a coalescing window: min(ImmediateAt, MaxBatch).
	threshold int

	closing chan struct{} // closed by the first Close; wakes blocked Adds
	wake    chan struct{} // buffer of one; nudges the loop

	mu     sync.Mutex
	queue  []T // accepted, not yet taken into a batch
	closed bool
	cancel context.CancelCauseFunc
	done   chan struct{} // nil until started; closed when the loop returns
	space  chan struct{} // closed and replaced whenever the loop takes items
	// The counters number items in Add order, which is also flush order.
	enqueued uint64 // accepted by Add
	taken    uint64 // taken into a batch by the loop
	settled  uint64 // flushed or dropped
	force    uint64 // the loop skips coalescing while taken < force
	// unsettledWeight is the Weight of the items accepted and not yet
	// settled; lighter is closed and replaced whenever it decreases.
	unsettledWeight int
	lighter         chan struct{}
	// stopDropped counts items dropped because the loop was cancelled.
	stopDropped int
	waiters     []*waiter
}

// Busy reports whether items are queued or being flushed (accepted but not
// yet flushed or dropped).
func (f *Flusher[T]) Busy() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.settled < f.enqueued
}

// waiter is a Flush call, or an AfterSettled callback, waiting for the
// items before target to settle.
type waiter struct {
	target uint64
	err    error // set under Flusher.mu before ch is closed
	ch     chan struct{}
	fn     func() // set for AfterSettled; ch is nil then
}

// New returns a Flusher named name (used in logs and errors) that hands
// batches to flush. flush gets the loop's context, cancelled only when Close
// gives up draining, and must return promptly once it is. It must not modify
// batch; OnFlushed and OnDropped may keep it. New returns an error naming
// the field for an invalid option.
func New[T any](name string, opts Options[T], flush func(ctx context.Context, batch []T) error) (*Flusher[T], error) {
	var errs []error
	if name == "" {
		errs = append(errs, errors.New("flush.New: name must not be empty"))
	}
	if flush == nil {
		errs = append(errs, errors.New("flush.New: flush func must not be nil"))
	}
	num := func(field string, v *int, def int) {
		if *v < 0 {
			errs = append(errs, fmt.Errorf("flush.Options.%s must not be negative, got %d", field, *v))
		}
		*v = cmp.Or(*v, def)
	}
	dur := func(field string, v *time.Duration, def time.Duration) {
		if *v < 0 {
			errs = append(errs, fmt.Errorf("flush.Options.%s must not be negative, got %s", field, *v))
		}
		*v = cmp.Or(*v, def)
	}
	// opts is a copy: filling in defaults never touches the caller's value.
	num("MaxBatch", &opts.MaxBatch, MaxBatchDefault)
	dur("Coalesce", &opts.Coalesce, CoalesceDefault)
	num("ImmediateAt", &opts.ImmediateAt, ImmediateAtDefault)
	num("Capacity", &opts.Capacity, CapacityDefault)
	num("MaxAttempts", &opts.MaxAttempts, MaxAttemptsDefault)
	dur("DrainTimeout", &opts.DrainTimeout, DrainTimeoutDefault)
	opts.Retry.Initial = cmp.Or(opts.Retry.Initial, RetryDefault.Initial)
	opts.Retry.Max = cmp.Or(opts.Retry.Max, RetryDefault.Max)
	opts.Retry.Multiplier = cmp.Or(opts.Retry.Multiplier, RetryDefault.Multiplier)
	if err := opts.Retry.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("flush.Options.Retry: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	opts.Clock = cmp.Or[ports.Clock](opts.Clock, ports.SystemClock{})
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	logger := opts.Logger.With(slog.String("flusher", name))
	faults := opts.Faults
	if faults == nil {
		faults = logFaults{opts.Logger}
	}
	return &Flusher[T]{
		name:      name,
		op:        "flushing " + name,
		opts:      opts,
		backoff:   opts.Retry,
		flush:     flush,
		logger:    logger,
		faults:    faults,
		threshold: min(opts.ImmediateAt, opts.MaxBatch),
		closing:   make(chan struct{}),
		wake:      make(chan struct{}, 1),
		space:     make(chan struct{}),
		lighter:   make(chan struct{}),
	}, nil
}

// Start launches the loop goroutine. It is idempotent. The loop keeps ctx's
// values but not its cancellation: only Close stops it. Start returns
// ports.ErrClosed after Close.
func (f *Flusher[T]) Start(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return fmt.Errorf("starting %s flusher: %w", f.name, ports.ErrClosed)
	}
	f.startLocked(ctx)
	return nil
}

func (f *Flusher[T]) startLocked(ctx context.Context) {
	if f.done != nil {
		return
	}
	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	done := make(chan struct{})
	f.cancel, f.done = cancel, done
	go func() {
		defer close(done)
		f.run(runCtx)
	}()
}

// Add queues items in order. It blocks while the buffer lacks room for them
// and returns ctx's error if ctx ends first, or ports.ErrClosed once Close
// was called. Up to Capacity items are queued all or nothing; a longer slice
// is queued in Capacity-sized chunks, so an error may leave a prefix queued.
// Items are accepted before Start too; they wait for the loop.
func (f *Flusher[T]) Add(ctx context.Context, items ...T) error {
	for {
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			return fmt.Errorf("adding to %s flusher: %w", f.name, ports.ErrClosed)
		}
		chunk := items[:min(len(items), f.opts.Capacity)]
		if f.opts.Capacity-len(f.queue) >= len(chunk) {
			f.queue = append(f.queue, chunk...)
			f.enqueued += uint64(len(chunk))
			f.unsettledWeight += f.weight(chunk)
			f.mu.Unlock()
			f.signal()
			if items = items[len(chunk):]; len(items) == 0 {
				return nil
			}
			continue
		}
		space := f.space
		f.mu.Unlock()
		select {
		case <-space:
		case <-f.closing:
			return fmt.Errorf("adding to %s flusher: %w", f.name, ports.ErrClosed)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// weight returns the Weight of items.
func (f *Flusher[T]) weight(items []T) int {
	if f.opts.Weight == nil {
		return len(items)
	}
	w := 0
	for _, it := range items {
		w += f.opts.Weight(it)
	}
	return w
}

// WaitBelow waits until the items accepted and not yet flushed or dropped
// weigh less than limit (see Options.Weight), calling waiting (when not
// nil) first when it has to wait. While it waits, the items queued are sent
// without waiting for the coalescing window. Items dropped count as settled,
// so a failing backend does not hold it forever. It returns ctx's error if
// ctx ends first.
func (f *Flusher[T]) WaitBelow(ctx context.Context, limit int, waiting func()) error {
	for first := true; ; first = false {
		f.mu.Lock()
		if f.unsettledWeight < limit {
			f.mu.Unlock()
			return nil
		}
		f.force = max(f.force, f.enqueued)
		lighter := f.lighter
		f.mu.Unlock()
		if first && waiting != nil {
			waiting()
		}
		f.signal()
		select {
		case <-lighter:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Coalesce returns how long the loop waits for more items after the first
// one of a batch (Options.Coalesce).
func (f *Flusher[T]) Coalesce() time.Duration { return f.opts.Coalesce }

// Hurry ends the current coalescing window without waiting: the items
// queued before the call are sent as soon as the loop is free, not when the
// window elapses. It does nothing when nothing is pending or after Close.
func (f *Flusher[T]) Hurry() {
	f.mu.Lock()
	if f.closed || f.settled >= f.enqueued {
		f.mu.Unlock()
		return
	}
	f.force = max(f.force, f.enqueued)
	f.mu.Unlock()
	f.signal()
}

// Flush ends the current coalescing window and waits until every item
// queued before the call was flushed or dropped (OnFlushed and OnDropped have
// run by then). It returns an error if any of them was dropped, ctx's error
// if ctx ends first, and ports.ErrClosed after Close. Before Start it waits
// for Start.
func (f *Flusher[T]) Flush(ctx context.Context) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return fmt.Errorf("flushing %s flusher: %w", f.name, ports.ErrClosed)
	}
	if f.settled >= f.enqueued {
		f.mu.Unlock()
		return nil
	}
	w := &waiter{target: f.enqueued, ch: make(chan struct{})}
	f.waiters = append(f.waiters, w)
	f.force = max(f.force, w.target)
	f.mu.Unlock()
	f.signal()

	select {
	case <-w.ch:
		return w.err
	case <-ctx.Done():
		f.mu.Lock()
		f.waiters = slices.DeleteFunc(f.waiters, func(x *waiter) bool { return x == w })
		f.mu.Unlock()
		return ctx.Err()
	}
}

// AfterSettled calls fn once every item queued before the call was flushed
// or dropped: at once, on the calling goroutine, when nothing is pending;
// otherwise on the loop goroutine, after the OnFlushed or OnDropped call of
// the batch that settles the last of them. Unlike Flush it does not end the
// coalescing window, and fn runs even after Close (Close settles everything
// queued). fn must be quick and must not call Close.
func (f *Flusher[T]) AfterSettled(fn func()) {
	f.mu.Lock()
	if f.settled >= f.enqueued {
		f.mu.Unlock()
		fn()
		return
	}
	f.waiters = append(f.waiters, &waiter{target: f.enqueued, fn: fn})
	f.mu.Unlock()
}

// Close stops accepting items, lets the loop flush everything queued (even
// if Start was never called) and waits for it to return. If that takes
// longer than DrainTimeout, or ctx ends first, it cancels the loop, whose
// remaining items are dropped, waits for it to return and reports
// ErrDrainTimeout or ctx's error. Close is idempotent and safe to call
// concurrently; a Close after a completed one returns nil. It must not be
// called from OnFlushed or OnDropped.
func (f *Flusher[T]) Close(ctx context.Context) error {
	f.mu.Lock()
	if !f.closed {
		f.closed = true
		close(f.closing)
		if len(f.queue) > 0 {
			f.startLocked(ctx) // drain what was queued before Start
		}
	}
	done, cancel := f.done, f.cancel
	f.mu.Unlock()
	if done == nil {
		return nil // never started, nothing queued
	}
	f.signal()

	select {
	case <-done:
		return nil
	default:
	}
	timer := f.opts.Clock.NewTimer(f.opts.DrainTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-timer.C():
		err := fmt.Errorf("closing %s flusher: queued items not flushed within %s: %w", f.name, f.opts.DrainTimeout, ErrDrainTimeout)
		cancel(err)
		return f.awaitStopped(done, err)
	case <-ctx.Done():
		cancel(context.Cause(ctx))
		return f.awaitStopped(done, ctx.Err())
	}
}

// awaitStopped waits for the cancelled loop and returns err, or nil if the
// loop had drained everything before the cancellation could drop anything.
func (f *Flusher[T]) awaitStopped(done <-chan struct{}, err error) error {
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopDropped == 0 {
		return nil
	}
	return err
}

func (f *Flusher[T]) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *Flusher[T]) run(ctx context.Context) {
	f.logger.DebugContext(ctx, "flusher started")
	for {
		batch, ok := f.next(ctx)
		if !ok {
			break
		}
		f.flushBatch(ctx, batch)
	}
	if ctx.Err() != nil {
		f.dropRemaining(ctx)
	}
	f.logger.DebugContext(ctx, "flusher stopped")
}

// next waits for the next batch. It reports false once the Flusher is
// closed and empty, or ctx is done.
func (f *Flusher[T]) next(ctx context.Context) ([]T, bool) {
	var (
		timer   ports.Timer
		timerC  <-chan time.Time
		elapsed bool
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if ctx.Err() != nil {
			return nil, false
		}
		f.mu.Lock()
		n := len(f.queue)
		if n > 0 && (elapsed || f.closed || f.force > f.taken || n >= f.threshold) {
			batch := f.takeLocked(f.opts.MaxBatch)
			f.mu.Unlock()
			return batch, true
		}
		if n == 0 && f.closed {
			f.mu.Unlock()
			return nil, false
		}
		f.mu.Unlock()
		if n > 0 && timer == nil {
			timer = f.opts.Clock.NewTimer(f.opts.Coalesce)
			timerC = timer.C()
		}
		select {
		case <-f.wake:
		case <-timerC:
			elapsed = true
		case <-ctx.Done():
		}
	}
}

// takeLocked removes up to limit items from the head of the queue and
// returns them in a new slice.
func (f *Flusher[T]) takeLocked(limit int) []T {
	k := min(len(f.queue), limit)
	batch := make([]T, k)
	copy(batch, f.queue)
	clear(f.queue[:k]) // let the GC reclaim what the items point to
	f.queue = f.queue[k:]
	if len(f.queue) == 0 {
		f.queue = nil
	}
	f.taken += uint64(k)
	close(f.space)
	f.space = make(chan struct{})
	return batch
}

// flushBatch calls flush with batch until it succeeds, MaxAttempts calls
// failed, one failed with a permanent error, or ctx is done.
func (f *Flusher[T]) flushBatch(ctx context.Context, batch []T) {
	// No jitter, so waits are deterministic; MaxAttempts bounds the retries.
	bo := f.backoff.New(f.opts.Clock)
	for attempt := 1; ; attempt++ {
		err := f.flush(ctx, batch)
		if err == nil {
			f.faults.OK(ctx, f.op)
			if f.opts.OnFlushed != nil {
				f.opts.OnFlushed(batch)
			}
			f.settle(batch, nil)
			return
		}
		if retry.Permanent(err) {
			if len(batch) > 1 {
				// The backend refuses the whole call for one bad item:
				// halve the batch to find it, so the others still land.
				mid := len(batch) / 2
				f.flushBatch(ctx, batch[:mid])
				f.flushBatch(ctx, batch[mid:])
				return
			}
			f.refused(ctx, batch, attempt, err)
			return
		}
		if attempt >= f.opts.MaxAttempts || ctx.Err() != nil {
			f.drop(ctx, batch, attempt, err)
			return
		}
		wait := bo.NextBackOff()
		if f.opts.OnRetry != nil {
			f.opts.OnRetry(batch, attempt, err)
		}
		f.faults.Fail(ctx, f.op, err,
			slog.String("flusher", f.name),
			slog.Int("attempt", attempt),
			slog.Int("max_attempts", f.opts.MaxAttempts),
			slog.Int("batch_size", len(batch)),
			slog.Duration("retry_in", wait))
		if !f.sleep(ctx, wait) {
			f.drop(ctx, batch, attempt, err)
			return
		}
	}
}

// sleep waits d on the injected clock. It reports false if ctx ended first.
func (f *Flusher[T]) sleep(ctx context.Context, d time.Duration) bool {
	timer := f.opts.Clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// refused gives up on batch at once: its last call failed with err, a
// permanent error that any retry would meet again.
func (f *Flusher[T]) refused(ctx context.Context, batch []T, attempts int, err error) {
	f.giveUp(ctx, batch, attempts, err, "dropping batch: the flush failed with a permanent error, not retried; "+
		"its rows stay leased until their lease expires and are re-delivered")
}

// drop gives up on batch after attempts failed calls, the last with err.
func (f *Flusher[T]) drop(ctx context.Context, batch []T, attempts int, err error) {
	f.giveUp(ctx, batch, attempts, err, "dropping batch after its last flush attempt; "+
		"its rows stay leased until their lease expires and are re-delivered")
}

// giveUp drops batch after attempts failed calls, the last with err, and
// reports msg to Faults.
func (f *Flusher[T]) giveUp(ctx context.Context, batch []T, attempts int, err error, msg string) {
	attrs := []any{
		slog.String("flusher", f.name),
		slog.Int("batch_size", len(batch)),
		slog.Int("attempts", attempts),
	}
	if cause := context.Cause(ctx); cause != nil {
		attrs = append(attrs, slog.String("stopped", cause.Error()))
		f.mu.Lock()
		f.stopDropped += len(batch)
		f.mu.Unlock()
	}
	f.faults.Drop(ctx, f.op, msg, len(batch), err, attrs...)
	if f.opts.OnDropped != nil {
		f.opts.OnDropped(batch, err)
	}
	f.settle(batch, fmt.Errorf("flushing %s flusher: dropped a batch of %d after %d attempts: %w", f.name, len(batch), attempts, err))
}

// dropRemaining drops every item still queued once the loop was cancelled.
func (f *Flusher[T]) dropRemaining(ctx context.Context) {
	f.mu.Lock()
	rest := f.takeLocked(len(f.queue))
	f.stopDropped += len(rest)
	f.mu.Unlock()
	if len(rest) == 0 {
		return
	}
	err := context.Cause(ctx)
	f.faults.Drop(ctx, f.op, "dropping queued items: flusher stopped before flushing them; "+
		"their rows stay leased until their lease expires and are re-delivered",
		len(rest), err, slog.String("flusher", f.name), slog.Int("batch_size", len(rest)))
	if f.opts.OnDropped != nil {
		f.opts.OnDropped(rest, err)
	}
	f.settle(rest, fmt.Errorf("flushing %s flusher: dropped %d queued items: %w", f.name, len(rest), err))
}

// settle records that the next items, batch, were flushed (err nil) or
// dropped, releases the Flush and WaitBelow calls waiting for them and then
// runs the AfterSettled callbacks they satisfy, outside the lock.
func (f *Flusher[T]) settle(batch []T, err error) {
	var due []func()
	w := f.weight(batch)
	f.mu.Lock()
	start := f.settled
	f.settled += uint64(len(batch))
	if w > 0 {
		f.unsettledWeight -= w
		close(f.lighter)
		f.lighter = make(chan struct{})
	}
	keep := f.waiters[:0]
	for _, w := range f.waiters {
		if err != nil && w.err == nil && w.target > start {
			w.err = err
		}
		switch {
		case w.target > f.settled:
			keep = append(keep, w)
		case w.fn != nil:
			due = append(due, w.fn)
		default:
			close(w.ch)
		}
	}
	clear(f.waiters[len(keep):])
	f.waiters = keep
	f.mu.Unlock()
	for _, fn := range due {
		fn()
	}
}
