// Package consume runs the consumers: the loops that take stream ids from
// the drain queue, gather them into batches behind the one in flight (a
// group commit) and hand each batch to the drain, and the activity that
// tells whether the worker is idle.
package consume

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/queue"
	"github.com/vantage-go/vantage/core/internal/startstop"
)

// Notifications tell whether notifications arrive, and how many did.
type Notifications interface {
	Healthy() bool
	Heard() uint64
}

// Config is what the Consumers read.
type Config struct {
	// PollingInterval is how long a consumer with nothing to drain waits
	// before an idle tick; NotifyHealthyPollingInterval while
	// notifications arrive, if longer.
	PollingInterval              time.Duration
	NotifyHealthyPollingInterval time.Duration
	// MaxSize bounds the stream ids of one batch; SlidingWindow and
	// MaxWait the gathering of more behind a batch in flight (after the
	// latest arrival, after the first).
	MaxSize       int
	SlidingWindow time.Duration
	MaxWait       time.Duration
	// Coalesce is how long the completions flusher gathers completions
	// before it sends them (see settle).
	Coalesce time.Duration
	// OnIdleTick, when set, runs after each idle tick.
	OnIdleTick func()
}

// Funcs are what the Consumers call of the rest of the engine.
type Funcs struct {
	// Drain drains one batch of streams.
	Drain func(ctx context.Context, ids []uuid.UUID)
	// Tick runs when a consumer found nothing to drain.
	Tick func(ctx context.Context)
	// SendHeld sends the completions the flusher holds without waiting for
	// its coalescing window.
	SendHeld func()
}

// Consumers are the loops that take stream ids from the drain queue,
// gather them into a batch (see pace.go) and hand the batch to the drain;
// a consumer with nothing to drain runs an idle tick (buffered
// completions are flushed, an empty poll is counted).
type Consumers struct {
	*base.Env
	startstop.Base
	cfg      Config
	fn       Funcs
	queue    *queue.Queue
	notes    Notifications
	activity *Activity
	wakes    []chan struct{}
	// arrivals and flights pace the gathering of a batch.
	arrivals *Arrivals
	flights  *flights
}

// New returns the Consumers of env configured by cfg: one loop per wake
// channel (a signal on it wakes that loop), taking ids from drainQ, whose
// arrivals arr measures, and counting idleness in activity.
func New(env *base.Env, cfg Config, fn Funcs, drainQ *queue.Queue, notes Notifications, wakes []chan struct{}, arr *Arrivals, activity *Activity) *Consumers {
	return &Consumers{Env: env, cfg: cfg, fn: fn, queue: drainQ, notes: notes, wakes: wakes, arrivals: arr, activity: activity, flights: newFlights()}
}

// Start launches the consumer loops. They take batches until Stop, or
// until runCtx ends; the batches run under workCtx, which outlives runCtx
// so a batch in flight at Stop finishes.
func (c *Consumers) Start(runCtx, workCtx context.Context) error {
	ctx, wg, ok := c.StartInit(runCtx)
	if !ok {
		return nil
	}
	for i, wake := range c.wakes {
		wg.Go(func() { c.loop(ctx, workCtx, i, wake) })
	}
	return nil
}

// Activity returns the activity the consumers count.
func (c *Consumers) Activity() *Activity { return c.activity }

// WakeAll wakes every consumer now. Redundant calls coalesce.
func (c *Consumers) WakeAll() {
	for _, w := range c.wakes {
		base.Signal(w)
	}
}

func (c *Consumers) idleTimeout() time.Duration {
	if c.notes.Healthy() {
		return max(c.cfg.PollingInterval, c.cfg.NotifyHealthyPollingInterval)
	}
	return c.cfg.PollingInterval
}

