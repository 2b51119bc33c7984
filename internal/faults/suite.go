package faults

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/pgtest"
)

// Defaults of Config: the full run of make faults.
const (
	RunsDefault         = 1
	RateDefault         = 200
	StreamsDefault      = 100
	AppendersDefault    = 4
	WarmupDefault       = 5 * time.Second
	DurationDefault     = 20 * time.Second
	SettleDefault       = 90 * time.Second
	StepWaitDefault     = 30 * time.Second
	LagThresholdDefault = 2 * time.Second
	HangForDefault      = 30 * time.Second
)

// Config configures Run. The zero value runs every scenario once with the
// defaults above.
type Config struct {
	// Faults are the scenarios to run, by name (see Scenarios). Defaults
	// to all of them.
	Faults []string
	// Runs is how many times each scenario runs. Defaults to 1.
	Runs int
	// Rate is how many events a second the appenders append in total.
	// Defaults to 200.
	Rate int
	// Streams is how many streams the appenders spread them over.
	// Defaults to 100.
	Streams int
	// Appenders is how many goroutines append. Defaults to 4.
	Appenders int
	// Warmup is how long the appenders run before the fault. Defaults to
	// 5s.
	Warmup time.Duration
	// Duration is how long they run from the fault on. Defaults to 20s.
	Duration time.Duration
	// Settle bounds the wait, after the appenders stopped, for the workers
	// to apply (or dead-letter) everything. Defaults to 90s.
	Settle time.Duration
	// StepWait bounds each wait within a scenario (a dead letter to
	// appear, a requeue, ...). Defaults to 30s.
	StepWait time.Duration
	// LagThreshold is the healthy lag above which events count as held
	// up (see RELIABILITY.md). Defaults to 2s.
	LagThreshold time.Duration
	// HangFor is how long a FaultHang apply blocks. Defaults to 30s.
	HangFor time.Duration
	// OutDir receives one directory of logs per run: the workers' logs
	// and standard error, the PostgreSQL log of the run and the run's
	// result. Defaults to a new temporary directory.
	OutDir string
	// KeepLogs keeps the logs of the runs that passed too; by default only
	// those of failed runs are kept.
	KeepLogs bool
	// Command starts the worker processes. Defaults to SelfCommand.
	Command CommandFunc
	// Progress receives a line per step; nil is silent.
	Progress io.Writer
}

// ShortConfig is the short mode: every scenario but the control once, at
// small rates, in about three minutes on two cores. go test runs it.
func ShortConfig() Config {
	var faults []string
	for _, s := range scenarios {
		if s.name != "none" {
			faults = append(faults, s.name)
		}
	}
	return Config{
		Faults:    faults,
		Runs:      1,
		Rate:      50,
		Streams:   20,
		Appenders: 2,
		Warmup:    2 * time.Second,
		Duration:  6 * time.Second,
		Settle:    40 * time.Second,
		StepWait:  15 * time.Second,
	}
}

