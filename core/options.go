package core

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/vantage-go/vantage/core/completion"
	"github.com/vantage-go/vantage/core/internal/retry"
	"github.com/vantage-go/vantage/core/internal/rewind"
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
	StatsIntervalDefault                = 5 * time.Second
	ApplyDurationIntervalDefault        = time.Millisecond
	MaxEventAttemptsDefault             = 10
	LeaseDurationDefault                = 300 * time.Second
	ApplyTimeoutDefault                 = time.Minute
	ApplyAbandonGraceDefault            = 10 * time.Second
	StaleInstanceThresholdDefault       = 30 * time.Second
	IdleThresholdPollsDefault           = 2
	PerspectiveBatchSizeDefault         = 100
	MaxConcurrentStreamsDefault         = 30
	MaxPerspectivesPerStreamDefault     = 4
	DrainConsumersDefault               = 4
	MaxStreamsPerBatchDefault           = 300
	DrainLoopMaxIterationsDefault       = 5
	DrainLoopRefetchMinBatchDefault     = 2
	FetchMaxRowsDefault                 = 10_000
	SlidingWindowDefault                = 300 * time.Millisecond
	MaxWaitDefault                      = 3 * time.Second
	MaxSizeDefault                      = 1000
	CompletionResendInitialDefault      = time.Second
	CompletionResendMaxDefault          = 60 * time.Second
	CompletionResendMultiplierDefault   = 2.0
	FlushRetryInitialDefault            = 100 * time.Millisecond
	FlushRetryMaxDefault                = 5 * time.Second
	FlushRetryMultiplierDefault         = 2.0
	FlushRetryMaxAttemptsDefault        = 5
	EventRetryInitialDefault            = 60 * time.Second
	EventRetryMaxDefault                = 300 * time.Second
	EventRetryMultiplierDefault         = 2.0
	InfraRetryInitialDefault            = 100 * time.Millisecond
	InfraRetryMaxDefault                = 5 * time.Second
	InfraRetryMultiplierDefault         = 1.5
	DeadLetterRecoveryIntervalDefault   = 10 * time.Second
	DeadLetterRecoveryBatchDefault      = 10
	RebuildPollIntervalDefault          = 5 * time.Second
	ServiceNameDefault                  = "vantage"
)

// Unlimited disables a limit where an option documents it (for example
// Retries.MaxEventAttempts).
const Unlimited = -1

// Options configure a Worker. The zero value is valid: every zero field takes
// its documented default. Negative values are rejected by New with an error
// naming the field, except where Unlimited is documented. The fields are
// grouped by concern: who the instance is, then how it claims work
// (Claims), drains it (Drain) and retries what failed (Retries), then the
// services around them.
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
	// Generation names this instance's deploy generation: the service's
	// version or build. Dead letters record the generation they failed on,
	// and an instance with a Generation requeues, once, the dead letters
	// that failed on other generations (see DeadLetterRecovery), so a
	// deploy that fixes a handler retries what it failed on. Defaults to ""
	// (no recovery).
	Generation string

	// Claims configure how work is leased across instances.
	Claims ClaimOptions
	// Drain configures how leased work is fetched and applied.
	Drain DrainOptions
	// Retries configure what a failure costs and when it is retried.
	Retries RetryOptions
	// Rewind configures rewinds of perspectives after late events, and
	// rebuilds.
	Rewind RewindOptions
	// Completion builds the completion strategy, which decides when
	// outcomes reach the backend: completion.BatchedFactory (the default)
	// buffers them and flushes them in batches, acknowledged and retried;
	// completion.InstantFactory reports each one at once (more round
	// trips; every outcome visible at once), and keeps one whose report
	// failed to send it again as batched ones are (Retries.Flush, then
	// Retries.CompletionResend) until it is acknowledged. A factory of your
	// own may build any Strategy. New calls it once per Worker.
	Completion completion.Factory
	// DeadLetterRecovery configures the requeue of dead letters by a new
	// generation.
	DeadLetterRecovery DeadLetterRecoveryOptions
	// Health sets the thresholds of Worker.Health.
	Health HealthOptions
	// Security configures the security context every apply function and
	// receptor runs under.
	Security SecurityOptions
	// Hooks are callbacks for monitoring and tests.
	Hooks Hooks
	// Telemetry configures the engine's metrics and traces.
	Telemetry TelemetryOptions

	// Clock is the time source. When set, the engine also passes its time to
	// the backend (tests); when nil the real clock is used and the backend
	// uses its own (the database clock on PostgreSQL).
	Clock ports.Clock
	// Logger receives the worker's lines (its start and stop, background
	// failures, logged once and then summed up, and their recoveries), and
	// is handed to the backend's Notifier for the lines about its
	// subscription (ports.NotifierListenParams). The worker adds
	// instance_id and a component to each line, so Logger should carry
	// neither. Defaults to slog.Default().
	Logger *slog.Logger
	// DebugMode keeps completed work rows, marked, instead of deleting them.
	DebugMode bool
}

