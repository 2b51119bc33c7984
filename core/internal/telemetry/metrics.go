package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/vantage-go/vantage/core/internal/complete"
	"github.com/vantage-go/vantage/core/internal/stage"
	"github.com/vantage-go/vantage/ports"
)

// meterName names the engine's instruments (the instrumentation scope).
const meterName = "github.com/vantage-go/vantage"

// Attribute keys of the engine's measurements.
const (
	attrOutcome    = attribute.Key("vantage.outcome")
	attrReason     = attribute.Key("vantage.reason")
	attrFlusher    = attribute.Key("vantage.flusher")
	attrRewindKind = attribute.Key("vantage.rewind.kind")
)

// Values of vantage.outcome, vantage.reason (beyond the dead-letter
// reasons of ports), vantage.flusher and vantage.rewind.kind.
const (
	outcomeApplied = "applied"
	outcomeFailed  = "failed"
	outcomeSkipped = "skipped"
	outcomeOK      = "ok"
	outcomeError   = "error"

	reasonClaim    = "claim"
	reasonReceptor = "receptor"

	kindRewind  = "rewind"
	kindRebuild = "rebuild"
)

// Bucket boundaries of the histograms. Durations are in seconds: an apply
// takes microseconds in memory and may take up to ApplyTimeout; a batch,
// a claim or a flush takes a round trip or a few.
var (
	durationBuckets = []float64{
		0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
		0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
	}
	countBuckets = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}
)

// Metrics holds the engine's instruments, created from
// Options.Telemetry.MeterProvider at New. Its methods are the engine's
// measurement points; each is one call at its site. Hot paths pass
// precomputed attribute sets (see attrs), so that a measurement allocates
// nothing, and count once per pair run or batch rather than per event. With
// the default provider, before the application installs one, every
// instrument is a no-op and the per-event duration does not even read the
// clock.
type Metrics struct {
	clock ports.Clock
	log   *slog.Logger
	meter metric.Meter
	// applyEvery spaces the recorded apply durations of a perspective
	// (Options.Telemetry.ApplyDurationInterval).
	applyEvery time.Duration

	// Per perspective.
	events        metric.Int64Counter
	applyDuration metric.Float64Histogram
	dedupHits     metric.Int64Counter
	failures      metric.Int64Counter
	deadLetters   metric.Int64Counter
	backendErrors metric.Int64Counter
	abandoned     metric.Int64Counter
	// Batches and claims.
	batchStreams  metric.Int64Histogram
	batchEvents   metric.Int64Histogram
	batchDuration metric.Float64Histogram
	claimDuration metric.Float64Histogram
	claimStreams  metric.Int64Counter
	claimStalls   metric.Int64Counter
	// Completion flushes.
	flushSize     metric.Int64Histogram
	flushDuration metric.Float64Histogram
	flushRetries  metric.Int64Counter
	flushDropped  metric.Int64Counter
	// Rewinds and lifecycle stages.
	rewinds        metric.Int64Counter
	rewindDuration metric.Float64Histogram
	rewindEvents   metric.Int64Counter
	stageRuns      metric.Int64Counter
	stageFailures  metric.Int64Counter
	// Observed at each collection (see observe); the lag gauges are nil
	// when the backend has no Stats port.
	liveInstances   metric.Int64ObservableGauge
	heartbeatAge    metric.Float64ObservableGauge
	listenerHealthy metric.Int64ObservableGauge
	stuckApplies    metric.Int64ObservableGauge
	lagPending      metric.Int64ObservableGauge
	lagOldestAge    metric.Float64ObservableGauge

	claimOK, claimErr attrs
	flushAttrs        map[string]*flushAttrs // by flusher

	// byName holds the attributes of the perspectives registered at New;
	// others (registered later, or named by work rows this instance has no
	// perspective for) are kept in more.
	byName map[string]*PerspectiveAttrs
	more   sync.Map // string -> *PerspectiveAttrs
}

// attrs is one attribute set as the options of each kind of measurement,
// built once: passing a prebuilt slice allocates nothing.
type attrs struct {
	add     []metric.AddOption
	record  []metric.RecordOption
	observe []metric.ObserveOption
}

func newAttrs(kvs ...attribute.KeyValue) attrs {
	o := metric.WithAttributeSet(attribute.NewSet(kvs...))
	return attrs{add: []metric.AddOption{o}, record: []metric.RecordOption{o}, observe: []metric.ObserveOption{o}}
}

