package core

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// Defaults of Options: those of the system Vantage descends from, so that
// its operators find the behaviour they know.
const (
	PollingIntervalDefault              = time.Second
	NotifyHealthyPollingIntervalDefault = time.Second
	ClaimIntervalDefault                = 250 * time.Millisecond
	ClaimNotifyHealthyIntervalDefault   = 5 * time.Second
	HeartbeatIntervalDefault            = 5 * time.Second
	MaxPerspectiveEventAttemptsDefault  = 10
	LeaseDurationDefault                = 300 * time.Second
	ApplyTimeoutDefault                 = time.Minute
	ApplyAbandonGraceDefault            = 10 * time.Second
	StaleInstanceThresholdDefault       = 30 * time.Second
	IdleThresholdPollsDefault           = 2
	PerspectiveBatchSizeDefault         = 100
	MaxConcurrentStreamsDefault         = 30
	MaxConcurrentDrainConsumersDefault  = 4
	MaxStreamsPerBatchDefault           = 300
	DrainLoopMaxIterationsDefault       = 5
	DrainLoopRefetchMinBatchDefault     = 2
	FetchMaxRowsDefault                 = 10_000
	SlidingWindowDefault                = 300 * time.Millisecond
	MaxWaitDefault                      = 3 * time.Second
	MaxSizeDefault                      = 1000
	RetryTimeoutDefault                 = time.Second
	BackoffMultiplierDefault            = 2.0
	MaxBackoffDefault                   = 60 * time.Second
	FailureRetryBaseDefault             = 30 * time.Second
	FailureRetryMaxDefault              = 300 * time.Second
	MaxFlushAttemptsDefault             = 5
	DeadLetterRecoveryIntervalDefault   = 10 * time.Second
	DeadLetterRecoveryBatchDefault      = 10
	ServiceNameDefault                  = "vantage"
)

// Unlimited disables a limit where an option documents it (for example
// MaxPerspectiveEventAttempts).
const Unlimited = -1

// CompletionMode selects how completions reach the backend.
type CompletionMode int

const (
	// CompletionBatched buffers completions and failures and flushes them in
	// batches, one backend round trip per batch, with acknowledgement by
	// identity and stale re-sends. The default.
	CompletionBatched CompletionMode = iota
	// CompletionInstant reports every completion and failure to the backend
	// as soon as it happens: more round trips, immediate visibility.
	CompletionInstant
)

// DrainBatcherOptions configure the sliding window that coalesces drain
// signals into one batch.
type DrainBatcherOptions struct {
	// SlidingWindow is how long the batcher waits after the latest arrival.
	// Defaults to 300ms.
	SlidingWindow time.Duration
	// MaxWait caps the total wait from the first arrival. Defaults to 3s.
	MaxWait time.Duration
	// MaxSize is the most stream ids in one batch. Defaults to 1000.
	MaxSize int
}

// RetryOptions configure when an unacknowledged completion is sent again:
// after RetryTimeout, then multiplied by BackoffMultiplier per retry, capped
// at MaxBackoff (1s, 2s, 4s … 60s with the defaults).
type RetryOptions struct {
	// RetryTimeout is the first wait for an acknowledgement. Defaults to 1s.
	RetryTimeout time.Duration
	// BackoffMultiplier grows the wait per retry. Defaults to 2. Must be >= 1.
	BackoffMultiplier float64
	// MaxBackoff caps the wait. Defaults to 60s.
	MaxBackoff time.Duration
	// DisableExponentialBackoff keeps every wait at RetryTimeout.
	DisableExponentialBackoff bool
	// MaxFlushAttempts bounds the in-place retries of one flush batch before
	// it is dropped (its rows are then re-delivered after their leases
	// expire). Defaults to 5.
	MaxFlushAttempts int
}

// DeadLetterRecoveryOptions configure how an instance with a Generation
// requeues the dead letters that failed on other generations: BatchSize
// dead letters every Interval, each once per generation. A requeued event
// is applied in order (by a rewind when its pair went on past it); if it
// fails for good again, its dead letter records that it failed on this
// generation too, and is not retried again by it.
type DeadLetterRecoveryOptions struct {
	// Disabled turns the recovery off.
	Disabled bool
	// Interval is the time between two requeues. Defaults to 10s.
	Interval time.Duration
	// BatchSize is the most dead letters one requeue takes. Defaults to 10.
	BatchSize int
}

