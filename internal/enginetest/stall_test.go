package enginetest_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/internal/logtest"
	"github.com/vantage-go/vantage/internal/metricstest"
	"github.com/vantage-go/vantage/ports"
)

// stallingClaimer holds the claims of its instance while stall is set,
// until release is closed or the call's context ends, as a lock held on
// the lease table would. A held claim then runs at the
// clock's time, as the database runs a statement once its lock is free.
// Heartbeats go through; it records each successful one.
type stallingClaimer struct {
	ports.WorkClaimer
	clock   ports.Clock
	stall   atomic.Bool
	release chan struct{}
	held    atomic.Int64 // claims that were held

	mu    sync.Mutex
	beats []ports.InstanceHeartbeatResult
	at    []time.Time
}

func (c *stallingClaimer) WorkClaim(ctx context.Context, p *ports.WorkClaimParams) (*ports.WorkClaimResult, error) {
	if c.stall.Load() {
		c.held.Add(1)
		select {
		case <-c.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		q := *p
		q.Now = c.clock.Now()
		p = &q
	}
	return c.WorkClaimer.WorkClaim(ctx, p)
}

func (c *stallingClaimer) InstanceHeartbeat(ctx context.Context, p *ports.InstanceHeartbeatParams) (*ports.InstanceHeartbeatResult, error) {
	res, err := c.WorkClaimer.InstanceHeartbeat(ctx, p)
	if err == nil {
		c.mu.Lock()
		c.beats = append(c.beats, *res)
		c.at = append(c.at, p.Now)
		c.mu.Unlock()
	}
	return res, err
}

// beatsSince returns the results of the heartbeats that ran at since or
// later.
func (c *stallingClaimer) beatsSince(since time.Time) []ports.InstanceHeartbeatResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []ports.InstanceHeartbeatResult
	for i, at := range c.at {
		if !at.Before(since) {
			out = append(out, c.beats[i])
		}
	}
	return out
}

