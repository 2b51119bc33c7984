// Package claim runs the claim loop: it leases work to this instance and
// pushes the streams it may drain into the drain queue, on its cadence, at
// once while claims report more work, and when woken; notifications wake
// it as a budget of claim time allows.
package claim

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/heartbeat"
	"github.com/vantage-go/vantage/core/internal/queue"
	"github.com/vantage-go/vantage/core/internal/startstop"
	"github.com/vantage-go/vantage/ports"
)

// notifyClaimSpacing bounds how long a notification waits for its claim
// (see Claimer.loop) when the claim interval is longer.
const notifyClaimSpacing = 250 * time.Millisecond

// Claims woken by notifications are paced by a budget (see claimBudget):
// they may take up to notifyClaimShare of the claim loop's time, with
// bursts of notifyClaimBurst. A notification at a low rate thus claims at
// once, and a steady stream of them coalesces into claims that take at
// most half of a connection's time, however fast appends come; under load
// claims slow down, and so their rate does.
const (
	notifyClaimShare = 2 // claims take at most 1/notifyClaimShare of the time
	notifyClaimBurst = 10 * time.Millisecond
)

// claimChargeFactor caps what one claim costs the budget: this many times
// the moving average of the charges before it, or notifyClaimBurst if that
// is more (see claimBudget.spent).
const claimChargeFactor = 4

// claimBudget is a leaky bucket of claim time: each claim adds its
// duration, up to a cap, and the level drains by 1/notifyClaimShare of the
// time that passes.
type claimBudget struct {
	level time.Duration
	at    time.Time
	avg   time.Duration // moving average of the charges, 0 before the first
}

// spent records a claim that ended at end after took. The budget caps the
// share of a connection that claims use; a claim that took far longer than
// the claims before it spent that time waiting (on a lock, for a paused
// process to resume, for a connection) rather than using the database, so
// it is charged claimChargeFactor times the average charge at most. A
// single slow claim thus costs the claims after it a short pause at most,
// not a wait as long as twice its own duration. Claims that are slow
// because the database is loaded raise the average within a few claims
// (each may charge four times the average), and the budget holds them to
// their share again.
func (b *claimBudget) spent(end time.Time, took time.Duration) {
	charge := min(took, max(claimChargeFactor*b.avg, notifyClaimBurst))
	b.avg = base.EWMA(b.avg, charge)
	b.level = b.levelAt(end) + charge
	b.at = end
}

func (b *claimBudget) levelAt(now time.Time) time.Duration {
	if b.at.IsZero() {
		return 0
	}
	return max(b.level-now.Sub(b.at)/notifyClaimShare, 0)
}

// wait returns how long a notified claim waits at now for the level to
// drain to notifyClaimBurst.
func (b *claimBudget) wait(now time.Time) time.Duration {
	return max(b.levelAt(now)-notifyClaimBurst, 0) * notifyClaimShare
}

// Config is what a Claimer reads.
type Config struct {
	// Claimer is the backend's port that leases work.
	Claimer ports.WorkClaimer
	// InstanceID is the instance the work is leased to.
	InstanceID uuid.UUID
	// MaxStreams bounds the streams one claim leases; PartitionCount is
	// the number of partitions work is distributed over.
	MaxStreams     int
	PartitionCount int
	// LeaseDuration is how long a claimed stream is leased;
	// StaleThreshold how long an instance may go without a heartbeat.
	LeaseDuration  time.Duration
	StaleThreshold time.Duration
	// Interval is the claim cadence while notifications are unhealthy,
	// NotifyHealthyInterval while they arrive.
	Interval              time.Duration
	NotifyHealthyInterval time.Duration
	// OnClaimed, when set, sees each claim: how long it took and what it
	// returned.
	OnClaimed func(ctx context.Context, took time.Duration, res *ports.WorkClaimResult, err error)
}

// Notifications tell whether notifications arrive: then the claim loop
// polls rarely.
type Notifications interface {
	Healthy() bool
}

// Wakes are how the rest of the engine wakes the claim loop. Make them
// before the services that ring them, and hand them to New.
type Wakes struct {
	now    chan struct{} // claim now: an immediate poll, freed room
	notify chan struct{} // notifications, paced by the claim budget
}

// NewWakes returns Wakes for one Claimer.
func NewWakes() *Wakes {
	return &Wakes{now: make(chan struct{}, 1), notify: make(chan struct{}, 1)}
}

// Now makes the claim loop claim at once. Calls coalesce.
func (w *Wakes) Now() { base.Signal(w.now) }

// Notified tells the claim loop that a notification arrived: it claims as
// soon as its budget allows. Calls coalesce.
func (w *Wakes) Notified() { base.Signal(w.notify) }

// Claimer leases work to this instance and pushes the streams it may
// drain into the drain queue. It claims on its cadence, at once while
// claims report more work, and when woken (see Wakes).
type Claimer struct {
	*base.Env
	startstop.Base
	cfg    Config
	queue  *queue.Queue
	heart  *heartbeat.Heartbeater
	notes  Notifications
	wake   chan struct{}
	notify chan struct{}

	// recovering is set when a peer was abandoned; the next claim then
	// marks the queue urgent, so the streams it takes over are drained at
	// once instead of waiting in the sliding window.
	recovering atomic.Bool
}

