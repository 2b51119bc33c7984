package core

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/queue"
	"github.com/vantage-go/vantage/core/internal/startstop"
)

// notifications tell whether notifications arrive, and how many did.
type notifications interface {
	Healthy() bool
	Heard() uint64
}

// consumers are the MaxConcurrentDrainConsumers loops that take stream ids
// from the drain queue, gather them into a batch (see pace.go) and hand the
// batch to the drain; a consumer with nothing to drain runs an idle tick
// (buffered completions are flushed, an empty poll is counted).
type consumers struct {
	*engine
	startstop.Base
	queue    *queue.Queue
	listener notifications
	activity *activity
	wakes    []chan struct{}
	// arrivals and flights pace the gathering of a batch.
	arrivals *arrivals
	flights  *flights
	// drain drains one batch of streams; tick runs when a consumer found
	// nothing to drain.
	drain func(ctx context.Context, ids []uuid.UUID)
	tick  func(ctx context.Context)
	// sendHeld sends the completions the flusher holds without waiting for
	// its coalescing window, which lasts coalesce (see settle).
	sendHeld func()
	coalesce time.Duration
}

// Start launches the consumer loops. They take batches until Stop, or
// until runCtx ends; the batches run under workCtx, which outlives runCtx
// so a batch in flight at Stop finishes.
func (c *consumers) Start(runCtx, workCtx context.Context) {
	ctx, wg, ok := c.StartInit(runCtx)
	if !ok {
		return
	}
	for i, wake := range c.wakes {
		wg.Go(func() { c.loop(ctx, workCtx, i, wake) })
	}
}

// wakeAll wakes every consumer now. Redundant calls coalesce.
func (c *consumers) wakeAll() {
	for _, w := range c.wakes {
		base.Signal(w)
	}
}

func (c *consumers) idleTimeout() time.Duration {
	if c.listener.Healthy() {
		return max(c.opts.PollingInterval, c.opts.NotifyHealthyPollingInterval)
	}
	return c.opts.PollingInterval
}

// loop waits for any of: stream ids in the drain queue, a wake
// (notification or RequestImmediatePoll), or the idle timeout; then it drains
// a batch or runs an idle tick. id numbers the consumer.
func (c *consumers) loop(runCtx, workCtx context.Context, id int, wake chan struct{}) {
	t := c.Clock.NewTimer(c.idleTimeout())
	defer t.Stop()
	var lastWakes uint64
	for {
		ids := c.queue.Take(c.opts.DrainBatcher.MaxSize)
		if len(ids) == 0 {
			timedOut := false
			base.ResetTimer(t, c.idleTimeout())
			select {
			case <-runCtx.Done():
				return
			case <-c.queue.Signal():
			case <-wake:
			case <-t.C():
				timedOut = true
			}
			ids = c.queue.Take(c.opts.DrainBatcher.MaxSize)
			if len(ids) == 0 {
				c.idleTick(workCtx, timedOut)
				continue
			}
		}
		if c.wantWindow(len(ids), &lastWakes) {
			if wait, ended := c.flights.gather(c.Now(), c.arrivals.interval()); wait > 0 {
				ids = c.collectWindow(runCtx, ids, wait, ended)
			}
		}
		c.flights.start(id, c.Now())
		c.drain(workCtx, ids)
		if last := c.flights.end(id, c.Now()); last {
			c.settle()
		}
		if runCtx.Err() != nil {
			return
		}
	}
}

// settle runs when the last batch in flight ended. The completions the
// batches left with the flusher are sent at once when waiting would
// gather no more of them (see sendNow).
func (c *consumers) settle() {
	if sendNow(c.queue.Len(), c.arrivals.interval(), c.coalesce) {
		c.sendHeld()
	}
}

// sendNow reports whether the completions of a worker with no batch in
// flight should go without waiting for a coalescing window of length
// window: when no stream is queued and streams arrive no more often than
// the window lasts (every, the average gap between arrivals, 0 while
// unknown). Otherwise the window gathers the completions of the batches
// to come into one flush, which under load keeps their round trips few;
// when arrivals are sparser than the window it gathers nothing anyway, so
// sending at once costs no round trip and spares the wait: the end of a
// catch-up, a quiet worker's event.
func sendNow(queued int, every, window time.Duration) bool {
	return queued == 0 && (every == 0 || every >= window)
}