// ClaimOptions configure how work is leased across instances: the claim
// loop that leases streams to this instance, the leases themselves, and
// the heartbeats that keep the instance live (see CLAIMING.md).
type ClaimOptions struct {
	// Interval is the claim loop's tight cadence. Defaults to 250ms.
	// A notification claims at once while claims took less than half of
	// the recent time (bursts of 10ms allowed); beyond that it waits, which
	// coalesces the claims of a stream of appends, never longer than
	// Interval (nor 250ms).
	Interval time.Duration
	// NotifyHealthyInterval is the claim loop's relaxed cadence while
	// notifications are healthy. Defaults to 5s.
	NotifyHealthyInterval time.Duration
	// Disabled makes a passive instance: the claim loop does not run,
	// so the instance claims no work, and its heartbeats declare it passive
	// (ports.InstanceHeartbeatParams.Passive), so it takes no share of the
	// streams either: the other instances claim every partition among them,
	// while the streams it holds stay its own. Everything else runs: the
	// heartbeat, the consumers (which drain what parking wakes and rewinds
	// hand them; notifications and RequestImmediatePoll only wake them),
	// rewinds, Rebuild and rebuild requests, the startup rewind scan,
	// lifecycle reconciliation and dead-letter recovery. For operator
	// instances, a rebuild box, or a deploy being drained. Defaults to
	// false: the instance claims.
	Disabled bool
	// LeaseDuration is how long claimed work stays leased to this instance
	// without renewal: the engine renews the leases of the work it is
	// draining for as long as that takes. It is also the dedup retention.
	// Defaults to 300s; must be at least 1s.
	LeaseDuration time.Duration
	// StaleInstanceThreshold is how long without a heartbeat before an
	// instance is abandoned and its work reclaimed. Defaults to 30s.
	StaleInstanceThreshold time.Duration
	// HeartbeatInterval is how often the instance heartbeats. Defaults to 5s.
	// Must be below StaleInstanceThreshold.
	HeartbeatInterval time.Duration
	// PartitionCount is the number of partitions work is distributed over.
	// Defaults to ports.PartitionCountDefault (10000).
	PartitionCount int
	// MaxStreamsPerBatch bounds the streams one claim returns, those the
	// instance holds already included. Defaults to 300.
	MaxStreamsPerBatch int
}