func (c Config) withDefaults() (Config, error) {
	c.Runs = cmp.Or(c.Runs, RunsDefault)
	c.Rate = cmp.Or(c.Rate, RateDefault)
	c.Streams = cmp.Or(c.Streams, StreamsDefault)
	c.Appenders = cmp.Or(c.Appenders, AppendersDefault)
	c.Warmup = cmp.Or(c.Warmup, WarmupDefault)
	c.Duration = cmp.Or(c.Duration, DurationDefault)
	c.Settle = cmp.Or(c.Settle, SettleDefault)
	c.StepWait = cmp.Or(c.StepWait, StepWaitDefault)
	c.LagThreshold = cmp.Or(c.LagThreshold, LagThresholdDefault)
	c.HangFor = cmp.Or(c.HangFor, HangForDefault)
	if c.Command == nil {
		c.Command = SelfCommand
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if len(c.Faults) == 0 {
		for _, s := range scenarios {
			c.Faults = append(c.Faults, s.name)
		}
	}
	var errs []error
	for _, name := range c.Faults {
		if _, ok := scenarioNamed(name); !ok {
			errs = append(errs, fmt.Errorf("unknown fault %q", name))
		}
	}
	for name, v := range map[string]int{"Runs": c.Runs, "Rate": c.Rate, "Streams": c.Streams, "Appenders": c.Appenders} {
		if v < 1 {
			//lint:ignore ST1005 the message starts with the Go field name
			errs = append(errs, fmt.Errorf("Config.%s must be positive, got %d", name, v))
		}
	}
	for name, v := range map[string]time.Duration{"Warmup": c.Warmup, "Duration": c.Duration, "Settle": c.Settle,
		"StepWait": c.StepWait, "LagThreshold": c.LagThreshold, "HangFor": c.HangFor} {
		if v < 0 {
			//lint:ignore ST1005 the message starts with the Go field name
			errs = append(errs, fmt.Errorf("Config.%s must not be negative, got %s", name, v))
		}
	}
	return c, errors.Join(errs...)
}

// suiteSettings are the cluster's settings: commits must survive the
// immediate restarts (synchronous_commit on; fsync stays off, the machine
// does not crash), and the log names the process and application of each
// line and the long lock waits.
var suiteSettings = map[string]string{
	"synchronous_commit": "on",
	"log_line_prefix":    "%m [%p] %a: ",
	// A statement waiting longer than deadlock_timeout (1s) for a lock is
	// logged, with who holds it: what a stalled run's PostgreSQL log
	// shows first.
	"log_lock_waits": "on",
}

// suite is the state shared by the runs.
type suite struct {
	cfg     Config
	cluster *pgtest.Cluster
	pool    *pgxpool.Pool // the orchestrator's: appends, lag, checks
}

// Run runs the configured scenarios against a private PostgreSQL cluster
// and returns the report. It fails without a report when the suite cannot
// run at all (no PostgreSQL binaries: an error wrapping pgtest.ErrNoCluster;
// bad configuration); a scenario that fails its checks is a failed run in
// the report. Every process it started is gone when it returns.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.OutDir == "" {
		if cfg.OutDir, err = os.MkdirTemp("", "vantage-faults-"); err != nil {
			return nil, err
		}
		// Run made it: remove it when no run left logs in it.
		defer func() { _ = os.Remove(cfg.OutDir) }()
	} else if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, err
	}
	report := &Report{Started: time.Now(), Config: summarize(cfg)}
	fmt.Fprintf(cfg.Progress, "faults: logs in %s\n", cfg.OutDir)
	cluster, err := pgtest.StartCluster(ctx, pgtest.ClusterOptions{Settings: suiteSettings})
	if err != nil {
		return nil, fmt.Errorf("starting PostgreSQL: %w", err)
	}
	defer func() { _ = cluster.Close() }()
	pcfg, err := pgxpool.ParseConfig(cluster.ConnString() + "&application_name=faults-orchestrator")
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = int32(cfg.Appenders) + 4
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	s := &suite{cfg: cfg, cluster: cluster, pool: pool}
	for _, name := range cfg.Faults {
		sc, _ := scenarioNamed(name)
		for i := 1; i <= cfg.Runs && ctx.Err() == nil; i++ {
			fmt.Fprintf(cfg.Progress, "faults: %s run %d: %s\n", sc.name, i, sc.about)
			res := s.runScenario(ctx, sc, i)
			report.Runs = append(report.Runs, res)
			fmt.Fprintf(cfg.Progress, "faults: %s run %d: %s\n", sc.name, i, res.summary())
		}
	}
	report.Elapsed = time.Since(report.Started)
	if err := ctx.Err(); err != nil {
		return report, err
	}
	return report, nil
}

// faultStream is the index of the appender stream that receives the fault
// events, among its regular appends.
const faultStream = 0

// run is one run of one scenario.
type run struct {
	suite  *suite
	sc     scenario
	index  int
	schema string
	dir    string
	store  *postgres.Store
	app    *appender
	t0     time.Time // the injection (a scenario may set it when its fault starts)
	// samples are the lag monitor's, once the run settled.
	samples []lagSample

	mu        sync.Mutex // guards procs, findings, notes
	procs     []*process
	findings  []Finding
	notes     []string
	mustApply map[eventKey]bool // fault events that must end applied
	replayed  []uuid.UUID       // streams whose models must equal a clean replay
}