// New returns a Claimer of env configured by cfg, woken by wakes, that
// fills drainQ and reports to heart's watch.
func New(env *base.Env, cfg Config, wakes *Wakes, drainQ *queue.Queue, heart *heartbeat.Heartbeater, notes Notifications) *Claimer {
	return &Claimer{Env: env, cfg: cfg, queue: drainQ, heart: heart, notes: notes, wake: wakes.now, notify: wakes.notify}
}

// Start launches the claim loop; it runs until Stop or until ctx ends.
func (c *Claimer) Start(ctx context.Context) error {
	ctx, wg, ok := c.StartInit(ctx)
	if ok {
		wg.Go(func() { c.loop(ctx) })
	}
	return nil
}

// loop claims on its cadence, at once while claims report more work, and on
// wakes: at once for an immediate poll, freed room and abandoned peers
// (a peer's streams are claimable now, and the claim that takes them skips
// the sliding window: see recovering),
// and for notifications as soon as the claim budget allows (see
// claimBudget): every instance hears every append, and a claim per append per
// instance would cost more than the appends themselves, while a claim that
// waits adds its wait to every append's latency. A notification only ever
// brings the armed claim forward: were each to re-arm the timer for its
// wait, notifications coming faster than that wait would postpone the
// claim for as long as they come. The loop reports to the heartbeat's
// heartbeat.Watch when each claim is due and which claims were answered.
func (c *Claimer) loop(ctx context.Context) {
	t := c.Clock.NewTimer(0)
	defer t.Stop()
	var (
		budget   claimBudget
		notified bool      // a notification came since the last claim
		due      = c.Now() // when t fires
	)
	watch := c.heart.Watch()
	watch.Arm(due)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-c.wake:
		case <-c.heart.TakeOvers():
			c.recovering.Store(true)
		case <-c.notify:
			notified = true
			if wait := c.claimPace(&budget); wait > 0 {
				now := c.Now()
				if at := now.Add(wait); at.Before(due) {
					base.ResetTimer(t, wait) // claim when the budget allows
					due = at
					watch.Arm(due)
				}
				c.Signals.OnClaimDeferred(due.Sub(now))
				continue
			}
		}
		start := c.Now()
		watch.Arm(start)
		hasMore, answered := c.claimOnce(ctx, notified || !c.notes.Healthy())
		notified = false
		end := c.Now()
		budget.spent(end, end.Sub(start))
		interval := c.cfg.Interval
		if c.notes.Healthy() {
			interval = c.cfg.NotifyHealthyInterval
		}
		if hasMore {
			interval = 0
		}
		base.ResetTimer(t, interval)
		due = end.Add(interval)
		if answered {
			watch.Answered(ctx, due)
		} else {
			watch.Arm(due)
		}
	}
}

// claimPace returns how long a claim woken by a notification waits for the
// budget, at most the claim interval or notifyClaimSpacing.
func (c *Claimer) claimPace(b *claimBudget) time.Duration {
	return min(b.wait(c.Now()), c.cfg.Interval, notifyClaimSpacing)
}

// claimOnce runs one claim and reports whether to claim again at once, and
// whether the backend answered it: it returned the instance's streams, or
// said that the instance is not live (it then re-registers). fresh tells
// whether the streams this instance is draining may have received events
// since their fetch (a notification came, or none can be heard): they are
// then marked to be fetched again (see queue.Queue.Push).
func (c *Claimer) claimOnce(ctx context.Context, fresh bool) (again, answered bool) {
	recovering := c.recovering.Swap(false)
	cctx, cancel := base.LeaseCallContext(ctx)
	defer cancel()
	start := c.Now()
	res, err := c.cfg.Claimer.WorkClaim(cctx, &ports.WorkClaimParams{
		InstanceID:     c.cfg.InstanceID,
		MaxStreams:     c.cfg.MaxStreams,
		PartitionCount: c.cfg.PartitionCount,
		LeaseDuration:  c.cfg.LeaseDuration,
		StaleThreshold: c.cfg.StaleThreshold,
		Now:            c.ParamNow(),
	})
	if c.cfg.OnClaimed != nil {
		c.cfg.OnClaimed(ctx, c.Now().Sub(start), res, err)
	}
	if err != nil {
		if recovering {
			c.recovering.Store(true) // the next claim takes the streams over
		}
		if ctx.Err() != nil {
			return false, false
		}
		if errors.Is(err, ports.ErrInstanceNotAlive) {
			// We were abandoned (a pause longer than the stale threshold,
			// or a stall of the claim loop: see heartbeat.Watch): heartbeat
			// again and claim afresh.
			c.Log.WarnContext(ctx, "instance was considered stale and lost its work; re-registering")
			if _, herr := c.heart.Beat(ctx); herr != nil {
				c.Faults.Fail(ctx, "heartbeat", herr)
			}
			return false, true
		}
		c.Faults.Fail(ctx, "claiming work", err)
		return false, false
	}
	c.Faults.OK(ctx, "claiming work")
	if recovering {
		c.queue.MarkUrgent() // before the push, so the consumer taking the ids sees it
	}
	push := c.queue.PushHeld
	if fresh {
		push = c.queue.Push
	}
	added := push(res.StreamIDs...)
	c.queue.SetBacklog(res.HasMore)
	// Re-poll at once only while claims keep finding new streams. When the
	// backlog is larger than what we hold, the next claim is woken by an
	// acknowledged completion flush, which frees room (no hot loop
	// re-claiming the streams we are already draining).
	return res.HasMore && added > 0, true
}