// DrainOptions configure how leased work is fetched and applied: the
// consumer loops that take the claimed streams, the batches they gather,
// the passes and fetches of a batch, and the applies of its events.
type DrainOptions struct {
	// PollingInterval is the consumers' safety-net wake cadence when
	// notifications are unhealthy. Defaults to 1s.
	PollingInterval time.Duration
	// NotifyHealthyPollingInterval is the consumers' cadence while
	// notifications are healthy (the larger of it and PollingInterval is
	// used). Defaults to 1s.
	NotifyHealthyPollingInterval time.Duration
	// IdleThresholdPolls is how many consecutive empty polls make the worker
	// idle. Defaults to 2.
	IdleThresholdPolls int
	// Consumers is the number of consumer loops. Defaults to 4.
	Consumers int
	// Batcher bounds the gathering of streams into a batch.
	Batcher DrainBatcherOptions
	// MaxConcurrentStreams bounds the streams drained in parallel within
	// one batch. Defaults to 30. (The original system calls this bound
	// MaxConcurrentPerspectives.)
	MaxConcurrentStreams int
	// MaxPerspectivesPerStream bounds the perspectives of one stream
	// drained in parallel: each runs its own events in order, under its
	// own gate, and the stream is released once every one of them ended.
	// With MaxConcurrentStreams streams at once, up to
	// MaxConcurrentStreams × MaxPerspectivesPerStream applies run in
	// parallel. Defaults to 4; 1 drains them one after another. The
	// original system drains a stream's perspectives one after another.
	MaxPerspectivesPerStream int
	// PerspectiveBatchSize is how many events are applied before the model
	// and cursor are saved (they are also saved at the end of each run).
	// Defaults to 100.
	PerspectiveBatchSize int
	// FetchMaxRows bounds the work rows one fetch returns. Defaults to 10000.
	FetchMaxRows int
	// MaxRowsInFlight bounds the work rows a worker holds while it catches
	// up, whatever the backlog: before each fetch a batch waits until fewer
	// than MaxRowsInFlight fetched rows wait to be drained, across the
	// worker's batches, and until the rows applied and not yet acknowledged
	// by the backend are fewer than MaxRowsInFlight too. Each fetch may
	// then add up to FetchMaxRows. Defaults to twice FetchMaxRows.
	MaxRowsInFlight int
	// LoopMaxIterations bounds the passes over one stream within a
	// batch: a stream is fetched again, once what it applied is
	// acknowledged, when its fetch was cut at FetchMaxRows or when events
	// arrived while it was drained (a claim or a notification pushed it
	// meanwhile). Defaults to 5; 1 means a single pass.
	LoopMaxIterations int
	// LoopRefetchMinBatch is the fewest events a pass must apply for
	// the stream to be fetched again within the batch (an event applied by
	// several perspectives counts once); below it, what arrived meanwhile
	// waits for the next batch. Defaults to 2.
	LoopRefetchMinBatch int
	// ModelCacheSize is how many (stream, perspective) models this instance
	// keeps, encoded, after saving them, so draining a pair it owns needs no
	// load round trip. Defaults to 10000; Unlimited (-1) disables the cache.
	ModelCacheSize int
	// ApplyTimeout bounds one apply (one event through one perspective):
	// past it the apply's context is cancelled and the event counts one
	// failed attempt. It bounds each write of a table projection too, and
	// sets the patience of a projection's save shared with others,
	// min(ApplyTimeout/4, 1s) (see HandleTx). Defaults to 1m.
	ApplyTimeout time.Duration
	// ApplyAbandonGrace is how long an apply may run on past ApplyTimeout,
	// ignoring its cancelled context, before the engine abandons it: it is
	// logged at Error, counted (Worker.AbandonedApplies,
	// Hooks.OnApplyAbandoned), its event counts a failed attempt and its
	// pair is released for a retry while the apply runs on; whatever the
	// apply returns then is discarded. Neither the other perspectives of
	// its stream nor any other stream waits for it. Defaults to 10s.
	ApplyAbandonGrace time.Duration
}

// DrainBatcherOptions bound how streams that arrive to be drained gather
// into one batch. A batch starts at once while no other batch is being
// drained; streams that arrive while one is gather into the next for as
// long as the batch in flight is expected to run (its average duration)
// and more arrivals are expected meanwhile, and no longer than these
// bounds. A quiet instance thus drains an append as soon as it is claimed,
// and a busy one in full batches.
type DrainBatcherOptions struct {
	// SlidingWindow bounds the gathering after the latest arrival.
	// Defaults to 300ms.
	SlidingWindow time.Duration
	// MaxWait bounds the gathering from the first arrival. Defaults to 3s.
	MaxWait time.Duration
	// MaxSize is the most stream ids in one batch. Defaults to 1000.
	MaxSize int
}

