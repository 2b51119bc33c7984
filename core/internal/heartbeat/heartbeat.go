// Package heartbeat keeps the instance live in the backend: it heartbeats
// on its interval, or right when the next peer goes stale, tells the claim
// loop when a peer was abandoned, and stops vouching for the instance while
// the claim loop is stalled (see Watch).
package heartbeat

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/startstop"
	"github.com/vantage-go/vantage/ports"
)

// A heartbeat aimed at a peer's staleness runs staleMargin after it, and
// never sooner than heartbeatMinDelay after the previous one (see
// heartbeatDelay).
const (
	staleMargin       = 50 * time.Millisecond
	heartbeatMinDelay = 10 * time.Millisecond
)

// Config is what a Heartbeater reads.
type Config struct {
	// Claimer is the backend's port that records heartbeats.
	Claimer ports.WorkClaimer
	// InstanceID, ServiceName, HostName and Metadata are recorded with
	// each heartbeat.
	InstanceID  uuid.UUID
	ServiceName string
	HostName    string
	Metadata    map[string]string
	// Interval is the time between two heartbeats.
	Interval time.Duration
	// StaleThreshold is how long an instance may go without a heartbeat
	// before its peers abandon it.
	StaleThreshold time.Duration
	// Passive is set for an instance that claims nothing: it runs no claim
	// loop, and is never alone (see Heartbeater.Alone).
	Passive bool
	// OnStall, when set, counts each stall of the claim loop.
	OnStall func(context.Context)
}

// Heartbeater keeps the instance live in the backend: it heartbeats every
// Interval, or right when the next peer goes stale, and tells the claim
// loop when a peer was abandoned (its streams are claimable now: see
// TakeOvers). It skips its heartbeats while the claim loop is stalled (see
// Watch).
type Heartbeater struct {
	*base.Env
	startstop.Base
	cfg Config
	// takeOvers is signalled when a stale peer was abandoned, by this
	// instance or another survivor.
	takeOvers chan struct{}
	// watch is the claim loop's watch: the claim loop reports to it, and
	// the heartbeat loop asks it before each heartbeat.
	watch Watch
	// wake makes the heartbeat loop heartbeat at once: a stall of the
	// claim loop ended.
	wake chan struct{}
	// first is the result of the heartbeat of Register, from which the
	// loop starts.
	first *ports.InstanceHeartbeatResult

	// lastBeat is when the latest successful heartbeat returned (unix
	// nanoseconds on the engine's clock, 0 before the first), live the
	// number of live instances it reported. lastTry is when the latest
	// heartbeat returned, successful or not, or was skipped while the
	// claim loop stalled: a loop that keeps trying while the backend is
	// down is alive, one that stopped trying is not.
	lastBeat atomic.Int64
	live     atomic.Int64
	lastTry  atomic.Int64
}

// Last returns when the latest successful heartbeat returned (zero before
// the first) and how many live instances it reported.
func (h *Heartbeater) Last() (time.Time, int) {
	at := h.lastBeat.Load()
	if at == 0 {
		return time.Time{}, 0
	}
	return time.Unix(0, at), int(h.live.Load())
}

// Alone reports whether this instance may drain the streams a notification
// names without claiming them first: it claims (it is not passive), and its
// latest heartbeat, recent enough that the instance is surely still live,
// found no other live instance, so every partition is its own. A peer that
// started since is learned at the next heartbeat; meanwhile both may ask
// for a stream, and its lease gives it to one of them.
func (h *Heartbeater) Alone() bool {
	at, live := h.Last()
	return live == 1 && !h.cfg.Passive && !at.IsZero() && h.Now().Sub(at) < h.cfg.StaleThreshold/2
}

// LastAttempt returns when the latest heartbeat returned, successful or
// not (zero before the first).
func (h *Heartbeater) LastAttempt() time.Time {
	at := h.lastTry.Load()
	if at == 0 {
		return time.Time{}
	}
	return time.Unix(0, at)
}

// New returns a Heartbeater of env configured by cfg.
func New(env *base.Env, cfg Config) *Heartbeater {
	h := &Heartbeater{Env: env, cfg: cfg, takeOvers: make(chan struct{}, 1), wake: make(chan struct{}, 1)}
	h.watch = Watch{env: env, bound: cfg.StaleThreshold / 2, onStall: cfg.OnStall, resume: func() { base.Signal(h.wake) }}
	return h
}

// Watch is the claim loop's watch, which the claim loop reports to.
func (h *Heartbeater) Watch() *Watch { return &h.watch }

// TakeOvers is signalled when a stale peer was abandoned, by this instance
// or another survivor: its streams are claimable now. Signals coalesce.
func (h *Heartbeater) TakeOvers() <-chan struct{} { return h.takeOvers }

// Register records the instance with a first heartbeat, from whose result
// Start's loop continues.
func (h *Heartbeater) Register(ctx context.Context) error {
	res, err := h.Beat(ctx)
	if err != nil {
		return err
	}
	h.first = res
	return nil
}

