package core

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/vantage-go/vantage/ports"
)

// notifyClaimSpacing bounds how long a notification waits for its claim
// (see claimer.loop) when ClaimInterval is longer.
const notifyClaimSpacing = 250 * time.Millisecond

// notifyClaimRest is how many times its own duration the claim loop rests
// after a claim before a notification may start the next one: claims thus
// take at most half of a connection's time however fast appends come, and
// a burst of appends coalesces into one claim per rest. Under load claims
// slow down, and so their rate does; at low rates the rest is short enough
// that a notification rarely waits for it.
const notifyClaimRest = 1

// claimer leases work to this instance and pushes the streams it may drain
// into the drain queue. It claims on its cadence, at once while claims
// report more work, and when woken.
type claimer struct {
	*engine
	startStop
	queue  *drainQueue
	heart  *heartbeater
	notes  *listener
	wake   chan struct{} // claim now: RequestImmediatePoll, freed room, abandoned peers
	notify chan struct{} // notifications, coalesced to one claim per ClaimInterval

	// hasMore is set while the latest claim left candidate streams out: a
	// backlog larger than what this instance holds.
	hasMore atomic.Bool
	// recovering is set when a peer was abandoned (see takeOver); the next
	// claim then sets windowSkip, so the streams it takes over are drained
	// at once instead of waiting in the sliding window.
	recovering atomic.Bool
	windowSkip atomic.Bool
}

func newClaimer(e *engine, queue *drainQueue, notes *listener) *claimer {
	return &claimer{engine: e, queue: queue, notes: notes, wake: make(chan struct{}, 1), notify: make(chan struct{}, 1)}
}

// Start launches the claim loop; it runs until Stop or until ctx ends.
func (c *claimer) Start(ctx context.Context) {
	ctx, wg, ok := c.startInit(ctx)
	if ok {
		wg.Go(func() { c.loop(ctx) })
	}
}

// takeOver wakes the claim loop after a peer was abandoned, by this instance
// or another survivor: the peer's streams are claimable now, and the claim
// that takes them skips the sliding window (see recovering).
func (c *claimer) takeOver() {
	c.recovering.Store(true)
	signal(c.wake)
}

// roomFreed wakes the claim loop when completions freed room while the
// backlog is larger than what this instance holds.
func (c *claimer) roomFreed() {
	if c.hasMore.Load() {
		signal(c.wake)
	}
}

// loop claims on its cadence, at once while claims report more work, and on
// wakes: at once for RequestImmediatePoll, freed room and abandoned peers,
// and for notifications as soon as the previous claim rested (see
// claimPace): every instance hears every append, and a claim per append per
// instance would cost more than the appends themselves, while a claim that
// waits adds its wait to every append's latency.
func (c *claimer) loop(ctx context.Context) {
	t := c.clock.NewTimer(0)
	defer t.Stop()
	var (
		ended    time.Time     // when the last claim returned
		took     time.Duration // how long it took
		notified bool          // a notification came since the last claim
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-c.wake:
		case <-c.notify:
			notified = true
			if wait := c.claimPace(took) - c.now().Sub(ended); !ended.IsZero() && wait > 0 {
				resetTimer(t, wait) // claim when the rest is over
				c.signals.claimDeferred(wait)
				continue
			}
		}
		start := c.now()
		hasMore := c.claimOnce(ctx, notified || !c.notes.healthy())
		notified = false
		ended = c.now()
		took = ended.Sub(start)
		interval := c.opts.ClaimInterval
		if c.notes.healthy() {
			interval = c.opts.ClaimNotifyHealthyInterval
		}
		if hasMore {
			interval = 0
		}
		resetTimer(t, interval)
	}
}

// claimPace returns the least time between the end of a claim that took
// took and a claim woken by a notification: notifyClaimRest times took,
// at most ClaimInterval or notifyClaimSpacing.
func (c *claimer) claimPace(took time.Duration) time.Duration {
	return min(notifyClaimRest*took, c.opts.ClaimInterval, notifyClaimSpacing)
}

// claimOnce runs one claim and reports whether to claim again at once.
// fresh tells whether the streams this instance is draining may have
// received events since their fetch (a notification came, or none can be
// heard): they are then marked to be fetched again (see drainQueue.Push).
func (c *claimer) claimOnce(ctx context.Context, fresh bool) bool {
	recovering := c.recovering.Swap(false)
	cctx, cancel := leaseCallContext(ctx)
	defer cancel()
	res, err := c.backend.Claimer.WorkClaim(cctx, &ports.WorkClaimParams{
		InstanceID:     c.opts.InstanceID,
		MaxStreams:     c.opts.MaxStreamsPerBatch,
		PartitionCount: c.opts.PartitionCount,
		LeaseDuration:  c.opts.LeaseDuration,
		StaleThreshold: c.opts.StaleInstanceThreshold,
		Now:            c.paramNow(),
	})
	if err != nil {
		if recovering {
			c.recovering.Store(true) // the next claim takes the streams over
		}
		if ctx.Err() != nil {
			return false
		}
		if errors.Is(err, ports.ErrInstanceNotAlive) {
			// We were abandoned (a pause longer than the stale threshold):
			// heartbeat again and claim afresh.
			c.log.WarnContext(ctx, "instance was considered stale and lost its work; re-registering")
			if _, herr := c.heart.beat(ctx); herr != nil {
				c.faults.fail(ctx, "heartbeat", herr)
			}
			return false
		}
		c.faults.fail(ctx, "claiming work", err)
		return false
	}
	c.faults.ok(ctx, "claiming work")
	if recovering {
		c.windowSkip.Store(true) // before the push, so the consumer taking the ids sees it
	}
	push := c.queue.PushHeld
	if fresh {
		push = c.queue.Push
	}
	added := push(res.StreamIDs...)
	c.hasMore.Store(res.HasMore)
	// Re-poll at once only while claims keep finding new streams. When the
	// backlog is larger than what we hold, the next claim is woken by an
	// acknowledged completion flush, which frees room (no hot loop
	// re-claiming the streams we are already draining).
	return res.HasMore && added > 0
}