// ModelCacheSizeDefault is the default of Options.Drain.ModelCacheSize.
const ModelCacheSizeDefault = 10_000

// RetryOptions configure what a failure costs and when what failed is
// tried again. Each Backoff says what it retries; an error that no retry
// can fix is never retried in place (see Backoff).
type RetryOptions struct {
	// MaxEventAttempts is how many attempts an event gets before it moves
	// to dead letters: an attempt is an apply that failed (an error, a
	// panic, its deadline passed) or a takeover of the event from an
	// instance that died holding it. Errors of the backend (a lost
	// connection, say) are never attempts. The event is dead-lettered right
	// after the failure that uses up its attempts, and its pair goes on
	// with the next event. Defaults to 10; Unlimited retries forever.
	MaxEventAttempts int
	// Event is the delay before a failed event (its apply returned an
	// error, panicked or timed out) is applied again: Initial after its
	// first failure, Multiplier times longer after each next one, at most
	// Max, until MaxEventAttempts moves it to dead letters. Its pair waits
	// meanwhile. Only an apply's failure is retried this way: backend
	// errors are never charged to the event (see Infra). Defaults to 60s,
	// doubling, at most 300s (60s, 120s, 240s, 300s …).
	Event Backoff
	// Infra is the delay before a pair whose drain met a backend error
	// (a fetch, a model load or a move to dead letters failed, say because
	// the connection was lost) is drained again, for as long as it keeps
	// failing. The pair keeps its rows and no attempt is counted: the event
	// is not at fault. Each wait is spread at random by ±50%, so the pairs
	// of one outage do not all come back at once. A model the store refuses
	// as malformed (a permanent error) is not saved again as is: the event
	// that produced it is found and charged a failed attempt (see Event).
	// Defaults to 100ms, growing by 1.5, at most 5s.
	Infra Backoff
	// CompletionResend is when a completion or failure report the engine
	// handed to the backend (with completion.InstantFactory, one whose report
	// failed) is sent again because its acknowledgement has not come: a
	// wait of Initial after the send, Multiplier times longer after each
	// re-send, at most Max. It is what recovers an outcome whose batch the
	// flusher dropped (see Flush), unless the backend refused it, since
	// the outcome's rows stay leased to this instance until it is
	// acknowledged. Multiplier 1 re-sends at a constant pace. Defaults to
	// 1s, doubling, at most 60s (1s, 2s, 4s … 60s).
	CompletionResend Backoff
	// Flush configures the in-place retries of a batch whose flush to
	// the backend failed. A permanent error is never retried: the batch is
	// halved to drop only the outcomes the backend refuses. Defaults to
	// 100ms, doubling, at most 5s, and 5 attempts.
	Flush FlushRetryOptions
}

// Backoff configures the waits between the retries of something that
// failed: Initial before the first retry, each next wait Multiplier times
// longer, none longer than Max (1s, 2s, 4s … 60s for Initial 1s,
// Multiplier 2 and Max 60s). Each option of this type says what it
// retries and how it treats an error that no retry can fix (the backend
// refusing a request as malformed, ports.ErrInvalidArgument, or naming a
// row that does not exist, ports.ErrNotFound); a zero field takes that
// option's default, a negative one is rejected.
type Backoff struct {
	// Initial is the wait before the first retry. Must not exceed Max.
	Initial time.Duration
	// Max caps every wait.
	Max time.Duration
	// Multiplier grows the wait per retry; 1 keeps every wait at Initial.
	// Must be at least 1.
	Multiplier float64
}

// internal returns b, with defaults applied, as the engine's backoff with
// the given jitter.
func (b Backoff) internal(jitter float64) retry.Backoff {
	return retry.Backoff{Initial: b.Initial, Max: b.Max, Multiplier: b.Multiplier, Jitter: jitter}
}