// PerspectiveAttrs are the attribute sets of one perspective's hot
// measurements.
type PerspectiveAttrs struct {
	name                     string
	base                     attrs // vantage.perspective alone
	applied, failed, skipped attrs // with vantage.outcome
	// nextSample is the earliest start, in Unix nanoseconds, of the next
	// apply whose duration is recorded.
	nextSample atomic.Int64
}

func newPerspectiveAttrs(name string) *PerspectiveAttrs {
	p := attrPerspective.String(name)
	return &PerspectiveAttrs{
		name:    name,
		base:    newAttrs(p),
		applied: newAttrs(p, attrOutcome.String(outcomeApplied)),
		failed:  newAttrs(p, attrOutcome.String(outcomeFailed)),
		skipped: newAttrs(p, attrOutcome.String(outcomeSkipped)),
	}
}

// with returns the attributes of the perspective plus kvs, for the rare
// measurements (failures, dead letters, rewinds), which build theirs.
func (p *PerspectiveAttrs) with(kvs ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributes(append(kvs, attrPerspective.String(p.name))...)
}

// flushAttrs are the attribute sets of one flusher's measurements.
type flushAttrs struct {
	base, ok, failed attrs
}

// MetricsConfig is what NewMetrics reads.
type MetricsConfig struct {
	Provider metric.MeterProvider
	Clock    ports.Clock
	Log      *slog.Logger
	// ApplyEvery is the interval of the sampled per-event apply duration.
	ApplyEvery time.Duration
	// Lag creates the lag instruments (the backend has a Stats port).
	Lag bool
	// Perspectives are the registered perspectives, whose attribute sets
	// are made up front.
	Perspectives []string
}