// Options configure a Worker. The zero value is valid: every zero field takes
// its documented default. Negative values are rejected by New with an error
// naming the field, except where Unlimited is documented.
type Options struct {
	// InstanceID identifies this engine instance; it must be unique per
	// process. Defaults to a new UUIDv7.
	InstanceID uuid.UUID
	// ServiceName is recorded with the instance. Defaults to "vantage".
	ServiceName string
	// HostName is recorded with the instance. Defaults to os.Hostname().
	HostName string
	// InstanceMetadata is recorded with the instance's heartbeats.
	InstanceMetadata map[string]string

	// PollingInterval is the consumers' safety-net wake cadence when
	// notifications are unhealthy. Defaults to 1s.
	PollingInterval time.Duration
	// NotifyHealthyPollingInterval is the consumers' cadence while
	// notifications are healthy (the larger of it and PollingInterval is
	// used). Defaults to 1s.
	NotifyHealthyPollingInterval time.Duration
	// ClaimInterval is the claim loop's tight cadence. Defaults to 250ms.
	// It is also the least time between claims woken by notifications (at
	// most 250ms), which coalesces the claims of a burst of appends.
	ClaimInterval time.Duration
	// ClaimNotifyHealthyInterval is the claim loop's relaxed cadence while
	// notifications are healthy. Defaults to 5s.
	ClaimNotifyHealthyInterval time.Duration
	// HeartbeatInterval is how often the instance heartbeats. Defaults to 5s.
	// Must be below StaleInstanceThreshold.
	HeartbeatInterval time.Duration

	// MaxPerspectiveEventAttempts is how many attempts an event gets before
	// it moves to dead letters: an attempt is an apply that failed (an
	// error, a panic, its deadline passed) or a takeover of the event from
	// an instance that died holding it. Errors of the backend (a lost
	// connection, say) are never attempts. The event is dead-lettered right
	// after the failure that uses up its attempts, and its pair goes on
	// with the next event. Defaults to 10; Unlimited retries forever.
	MaxPerspectiveEventAttempts int
	// LeaseDuration is how long claimed work stays leased to this instance
	// without renewal: the engine renews the leases of the work it is
	// draining for as long as that takes. It is also the dedup retention.
	// Defaults to 300s; must be at least 1s.
	LeaseDuration time.Duration
	// ApplyTimeout bounds one apply (one event through one perspective):
	// past it the apply's context is cancelled and the event counts one
	// failed attempt. Defaults to 1m.
	ApplyTimeout time.Duration
	// ApplyAbandonGrace is how long an apply may run on past ApplyTimeout,
	// ignoring its cancelled context, before the engine abandons it: it is
	// logged at Error, counted (Worker.AbandonedApplies,
	// Hooks.OnApplyAbandoned), its event counts a failed attempt and its
	// pair is released for a retry while the apply runs on; whatever the
	// apply returns then is discarded. No other stream waits for it.
	// Defaults to 10s.
	ApplyAbandonGrace time.Duration
	// StaleInstanceThreshold is how long without a heartbeat before an
	// instance is abandoned and its work reclaimed. Defaults to 30s.
	StaleInstanceThreshold time.Duration
	// DebugMode keeps completed work rows, marked, instead of deleting them.
	DebugMode bool
	// PartitionCount is the number of partitions work is distributed over.
	// Defaults to ports.PartitionCountDefault (10000).
	PartitionCount int
	// IdleThresholdPolls is how many consecutive empty polls make the worker
	// idle. Defaults to 2.
	IdleThresholdPolls int
	// PerspectiveBatchSize is how many events are applied before the model
	// and cursor are saved (they are also saved at the end of each run).
	// Defaults to 100.
	PerspectiveBatchSize int
	// MaxConcurrentStreams bounds the streams drained in parallel within
	// one batch. Defaults to 30.
	MaxConcurrentStreams int
	// MaxConcurrentDrainConsumers is the number of consumer loops. Defaults to 4.
	MaxConcurrentDrainConsumers int
	// MaxStreamsPerBatch bounds the streams one claim returns, those the
	// instance holds already included. Defaults to 300.
	MaxStreamsPerBatch int
	// DrainLoopMaxIterations bounds the refetches of one stream within a
	// batch. Defaults to 5; 1 means a single pass.
	DrainLoopMaxIterations int
	// DrainLoopRefetchMinBatch is the fewest events an iteration must apply to
	// refetch. Defaults to 2.
	DrainLoopRefetchMinBatch int
	// ModelCacheSize is how many (stream, perspective) models this instance
	// keeps, encoded, after saving them, so draining a pair it owns needs no
	// load round trip. Defaults to 10000; Unlimited (-1) disables the cache.
	ModelCacheSize int
	// FetchMaxRows bounds the work rows one fetch returns. Defaults to 10000.
	FetchMaxRows int
	// DrainBatcher configures the sliding window over drain signals.
	DrainBatcher DrainBatcherOptions
	// Retry configures re-sending of unacknowledged completions.
	Retry RetryOptions
	// FailureRetryBase is the first retry delay of a failed event; it doubles
	// per attempt up to FailureRetryMax. Defaults to 30s (60s, 120s, 240s,
	// then 300s).
	FailureRetryBase time.Duration
	// FailureRetryMax caps the retry delay of a failed event. Defaults to 300s.
	FailureRetryMax time.Duration
	// Completion selects the completion strategy. Defaults to CompletionBatched.
	Completion CompletionMode
	// Generation names this instance's deploy generation: the service's
	// version or build. Dead letters record the generation they failed on,
	// and an instance with a Generation requeues, once, the dead letters
	// that failed on other generations (see DeadLetterRecovery), so a
	// deploy that fixes a handler retries what it failed on. Defaults to ""
	// (no recovery).
	Generation string
	// DeadLetterRecovery configures the requeue of dead letters by a new
	// generation.
	DeadLetterRecovery DeadLetterRecoveryOptions

	// Clock is the time source. When set, the engine also passes its time to
	// the backend (tests); when nil the real clock is used and the backend
	// uses its own (the database clock on PostgreSQL).
	Clock ports.Clock
	// Logger receives background errors. Defaults to slog.Default().
	Logger *slog.Logger
	// Hooks are callbacks for monitoring and tests.
	Hooks Hooks
	// Rewind configures rewinds of perspectives after late events.
	Rewind RewindOptions
	// Security configures the security context every apply function and
	// receptor runs under.
	Security SecurityOptions
}