// FlushRetryOptions configure the in-place retries of a batch of
// completions or failure reports whose flush to the backend failed: the
// same batch is sent again after the Backoff, up to MaxAttempts sends in
// all, while the batches behind it wait. A batch refused with a permanent
// error (ports.ErrInvalidArgument, ports.ErrNotFound) is not sent again as
// is: it is halved until the refused outcomes are alone, those are
// given up on and the others land. An outcome dropped after its last
// attempt is not lost: it is sent again on the Retries.CompletionResend
// schedule until it is acknowledged. One given up on is not sent again,
// since it would be refused again: its pair is drained again after the
// Retries.Infra backoff (its rows already in the stored model complete
// without being applied again, and a failed event is applied again,
// uncharged).
type FlushRetryOptions struct {
	// Backoff is the wait between two sends of one batch. Defaults to
	// 100ms, doubling, at most 5s.
	Backoff
	// MaxAttempts is how many times one batch is sent before it is
	// dropped; 1 disables the retries. Defaults to 5.
	MaxAttempts int
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

// TelemetryOptions configure the engine's metrics and traces (see
// docs/observability.md).
type TelemetryOptions struct {
	// MeterProvider creates the engine's instruments. Defaults to
	// otel.GetMeterProvider(), the global provider, which records nothing
	// until the application installs one.
	MeterProvider metric.MeterProvider
	// TracerProvider creates the engine's spans. Defaults to
	// otel.GetTracerProvider(), the global provider, which records nothing
	// until the application installs one.
	TracerProvider trace.TracerProvider
	// StatsInterval is the least time between two reads of the backend's
	// backlog figures (ports.Stats) for the lag metrics and Worker.Health:
	// figures younger than that are served from memory, and nothing is read
	// while nobody asks. Defaults to 5s.
	StatsInterval time.Duration
	// ApplyDurationInterval spaces the applies that the
	// vantage.perspective.apply.duration histogram measures: of a
	// perspective's applies, the first to start at least this long after
	// the last measured one is measured. A catch-up of hundreds of
	// thousands of events a second then records about a thousand
	// durations a second per perspective instead of paying a histogram
	// record and a clock read for each event, while a perspective that
	// applies fewer than that has nearly every apply measured. Whether an
	// apply is measured does not depend on its own duration, so the
	// histogram's distribution stays a fair sample; its count is not the
	// number of applies (vantage.perspective.events is). Defaults to 1ms;
	// a negative value measures every apply.
	ApplyDurationInterval time.Duration
}

// withDefaults returns a copy of o with defaults applied, or an error naming
// every invalid field.
func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if err := c.identityDefaults(); err != nil {
		return c, err
	}
	var errs []error
	c.Claims.withDefaults(&errs)
	c.Drain.withDefaults(&errs)
	c.Retries.withDefaults(&errs)
	c.Rewind.withDefaults(&errs)
	c.Telemetry.withDefaults(&errs)
	defaultDuration(&errs, "DeadLetterRecovery.Interval", &c.DeadLetterRecovery.Interval, DeadLetterRecoveryIntervalDefault)
	defaultCount(&errs, "DeadLetterRecovery.BatchSize", &c.DeadLetterRecovery.BatchSize, DeadLetterRecoveryBatchDefault, false)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("invalid options: %w", err)
	}
	return c, nil
}

// identityDefaults names the instance: a new id, the default service name
// and the host's name where they are not set.
func (c *Options) identityDefaults() error {
	if c.InstanceID == uuid.Nil {
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("generating instance id: %w", err)
		}
		c.InstanceID = id
	}
	if c.ServiceName == "" {
		c.ServiceName = ServiceNameDefault
	}
	if c.HostName == "" {
		c.HostName, _ = os.Hostname()
	}
	return nil
}