func (r *run) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.notes = append(r.notes, msg)
	r.mu.Unlock()
	fmt.Fprintf(r.suite.cfg.Progress, "faults:   %s\n", msg)
}

func (r *run) find(f Finding) {
	r.mu.Lock()
	r.findings = append(r.findings, f)
	r.mu.Unlock()
}

// runScenario runs sc once and checks it. Whatever happens, its processes
// are gone when it returns.
func (s *suite) runScenario(ctx context.Context, sc scenario, index int) RunResult {
	start := time.Now()
	r := &run{
		suite:     s,
		sc:        sc,
		index:     index,
		schema:    fmt.Sprintf("faults_%s_%d", strings.ReplaceAll(sc.name, "-", "_"), index),
		dir:       filepath.Join(s.cfg.OutDir, fmt.Sprintf("%s-%d", sc.name, index)),
		mustApply: map[eventKey]bool{},
	}
	res := RunResult{Fault: sc.name, Run: index}
	defer r.killAll() // also when execute panics
	if err := r.execute(ctx, &res); err != nil {
		r.find(Finding{Check: CheckStep, Detail: err.Error()})
	}
	r.killAll()
	res.Elapsed = time.Since(start)
	r.finish(&res)
	return res
}

// execute is the body of a run: start, inject, settle, check.
func (r *run) execute(ctx context.Context, res *RunResult) error {
	cfg := r.suite.cfg
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return err
	}
	logStart := fileSize(r.suite.cluster.LogPath())
	defer r.savePostgresLog(logStart)
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := postgres.Migrate(mctx, r.suite.pool, r.schema); err != nil {
		return err // names the schema and the step
	}
	if _, err := r.suite.pool.Exec(mctx, rowsTableSQL(r.schema)+";\n"+movesSQL(r.schema)); err != nil {
		return fmt.Errorf("creating the tables of %s: %w", r.schema, err)
	}
	// The orchestrator appends through a registry of the run's schema, so
	// its appends carry the same subscriptions as the workers'.
	reg, err := NewRegistry(r.schema, false)
	if err != nil {
		return err
	}
	// The orchestrator's own store (appends, dead letters) logs into the
	// run's directory, not over the progress lines.
	logFile, err := os.Create(filepath.Join(r.dir, "orchestrator.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	logger := slog.New(slog.NewJSONHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	store, err := postgres.New(r.suite.pool, postgres.Options{Schema: r.schema, Logger: logger})
	if err != nil {
		return err
	}
	defer store.Close()
	r.store = store
	if _, err := r.startWorkers(ctx, r.sc.workers, failedGeneration, false); err != nil {
		return err
	}

	r.app = startAppender(ctx, reg, store, r.suite.pool, r.schema, cfg.Streams, cfg.Appenders, cfg.Rate)
	defer r.app.stop()
	mon := startLagMonitor(ctx, r.suite.pool, r.schema, r.suite.cfg.LagThreshold)
	defer mon.stop()
	if err := sleep(ctx, cfg.Warmup); err != nil {
		return err
	}
	if err := r.waitFor(ctx, cfg.StepWait, func(context.Context) (bool, error) {
		s, ok := mon.last()
		return ok && s.ok && s.lag <= cfg.LagThreshold, nil
	}); err != nil {
		r.find(Finding{Check: CheckBaseline, Detail: fmt.Sprintf("healthy lag above %s before the fault: %v", cfg.LagThreshold, err)})
	}

	r.t0 = time.Now()
	// A scenario waits StepWait at most per step; the bound covers the
	// longest (requeue: three waits and a deploy).
	ictx, cancel := context.WithTimeout(ctx, 4*cfg.StepWait+readyTimeout)
	defer cancel()
	if err := r.sc.inject(ictx, r); err != nil {
		r.find(Finding{Check: CheckStep, Detail: fmt.Sprintf("injecting the fault: %v", err)})
	}
	// The appends go on for the run's duration from the injection, and
	// for the scenario's after past its last step.
	end := r.t0.Add(cfg.Duration)
	if after := time.Now().Add(r.sc.after); after.After(end) {
		end = after
	}
	if err := sleep(ctx, time.Until(end)); err != nil {
		return err
	}
	r.app.stop()
	res.Appended = int(r.app.appended.Load())
	if n := r.app.errs.Load(); n > 0 {
		r.note("appends: %d failed calls, %d of them found stored on retry", n, r.app.recovered.Load())
	}

	r.settle(ctx, mon, res)
	r.checkProcesses()
	r.stopProcesses(r.live())
	return r.checkDatabase(ctx, res)
}

// settle waits, bounded, until no work is pending, and judges the
// recovery from the lag samples.
func (r *run) settle(ctx context.Context, mon *lagMonitor, res *RunResult) {
	cfg := r.suite.cfg
	if err := r.waitFor(ctx, cfg.Settle, func(ctx context.Context) (bool, error) {
		n, err := r.pending(ctx)
		return n == 0, err
	}); err != nil {
		r.find(Finding{Check: CheckCaughtUp, Detail: fmt.Sprintf("work still pending after %s: %v; %s", cfg.Settle, err, r.describePending(ctx))})
	}
	r.samples = mon.stop()
	rec, peak, recovered := recovery(r.samples, r.t0, cfg.LagThreshold)
	res.Recovery, res.PeakLag, res.Recovered = rec, peak, recovered
	switch {
	case !recovered:
		r.find(Finding{Check: CheckRecovery, Detail: fmt.Sprintf("healthy lag still above %s (or unreadable) %s after the fault; peak %s; %s",
			cfg.LagThreshold, rec.Round(100*time.Millisecond), peak.Round(100*time.Millisecond), mon.worst())})
	case rec > r.sc.budget:
		r.find(Finding{Check: CheckRecovery, Detail: fmt.Sprintf("healthy lag above %s for %s after the fault, budget %s; peak %s; %s",
			cfg.LagThreshold, rec.Round(100*time.Millisecond), r.sc.budget, peak.Round(100*time.Millisecond), mon.worst())})
	}
}

// checkDatabase reads the events, models and dead letters and checks them.
func (r *run) checkDatabase(ctx context.Context, res *RunResult) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	d, err := loadDataset(ctx, r.suite.pool, r.store, r.schema)
	if err != nil {
		return err
	}
	for _, evs := range d.events {
		res.Events += len(evs)
	}
	counts, findings := check(d, r.mustApply)
	res.Counts = counts
	for _, f := range findings {
		r.find(f)
	}
	worst, err := maxDelay(ctx, r.suite.pool, r.schema)
	if err != nil {
		return err
	}
	res.MaxDelay = worst.d
	r.note("largest delay of a healthy event %s", worst)
	if err := r.writeTimeline(ctx); err != nil {
		r.note("writing the timeline: %v", err)
	}
	for _, stream := range r.replayed {
		if diff := cleanReplay(d, stream); diff != "" {
			r.find(Finding{Check: CheckCleanReplay, Stream: stream, Detail: diff})
		}
	}
	return nil
}

