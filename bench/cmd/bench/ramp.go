package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vantage-go/vantage/bench/internal/measure"
	"github.com/vantage-go/vantage/bench/internal/raw"
	"github.com/vantage-go/vantage/bench/internal/riverref"
	"github.com/vantage-go/vantage/bench/internal/workload"
	"github.com/vantage-go/vantage/core"
)

// The ramp scenario raises the live rate step by step and reports the
// highest rate an implementation sustains. A step is sustainable when all
// of these hold for the events appended during it:
//
//   - the appends reached at least rampMinAchievedShare of the step's rate;
//   - the p99 of append-to-applied is at most the limit (-ramp-p99);
//   - the backlog at the step's end (appended, not yet applied) is at most
//     rampBacklogWindow's worth of appends at the step's rate.
//
// The ramp stops after the first step that is not sustainable; the highest
// sustainable rate is that of the step before it.
const (
	rampMinAchievedShare = 0.95
	rampBacklogWindow    = time.Second
)

// rampSpec is the plan of a ramp run.
type rampSpec struct {
	// Rates are the steps' rates in events per second, in order.
	Rates []int `json:"rates"`
	// Step is each step's duration.
	Step time.Duration `json:"step"`
	// P99 is the largest p99 latency of a sustainable step.
	P99 time.Duration `json:"p99"`
	// Appenders is the number of concurrent appending goroutines, each
	// with a connection of its own.
	Appenders int `json:"appenders"`
}

// rampGrowth is how the rate rises from one step to the next: times
// Factor, or plus Add when Add is positive.
type rampGrowth struct {
	Factor float64
	Add    int
}

// parseRampGrowth reads "1.25x" (multiply) or "+250" (add).
func parseRampGrowth(s string) (rampGrowth, error) {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(s, "+"); ok {
		n, err := strconv.Atoi(rest)
		if err != nil || n < 1 {
			return rampGrowth{}, fmt.Errorf("-ramp-step: %q is not +N with N a positive number", s)
		}
		return rampGrowth{Add: n}, nil
	}
	if rest, ok := strings.CutSuffix(s, "x"); ok {
		f, err := strconv.ParseFloat(rest, 64)
		if err != nil || !(f > 1) || math.IsInf(f, 0) {
			return rampGrowth{}, fmt.Errorf("-ramp-step: %q is not Fx with F above 1", s)
		}
		return rampGrowth{Factor: f}, nil
	}
	return rampGrowth{}, fmt.Errorf("-ramp-step: %q is neither a factor (1.25x) nor an increment (+250)", s)
}

// next returns the rate of the step after one at rate; it always grows.
func (g rampGrowth) next(rate int) int {
	if g.Add > 0 {
		return rate + g.Add
	}
	return max(int(math.Round(float64(rate)*g.Factor)), rate+1)
}

// rampRates returns the steps' rates from start, growing by g, up to and
// including top: the last step is top itself.
func rampRates(start, top int, g rampGrowth) []int {
	var out []int
	for r := start; ; r = g.next(r) {
		if r >= top {
			return append(out, top)
		}
		out = append(out, r)
	}
}

// rampStep is one segment of the ramp's schedule, as offsets from its
// start. The warm-up segment, at the first step's rate, is not measured.
type rampStep struct {
	Rate     int
	From, To time.Duration
	Warmup   bool
}

// rampSchedule lays out a warm-up (if any) then one step per rate.
func rampSchedule(rates []int, warmup, step time.Duration) []rampStep {
	var out []rampStep
	at := time.Duration(0)
	if warmup > 0 && len(rates) > 0 {
		out = append(out, rampStep{Rate: rates[0], From: 0, To: warmup, Warmup: true})
		at = warmup
	}
	for _, r := range rates {
		out = append(out, rampStep{Rate: r, From: at, To: at + step})
		at += step
	}
	return out
}