// withDefaults fills the unset claim options and records, by field, those
// that are invalid.
func (o *ClaimOptions) withDefaults(errs *[]error) {
	defaultDuration(errs, "Claims.Interval", &o.Interval, ClaimIntervalDefault)
	defaultDuration(errs, "Claims.NotifyHealthyInterval", &o.NotifyHealthyInterval, ClaimNotifyHealthyIntervalDefault)
	defaultDuration(errs, "Claims.HeartbeatInterval", &o.HeartbeatInterval, HeartbeatIntervalDefault)
	defaultDuration(errs, "Claims.LeaseDuration", &o.LeaseDuration, LeaseDurationDefault)
	defaultDuration(errs, "Claims.StaleInstanceThreshold", &o.StaleInstanceThreshold, StaleInstanceThresholdDefault)
	defaultCount(errs, "Claims.PartitionCount", &o.PartitionCount, ports.PartitionCountDefault, false)
	defaultCount(errs, "Claims.MaxStreamsPerBatch", &o.MaxStreamsPerBatch, MaxStreamsPerBatchDefault, false)
	if o.LeaseDuration < time.Second {
		*errs = append(*errs, fmt.Errorf("Options.Claims.LeaseDuration must be at least 1s, got %s", o.LeaseDuration))
	}
	if o.HeartbeatInterval >= o.StaleInstanceThreshold {
		*errs = append(*errs, fmt.Errorf("Options.Claims.HeartbeatInterval (%s) must be below Options.Claims.StaleInstanceThreshold (%s)", o.HeartbeatInterval, o.StaleInstanceThreshold))
	}
}

// withDefaults fills the unset drain options and records, by field, those
// that are invalid.
func (o *DrainOptions) withDefaults(errs *[]error) {
	defaultDuration(errs, "Drain.PollingInterval", &o.PollingInterval, PollingIntervalDefault)
	defaultDuration(errs, "Drain.NotifyHealthyPollingInterval", &o.NotifyHealthyPollingInterval, NotifyHealthyPollingIntervalDefault)
	defaultDuration(errs, "Drain.ApplyTimeout", &o.ApplyTimeout, ApplyTimeoutDefault)
	defaultDuration(errs, "Drain.ApplyAbandonGrace", &o.ApplyAbandonGrace, ApplyAbandonGraceDefault)
	defaultDuration(errs, "Drain.Batcher.SlidingWindow", &o.Batcher.SlidingWindow, SlidingWindowDefault)
	defaultDuration(errs, "Drain.Batcher.MaxWait", &o.Batcher.MaxWait, MaxWaitDefault)
	defaultCount(errs, "Drain.IdleThresholdPolls", &o.IdleThresholdPolls, IdleThresholdPollsDefault, false)
	defaultCount(errs, "Drain.PerspectiveBatchSize", &o.PerspectiveBatchSize, PerspectiveBatchSizeDefault, false)
	defaultCount(errs, "Drain.MaxConcurrentStreams", &o.MaxConcurrentStreams, MaxConcurrentStreamsDefault, false)
	defaultCount(errs, "Drain.MaxPerspectivesPerStream", &o.MaxPerspectivesPerStream, MaxPerspectivesPerStreamDefault, false)
	defaultCount(errs, "Drain.Consumers", &o.Consumers, DrainConsumersDefault, false)
	defaultCount(errs, "Drain.LoopMaxIterations", &o.LoopMaxIterations, DrainLoopMaxIterationsDefault, false)
	defaultCount(errs, "Drain.LoopRefetchMinBatch", &o.LoopRefetchMinBatch, DrainLoopRefetchMinBatchDefault, false)
	defaultCount(errs, "Drain.FetchMaxRows", &o.FetchMaxRows, FetchMaxRowsDefault, false)
	defaultCount(errs, "Drain.MaxRowsInFlight", &o.MaxRowsInFlight, 2*max(o.FetchMaxRows, 1), false)
	defaultCount(errs, "Drain.ModelCacheSize", &o.ModelCacheSize, ModelCacheSizeDefault, true)
	defaultCount(errs, "Drain.Batcher.MaxSize", &o.Batcher.MaxSize, MaxSizeDefault, false)
	if o.Batcher.SlidingWindow > o.Batcher.MaxWait {
		*errs = append(*errs, fmt.Errorf("Options.Drain.Batcher.SlidingWindow (%s) must not exceed Options.Drain.Batcher.MaxWait (%s)", o.Batcher.SlidingWindow, o.Batcher.MaxWait))
	}
}