// loop waits for any of: stream ids in the drain queue, a wake
// (notification or RequestImmediatePoll), or the idle timeout; then it drains
// a batch or runs an idle tick. id numbers the consumer.
func (c *Consumers) loop(runCtx, workCtx context.Context, id int, wake chan struct{}) {
	t := c.Clock.NewTimer(c.idleTimeout())
	defer t.Stop()
	var lastWakes uint64
	for {
		ids := c.queue.Take(c.cfg.MaxSize)
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
			ids = c.queue.Take(c.cfg.MaxSize)
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
		c.fn.Drain(workCtx, ids)
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
func (c *Consumers) settle() {
	if sendNow(c.queue.Len(), c.arrivals.interval(), c.cfg.Coalesce) {
		c.fn.SendHeld()
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
func (c *Consumers) wantWindow(n int, lastWakes *uint64) bool {
	wakes := c.notes.Heard()
	live := wakes != *lastWakes || !c.notes.Healthy()
	*lastWakes = wakes
	return n < c.cfg.MaxSize && !c.queue.Backlog() && !c.queue.TakeUrgent() && live
}

// collectWindow extends a batch with the streams that arrive for at most
// wait, until ended is closed (the batch it waited behind ended), and
// within the Drain.Batcher bounds: SlidingWindow after the latest arrival,
// MaxWait after the first, at most MaxSize ids.
func (c *Consumers) collectWindow(ctx context.Context, ids []uuid.UUID, wait time.Duration, ended <-chan struct{}) []uuid.UUID {
	first := c.Now()
	last := first
	defer c.Signals.OnWindow(0, true)
	for len(ids) < c.cfg.MaxSize {
		now := c.Now()
		remaining := min(wait-now.Sub(first), c.cfg.SlidingWindow-now.Sub(last), c.cfg.MaxWait-now.Sub(first))
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
			return append(ids, c.queue.Take(c.cfg.MaxSize-len(ids))...)
		case <-t.C():
			return ids
		case <-c.queue.Signal():
			t.Stop()
			if more := c.queue.Take(c.cfg.MaxSize - len(ids)); len(more) > 0 {
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
func (c *Consumers) idleTick(ctx context.Context, timedOut bool) {
	c.fn.Tick(ctx)
	if timedOut {
		c.activity.poll(false)
	}
	if c.cfg.OnIdleTick != nil {
		c.cfg.OnIdleTick()
	}
}

// Activity tracks whether the worker is idle: no work for a threshold of
// consecutive polls, and no batch being drained.
type Activity struct {
	threshold int64
	// onStarted and onIdle, when set, run when the worker stops being idle
	// and when it becomes idle.
	onStarted, onIdle func()
	idle              atomic.Bool
	// emptyPolls counts consecutive polls that found no work, across
	// consumers.
	emptyPolls atomic.Int64
	// busy counts the batches being drained: the worker is not idle while
	// one runs, however long it takes.
	busy atomic.Int64
}

// NewActivity returns the Activity of an idle worker that becomes idle
// again after threshold consecutive empty polls; onStarted and onIdle, when
// set, see the changes.
func NewActivity(threshold int, onStarted, onIdle func()) *Activity {
	a := &Activity{threshold: int64(threshold), onStarted: onStarted, onIdle: onIdle}
	a.idle.Store(true)
	return a
}

// Idle reports whether the worker is idle.
func (a *Activity) Idle() bool { return a.idle.Load() }

// EmptyPolls returns the number of consecutive polls that found no work,
// across consumers.
func (a *Activity) EmptyPolls() int { return int(a.emptyPolls.Load()) }

// BatchStarted records a poll that found work and counts the batch as
// being drained until the returned function is called.
func (a *Activity) BatchStarted() (done func()) {
	a.poll(true)
	a.busy.Add(1)
	return func() { a.busy.Add(-1) }
}

func (a *Activity) poll(hasWork bool) {
	if hasWork {
		a.emptyPolls.Store(0)
		if a.idle.CompareAndSwap(true, false) {
			if a.onStarted != nil {
				a.onStarted()
			}
		}
		return
	}
	n := a.emptyPolls.Add(1)
	// A batch still draining (a slow apply, say) keeps the worker busy
	// however many polls other consumers find empty.
	if n >= a.threshold && a.busy.Load() == 0 && a.idle.CompareAndSwap(false, true) {
		if a.onIdle != nil {
			a.onIdle()
		}
	}
}