// finish fills the result from the run's findings and notes, writes it
// into the run's directory, and removes the directory and the schema of a
// run that passed (unless the logs are kept).
func (r *run) finish(res *RunResult) {
	r.mu.Lock()
	findings, notes := slices.Clone(r.findings), slices.Clone(r.notes)
	r.mu.Unlock()
	for _, p := range r.procs {
		if n := occurrences(p.logPath, `"level":"ERROR"`); n > 0 {
			notes = append(notes, fmt.Sprintf("%s logged %d errors", p.name, n))
		}
	}
	res.Notes = notes
	res.setFindings(findings)
	res.Dir = r.dir
	if err := writeJSON(filepath.Join(r.dir, "result.json"), res); err != nil {
		res.Notes = append(res.Notes, "writing result.json: "+err.Error())
	}
	if res.Passed && !r.suite.cfg.KeepLogs {
		_ = os.RemoveAll(r.dir)
		res.Dir = ""
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = r.suite.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{r.schema}.Sanitize()+` CASCADE`)
	}
}

// startWorkers starts n worker processes of a generation, in parallel.
func (r *run) startWorkers(ctx context.Context, n int, generation string, fixed bool) ([]*process, error) {
	r.mu.Lock()
	first := len(r.procs) + 1
	r.mu.Unlock()
	procs := make([]*process, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		name := fmt.Sprintf("%s-%d-w%d", r.sc.name, r.index, first+i)
		wg.Go(func() {
			procs[i], errs[i] = startProcess(ctx, r.suite.cfg.Command, r.dir, name, r.suite.cluster.ConnString(), r.schema, generation, fixed)
		})
	}
	wg.Wait()
	r.mu.Lock()
	for _, p := range procs {
		if p != nil {
			r.procs = append(r.procs, p)
		}
	}
	r.mu.Unlock()
	return procs, errors.Join(errs...)
}