// withDefaults fills the unset retry options and records, by field, those
// that are invalid.
func (o *RetryOptions) withDefaults(errs *[]error) {
	defaultCount(errs, "Retries.MaxEventAttempts", &o.MaxEventAttempts, MaxEventAttemptsDefault, true)
	defaultBackoff(errs, "Retries.Event", &o.Event,
		Backoff{EventRetryInitialDefault, EventRetryMaxDefault, EventRetryMultiplierDefault})
	defaultBackoff(errs, "Retries.Infra", &o.Infra,
		Backoff{InfraRetryInitialDefault, InfraRetryMaxDefault, InfraRetryMultiplierDefault})
	defaultBackoff(errs, "Retries.CompletionResend", &o.CompletionResend,
		Backoff{CompletionResendInitialDefault, CompletionResendMaxDefault, CompletionResendMultiplierDefault})
	defaultBackoff(errs, "Retries.Flush", &o.Flush.Backoff,
		Backoff{FlushRetryInitialDefault, FlushRetryMaxDefault, FlushRetryMultiplierDefault})
	defaultCount(errs, "Retries.Flush.MaxAttempts", &o.Flush.MaxAttempts, FlushRetryMaxAttemptsDefault, false)
}

// withDefaults fills the unset telemetry options and records, by field,
// those that are invalid.
func (o *TelemetryOptions) withDefaults(errs *[]error) {
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	defaultDuration(errs, "Telemetry.StatsInterval", &o.StatsInterval, StatsIntervalDefault)
	if o.ApplyDurationInterval == 0 {
		o.ApplyDurationInterval = ApplyDurationIntervalDefault // negative: measure every apply
	}
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

// defaultBackoff sets every zero field of *b to that of def and records an
// error naming each invalid field (Options.name.Field).
func defaultBackoff(errs *[]error, name string, b *Backoff, def Backoff) {
	defaultDuration(errs, name+".Initial", &b.Initial, def.Initial)
	defaultDuration(errs, name+".Max", &b.Max, def.Max)
	if b.Multiplier == 0 {
		b.Multiplier = def.Multiplier
	}
	if !(b.Multiplier >= 1) { // also rejects NaN
		//lint:ignore ST1005 the message starts with the Go field name
		*errs = append(*errs, fmt.Errorf("Options.%s.Multiplier must be at least 1, got %g", name, b.Multiplier))
	}
	if b.Initial > b.Max && b.Max > 0 {
		//lint:ignore ST1005 the message starts with the Go field name
		*errs = append(*errs, fmt.Errorf("Options.%s.Initial (%s) must not exceed Options.%s.Max (%s)", name, b.Initial, name, b.Max))
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

// StartupScanMode says whether the startup rewind scan holds the startup
// signal until every interrupted rewind is repaired.
type StartupScanMode int

const (
	// StartupScanBlocking repairs interrupted rewinds before
	// StartupScanComplete is signalled (bounded: 100 polls).
	StartupScanBlocking = StartupScanMode(rewind.ScanBlocking)
	// StartupScanBackground signals at once and repairs in the background.
	StartupScanBackground = StartupScanMode(rewind.ScanBackground)
	// StartupScanDisabled skips the scan.
	StartupScanDisabled = StartupScanMode(rewind.ScanDisabled)
)

// Defaults of RewindOptions.
const (
	RewindDebounceDefault       = 5 * time.Second
	RewindMaxDebounceDefault    = 30 * time.Second
	RewindLockTimeoutDefault    = 30 * time.Second
	RewindKeepAliveDefault      = 10 * time.Second
	MaxConcurrentRewindsDefault = 3
)

// RewindOptions configure rewinds, replaying a (stream, perspective) after
// an event arrived below its cursor, and the rebuild requests a worker
// carries out.
type RewindOptions struct {
	// Disabled turns rewinds off. A late event (stored below its pair's
	// cursor) is then moved to dead letters with reason "late", never
	// applied out of order nor completed unapplied; requeue it once rewinds
	// are on.
	Disabled bool
	// StartupScan selects the startup scan mode. Defaults to
	// StartupScanBlocking.
	StartupScan StartupScanMode
	// MaxConcurrentRewinds bounds rewinds running at once. Defaults to 3.
	MaxConcurrentRewinds int
	// Debounce is the sliding window after the latest late event before a
	// rewind starts, so a burst of late events causes one rewind. Defaults
	// to 5s.
	Debounce time.Duration
	// MaxDebounce caps the wait from the first late event. Defaults to 30s.
	MaxDebounce time.Duration
	// LockTimeout is how long the rewind lock lasts without renewal.
	// Defaults to 30s.
	LockTimeout time.Duration
	// KeepAlive is how often a running rewind renews its lock. Defaults to
	// 10s; must be below LockTimeout.
	KeepAlive time.Duration
	// SnapshotEvery stores a model snapshot whenever a saved model crosses a
	// multiple of that many stream versions (in normal processing, rewinds
	// and rebuilds), so a rewind replays from the latest snapshot before its
	// trigger instead of from the start. A snapshot holds the pair's epoch
	// of the model it copies, and a rewind starts only from one of the
	// model it loaded: never from a snapshot of a model that a rewind or a
	// rebuild replaced since. A rewind keeps the snapshot it started from
	// for the epoch it moves the pair to. 0 disables snapshots.
	SnapshotEvery int
	// RebuildPollInterval is how often the worker looks for rebuild
	// requests of its perspectives (ports.Admin.RebuildRequest), which it
	// claims and carries out one at a time, resuming those whose instance
	// died or stopped (see Rebuilding in the package doc). Each look is one
	// index probe of the backend's RebuildQueue; a backend without one, or
	// without a RewindStore, has the worker look for none. A request's
	// claim lasts LockTimeout and is renewed every KeepAlive, and whenever
	// its progress is recorded (at most once a second). Defaults to 5s.
	RebuildPollInterval time.Duration
}

// withDefaults fills the unset rewind options and records, by field, those
// that are invalid.
func (o *RewindOptions) withDefaults(errs *[]error) {
	defaultDuration(errs, "Rewind.Debounce", &o.Debounce, RewindDebounceDefault)
	defaultDuration(errs, "Rewind.MaxDebounce", &o.MaxDebounce, RewindMaxDebounceDefault)
	defaultDuration(errs, "Rewind.LockTimeout", &o.LockTimeout, RewindLockTimeoutDefault)
	defaultDuration(errs, "Rewind.KeepAlive", &o.KeepAlive, RewindKeepAliveDefault)
	defaultCount(errs, "Rewind.MaxConcurrentRewinds", &o.MaxConcurrentRewinds, MaxConcurrentRewindsDefault, false)
	defaultDuration(errs, "Rewind.RebuildPollInterval", &o.RebuildPollInterval, RebuildPollIntervalDefault)
	if o.SnapshotEvery < 0 {
		*errs = append(*errs, fmt.Errorf("Options.Rewind.SnapshotEvery must not be negative, got %d", o.SnapshotEvery))
	}
	if o.KeepAlive >= o.LockTimeout {
		*errs = append(*errs, fmt.Errorf("Options.Rewind.KeepAlive (%s) must be below Options.Rewind.LockTimeout (%s)", o.KeepAlive, o.LockTimeout))
	}
	if o.Debounce > o.MaxDebounce {
		*errs = append(*errs, fmt.Errorf("Options.Rewind.Debounce (%s) must not exceed Options.Rewind.MaxDebounce (%s)", o.Debounce, o.MaxDebounce))
	}
	if o.StartupScan < StartupScanBlocking || o.StartupScan > StartupScanDisabled {
		*errs = append(*errs, fmt.Errorf("Options.Rewind.StartupScan has unknown value %d", o.StartupScan))
	}
}