// An instance whose claims stop being answered (a lock held on the lease
// table) while it holds a stream with pending work is
// treated like a slow one, not a live one: half a stale threshold after
// its claim was due it logs the stall, once, and stops heartbeating, so a
// peer abandons it once it is stale and drains the stream. When the claim
// returns, the instance logs its recovery, re-registers and heartbeats
// again.
//
// Both workers run in a synctest bubble on a fake clock, stepped one claim
// interval at a time (see TestOutageLoggedOncePerOperation).
func TestStalledClaimLoopHandsItsStreamsOver(t *testing.T) {
	t.Parallel()

	synctest.Test(t, func(t *testing.T) {
		const (
			tick      = 250 * time.Millisecond // the claim and polling interval
			interval  = time.Second            // HeartbeatInterval
			threshold = 10 * time.Second       // StaleInstanceThreshold: a stall is noticed after 5s
		)
		clock := clocktest.NewFake()
		mem := memory.New(memory.Options{Clock: clock}).Backend()
		mem.Notifier = nil // claims every Claims.Interval; no wake names a stream
		// The apply of the stream's first event waits for applying, so
		// that A still drains the stream when its claims stall.
		applying, entered := make(chan struct{}), make(chan struct{}, 1)
		reg := heldFirstRegistry(t, applying, entered)
		opts := tickedOptions(t, clock, tick, interval, threshold)

		claims := &stallingClaimer{WorkClaimer: mem.Claimer, clock: clock, release: make(chan struct{})}
		a := mem
		a.Claimer = claims
		logger, logs := logtest.NewJSON(slog.LevelInfo)
		provider, reader := meterProvider(t)
		optsA := opts
		optsA.Logger = logger
		optsA.Telemetry.MeterProvider = provider
		// A claims only when the test wakes it, so that no claim marks
		// the stream it drains to be fetched again when its drain ends.
		optsA.Claims.Interval, optsA.Claims.NotifyHealthyInterval = time.Hour, time.Hour
		processedA := reportProcessed(&optsA, 100)
		wa := startWorker(t, a, reg, optsA)
		t.Cleanup(func() { // before the workers' Stop
			claims.stall.Store(false)
			closeOnce(claims.release)
			closeOnce(applying)
		})
		step := func() {
			clock.Advance(tick)
			synctest.Wait()
		}
		synctest.Wait()

		stream := uuid.New()
		appendAdded(t, reg, mem, stream, 1)
		wa.RequestImmediatePoll()
		for i := 0; i < 40 && len(entered) == 0; i++ {
			step()
		}
		require.Len(t, entered, 1, "A claimed the stream and applies its event")
		optsB := opts
		processedB := reportProcessed(&optsB, 100)
		startWorker(t, mem, reg, optsB)
		for range 8 {
			step()
		}
		require.Empty(t, processedB)

		// A's claims stop returning. It finishes the drain under way, and
		// keeps the stream's lease: an event appended to the stream since
		// its fetch is pending, and waits for a claim of A.
		claims.stall.Store(true)
		wa.RequestImmediatePoll()
		for i := 0; i < 8 && claims.held.Load() == 0; i++ {
			step()
		}
		require.Positive(t, claims.held.Load(), "A's claim is held")
		stalled := clock.Now()
		appendAdded(t, reg, mem, stream, 2)
		close(applying)
		for i := 0; i < 8 && len(processedA) == 0; i++ {
			step()
		}
		require.Len(t, processedA, 1, "A applied the first event")
		<-processedA

		// Noticed half a threshold after the claim was due, A's last
		// heartbeat goes stale a threshold later, when B abandons it and
		// takes the stream over.
		limit := stalled.Add(threshold/2 + interval + threshold + 2*tick)
		for clock.Now().Before(limit) && len(processedB) == 0 {
			step()
		}
		require.Len(t, processedB, 1, "B took the stalled instance's stream over within %s", limit.Sub(stalled))
		require.Equal(t, stream, (<-processedB).StreamID)
		require.Equal(t, []int64{1, 2}, loadTotal(t, mem, stream).Seen, "each event applied once, in order")
		lines := logs.Lines(t)
		warned := logtest.WithMsg(lines, "claim loop stalled; no longer heartbeating, so that other instances take over this instance's streams")
		require.Len(t, warned, 1, "the stall is logged once")
		require.Equal(t, "WARN", warned[0].Level())
		require.GreaterOrEqual(t, warned[0]["stalled_for"], float64(threshold/2), "noticed half a threshold after the claim was due")
		require.Empty(t, claims.beatsSince(stalled.Add(threshold/2+interval)), "A stopped heartbeating once the stall was noticed")
		require.Empty(t, logtest.WithMsg(lines, "claim loop recovered"))

		// The claim returns: A was abandoned meanwhile, so it re-registers
		// and heartbeats again.
		released := clock.Now()
		claims.stall.Store(false)
		close(claims.release)
		synctest.Wait()
		for i := 0; i < 8 && len(logtest.WithMsg(logs.Lines(t), "claim loop recovered")) == 0; i++ {
			step()
		}
		lines = logs.Lines(t)
		recovered := logtest.WithMsg(lines, "claim loop recovered")
		require.Len(t, recovered, 1, "the recovery is logged once")
		require.Equal(t, "INFO", recovered[0].Level())
		took := clock.Now().Sub(stalled)
		require.GreaterOrEqual(t, recovered[0]["stalled_for"], float64(took), "how long no claim returned")
		require.LessOrEqual(t, recovered[0]["stalled_for"], float64(took+tick), "how long no claim returned")
		require.Len(t, logtest.WithMsg(lines, "claim loop stalled; no longer heartbeating, so that other instances take over this instance's streams"), 1)
		beats := claims.beatsSince(released)
		require.NotEmpty(t, beats, "A heartbeats again")
		require.True(t, beats[0].Rejoined, "A was abandoned while it stalled: it re-registered")
		require.Equal(t, int64(1), metricstest.Collect(t, reader).SumAll("vantage.claim.stalls"))
		require.Empty(t, processedA, "A applied nothing more")
	})
}

// closeOnce closes c unless it is closed already.
// heldFirstRegistry returns a registry whose perspective records the
// versions it applies; the apply of the event with N 1 signals entered and
// waits for applying to close, ignoring its context.
func heldFirstRegistry(t *testing.T, applying <-chan struct{}, entered chan<- struct{}) *core.Registry {
	return registryWith(t, func(ctx context.Context, m total, e added) (total, error) {
		if e.N == 1 {
			entered <- struct{}{}
			<-applying
		}
		ev, _ := core.EventFromContext(ctx)
		m.Seen = append(m.Seen, ev.Version)
		return m, nil
	})
}

// tickedOptions is quietOptions on clock, claiming and polling every
// tick, heartbeating every interval, with the stale threshold given.
func tickedOptions(t *testing.T, clock ports.Clock, tick, interval, threshold time.Duration) core.Options {
	opts := quietOptions(t)
	opts.Clock = clock
	opts.Claims.Interval, opts.Claims.NotifyHealthyInterval = tick, tick
	opts.Drain.PollingInterval, opts.Drain.NotifyHealthyPollingInterval = tick, tick
	opts.Claims.HeartbeatInterval = interval
	opts.Claims.StaleInstanceThreshold = threshold
	return opts
}

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}