// NewMetrics creates the engine's instruments.
func NewMetrics(cfg MetricsConfig) *Metrics {
	provider, clock, log, applyEvery := cfg.Provider, cfg.Clock, cfg.Log, cfg.ApplyEvery
	meter := provider.Meter(meterName)
	m := &Metrics{clock: clock, log: log, meter: meter, applyEvery: applyEvery, byName: map[string]*PerspectiveAttrs{}, flushAttrs: map[string]*flushAttrs{}}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if c == nil {
			c, err = noop.Int64Counter{}, errors.Join(err, errors.New(name+": no instrument"))
		}
		errs = append(errs, err)
		return c
	}
	histogram := func(name, unit, desc string, buckets []float64) metric.Int64Histogram {
		h, err := meter.Int64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
		if h == nil {
			h, err = noop.Int64Histogram{}, errors.Join(err, errors.New(name+": no instrument"))
		}
		errs = append(errs, err)
		return h
	}
	seconds := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(durationBuckets...))
		if h == nil {
			h, err = noop.Float64Histogram{}, errors.Join(err, errors.New(name+": no instrument"))
		}
		errs = append(errs, err)
		return h
	}
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if g == nil {
			g, err = noop.Int64ObservableGauge{}, errors.Join(err, errors.New(name+": no instrument"))
		}
		errs = append(errs, err)
		return g
	}
	secondsGauge := func(name, desc string) metric.Float64ObservableGauge {
		g, err := meter.Float64ObservableGauge(name, metric.WithUnit("s"), metric.WithDescription(desc))
		if g == nil {
			g, err = noop.Float64ObservableGauge{}, errors.Join(err, errors.New(name+": no instrument"))
		}
		errs = append(errs, err)
		return g
	}

	m.events = counter("vantage.perspective.events", "{event}",
		"Work rows a perspective handled, by outcome: applied (applied and saved), failed (the apply failed), skipped (already in the stored model).")
	m.applyDuration = seconds("vantage.perspective.apply.duration", "Duration of one apply function call.")
	m.dedupHits = counter("vantage.dedup.hits", "{event}", "Work rows skipped because they were applied and their completion is not acknowledged yet.")
	m.failures = counter("vantage.perspective.failures", "{failure}", "Failed applies reported for a retry after Retries.Event, by reason.")
	m.deadLetters = counter("vantage.perspective.dead_letters", "{event}", "Work rows moved to dead letters, by reason.")
	m.backendErrors = counter("vantage.perspective.backend_errors", "{error}", "Drains of a pair set back by a backend error and retried after Retries.Infra, at no attempt.")
	m.abandoned = counter("vantage.apply.abandoned", "{apply}", "Applies abandoned after ignoring their cancelled context past ApplyAbandonGrace.")
	m.batchStreams = histogram("vantage.batch.streams", "{stream}", "Streams drained by one batch.", countBuckets)
	m.batchEvents = histogram("vantage.batch.events", "{event}", "Events applied by one batch, counted once per perspective.", countBuckets)
	m.batchDuration = seconds("vantage.batch.duration", "Duration of one batch: fetch, applies, saves and the hand-off of its completions.")
	m.claimDuration = seconds("vantage.claim.duration", "Duration of one claim of work, by outcome.")
	m.claimStreams = counter("vantage.claim.streams", "{stream}", "Streams handed to this instance by its claims, held ones included.")
	m.claimStalls = counter("vantage.claim.stalls", "{stall}",
		"Stalls of the claim loop: no claim answered for half of StaleInstanceThreshold past its time; the instance skips its heartbeats until one is.")
	m.flushSize = histogram("vantage.completion.flush.size", "{item}", "Completions or failures sent to the backend in one call.", countBuckets)
	m.flushDuration = seconds("vantage.completion.flush.duration", "Duration of one call sending completions or failures to the backend, by outcome.")
	m.flushRetries = counter("vantage.completion.flush.retries", "{retry}", "Flush calls repeated in place after a failure (Retries.Flush).")
	m.flushDropped = counter("vantage.completion.flush.dropped", "{item}", "Completions or failures given up on after their last flush attempt; their rows are re-delivered.")
	m.rewinds = counter("vantage.rewinds", "{rewind}", "Rewinds and rebuilds of a (stream, perspective) that finished.")
	m.rewindDuration = seconds("vantage.rewind.duration", "Duration of one rewind or rebuild of a (stream, perspective).")
	m.rewindEvents = counter("vantage.rewind.events", "{event}", "Events replayed by rewinds and rebuilds.")
	m.stageRuns = counter("vantage.lifecycle.stage.runs", "{run}", "Runs of a lifecycle stage's receptors for the events this instance claimed.")
	m.stageFailures = counter("vantage.lifecycle.stage.failures", "{failure}",
		"Lifecycle stage failures, by reason: claim (the stage could not be claimed; its receptors did not run) or receptor (a receptor returned an error or panicked).")
	m.liveInstances = gauge("vantage.instances.live", "{instance}", "Live instances of the service, as the latest heartbeat reported.")
	m.heartbeatAge = secondsGauge("vantage.heartbeat.age", "Time since this instance's latest successful heartbeat.")
	m.listenerHealthy = gauge("vantage.listener.healthy", "1", "1 while notifications arrive, 0 while the engine polls only.")
	m.stuckApplies = gauge("vantage.apply.stuck", "{apply}", "Abandoned applies still running.")
	if cfg.Lag {
		m.lagPending = gauge("vantage.perspective.lag.pending", "{row}", "Pending work rows of a perspective, on every instance.")
		m.lagOldestAge = secondsGauge("vantage.perspective.lag.oldest_age", "Age of a perspective's oldest pending event (0 when none is pending).")
	}
	if err := errors.Join(errs...); err != nil {
		log.Warn("creating metric instruments; those that failed record nothing", slog.Any("error", err))
	}

	m.claimOK, m.claimErr = newAttrs(attrOutcome.String(outcomeOK)), newAttrs(attrOutcome.String(outcomeError))
	for _, name := range []string{complete.Completions, complete.Failures} {
		f := attrFlusher.String(name)
		m.flushAttrs[name] = &flushAttrs{
			base:   newAttrs(f),
			ok:     newAttrs(f, attrOutcome.String(outcomeOK)),
			failed: newAttrs(f, attrOutcome.String(outcomeError)),
		}
	}
	for _, name := range cfg.Perspectives {
		m.byName[name] = newPerspectiveAttrs(name)
	}
	return m
}

// Perspective returns the attribute sets of the named perspective.
func (m *Metrics) Perspective(name string) *PerspectiveAttrs {
	if p, ok := m.byName[name]; ok {
		return p
	}
	if p, ok := m.more.Load(name); ok {
		return p.(*PerspectiveAttrs)
	}
	p, _ := m.more.LoadOrStore(name, newPerspectiveAttrs(name))
	return p.(*PerspectiveAttrs)
}

// PairRan counts what one run of a pair did: events applied and saved, and
// events skipped because the stored model already reflected them.
func (m *Metrics) PairRan(ctx context.Context, perspective string, applied, skipped int) {
	if applied == 0 && skipped == 0 {
		return
	}
	p := m.Perspective(perspective)
	if applied > 0 {
		m.events.Add(ctx, int64(applied), p.applied.add...)
	}
	if skipped > 0 {
		m.events.Add(ctx, int64(skipped), p.skipped.add...)
	}
}