// withDefaults returns a copy of o with defaults applied, or an error naming
// every invalid field.
func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	var errs []error
	dur := func(name string, v *time.Duration, def time.Duration) {
		defaultDuration(&errs, name, v, def)
	}
	num := func(name string, v *int, def int, allowUnlimited bool) {
		defaultCount(&errs, name, v, def, allowUnlimited)
	}
	if c.InstanceID == uuid.Nil {
		id, err := uuid.NewV7()
		if err != nil {
			return c, fmt.Errorf("generating instance id: %w", err)
		}
		c.InstanceID = id
	}
	if c.ServiceName == "" {
		c.ServiceName = ServiceNameDefault
	}
	if c.HostName == "" {
		c.HostName, _ = os.Hostname()
	}
	dur("PollingInterval", &c.PollingInterval, PollingIntervalDefault)
	dur("NotifyHealthyPollingInterval", &c.NotifyHealthyPollingInterval, NotifyHealthyPollingIntervalDefault)
	dur("ClaimInterval", &c.ClaimInterval, ClaimIntervalDefault)
	dur("ClaimNotifyHealthyInterval", &c.ClaimNotifyHealthyInterval, ClaimNotifyHealthyIntervalDefault)
	dur("HeartbeatInterval", &c.HeartbeatInterval, HeartbeatIntervalDefault)
	dur("LeaseDuration", &c.LeaseDuration, LeaseDurationDefault)
	dur("ApplyTimeout", &c.ApplyTimeout, ApplyTimeoutDefault)
	dur("ApplyAbandonGrace", &c.ApplyAbandonGrace, ApplyAbandonGraceDefault)
	dur("DeadLetterRecovery.Interval", &c.DeadLetterRecovery.Interval, DeadLetterRecoveryIntervalDefault)
	dur("StaleInstanceThreshold", &c.StaleInstanceThreshold, StaleInstanceThresholdDefault)
	dur("DrainBatcher.SlidingWindow", &c.DrainBatcher.SlidingWindow, SlidingWindowDefault)
	dur("DrainBatcher.MaxWait", &c.DrainBatcher.MaxWait, MaxWaitDefault)
	dur("Retry.RetryTimeout", &c.Retry.RetryTimeout, RetryTimeoutDefault)
	dur("Retry.MaxBackoff", &c.Retry.MaxBackoff, MaxBackoffDefault)
	dur("FailureRetryBase", &c.FailureRetryBase, FailureRetryBaseDefault)
	dur("FailureRetryMax", &c.FailureRetryMax, FailureRetryMaxDefault)
	num("MaxPerspectiveEventAttempts", &c.MaxPerspectiveEventAttempts, MaxPerspectiveEventAttemptsDefault, true)
	num("PartitionCount", &c.PartitionCount, ports.PartitionCountDefault, false)
	num("IdleThresholdPolls", &c.IdleThresholdPolls, IdleThresholdPollsDefault, false)
	num("PerspectiveBatchSize", &c.PerspectiveBatchSize, PerspectiveBatchSizeDefault, false)
	num("MaxConcurrentStreams", &c.MaxConcurrentStreams, MaxConcurrentStreamsDefault, false)
	num("MaxConcurrentDrainConsumers", &c.MaxConcurrentDrainConsumers, MaxConcurrentDrainConsumersDefault, false)
	num("MaxStreamsPerBatch", &c.MaxStreamsPerBatch, MaxStreamsPerBatchDefault, false)
	num("DrainLoopMaxIterations", &c.DrainLoopMaxIterations, DrainLoopMaxIterationsDefault, false)
	num("DrainLoopRefetchMinBatch", &c.DrainLoopRefetchMinBatch, DrainLoopRefetchMinBatchDefault, false)
	num("FetchMaxRows", &c.FetchMaxRows, FetchMaxRowsDefault, false)
	num("ModelCacheSize", &c.ModelCacheSize, ModelCacheSizeDefault, true)
	num("DrainBatcher.MaxSize", &c.DrainBatcher.MaxSize, MaxSizeDefault, false)
	num("Retry.MaxFlushAttempts", &c.Retry.MaxFlushAttempts, MaxFlushAttemptsDefault, false)
	num("DeadLetterRecovery.BatchSize", &c.DeadLetterRecovery.BatchSize, DeadLetterRecoveryBatchDefault, false)
	if c.LeaseDuration < time.Second {
		errs = append(errs, fmt.Errorf("Options.LeaseDuration must be at least 1s, got %s", c.LeaseDuration))
	}
	c.Rewind.withDefaults(&errs)
	if c.Retry.BackoffMultiplier == 0 {
		c.Retry.BackoffMultiplier = BackoffMultiplierDefault
	}
	if c.Retry.BackoffMultiplier < 1 {
		errs = append(errs, fmt.Errorf("Options.Retry.BackoffMultiplier must be at least 1, got %g", c.Retry.BackoffMultiplier))
	}
	if c.HeartbeatInterval >= c.StaleInstanceThreshold {
		errs = append(errs, fmt.Errorf("Options.HeartbeatInterval (%s) must be below Options.StaleInstanceThreshold (%s)", c.HeartbeatInterval, c.StaleInstanceThreshold))
	}
	if c.DrainBatcher.SlidingWindow > c.DrainBatcher.MaxWait {
		errs = append(errs, fmt.Errorf("Options.DrainBatcher.SlidingWindow (%s) must not exceed Options.DrainBatcher.MaxWait (%s)", c.DrainBatcher.SlidingWindow, c.DrainBatcher.MaxWait))
	}
	if c.FailureRetryBase > c.FailureRetryMax {
		errs = append(errs, fmt.Errorf("Options.FailureRetryBase (%s) must not exceed Options.FailureRetryMax (%s)", c.FailureRetryBase, c.FailureRetryMax))
	}
	if c.Completion != CompletionBatched && c.Completion != CompletionInstant {
		errs = append(errs, fmt.Errorf("Options.Completion has unknown value %d", c.Completion))
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("invalid options: %w", err)
	}
	return c, nil
}

// defaultDuration sets *v to def when it is zero and records an error naming
// the field (Options.name) when it is negative.
func defaultDuration(errs *[]error, name string, v *time.Duration, def time.Duration) {
	if *v < 0 {
		//lint:ignore ST1005 the message starts with the Go field name
		*errs = append(*errs, fmt.Errorf("Options.%s must not be negative, got %s", name, *v))
	}
	if *v == 0 {
		*v = def
	}
}

// defaultCount sets *v to def when it is zero and records an error naming
// the field (Options.name) when it is negative, unless allowUnlimited and it
// is Unlimited.
func defaultCount(errs *[]error, name string, v *int, def int, allowUnlimited bool) {
	if *v < 0 && !(allowUnlimited && *v == Unlimited) {
		//lint:ignore ST1005 the message starts with the Go field name
		*errs = append(*errs, fmt.Errorf("Options.%s must be positive, got %d", name, *v))
	}
	if *v == 0 {
		*v = def
	}
}