// live returns the processes the suite has not ended.
func (r *run) live() []*process {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*process
	for _, p := range r.procs {
		if !p.ended.Load() {
			out = append(out, p)
		}
	}
	return out
}

// stopProcesses stops procs gracefully, in parallel, and notes those that
// did not stop in time or cleanly.
func (r *run) stopProcesses(procs []*process) {
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() {
			// The worker's own bound, plus its start-up of the stop.
			if err := p.stop(workerStopTimeout + 5*time.Second); err != nil {
				r.note("%s did not stop cleanly: %v", p.name, err)
			}
		})
	}
	wg.Wait()
}

// killAll kills every process still running: the cleanup of every run,
// whatever failed.
func (r *run) killAll() {
	r.mu.Lock()
	procs := slices.Clone(r.procs)
	r.mu.Unlock()
	for _, p := range procs {
		select {
		case <-p.exited:
		default:
			p.kill()
		}
	}
}

// checkProcesses finds the workers that exited on their own and the data
// races the race detector reported.
func (r *run) checkProcesses() {
	r.mu.Lock()
	procs := slices.Clone(r.procs)
	r.mu.Unlock()
	for _, p := range procs {
		if err := p.unexpectedExit(); err != nil {
			r.find(Finding{Check: CheckWorkerExit, Detail: fmt.Sprintf("%s %v: %s", p.name, err, tail(p.stderrPath, 20))})
		}
		if n := occurrences(p.stderrPath, "WARNING: DATA RACE"); n > 0 {
			r.find(Finding{Check: CheckWorkerExit, Detail: fmt.Sprintf("%s: the race detector reported %d data races (see %s)", p.name, n, p.stderrPath)})
		}
	}
}

// busiest returns the live worker pinning the most streams (the first live
// one when none pins any).
func (r *run) busiest(ctx context.Context) (*process, error) {
	live := r.live()
	if len(live) == 0 {
		return nil, errors.New("no live worker")
	}
	rows, err := r.suite.pool.Query(ctx, `SELECT instance_id FROM `+pgx.Identifier{r.schema, "vantage_active_streams"}.Sanitize()+`
		WHERE instance_id IS NOT NULL GROUP BY instance_id ORDER BY count(*) DESC`)
	if err != nil {
		return nil, fmt.Errorf("reading stream pins: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("reading stream pins: %w", err)
	}
	for _, id := range ids {
		for _, p := range live {
			if p.instanceID == id {
				return p, nil
			}
		}
	}
	return live[0], nil
}

// injectFault appends an event carrying fault to the fault stream, within
// StepWait (the appender retries through outages).
func (r *run) injectFault(ctx context.Context, fault string) (uuid.UUID, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.suite.cfg.StepWait)
	defer cancel()
	in, err := r.app.injectEvent(ctx, faultStream, Step{Fault: fault, HangMS: r.suite.cfg.HangFor.Milliseconds()})
	if err != nil {
		return uuid.Nil, 0, fmt.Errorf("appending the %s event: %w", fault, err)
	}
	r.note("appended a %s event: stream %s version %d", fault, in.stream, in.version)
	return in.stream, in.version, nil
}

