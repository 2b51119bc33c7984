package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/core/completion"
)

// params are the run's random choices that are the simulator's, not the
// engine's: how many instances, how long the fault phase lasts, how fast
// events come, and which operations may happen.
type params struct {
	// instant is set when the workers report each outcome at once
	// (completion.InstantFactory), not in batches.
	instant    bool
	instances  int
	faultPhase time.Duration
	appendGap  time.Duration // mean sim time between two appends
	step       time.Duration // sim time the clock advances per real millisecond
	clean      int           // streams that never get a bad event
	dirty      int           // streams whose events may carry faults
	imports    int           // streams filled by late imports
	faultP     float64       // probability that an event of a dirty stream has a fault
	episodes   int           // instance faults and clock jumps
	rebuilds   int
	requeues   int
	retire     bool
	txAppends  int // transactional appends (PostgreSQL)
	generation bool
	jumpMax    time.Duration
	// focus, when set, makes every instance fault one kind (see
	// Config.Focus) and leaves hung events out; one seed in three draws one.
	focus string
}

// focused makes the run's instance fault the only disturbance of the
// fault phase: one episode, no rebuild and no retirement, so that the
// events appended after it are held to the quiet bound.
func (p *params) focused() {
	p.episodes, p.rebuilds, p.retire = 1, 0, false
}

// focusReports makes half the unfocused seeds with Instant completions
// focus on failing reports: an Instant completion that fails must be kept
// and sent again, and only a seed in which nothing else moves the
// instance's streams shows one that was not.
func focusReports(rng *rand.Rand, p *params) {
	if p.focus == "" && p.episodes > 0 && p.instant && rng.IntN(2) == 0 {
		p.focus = "reports"
		p.focused()
	}
}

// between returns a duration drawn uniformly in [lo, hi].
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

func pick[T any](rng *rand.Rand, vs ...T) T { return vs[rng.IntN(len(vs))] }

// newParams draws the simulator's choices of a seed.
func newParams(rng *rand.Rand, backend string, short bool) params {
	p := params{
		instances:  2 + rng.IntN(4),
		faultPhase: between(rng, 3*time.Second, 6*time.Second),
		appendGap:  pick(rng, 15*time.Millisecond, 30*time.Millisecond, 60*time.Millisecond),
		step:       2 * time.Millisecond,
		clean:      3 + rng.IntN(4),
		dirty:      3 + rng.IntN(4),
		imports:    rng.IntN(3),
		faultP:     pick(rng, 0.05, 0.15, 0.3),
		episodes:   1 + rng.IntN(5),
		rebuilds:   1 + rng.IntN(3),
		requeues:   rng.IntN(3),
		retire:     rng.IntN(4) == 0,
		generation: rng.IntN(4) == 0,
	}
	if rng.IntN(3) == 0 {
		p.focus = pick(rng, "lock", "lock", "lock", "block", "block", "crash", "fail", "jump", "stop")
	}
	if p.focus != "" {
		p.focused()
	}
	if backend == Postgres {
		p.step = time.Millisecond
		p.appendGap = pick(rng, 40*time.Millisecond, 80*time.Millisecond)
		p.instances = 2 + rng.IntN(3)
		p.txAppends = rng.IntN(4)
	}
	if short {
		p.faultPhase = between(rng, 2*time.Second, 3*time.Second)
	}
	return p
}

// completion records whether the workers report outcomes at once, and
// returns the factory of that strategy.
func (p *params) completion(instant bool) completion.Factory {
	p.instant = instant
	if instant {
		return completion.InstantFactory
	}
	return completion.BatchedFactory
}