// SampleApply reports whether the duration of p's apply that starts at
// started is to be recorded: the first apply of the perspective to start
// applyEvery after the last recorded one (every apply when applyEvery is
// negative). A start does not depend on how long its own apply takes, so
// the recorded durations are a fair sample of all of them; skipping the
// others spares a catch-up a histogram record and a clock read per event.
func (m *Metrics) SampleApply(p *PerspectiveAttrs, started time.Time) bool {
	if m.applyEvery < 0 {
		return true
	}
	now, next := started.UnixNano(), p.nextSample.Load()
	return now >= next && p.nextSample.CompareAndSwap(next, now+int64(m.applyEvery))
}

// ApplyTook records the duration of p's apply that started at started.
func (m *Metrics) ApplyTook(ctx context.Context, p *PerspectiveAttrs, started time.Time) {
	if !m.applyDuration.Enabled(ctx) {
		return
	}
	m.applyDuration.Record(ctx, m.clock.Now().Sub(started).Seconds(), p.base.record...)
}

// Deduped counts the rows of a pair the dedup cache skipped.
func (m *Metrics) Deduped(ctx context.Context, perspective string, n int) {
	if n > 0 {
		m.dedupHits.Add(ctx, int64(n), m.Perspective(perspective).base.add...)
	}
}

// ApplyFailed counts a failed apply (one attempt charged).
func (m *Metrics) ApplyFailed(ctx context.Context, perspective string) {
	m.events.Add(ctx, 1, m.Perspective(perspective).failed.add...)
}

// FailureReported counts a failure reported for a retry.
func (m *Metrics) FailureReported(ctx context.Context, perspective, reason string) {
	m.failures.Add(ctx, 1, m.Perspective(perspective).with(attrReason.String(reason)))
}

// DeadLettered counts a work row moved to dead letters.
func (m *Metrics) DeadLettered(ctx context.Context, dl ports.DeadLetter) {
	m.deadLetters.Add(ctx, 1, m.Perspective(dl.Perspective).with(attrReason.String(dl.Reason)))
}

// BackendError counts a pair's drain set back by a backend error.
func (m *Metrics) BackendError(ctx context.Context, perspective string) {
	m.backendErrors.Add(ctx, 1, m.Perspective(perspective).base.add...)
}

// monitor.AbandonedApply counts an abandoned apply.
func (m *Metrics) ApplyAbandoned(ctx context.Context, perspective string) {
	m.abandoned.Add(ctx, 1, m.Perspective(perspective).base.add...)
}

// BatchDrained records one batch: the streams it drained, the events it
// applied (once per perspective) and how long it took.
func (m *Metrics) BatchDrained(ctx context.Context, streams, applied int, took time.Duration) {
	m.batchStreams.Record(ctx, int64(streams))
	m.batchEvents.Record(ctx, int64(applied))
	m.batchDuration.Record(ctx, took.Seconds())
}

// Claimed records one claim that took took and returned res, or err. A
// claim cut short by Stop is not a measurement.
func (m *Metrics) Claimed(ctx context.Context, took time.Duration, res *ports.WorkClaimResult, err error) {
	switch {
	case err == nil:
		m.claimDuration.Record(ctx, took.Seconds(), m.claimOK.record...)
		m.claimStreams.Add(ctx, int64(len(res.StreamIDs)))
	case ctx.Err() == nil:
		m.claimDuration.Record(ctx, took.Seconds(), m.claimErr.record...)
	}
}

// ClaimStalled counts a stall of the claim loop (see heartbeat.Watch).
func (m *Metrics) ClaimStalled(ctx context.Context) {
	m.claimStalls.Add(ctx, 1)
}

// Flushed records one call of a flusher (complete.Completions or
// complete.Failures) sending n items, that took took and returned err.
func (m *Metrics) Flushed(ctx context.Context, flusher string, n int, took time.Duration, err error) {
	f := m.flushAttrs[flusher]
	m.flushSize.Record(ctx, int64(n), f.base.record...)
	if err != nil {
		m.flushDuration.Record(ctx, took.Seconds(), f.failed.record...)
		return
	}
	m.flushDuration.Record(ctx, took.Seconds(), f.ok.record...)
}

// FlushRetried counts a flush call repeated in place.
func (m *Metrics) FlushRetried(flusher string) {
	m.flushRetries.Add(context.Background(), 1, m.flushAttrs[flusher].base.add...)
}

// FlushGaveUp counts n items a flusher dropped.
func (m *Metrics) FlushGaveUp(flusher string, n int) {
	m.flushDropped.Add(context.Background(), int64(n), m.flushAttrs[flusher].base.add...)
}