// Start launches the heartbeat loop from the result of Register's
// heartbeat; it runs until Stop or until ctx ends. It needs Register first.
func (h *Heartbeater) Start(ctx context.Context) error {
	if h.first == nil {
		return errors.New("heartbeat: Start before Register")
	}
	ctx, wg, ok := h.StartInit(ctx)
	if ok {
		wg.Go(func() { h.loop(ctx, h.first) })
	}
	return nil
}

// Beat records the instance's heartbeat. When it abandoned stale
// instances it hands their work over (see TakeOvers).
func (h *Heartbeater) Beat(ctx context.Context) (*ports.InstanceHeartbeatResult, error) {
	cctx, cancel := base.LeaseCallContext(ctx)
	defer cancel()
	res, err := h.cfg.Claimer.InstanceHeartbeat(cctx, &ports.InstanceHeartbeatParams{
		InstanceID:     h.cfg.InstanceID,
		ServiceName:    h.cfg.ServiceName,
		HostName:       h.cfg.HostName,
		ProcessID:      os.Getpid(),
		Metadata:       h.cfg.Metadata,
		StaleThreshold: h.cfg.StaleThreshold,
		Now:            h.ParamNow(),
		Passive:        h.cfg.Passive,
	})
	h.lastTry.Store(h.Now().UnixNano())
	if err != nil {
		return nil, err
	}
	h.lastBeat.Store(h.Now().UnixNano())
	h.live.Store(int64(res.Live))
	if len(res.Abandoned) > 0 {
		ids := make([]string, len(res.Abandoned))
		for i, id := range res.Abandoned {
			ids[i] = id.String()
		}
		h.Log.InfoContext(ctx, "abandoned stale instances; taking over their work", slog.Any("instances", ids))
		base.Signal(h.takeOvers)
	}
	return res, nil
}

// loop heartbeats until ctx is done, starting from the result of the
// heartbeat at Start. While the claim loop is stalled it skips the
// heartbeats, and it heartbeats at once when the stall ends.
func (h *Heartbeater) loop(ctx context.Context, first *ports.InstanceHeartbeatResult) {
	t := h.Clock.NewTimer(heartbeatDelay(h.cfg.Interval, h.Now(), first.NextStaleAt))
	defer t.Stop()
	prev := first.NextStaleAt
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-h.wake:
		}
		delay := h.cfg.Interval
		if !h.watch.vouch(ctx) {
			h.lastTry.Store(h.Now().UnixNano()) // the loop runs; it chose not to vouch
		} else if res, err := h.Beat(ctx); err != nil {
			if ctx.Err() == nil {
				h.Faults.Fail(ctx, "heartbeat", err)
			}
		} else {
			h.Faults.OK(ctx, "heartbeat")
			if res.Rejoined {
				h.Log.WarnContext(ctx, "instance was silent past the stale threshold; re-registered, and stale peers are abandoned at the next heartbeat")
			}
			if len(res.Abandoned) == 0 && peerGone(prev, h.Now(), res.NextStaleAt) {
				// Another survivor abandoned the peer first: its streams
				// are ours to share all the same.
				base.Signal(h.takeOvers)
			}
			prev = res.NextStaleAt
			delay = heartbeatDelay(h.cfg.Interval, h.Now(), res.NextStaleAt)
		}
		base.ResetTimer(t, delay)
	}
}

// peerGone reports whether the peer that was due to go stale at prev (the
// NextStaleAt of the previous heartbeat) is gone by now: prev has passed
// and the new NextStaleAt differs. Then it was abandoned, by this instance
// or by another survivor (or it heartbeat in time, which costs one early
// claim).
func peerGone(prev, now, next time.Time) bool {
	return !prev.IsZero() && !now.Before(prev) && !next.Equal(prev)
}

// heartbeatDelay returns how long after now to heartbeat next: the
// interval, or staleMargin past nextStaleAt (when the next peer goes stale,
// zero for none) if that comes sooner, so a peer that stopped heartbeating is
// abandoned, and its streams claimed, right when it goes stale rather than up
// to an interval later. Never less than heartbeatMinDelay.
//
// nextStaleAt is on the backend's clock, which on PostgreSQL without an
// injected Clock is the database's. When our clock runs ahead of it, a
// heartbeat aimed past nextStaleAt finds the peer not stale yet and reports
// the same deadline, now behind us by at least staleMargin. Waiting as long
// again as we are late then doubles the overshoot with each such heartbeat,
// so a skew costs a few heartbeats, not one every heartbeatMinDelay until it
// is made up.
func heartbeatDelay(interval time.Duration, now, nextStaleAt time.Time) time.Duration {
	if nextStaleAt.IsZero() {
		return interval
	}
	d := nextStaleAt.Sub(now) + staleMargin
	if late := now.Sub(nextStaleAt); late >= staleMargin {
		d = late
	}
	return min(interval, max(d, heartbeatMinDelay))
}