// rampDue returns how many events the schedule has released elapsed after
// its start: each segment releases its rate's events evenly over its span.
func rampDue(schedule []rampStep, elapsed time.Duration) int {
	var due float64
	for _, s := range schedule {
		in := min(max(elapsed-s.From, 0), s.To-s.From)
		due += float64(s.Rate) * in.Seconds()
	}
	return int(math.Floor(due + 1e-9))
}

// rampSample is one measured unit: an event (Vantage, raw) or a job
// (River). done is zero while it is not applied (River: not started).
type rampSample struct {
	at, done time.Time
}

// rampStepFigures are the figures of one step. Samples, latencies and the
// backlog count the run's units (events; River: jobs), Achieved is in
// events per second.
type rampStepFigures struct {
	Rate     int     `json:"rate"`
	Achieved float64 `json:"achieved"`
	Samples  int     `json:"samples"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
	// Unapplied counts the step's samples not applied when it was judged;
	// their latency counts as the time they had waited then.
	Unapplied int `json:"unapplied,omitempty"`
	// Backlog counts the samples appended before the step's end and not
	// applied by then, the earlier steps' included.
	Backlog       int64   `json:"backlog"`
	CPUMsPerEvent float64 `json:"cpu_ms_per_event,omitempty"`
	MachinePct    float64 `json:"machine_cpu_pct,omitempty"`
	Sustainable   bool    `json:"sustainable"`
	// Verdict is "ok" or the first criterion the step missed.
	Verdict string `json:"verdict"`
}

// rampStepOf measures step (offsets from t0) over samples as of now, with
// perEvent samples per event, and judges it against the p99 limit.
func rampStepOf(samples []rampSample, step rampStep, t0, now time.Time, perEvent int, p99 time.Duration) rampStepFigures {
	from, to := t0.Add(step.From), t0.Add(step.To)
	f := rampStepFigures{Rate: step.Rate}
	var lat measure.Latencies
	for _, x := range samples {
		if x.at.Before(to) && (x.done.IsZero() || x.done.After(to)) {
			f.Backlog++
		}
		if x.at.Before(from) || !x.at.Before(to) {
			continue
		}
		f.Samples++
		end := x.done
		if end.IsZero() {
			end = now
			f.Unapplied++
		}
		lat.Add(max(end.Sub(x.at), 0))
	}
	f.Achieved = float64(f.Samples) / float64(perEvent) / (step.To - step.From).Seconds()
	ps := lat.Percentiles(0.5, 0.99, 1)
	f.P50Ms, f.P99Ms, f.MaxMs = ps[0], ps[1], ps[2]
	f.Sustainable, f.Verdict = rampJudge(f, perEvent, p99)
	return f
}

// rampJudge tells whether a step is sustainable and, when not, the first
// criterion it missed.
func rampJudge(f rampStepFigures, perEvent int, p99 time.Duration) (bool, string) {
	switch {
	case f.Achieved < rampMinAchievedShare*float64(f.Rate):
		return false, fmt.Sprintf("achieved<%.0f%%", 100*rampMinAchievedShare)
	case f.P99Ms > float64(p99)/float64(time.Millisecond):
		return false, fmt.Sprintf("p99>%s", p99)
	case float64(f.Backlog) > float64(f.Rate*perEvent)*rampBacklogWindow.Seconds():
		return false, fmt.Sprintf("backlog>%s", rampBacklogWindow)
	}
	return true, "ok"
}

// rampHighest returns the rate of the last sustainable step before the
// first that is not (0 when the first is not), and whether every step was
// sustainable.
func rampHighest(steps []rampStepFigures) (rate int, all bool) {
	for _, s := range steps {
		if !s.Sustainable {
			return rate, false
		}
		rate = s.Rate
	}
	return rate, len(steps) > 0
}

// rampFigures are a ramp run's figures: its steps and the highest rate it
// sustained.
type rampFigures struct {
	P99LimitMs  float64 `json:"p99_limit_ms"`
	StepSeconds float64 `json:"step_s"`
	// Unit is what the samples are: "event", or "job" for River.
	Unit  string            `json:"unit"`
	Steps []rampStepFigures `json:"steps"`
	// SustainedEventsPerS is the rate of the highest sustainable step;
	// SustainedJobsPerS, River's, in jobs (events × perspectives).
	SustainedEventsPerS float64 `json:"sustained_events_per_s"`
	SustainedJobsPerS   float64 `json:"sustained_jobs_per_s,omitempty"`
	// ReachedMax: every step was sustainable, -ramp-max included, so the
	// highest sustainable rate is at least the figure.
	ReachedMax bool `json:"reached_max"`
	// On Vantage's line: its sustained events/s over River's sustained
	// jobs/s, and over the raw pipeline's events/s (compareRamp).
	XRiverJobs float64 `json:"x_river_jobs,omitempty"`
	XRaw       float64 `json:"x_raw,omitempty"`
}

// rampDriver paces the appends of a ramp run and judges its steps. The
// implementation appends event i (stream i mod streams) with append and
// reports what it measured with samples.
type rampDriver struct {
	spec spec
	// perEvent is the samples per event: 1, River's perspectives.
	perEvent int
	unit     string
	append   func(ctx context.Context, i int) error
	samples  func() []rampSample
	// drained reports whether every sample appended is applied.
	drained func() bool
}

// cpuMark is the CPU counters at a step boundary.
type cpuMark struct {
	at              time.Time
	goCPU, pg, busy time.Duration
	marked          bool
}

// run appends along the schedule from ph's start until a step is not
// sustainable or the schedule ends, waits until every event is applied
// (DrainWait at most), ends the phase and fills r.
func (d *rampDriver) run(ctx context.Context, e *env, ph *phase, r *result) error {
	s := d.spec
	rs := s.Ramp
	schedule := rampSchedule(rs.Rates, s.Warmup, rs.Step)
	total := schedule[len(schedule)-1].To
	start := ph.start
	top := slices.Max(rs.Rates)

	stopAppends := make(chan struct{})
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { close(stopAppends) }) }
	defer stop()

	// The pacer releases event i once the schedule has released i+1
	// events; appenders append one event per call.
	jobs := pace(ctx, start, total, 2*top, stopAppends, func(elapsed time.Duration) int { return rampDue(schedule, elapsed) })
	var appended, appendErrs atomic.Int64
	var wg sync.WaitGroup
	for range rs.Appenders {
		wg.Go(func() {
			for i := range jobs {
				if err := d.append(ctx, i); err != nil {
					if appendErrs.Add(1) == 1 && ctx.Err() == nil {
						fmt.Fprintf(os.Stderr, "  append failed: %v\n", err)
					}
					continue
				}
				appended.Add(1)
			}
		})
	}

	// Each step is judged once the p99 limit has passed after its end: a
	// sample still unapplied then has waited longer than the limit, as it
	// will have once applied, so the verdict is the final figures' own.
	marks := make([]cpuMark, len(schedule)+1)
	mark := func(k int) {
		marks[k] = cpuMark{at: time.Now(), goCPU: measure.ProcessCPU(), pg: e.backends.CPU(), busy: measure.MachineBusy(), marked: true}
	}
	mark(0)
	sleepUntil := func(t time.Time) bool {
		select {
		case <-time.After(time.Until(t)):
			return true
		case <-ctx.Done():
			return false
		}
	}
	limit := time.Now().Add(runLimit(ctx))
	judged := 0
	for k, step := range schedule {
		if !sleepUntil(start.Add(step.To)) {
			break
		}
		mark(k + 1)
		if step.Warmup {
			continue
		}
		if !sleepUntil(start.Add(step.To + rs.P99)) {
			break
		}
		f := rampStepOf(d.samples(), step, start, time.Now(), d.perEvent, rs.P99)
		judged = k + 1
		fmt.Fprintf(os.Stderr, "  [%s] %4.0fs rate %d/s: achieved %.0f/s p50 %.1fms p99 %.1fms backlog %d: %s\n",
			s.name(), step.To.Seconds(), step.Rate, f.Achieved, f.P50Ms, f.P99Ms, f.Backlog, f.Verdict)
		if !f.Sustainable || time.Now().After(limit) {
			break
		}
	}
	stop()
	wg.Wait()
	appendEnd := time.Now()
	if n := appendErrs.Load(); n > 0 {
		r.Error = fmt.Sprintf("%d appends failed", n)
	}

	deadline := time.Now().Add(min(s.DrainWait, runLimit(ctx)))
	for !d.drained() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.Error = strings.TrimPrefix(r.Error+"; ", "; ") + fmt.Sprintf("not every %s was applied %s after the appends ended", d.unit, s.DrainWait)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.Events = appended.Load()
	r.WorkRows = r.Events * int64(s.Perspectives)
	ph.end(r, r.Events)
	r.Seconds = appendEnd.Sub(start).Seconds()
	r.AchievedRate = float64(r.Events) / r.Seconds

	// The figures, from every sample as finally applied.
	samples := d.samples()
	now := time.Now()
	fig := &rampFigures{P99LimitMs: float64(rs.P99) / float64(time.Millisecond), StepSeconds: rs.Step.Seconds(), Unit: d.unit}
	for k := range judged {
		step := schedule[k]
		if step.Warmup {
			continue
		}
		f := rampStepOf(samples, step, start, now, d.perEvent, rs.P99)
		if m0, m1 := marks[k], marks[k+1]; m0.marked && m1.marked {
			events := float64(f.Samples) / float64(d.perEvent)
			f.CPUMsPerEvent = cpuMsPerEvent((m1.goCPU - m0.goCPU).Seconds(), (m1.pg - m0.pg).Seconds(), int64(events))
			f.MachinePct = 100 * (m1.busy - m0.busy).Seconds() / m1.at.Sub(m0.at).Seconds() / float64(runtime.NumCPU())
		}
		fig.Steps = append(fig.Steps, f)
	}
	rate, all := rampHighest(fig.Steps)
	fig.SustainedEventsPerS, fig.ReachedMax = float64(rate), all && len(fig.Steps) == len(rs.Rates)
	if d.unit == "job" {
		fig.SustainedJobsPerS = float64(rate * s.Perspectives)
	}
	r.Ramp = fig
	var lat measure.Latencies
	for _, x := range samples {
		if !x.done.IsZero() && !x.at.Before(start.Add(s.Warmup)) {
			lat.Add(x.done.Sub(x.at))
		}
	}
	ps := lat.Percentiles(0.5, 0.99, 1)
	r.P50Ms, r.P99Ms, r.MaxMs, r.Samples = ps[0], ps[1], ps[2], lat.Len()
	return nil
}

// streamLog records, per stream, the events appended and how far each
// perspective applied them, for Vantage and the raw pipeline, which both
// report a pair's progress as the version it reached.
type streamLog struct {
	ids   []uuid.UUID
	index map[uuid.UUID]int
	state []*liveStream
}

func newStreamLog(streams, perspectives int) *streamLog {
	l := &streamLog{ids: make([]uuid.UUID, streams), index: make(map[uuid.UUID]int, streams), state: make([]*liveStream, streams)}
	for i := range l.ids {
		l.ids[i] = uuid.Must(uuid.NewV7())
		l.index[l.ids[i]] = i
		l.state[i] = &liveStream{progress: make([][]progressRecord, perspectives), servedBy: -1}
	}
	return l
}

// appended records the event at version of stream i, whose append started
// at at.
func (l *streamLog) appended(i int, version int64, at time.Time) {
	ls := l.state[i]
	ls.mu.Lock()
	ls.appended = append(ls.appended, appendRecord{version: version, at: at, took: time.Since(at), measured: true})
	ls.head = max(ls.head, version)
	ls.mu.Unlock()
}

// applied records that perspective p of stream id reached version at now.
func (l *streamLog) applied(id uuid.UUID, p int, version int64, now time.Time) {
	i, ok := l.index[id]
	if !ok {
		return
	}
	ls := l.state[i]
	ls.mu.Lock()
	ls.progress[p] = append(ls.progress[p], progressRecord{version, now})
	ls.mu.Unlock()
}

func (l *streamLog) samples() []rampSample {
	var out []rampSample
	for _, ls := range l.state {
		ls.mu.Lock()
		out = append(out, streamSamples(ls.appended, ls.progress)...)
		ls.mu.Unlock()
	}
	return out
}

func (l *streamLog) drained() bool { return allApplied(l.state) }

// heads returns every stream's last appended version.
func (l *streamLog) heads() []int64 {
	out := make([]int64, len(l.state))
	for i, ls := range l.state {
		ls.mu.Lock()
		out[i] = ls.head
		ls.mu.Unlock()
	}
	return out
}

// streamSamples pairs each appended event of a stream with the time its
// last perspective first reached its version (zero if one has not).
func streamSamples(appended []appendRecord, progress [][]progressRecord) []rampSample {
	byVersion := slices.Clone(appended)
	slices.SortFunc(byVersion, func(a, b appendRecord) int { return cmp.Compare(a.version, b.version) })
	out := make([]rampSample, len(byVersion))
	for i, a := range byVersion {
		out[i].at = a.at
	}
	missing := make([]bool, len(byVersion))
	for _, recs := range progress {
		// A perspective has reached version v from the first record at
		// which the highest version it reported is v or above.
		j := 0
		var hi int64
		reached := make([]time.Time, len(byVersion))
		for _, rec := range recs {
			hi = max(hi, rec.version)
			for ; j < len(byVersion) && byVersion[j].version <= hi; j++ {
				reached[j] = rec.at
			}
		}
		for i, at := range reached {
			switch {
			case at.IsZero():
				missing[i] = true
			case at.After(out[i].done):
				out[i].done = at
			}
		}
	}
	for i := range out {
		if missing[i] {
			out[i].done = time.Time{}
		}
	}
	return out
}

// ramp is Vantage's ramp run: default options (with the -opt overrides),
// the spec's instances, latency from the start of the Append call to the
// OnPerspectiveEventProcessed hook of the last perspective whose saved
// model covers the event, as live measures it.
func (v *vantage) ramp(ctx context.Context) (*result, error) {
	s := v.spec
	r := newResult(s)
	log := newStreamLog(s.Streams, s.Perspectives)
	hooks := func(int) core.Hooks {
		return core.Hooks{OnPerspectiveEventProcessed: func(e core.PerspectiveEventProcessed) {
			log.applied(e.StreamID, v.nameIdx[e.Perspective], e.LastVersion, time.Now())
		}}
	}
	if v.appStore != nil {
		// Subscriptions must exist before the first append fans out.
		if err := v.reg.RegisterSubscriptions(ctx, v.events); err != nil {
			return r, err
		}
	}
	// Every connection opened before the clock starts, as the references'
	// are: the appenders' pool is as large as the ramp's appenders.
	if err := warm(ctx, v.pools...); err != nil {
		return r, err
	}
	if err := v.startWorkers(ctx, hooks); err != nil {
		return r, err
	}
	ph, err := v.startPhase(ctx)
	if err != nil {
		return r, err
	}
	d := &rampDriver{
		spec: s, perEvent: 1, unit: "event", samples: log.samples, drained: log.drained,
		append: func(ctx context.Context, i int) error {
			at := time.Now()
			res, err := v.reg.Append(ctx, v.events, log.ids[i%s.Streams], 0, workload.NewIncremented(int64(i)))
			if err != nil {
				return err
			}
			log.appended(i%s.Streams, res.Events[0].Version, at)
			return nil
		},
	}
	if err := d.run(ctx, v.env, ph, r); err != nil {
		return r, err
	}
	v.stopWorkers(15 * time.Second)
	return r, v.check(ctx, r, log.ids, log.heads())
}

// rampRaw is the raw pipeline's ramp run: appends of one event and its
// work rows per statement, the pipeline's workers (instances × -pool
// unless -raw-workers) claiming live, latency from the start of the append
// to the commit of the transaction that applied the event's last
// perspective.
func rampRaw(ctx context.Context, s spec) (*result, error) {
	e, err := newEnv(ctx, s)
	if err != nil {
		return nil, err
	}
	defer e.close()
	r := newResult(s)
	if err := raw.Setup(ctx, e.admin, s.Schema); err != nil {
		return r, fmt.Errorf("creating the raw schema: %w", err)
	}
	appPool, err := e.pool(ctx, s.Ramp.Appenders)
	if err != nil {
		return r, err
	}
	pool, err := e.pool(ctx, s.Workers)
	if err != nil {
		return r, err
	}
	if err := warm(ctx, appPool, pool); err != nil {
		return r, err
	}
	log := newStreamLog(s.Streams, s.Perspectives)
	pidx := map[string]int{}
	for i, n := range workload.Perspectives(s.Perspectives) {
		pidx[n] = i
	}
	app := raw.NewAppender(appPool, s.Schema, s.Perspectives)
	stopWorkers := make(chan struct{})
	var stats raw.Stats
	ph, err := e.startPhase(ctx)
	if err != nil {
		return r, err
	}
	runErr := make(chan error, 1)
	go func() {
		_, err := raw.Run(ctx, raw.Options{
			Pool: pool, Schema: s.Schema, Streams: log.ids, Perspectives: s.Perspectives, Workers: s.Workers,
			Stop: stopWorkers,
			OnApplied: func(stream uuid.UUID, perspective string, version int64) {
				log.applied(stream, pidx[perspective], version, time.Now())
			},
		}, &stats)
		runErr <- err
	}()
	d := &rampDriver{
		spec: s, perEvent: 1, unit: "event", samples: log.samples, drained: log.drained,
		append: func(ctx context.Context, i int) error {
			// Event i is version i/streams+1 of stream i mod streams: the
			// pipeline applies a pair's versions in order, so a version
			// appended before its predecessor waits for it.
			stream, version := i%s.Streams, int64(i/s.Streams+1)
			at := time.Now()
			if err := app.Append(ctx, log.ids[stream], version); err != nil {
				return err
			}
			log.appended(stream, version, at)
			return nil
		},
	}
	derr := d.run(ctx, e, ph, r)
	close(stopWorkers)
	if err := errors.Join(derr, <-runErr); err != nil {
		return r, err
	}
	r.Deferred = stats.Deferred.Load()
	check, pending, err := raw.Check(ctx, e.admin, s.Schema, log.ids, log.heads(), s.Perspectives)
	if err != nil {
		return r, fmt.Errorf("checking: %w", err)
	}
	e.recordCheck(r, check, pending)
	return r, nil
}

// rampRiver is River's ramp run: one job per work row (events ×
// perspectives), each inserted by an Insert call of its own through a pool
// of the appenders, worked by one client per instance; latency from the
// start of the Insert call to the start of the job's Work.
func rampRiver(ctx context.Context, s spec) (*result, error) {
	e, err := newEnv(ctx, s)
	if err != nil {
		return nil, err
	}
	defer e.close()
	r := newResult(s)
	if err := riverref.Setup(ctx, e.admin, s.Schema); err != nil {
		return r, fmt.Errorf("migrating River: %w", err)
	}
	opts := riverref.Options{Schema: s.Schema, Perspectives: s.Perspectives, Workers: s.Workers, ClientDefaults: s.RiverDefaults}
	for range s.Instances {
		p, err := e.pool(ctx, s.Pool)
		if err != nil {
			return r, err
		}
		opts.Pools = append(opts.Pools, p)
	}
	appPool, err := e.pool(ctx, s.Ramp.Appenders)
	if err != nil {
		return r, err
	}
	if err := warm(ctx, append([]*pgxpool.Pool{appPool}, opts.Pools...)...); err != nil {
		return r, err
	}
	ins, err := riverref.NewInserter(appPool, opts)
	if err != nil {
		return r, err
	}
	// Job j is perspective j mod P of event j / P; times in Unix
	// nanoseconds, zero until known.
	capacity := rampDue(rampSchedule(s.Ramp.Rates, s.Warmup, s.Ramp.Step), time.Duration(math.MaxInt64)) * s.Perspectives
	insertAt := make([]atomic.Int64, capacity)
	workAt := make([]atomic.Int64, capacity)
	var inserted, worked atomic.Int64
	job := func(a riverref.NoopArgs) int {
		return (int(a.Version-1)*s.Streams+a.Stream)*s.Perspectives + a.Perspective
	}
	stopClients, err := riverref.Start(ctx, opts, func(a riverref.NoopArgs) {
		now := time.Now().UnixNano()
		if j := job(a); j < capacity {
			workAt[j].Store(now)
		}
		worked.Add(1)
	})
	if err != nil {
		return r, err
	}
	defer stopClients()
	ph, err := e.startPhase(ctx)
	if err != nil {
		return r, err
	}
	d := &rampDriver{
		spec: s, perEvent: s.Perspectives, unit: "job",
		append: func(ctx context.Context, i int) error {
			if (i+1)*s.Perspectives > capacity {
				return fmt.Errorf("event %d is beyond the planned %d jobs", i, capacity)
			}
			for p := range s.Perspectives {
				a := riverref.NoopArgs{Stream: i % s.Streams, Perspective: p, Version: int64(i/s.Streams + 1)}
				j := job(a)
				insertAt[j].Store(time.Now().UnixNano())
				if err := ins.Insert(ctx, a); err != nil {
					insertAt[j].Store(0)
					return err
				}
				inserted.Add(1)
			}
			return nil
		},
		samples: func() []rampSample {
			var out []rampSample
			for j := range insertAt {
				at := insertAt[j].Load()
				if at == 0 {
					continue
				}
				x := rampSample{at: time.Unix(0, at)}
				if w := workAt[j].Load(); w != 0 {
					x.done = time.Unix(0, w)
				}
				out = append(out, x)
			}
			return out
		},
		drained: func() bool { return worked.Load() >= inserted.Load() },
	}
	if err := d.run(ctx, e, ph, r); err != nil {
		return r, err
	}
	stopClients()
	left, err := riverref.Unfinished(ctx, e.admin, s.Schema)
	if err != nil {
		return r, fmt.Errorf("counting River's unfinished jobs: %w", err)
	}
	r.PendingAfter = left
	return r, nil
}

// riverSetting names River's fetch cadence in a ramp line: "fast" for
// its benchmark's (FetchCooldown 2ms, FetchPollInterval 20ms), "cadence-
// defaults" for its defaults (100ms, 1s).
func riverSetting(defaults bool) string {
	if defaults {
		return "cadence-defaults"
	}
	return "fast"
}

// compareRamp fills, on Vantage's ramp lines, its sustained events/s over
// River's sustained jobs/s and over the raw pipeline's events/s, from the
// lines of the same invocation with the same instances and perspectives.
// A line with an error still has its steps; a ratio needs both figures
// above zero.
func compareRamp(rs []*result) {
	type key struct{ instances, perspectives int }
	river, rawLines := map[key]*rampFigures{}, map[key]*rampFigures{}
	for _, r := range rs {
		if r.Scenario != scenarioRamp || r.Ramp == nil {
			continue
		}
		switch r.Impl {
		case implRiver:
			river[key{r.Instances, r.Perspectives}] = r.Ramp
		case implRaw:
			rawLines[key{r.Instances, r.Perspectives}] = r.Ramp
		}
	}
	for _, r := range rs {
		if r.Scenario != scenarioRamp || r.Impl != implVantage || r.Ramp == nil || r.Ramp.SustainedEventsPerS == 0 {
			continue
		}
		k := key{r.Instances, r.Perspectives}
		if x := river[k]; x != nil && x.SustainedJobsPerS > 0 {
			r.Ramp.XRiverJobs = r.Ramp.SustainedEventsPerS / x.SustainedJobsPerS
		}
		if x := rawLines[k]; x != nil && x.SustainedEventsPerS > 0 {
			r.Ramp.XRaw = r.Ramp.SustainedEventsPerS / x.SustainedEventsPerS
		}
	}
}

// printRamp writes one line per ramp run, its highest sustainable rate in
// events/s (and River's in jobs/s), then each run's steps.
func printRamp(w io.Writer, rs []*result) {
	fmt.Fprintf(w, "\n%-8s %-8s %-16s %4s %5s %9s %10s %8s %12s %7s %8s %8s %12s %8s  %s\n",
		"scenario", "impl", "setting", "inst", "persp", "p99_limit", "events/s", "jobs/s", "x_river_jobs", "x_raw", "events", "seconds", "cpu_ms/event", "rss_mb", "notes")
	for _, r := range rs {
		f := r.Ramp
		if f == nil {
			f = &rampFigures{}
		}
		sustained := strconv.Itoa(int(f.SustainedEventsPerS))
		if f.ReachedMax {
			sustained = "≥" + sustained
		}
		jobs := "-"
		if f.SustainedJobsPerS > 0 {
			jobs = fmt.Sprintf("%.0f", f.SustainedJobsPerS)
		}
		setting := cmp.Or(r.Setting, "-")
		notes := ""
		if r.Error != "" {
			notes = "ERROR: " + r.Error + ";"
		}
		switch {
		case r.Checked:
			notes += fmt.Sprintf(" skipped=%d double=%d pending=%d", r.Skipped, r.DoubleApplied, r.PendingAfter)
		case r.Impl == implRiver:
			notes += fmt.Sprintf(" jobs_not_completed=%d", r.PendingAfter)
		}
		if f.Unit == "job" {
			notes += " latency per job"
		}
		notes += cpuNote(r, 1)
		cpuPerEvent := "-"
		if r.CPUMsPerEvent > 0 {
			cpuPerEvent = fmt.Sprintf("%.3f", r.CPUMsPerEvent)
		}
		fmt.Fprintf(w, "%-8s %-8s %-16s %4d %5d %7.0fms %10s %8s %12s %7s %8d %8.1f %12s %8.1f  %s\n",
			r.Scenario, r.Impl, setting, r.Instances, r.Perspectives, f.P99LimitMs, sustained, jobs,
			ratio(f.XRiverJobs), ratio(f.XRaw), r.Events, r.Seconds, cpuPerEvent, r.PeakRSSMB, strings.TrimSpace(notes))
	}
	for _, r := range rs {
		if r.Ramp == nil || len(r.Ramp.Steps) == 0 {
			continue
		}
		unit := "events"
		if r.Ramp.Unit == "job" {
			unit = "jobs"
		}
		fmt.Fprintf(w, "\nramp steps of %s %s (%.0fs each; latency and backlog in %s):\n", r.Impl, cmp.Or(r.Setting, ""), r.Ramp.StepSeconds, unit)
		fmt.Fprintf(w, "%7s %9s %8s %8s %9s %8s %10s %8s  %s\n", "rate", "achieved", "p50_ms", "p99_ms", "max_ms", "backlog", "cpu_ms/ev", "machine", "verdict")
		for _, s := range r.Ramp.Steps {
			fmt.Fprintf(w, "%7d %9.0f %8.1f %8.1f %9.1f %8d %10.3f %7.0f%%  %s\n",
				s.Rate, s.Achieved, s.P50Ms, s.P99Ms, s.MaxMs, s.Backlog, s.CPUMsPerEvent, s.MachinePct, s.Verdict)
		}
	}
}