// newOptions draws the engine's options of a seed: every duration is sim
// time, scaled down like vantagetest.Options so that retries, leases and
// staleness play out within seconds. ApplyTimeout stays above every clock
// jump, so that a jump never times a healthy apply out.
func newOptions(rng *rand.Rand, p *params) core.Options {
	stale := between(rng, 600*time.Millisecond, 1500*time.Millisecond)
	hb := stale/4 + between(rng, 0, stale/4)
	lease := between(rng, time.Second, 1500*time.Millisecond)
	p.jumpMax = max(stale+hb, lease) + 300*time.Millisecond
	lock := between(rng, time.Second, 2*time.Second)
	// One field at a time, in a fixed order: the draws of a seed follow
	// the order of these statements, so that a seed names its options.
	var o core.Options
	o.ServiceName = "sim"
	o.HostName = "sim"
	o.Drain.PollingInterval = pick(rng, 20*time.Millisecond, 50*time.Millisecond, 200*time.Millisecond)
	o.Drain.NotifyHealthyPollingInterval = pick(rng, 50*time.Millisecond, 200*time.Millisecond, 500*time.Millisecond)
	o.Claims.Interval = pick(rng, 5*time.Millisecond, 50*time.Millisecond, 250*time.Millisecond)
	o.Claims.NotifyHealthyInterval = pick(rng, 20*time.Millisecond, 100*time.Millisecond, 500*time.Millisecond)
	o.Claims.HeartbeatInterval = hb
	o.Claims.StaleInstanceThreshold = stale
	o.Claims.LeaseDuration = lease
	o.Drain.ApplyTimeout = p.jumpMax + between(rng, 300*time.Millisecond, time.Second)
	o.Drain.ApplyAbandonGrace = between(rng, 200*time.Millisecond, 600*time.Millisecond)
	o.Retries.MaxEventAttempts = 2 + rng.IntN(3)
	o.Retries.Event = core.Backoff{Initial: between(rng, 10*time.Millisecond, 50*time.Millisecond), Max: between(rng, 50*time.Millisecond, 300*time.Millisecond), Multiplier: 2}
	o.Retries.Infra = core.Backoff{Initial: between(rng, 10*time.Millisecond, 50*time.Millisecond), Max: between(rng, 100*time.Millisecond, 500*time.Millisecond), Multiplier: 1.5}
	o.Retries.CompletionResend = core.Backoff{Initial: between(rng, 50*time.Millisecond, 200*time.Millisecond), Max: between(rng, 200*time.Millisecond, time.Second), Multiplier: 2}
	o.Retries.Flush = core.FlushRetryOptions{Backoff: core.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond, Multiplier: 2}, MaxAttempts: 2 + rng.IntN(4)}
	o.Drain.Batcher = core.DrainBatcherOptions{SlidingWindow: between(rng, time.Millisecond, 10*time.Millisecond), MaxWait: between(rng, 10*time.Millisecond, 100*time.Millisecond)}
	o.Drain.PerspectiveBatchSize = pick(rng, 2, 5, 0)
	o.Drain.ModelCacheSize = pick(rng, core.Unlimited, 2, 0, 0)
	o.Completion = p.completion(pick(rng, false, true))
	o.Rewind.RebuildPollInterval = between(rng, 100*time.Millisecond, 500*time.Millisecond)
	o.Telemetry.StatsInterval = 50 * time.Millisecond
	o.Drain.MaxConcurrentStreams = pick(rng, 0, 3)
	o.Drain.MaxPerspectivesPerStream = pick(rng, 0, 1, 2)
	o.Drain.Consumers = pick(rng, 0, 1, 2)
	o.Drain.FetchMaxRows = pick(rng, 0, 0, 7)
	o.Rewind.Disabled = rng.IntN(5) == 0
	o.Rewind.Debounce = between(rng, 5*time.Millisecond, 50*time.Millisecond)
	o.Rewind.MaxDebounce = between(rng, 50*time.Millisecond, 200*time.Millisecond)
	o.Rewind.LockTimeout = lock
	o.Rewind.KeepAlive = lock / 4
	o.Rewind.SnapshotEvery = pick(rng, 0, 0, 2, 3, 5)
	o.DeadLetterRecovery = core.DeadLetterRecoveryOptions{Interval: between(rng, 200*time.Millisecond, time.Second)}
	if o.Drain.ModelCacheSize == 0 {
		o.Drain.ModelCacheSize = core.ModelCacheSizeDefault
	}
	return o
}

// describeOptions sums up the options that shape a run, for the trace.
func describeOptions(o core.Options, p params) string {
	var b strings.Builder
	reports := "batched"
	if p.instant {
		reports = "instant"
	}
	if p.focus != "" {
		fmt.Fprintf(&b, "focus=%s ", p.focus)
	}
	fmt.Fprintf(&b, "instances=%d phase=%s gap=%s clean=%d dirty=%d imports=%d faultP=%.2f episodes=%d rebuilds=%d requeues=%d retire=%t tx=%d generation=%t\n",
		p.instances, p.faultPhase, p.appendGap, p.clean, p.dirty, p.imports, p.faultP, p.episodes, p.rebuilds, p.requeues, p.retire, p.txAppends, p.generation)
	fmt.Fprintf(&b, "completion=%s attempts=%d stale=%s heartbeat=%s lease=%s applyTimeout=%s grace=%s claim=%s/%s poll=%s/%s window=%s/%s batch=%d cache=%d fetchMax=%d\n",
		reports, o.Retries.MaxEventAttempts, o.Claims.StaleInstanceThreshold, o.Claims.HeartbeatInterval, o.Claims.LeaseDuration, o.Drain.ApplyTimeout, o.Drain.ApplyAbandonGrace,
		o.Claims.Interval, o.Claims.NotifyHealthyInterval, o.Drain.PollingInterval, o.Drain.NotifyHealthyPollingInterval, o.Drain.Batcher.SlidingWindow, o.Drain.Batcher.MaxWait,
		o.Drain.PerspectiveBatchSize, o.Drain.ModelCacheSize, o.Drain.FetchMaxRows)
	fmt.Fprintf(&b, "consumers=%d streams=%d perspectives=%d\n", o.Drain.Consumers, o.Drain.MaxConcurrentStreams, o.Drain.MaxPerspectivesPerStream)
	fmt.Fprintf(&b, "eventRetry=%s..%s infraRetry=%s..%s resend=%s..%s rewinds=%s snapshotEvery=%d debounce=%s/%s lock=%s rebuildPoll=%s",
		o.Retries.Event.Initial, o.Retries.Event.Max, o.Retries.Infra.Initial, o.Retries.Infra.Max, o.Retries.CompletionResend.Initial, o.Retries.CompletionResend.Max,
		map[bool]string{true: "off", false: "on"}[o.Rewind.Disabled], o.Rewind.SnapshotEvery, o.Rewind.Debounce, o.Rewind.MaxDebounce, o.Rewind.LockTimeout, o.Rewind.RebuildPollInterval)
	return b.String()
}

// shape sums up a run's options in a few words.
func shape(o core.Options, p params) string {
	reports := "batched"
	if p.instant {
		reports = "instant"
	}
	rewinds := "on"
	if o.Rewind.Disabled {
		rewinds = "off"
	}
	focus := ""
	if p.focus != "" {
		focus = " focus=" + p.focus
	}
	return fmt.Sprintf("%s rewinds=%s cache=%d instances=%d episodes=%d rebuilds=%d retire=%t%s", reports, rewinds, o.Drain.ModelCacheSize, p.instances, p.episodes, p.rebuilds, p.retire, focus)
}