// Rewound records a finished rewind (or, with rebuild, a rebuild) of a
// pair: how long it took, the events it replayed, and the pending ones
// among them, which were applied for the first time.
func (m *Metrics) Rewound(ctx context.Context, perspective string, rebuild bool, took time.Duration, replayed, fresh int) {
	p := m.Perspective(perspective)
	kind := attrRewindKind.String(kindRewind)
	if rebuild {
		kind = attrRewindKind.String(kindRebuild)
	}
	opt := p.with(kind)
	m.rewinds.Add(ctx, 1, opt)
	m.rewindDuration.Record(ctx, took.Seconds(), opt)
	m.rewindEvents.Add(ctx, int64(replayed), opt)
	if fresh > 0 {
		m.events.Add(ctx, int64(fresh), p.applied.add...)
	}
}

// StageRan counts a run of stage's receptors for the events this instance
// Claimed (none claimed: nothing ran), or, with err, a claim that failed. A
// claim cut short by Stop is not a failure.
func (m *Metrics) StageRan(ctx context.Context, stage stage.Stage, claimed int, err error) {
	switch {
	case err != nil:
		if ctx.Err() == nil {
			m.stageFailures.Add(ctx, 1, metric.WithAttributes(attrStage.String(stage.String()), attrReason.String(reasonClaim)))
		}
	case claimed > 0:
		m.stageRuns.Add(ctx, 1, metric.WithAttributes(attrStage.String(stage.String())))
	}
}

// ReceptorFailed counts a receptor of stage that returned an error or
// panicked.
func (m *Metrics) ReceptorFailed(ctx context.Context, stage stage.Stage) {
	m.stageFailures.Add(ctx, 1, metric.WithAttributes(attrStage.String(stage.String()), attrReason.String(reasonReceptor)))
}

// GaugeSources are what the observable instruments read at each
// collection.
type GaugeSources struct {
	// Heartbeat returns the time of the last heartbeat and the live
	// instances it counted.
	Heartbeat func() (time.Time, int)
	// Listening reports whether the notifications are healthy.
	Listening func() bool
	// Stuck counts the applies past their deadline.
	Stuck func() int
	// Lag reads the backlog of each perspective; nil without a Stats port.
	Lag func(ctx context.Context) ([]Lag, error)
}

// Lag is the backlog of one perspective.
type Lag struct {
	Perspective string
	Pending     int64
	OldestAge   time.Duration
}

// Observe registers the callback of the observable instruments; the
// returned registration is unregistered at Stop. A failed registration is
// logged and returns nil.
func (m *Metrics) Observe(src GaugeSources) metric.Registration {
	instruments := []metric.Observable{m.liveInstances, m.heartbeatAge, m.listenerHealthy, m.stuckApplies}
	if m.lagPending != nil {
		instruments = append(instruments, m.lagPending, m.lagOldestAge)
	}
	reg, err := m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		if at, live := src.Heartbeat(); !at.IsZero() {
			o.ObserveFloat64(m.heartbeatAge, max(m.clock.Now().Sub(at), 0).Seconds())
			if live > 0 { // a successful heartbeat counts at least its caller: 0 is an adapter that does not count
				o.ObserveInt64(m.liveInstances, int64(live))
			}
		}
		healthy := int64(0)
		if src.Listening() {
			healthy = 1
		}
		o.ObserveInt64(m.listenerHealthy, healthy)
		o.ObserveInt64(m.stuckApplies, int64(src.Stuck()))
		if m.lagPending != nil && src.Lag != nil {
			m.observeLag(ctx, o, src.Lag)
		}
		return nil
	}, instruments...)
	if err != nil {
		m.log.Warn("registering the observable metric instruments; they report nothing", slog.Any("error", err))
		return nil
	}
	return reg
}

// observeLag observes the backlog of each perspective. Figures that cannot
// be read are left out of this collection; the next one reads them again.
func (m *Metrics) observeLag(ctx context.Context, o metric.Observer, read func(context.Context) ([]Lag, error)) {
	lags, err := read(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.log.DebugContext(ctx, "reading the backlog for the lag metrics; left out of this collection", slog.Any("error", err))
		}
		return
	}
	for _, l := range lags {
		p := m.Perspective(l.Perspective)
		o.ObserveInt64(m.lagPending, l.Pending, p.base.observe...)
		o.ObserveFloat64(m.lagOldestAge, l.OldestAge.Seconds(), p.base.observe...)
	}
}

// Unobserve unregisters the callback Observe registered.
func (m *Metrics) Unobserve(reg metric.Registration) {
	if reg == nil {
		return
	}
	if err := reg.Unregister(); err != nil {
		m.log.Warn("unregistering the observable metric instruments", slog.Any("error", err))
	}
}