// wantWindow reports whether a consumer holding n ids may gather more
// before it drains them (how long is the flights' to say). Gathering
// coalesces bursts of live appends, so it is skipped where no burst can be
// coming: when n reached MaxSize; while the claim loop reports a backlog
// larger than what this instance holds (the ids came in bulk from a claim);
// for streams taken over from an abandoned instance (they have waited a
// stale threshold already); and, while notifications are healthy, when no
// notification arrived since this consumer's last batch (a backlog being
// worked through or a periodic claim: nothing to wait for). lastWakes is
// the consumer's notification count at its last batch; wantWindow updates
// it.
func (c *consumers) wantWindow(n int, lastWakes *uint64) bool {
	wakes := c.listener.Heard()
	live := wakes != *lastWakes || !c.listener.Healthy()
	*lastWakes = wakes
	return n < c.opts.DrainBatcher.MaxSize && !c.queue.Backlog() && !c.queue.TakeUrgent() && live
}

// collectWindow extends a batch with the streams that arrive for at most
// wait, until ended is closed (the batch it waited behind ended), and
// within the DrainBatcher bounds: SlidingWindow after the latest arrival,
// MaxWait after the first, at most MaxSize ids.
func (c *consumers) collectWindow(ctx context.Context, ids []uuid.UUID, wait time.Duration, ended <-chan struct{}) []uuid.UUID {
	first := c.Now()
	last := first
	defer c.Signals.OnWindow(0, true)
	for len(ids) < c.opts.DrainBatcher.MaxSize {
		now := c.Now()
		remaining := min(wait-now.Sub(first), c.opts.DrainBatcher.SlidingWindow-now.Sub(last), c.opts.DrainBatcher.MaxWait-now.Sub(first))
		if remaining <= 0 {
			return ids
		}
		t := c.Clock.NewTimer(remaining)
		select {
		case <-ctx.Done():
			t.Stop()
			return ids
		case <-ended:
			t.Stop()
			return append(ids, c.queue.Take(c.opts.DrainBatcher.MaxSize-len(ids))...)
		case <-t.C():
			return ids
		case <-c.queue.Signal():
			t.Stop()
			if more := c.queue.Take(c.opts.DrainBatcher.MaxSize - len(ids)); len(more) > 0 {
				ids = append(ids, more...)
				last = c.Now()
				c.Signals.OnWindow(len(more), false)
				if c.queue.TakeUrgent() {
					return ids // taken over from an abandoned instance: drain now
				}
			}
		}
	}
	return ids
}

// idleTick runs the consumer's idle work and records an empty poll when the
// idle timeout expired.
func (c *consumers) idleTick(ctx context.Context, timedOut bool) {
	c.tick(ctx)
	if timedOut {
		c.activity.poll(false)
	}
	if h := c.opts.Hooks.OnBatchCycleComplete; h != nil {
		h(BatchCycle{})
	}
}

// activity tracks whether the worker is idle: no work for
// IdleThresholdPolls consecutive polls, and no batch being drained.
type activity struct {
	hooks     *Hooks
	threshold int64
	idle      atomic.Bool
	// emptyPolls counts consecutive polls that found no work, across
	// consumers.
	emptyPolls atomic.Int64
	// busy counts the batches being drained: the worker is not idle while
	// one runs, however long it takes.
	busy atomic.Int64
}

func newActivity(o *Options) *activity {
	a := &activity{hooks: &o.Hooks, threshold: int64(o.IdleThresholdPolls)}
	a.idle.Store(true)
	return a
}

// batchStarted records a poll that found work and counts the batch as
// being drained until the returned function is called.
func (a *activity) batchStarted() (done func()) {
	a.poll(true)
	a.busy.Add(1)
	return func() { a.busy.Add(-1) }
}

func (a *activity) poll(hasWork bool) {
	if hasWork {
		a.emptyPolls.Store(0)
		if a.idle.CompareAndSwap(true, false) {
			if h := a.hooks.OnWorkProcessingStarted; h != nil {
				h()
			}
		}
		return
	}
	n := a.emptyPolls.Add(1)
	// A batch still draining (a slow apply, say) keeps the worker busy
	// however many polls other consumers find empty.
	if n >= a.threshold && a.busy.Load() == 0 && a.idle.CompareAndSwap(false, true) {
		if h := a.hooks.OnWorkProcessingIdle; h != nil {
			h()
		}
	}
}