// appliedThrough reports whether every perspective of stream reached
// version: its model, or for a projection the placeholder model saved
// with its cursor.
func (r *run) appliedThrough(ctx context.Context, stream uuid.UUID, version int64) (bool, error) {
	var n int
	err := r.suite.pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{r.schema, "vantage_models"}.Sanitize()+`
		WHERE stream_id = $1 AND last_version >= $2`, stream, version).Scan(&n)
	return n == len(Perspectives), err
}

// settled reports whether stream has no pending work row and no cursor
// that requires a rewind: everything appended to it was applied or
// dead-lettered.
func (r *run) settled(ctx context.Context, stream uuid.UUID) (bool, error) {
	var pending, rewinds int
	err := r.suite.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM `+pgx.Identifier{r.schema, "vantage_work"}.Sanitize()+` WHERE stream_id = $1 AND processed_at IS NULL),
		(SELECT count(*) FROM `+pgx.Identifier{r.schema, "vantage_cursors"}.Sanitize()+` WHERE stream_id = $1 AND status & 32 <> 0)`,
		stream).Scan(&pending, &rewinds)
	return pending == 0 && rewinds == 0, err
}

// pending returns how many work rows are pending.
func (r *run) pending(ctx context.Context) (int, error) {
	var n int
	err := r.suite.pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{r.schema, "vantage_work"}.Sanitize()+
		` WHERE processed_at IS NULL`).Scan(&n)
	return n, err
}

// describePending lists the oldest pending work rows, for a finding.
func (r *run) describePending(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	rows, err := r.suite.pool.Query(ctx, `SELECT count(*) OVER (), w.stream_id, w.perspective, w.event_version, w.attempts, coalesce(w.error, ''),
		coalesce(a.instance_id IS NOT NULL AND a.lease_expiry > now(), false)
		FROM `+pgx.Identifier{r.schema, "vantage_work"}.Sanitize()+` w
		LEFT JOIN `+pgx.Identifier{r.schema, "vantage_active_streams"}.Sanitize()+` a ON a.stream_id = w.stream_id
		WHERE w.processed_at IS NULL ORDER BY w.seq LIMIT 5`)
	if err != nil {
		return "listing pending work: " + err.Error()
	}
	var (
		b                  strings.Builder
		total              int
		stream             uuid.UUID
		perspective, cause string
		version            int64
		attempts           int
		leased             bool
	)
	if _, err := pgx.ForEachRow(rows, []any{&total, &stream, &perspective, &version, &attempts, &cause, &leased}, func() error {
		if b.Len() == 0 {
			fmt.Fprintf(&b, "%d pending rows, oldest:", total)
		}
		fmt.Fprintf(&b, " [stream %s %s version %d, %d attempts, stream leased %t, error %q]", stream, perspective, version, attempts, leased, cause)
		return nil
	}); err != nil {
		return "listing pending work: " + err.Error()
	}
	return b.String()
}

// waitFor polls cond every 100ms until it holds, for at most timeout. A
// condition that errs (the database restarting, say) is polled again; its
// last error is reported if time runs out.
func (r *run) waitFor(ctx context.Context, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ok, err := cond(qctx)
		cancel()
		if err == nil && ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("not within %s (last error: %w)", timeout, last)
			}
			return fmt.Errorf("not within %s", timeout)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// savePostgresLog copies the part of the cluster's log written since
// offset into the run's directory, reports the deadlocks it records and
// notes the longest lock wait.
func (r *run) savePostgresLog(offset int64) {
	f, err := os.Open(r.suite.cluster.LogPath())
	if err != nil {
		r.note("reading the PostgreSQL log: %v", err)
		return
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		r.note("reading the PostgreSQL log: %v", err)
		return
	}
	b, err := io.ReadAll(f)
	if err != nil {
		r.note("reading the PostgreSQL log: %v", err)
		return
	}
	_ = os.WriteFile(filepath.Join(r.dir, "postgres.log"), b, 0o644)
	var (
		deadlocks   []string
		waits       int
		longest     float64
		longestLine string
	)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "deadlock detected") {
			deadlocks = append(deadlocks, line)
		}
		if ms, ok := lockWait(line); ok {
			waits++
			if ms > longest {
				longest, longestLine = ms, line
			}
		}
	}
	if len(deadlocks) > 0 {
		r.find(Finding{Check: CheckDeadlock, Detail: fmt.Sprintf("PostgreSQL detected %d deadlocks, first: %s", len(deadlocks), deadlocks[0])})
	}
	if waits > 0 {
		r.note("PostgreSQL logged %d lock waits longer than 1s, the longest: %s", waits, longestLine)
	}
}

// lockWait returns the wait in milliseconds that a log line of
// log_lock_waits reports once the lock was acquired ("process N acquired
// ShareLock on transaction T after 7537.137 ms"), and false for any other
// line.
func lockWait(line string) (float64, bool) {
	_, rest, ok := strings.Cut(line, " acquired ")
	if !ok {
		return 0, false
	}
	_, rest, ok = strings.Cut(rest, " after ")
	if !ok {
		return 0, false
	}
	ms, err := strconv.ParseFloat(strings.TrimSuffix(rest, " ms"), 64)
	return ms, err == nil
}

// sleep waits d or until ctx ends. The suite sleeps only to pace appends,
// to give a run its duration and between two polls of the database; it
// never waits a fixed time for the engine to do something.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// occurrences counts the occurrences of s in a file.
func occurrences(path, s string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte(s))
}

// writeTimeline writes timeline.tsv into the run's directory: per second
// from the injection, the largest healthy lag read and the cursor moves
// each worker committed (movesTable), which shows who stalled when.
func (r *run) writeTimeline(ctx context.Context) error {
	rows, err := r.suite.pool.Query(ctx, `SELECT floor(extract(epoch FROM at - $1::timestamptz))::int, writer, count(*)
		FROM `+r.table(movesTable)+` GROUP BY 1, 2`, r.t0)
	if err != nil {
		return err
	}
	moves := map[int]map[string]int{}
	writers := map[string]bool{}
	var (
		second, n int
		writer    string
	)
	if _, err := pgx.ForEachRow(rows, []any{&second, &writer, &n}, func() error {
		if moves[second] == nil {
			moves[second] = map[string]int{}
		}
		moves[second][writer] = n
		writers[writer] = true
		return nil
	}); err != nil {
		return err
	}
	lags := map[int]time.Duration{}
	for _, s := range r.samples {
		sec := int(math.Floor(s.at.Sub(r.t0).Seconds()))
		lags[sec] = max(lags[sec], s.lag)
		if !s.ok {
			lags[sec] = -1
		}
	}
	first, last := 0, 0
	for sec := range moves {
		first, last = min(first, sec), max(last, sec)
	}
	for sec := range lags {
		first, last = min(first, sec), max(last, sec)
	}
	names := slices.Sorted(maps.Keys(writers))
	var b strings.Builder
	b.WriteString("second\tlag_s")
	for _, w := range names {
		b.WriteString("\t" + w)
	}
	b.WriteString("\n")
	for sec := first; sec <= last; sec++ {
		lag := "-"
		if l, ok := lags[sec]; ok && l >= 0 {
			lag = fmt.Sprintf("%.1f", l.Seconds())
		} else if ok {
			lag = "unreadable"
		}
		fmt.Fprintf(&b, "%d\t%s", sec, lag)
		for _, w := range names {
			fmt.Fprintf(&b, "\t%d", moves[sec][w])
		}
		b.WriteString("\n")
	}
	return os.WriteFile(filepath.Join(r.dir, "timeline.tsv"), []byte(b.String()), 0o644)
}

// table returns the quoted name of a table of the run's schema.
func (r *run) table(name string) string {
	return pgx.Identifier{r.schema, name}.Sanitize()
}
