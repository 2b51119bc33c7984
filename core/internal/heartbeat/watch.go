package heartbeat

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/vantage-go/vantage/core/internal/base"
)

// Watch tells the heartbeat whether the claim loop keeps up.
//
// A heartbeat vouches for the instance: while it is live, nobody takes
// the streams it holds, nor the unheld streams of its share of the
// partitions, which only its own claims lease. An instance whose claims
// are no longer answered (a claim blocked on a lock, a backend that
// stopped answering claims) drains nothing new, yet would keep all of that
// from the other instances for as long as it heartbeats. So once no claim
// has been answered for the bound (half the stale threshold) past the time one was due, the
// heartbeat loop stops vouching: it logs the stall once, counts it, and
// skips its heartbeats, and once the instance is stale a peer abandons it
// and takes its streams over, as it would a slow or dead instance's. The
// first claim answered after that ends the stall: it is logged with how
// long it lasted, and the instance heartbeats at once (a claim answered by
// ErrInstanceNotAlive re-registers it first, see the claim loop).
//
// When every instance stalls at once (a lock held on the lease table, a
// database that stops answering claims), each stops heartbeating half a
// threshold after its own claims stopped, so their last heartbeats lie
// within about a heartbeat interval of each other; when the lock is
// released their claims return together, and each heartbeats at once.
// They do not abandon each other wholesale: one that is no longer live
// when its heartbeat lands only re-registers and abandons nobody (see
// ports.WorkClaimer.InstanceHeartbeat), which gives the peers silenced by
// the same stall an interval to re-register too. One still live abandons
// the peers already stale that have not re-registered yet, as after a
// database outage of the same length; and a lock released less than the
// stall bound plus the threshold, minus a heartbeat interval, after it
// blocked the first claim leaves every instance live and abandons nobody.
//
// A claim that fails is not an answer: a claim loop whose every claim
// times out on a lock, or fails, for longer than the bound is stalled as
// much as one blocked in a single claim. A passive instance
// (Config.Passive) runs no claim loop, and its watch never arms.
type Watch struct {
	env *base.Env
	// bound is how long past its due time a claim may go unanswered
	// before the claim loop counts as stalled: half of the stale
	// threshold, far longer than any claim that works takes, and short
	// enough that the instance goes stale, and its streams move, within
	// one and a half thresholds of the claim that stalled.
	bound time.Duration
	// onStall, when set, counts a stall.
	onStall func(context.Context)
	// resume wakes the heartbeat loop when a stall ends.
	resume func()

	mu sync.Mutex
	// due is when the claim loop was due to claim: the earliest deadline
	// of its timer, or start of a claim, since the latest claim answered;
	// zero until the loop runs.
	due time.Time
	// stalled is set once the stall was logged, until a claim is
	// answered.
	stalled bool
}

// Arm records that a claim is due at due; an earlier due time since the
// latest claim answered stands.
func (w *Watch) Arm(due time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.due.IsZero() || due.Before(w.due) {
		w.due = due
	}
}

// Answered records that a claim was answered, the next being due at next,
// and ends a stall: it is logged, and the heartbeat loop woken.
func (w *Watch) Answered(ctx context.Context, next time.Time) {
	w.mu.Lock()
	since, stalled := w.due, w.stalled
	w.due, w.stalled = next, false
	w.mu.Unlock()
	if !stalled {
		return
	}
	w.env.Log.InfoContext(ctx, "claim loop recovered", slog.Duration("stalled_for", w.env.Now().Sub(since)))
	w.resume()
}

// Disarm forgets the claim due, and ends a stall: the claim loop ended
// (the worker stops), and the heartbeat vouches for the instance again
// until its drains in flight ended.
func (w *Watch) Disarm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.due, w.stalled = time.Time{}, false
}

// vouch reports whether the heartbeat may vouch for the instance: false
// while the claim loop is stalled. The first time it finds it stalled, it
// logs and counts the stall.
func (w *Watch) vouch(ctx context.Context) bool {
	now := w.env.Now()
	w.mu.Lock()
	late := now.Sub(w.due)
	if w.due.IsZero() || late <= w.bound {
		w.mu.Unlock()
		return true
	}
	first := !w.stalled
	w.stalled = true
	w.mu.Unlock()
	if first {
		w.env.Log.WarnContext(ctx, "claim loop stalled; no longer heartbeating, so that other instances take over this instance's streams",
			slog.Duration("stalled_for", late), slog.Duration("stall_bound", w.bound))
		if w.onStall != nil {
			w.onStall(ctx)
		}
	}
	return false
}
