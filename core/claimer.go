package core

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/heartbeat"
	"github.com/vantage-go/vantage/core/internal/notify"
	"github.com/vantage-go/vantage/core/internal/queue"
	"github.com/vantage-go/vantage/core/internal/startstop"
	"github.com/vantage-go/vantage/ports"
)

// notifyClaimSpacing bounds how long a notification waits for its claim
// (see claimer.loop) when ClaimInterval is longer.
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
	b.avg = ewma(b.avg, charge)
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

// claimer leases work to this instance and pushes the streams it may drain
// into the drain queue. It claims on its cadence, at once while claims
// report more work, and when woken.
type claimer struct {
	*engine
	startstop.Base
	queue    *queue.Queue
	heart    *heartbeat.Heartbeater
	listener *notify.Listener
	wake     chan struct{} // claim now: RequestImmediatePoll, freed room
	notify   chan struct{} // notifications, paced by the claim budget

	// recovering is set when a peer was abandoned; the next claim then
	// marks the queue urgent, so the streams it takes over are drained at
	// once instead of waiting in the sliding window.
	recovering atomic.Bool
}

func newClaimer(e *engine, drainQ *queue.Queue, listener *notify.Listener, heart *heartbeat.Heartbeater, notify chan struct{}) *claimer {
	return &claimer{engine: e, queue: drainQ, listener: listener, heart: heart, wake: make(chan struct{}, 1), notify: notify}
}

// Start launches the claim loop; it runs until Stop or until ctx ends.
func (c *claimer) Start(ctx context.Context) {
	ctx, wg, ok := c.StartInit(ctx)
	if ok {
		wg.Go(func() { c.loop(ctx) })
	}
}

// roomFreed wakes the claim loop when completions freed room while the
// backlog is larger than what this instance holds.
func (c *claimer) roomFreed() {
	if c.queue.Backlog() {
		base.Signal(c.wake)
	}
}

// loop claims on its cadence, at once while claims report more work, and on
// wakes: at once for RequestImmediatePoll, freed room and abandoned peers
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
func (c *claimer) loop(ctx context.Context) {
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
		hasMore, answered := c.claimOnce(ctx, notified || !c.listener.Healthy())
		notified = false
		end := c.Now()
		budget.spent(end, end.Sub(start))
		interval := c.opts.ClaimInterval
		if c.listener.Healthy() {
			interval = c.opts.ClaimNotifyHealthyInterval
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
// budget, at most ClaimInterval or notifyClaimSpacing.
func (c *claimer) claimPace(b *claimBudget) time.Duration {
	return min(b.wait(c.Now()), c.opts.ClaimInterval, notifyClaimSpacing)
}

// claimOnce runs one claim and reports whether to claim again at once, and
// whether the backend answered it: it returned the instance's streams, or
// said that the instance is not live (it then re-registers). fresh tells
// whether the streams this instance is draining may have received events
// since their fetch (a notification came, or none can be heard): they are
// then marked to be fetched again (see queue.Queue.Push).
func (c *claimer) claimOnce(ctx context.Context, fresh bool) (again, answered bool) {
	recovering := c.recovering.Swap(false)
	cctx, cancel := base.LeaseCallContext(ctx)
	defer cancel()
	start := c.Now()
	res, err := c.backend.Claimer.WorkClaim(cctx, &ports.WorkClaimParams{
		InstanceID:     c.opts.InstanceID,
		MaxStreams:     c.opts.MaxStreamsPerBatch,
		PartitionCount: c.opts.PartitionCount,
		LeaseDuration:  c.opts.LeaseDuration,
		StaleThreshold: c.opts.StaleInstanceThreshold,
		Now:            c.ParamNow(),
	})
	c.metrics.claimed(ctx, c.Now().Sub(start), res, err)
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
