package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vantage-go/vantage/bench/internal/measure"
)

// runChild executes one run and writes its result line to out.
func runChild(ctx context.Context, specJSON string, out io.Writer) error {
	var s spec
	if err := json.Unmarshal([]byte(specJSON), &s); err != nil {
		return fmt.Errorf("decoding spec: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	var (
		r   *result
		err error
	)
	switch s.Impl {
	case implVantage:
		r, err = runVantage(ctx, s)
	case implRaw:
		r, err = runRaw(ctx, s)
	case implRiver:
		r, err = runRiver(ctx, s)
	default:
		err = fmt.Errorf("unknown implementation %q", s.Impl)
	}
	if r == nil {
		r = newResult(s)
	}
	if err != nil {
		r.Error = err.Error()
	}
	r.finish()
	b, merr := json.Marshal(r)
	if merr != nil {
		return merr
	}
	_, werr := fmt.Fprintf(out, "%s%s\n", resultPrefix, b)
	return werr
}

// explainThreshold is the duration above which auto_explain logs a plan
// when profiling.
const explainThreshold = 100 * time.Millisecond

// env is what a child run shares across its parts: pools with their
// backend pids recorded, the optional SQL tracer and the profile files.
type env struct {
	spec     spec
	backends measure.Backends
	sql      *measure.SQLStats // nil unless profiling or idle
	// pings counts the liveness pings the pools sent before handing out a
	// connection (idle only).
	pings    atomic.Int64
	admin    *pgxpool.Pool // checks and statistics; not traced
	pools    []*pgxpool.Pool
	report   io.Writer // the profile report, or io.Discard
	closeRep func()
}

func newEnv(ctx context.Context, s spec) (*env, error) {
	e := &env{spec: s, report: io.Discard, closeRep: func() {}}
	// The idle scenario counts the statements the instance sends; the
	// tracer costs too little to weigh on it at idle rates.
	if s.ProfileDir != "" || s.Scenario == scenarioIdle {
		e.sql = &measure.SQLStats{Classify: classifySQL}
	}
	if s.ProfileDir != "" {
		f, err := os.Create(filepath.Join(s.ProfileDir, s.name()+".txt"))
		if err != nil {
			return nil, err
		}
		e.report, e.closeRep = f, func() { _ = f.Close() }
		fmt.Fprintf(f, "run: %s\nspec: %+v\n\n", s.name(), s)
	}
	if s.Backend == "postgres" {
		admin, err := pgxpool.New(ctx, s.Database)
		if err != nil {
			return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
		}
		e.admin = admin
	}
	return e, nil
}

// warm opens every connection pools may hold before a measured phase: a
// catch-up compares the processing of a backlog, not the opening of
// connections, and the references' pools are warm from seeding through
// them, where Vantage's engine pools, apart from its appenders', are not.
// Each connection is opened by an acquire while the others are held.
func warm(ctx context.Context, pools ...*pgxpool.Pool) error {
	for _, p := range pools {
		conns := make([]*pgxpool.Conn, 0, p.Config().MaxConns)
		var err error
		for range p.Config().MaxConns {
			var c *pgxpool.Conn
			if c, err = p.Acquire(ctx); err != nil {
				break
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			c.Release()
		}
		if err != nil {
			return fmt.Errorf("opening the pool's connections: %w", err)
		}
	}
	return nil
}

// pool opens a pool of maxConns connections whose backends are recorded
// (and traced when profiling or idle).
func (e *env) pool(ctx context.Context, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.spec.Database)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(maxConns)
	cfg.AfterConnect = e.backends.AfterConnect
	if e.sql != nil {
		cfg.ConnConfig.Tracer = e.sql
	}
	if e.spec.Scenario == scenarioIdle {
		// Pings are round trips the tracer does not see: keep pgx's own
		// rule (a connection idle for more than a second is pinged before
		// it is handed out) and count them.
		cfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
			if p.IdleDuration > time.Second {
				e.pings.Add(1)
				return true
			}
			return false
		}
	}
	if e.spec.ProfileDir != "" {
		// Plans of the slow statements, with actual row counts, go to the
		// server log (auto_explain, loadable per session by a superuser).
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			if err := e.backends.AfterConnect(ctx, conn); err != nil {
				return err
			}
			_, err := conn.Exec(ctx, fmt.Sprintf(`LOAD 'auto_explain'; SET auto_explain.log_min_duration = '%dms'; SET auto_explain.log_analyze = on; SET auto_explain.log_buffers = on; SET auto_explain.log_timing = off`, explainThreshold.Milliseconds()))
			if err != nil {
				fmt.Fprintf(os.Stderr, "  (auto_explain unavailable: %v)\n", err)
			}
			return nil
		}
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	e.pools = append(e.pools, p)
	return p, nil
}

func (e *env) close() {
	for _, p := range e.pools {
		p.Close()
	}
	if e.admin != nil {
		e.admin.Close()
	}
	e.closeRep()
}

// phase measures the timed part of a run: peak RSS from its start, the CPU
// time of this process and of PostgreSQL, a CPU profile and the PostgreSQL
// counters when profiling.
type phase struct {
	e               *env
	start           time.Time
	cpu0, pg0, aux0 time.Duration
	snap0           measure.PGSnapshot
	profile         *os.File
	stopHeap        func()
	logOffset       int64
	busy0           time.Duration
}

// watchHeap overwrites path with a heap profile whenever the heap in use
// (read every 250ms) exceeds the largest yet written by more than 10%, so
// the last file written shows the heap near its peak (as of the garbage
// collection before, as heap profiles do). The returned stop ends the
// watch and returns once it ended.
func watchHeap(path string) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var peak uint64
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse <= peak+peak/10 {
				continue
			}
			peak = ms.HeapInuse
			if f, err := os.Create(path); err == nil {
				_ = pprof.Lookup("heap").WriteTo(f, 0)
				_ = f.Close()
			}
		}
	}()
	return func() { close(quit); <-done }
}

func (e *env) startPhase(ctx context.Context) (*phase, error) {
	runtime.GC()
	debug.FreeOSMemory()
	if err := measure.ResetPeakRSS(); err != nil {
		fmt.Fprintf(os.Stderr, "  (cannot reset the peak RSS: %v; it includes seeding)\n", err)
	}
	p := &phase{e: e}
	if e.admin != nil && (e.spec.ProfileDir != "" || e.countsWrites()) {
		e.flushStats(ctx) // the seeding's and the start-up's counters, before the baseline
		var err error
		if p.snap0, err = measure.TakePGSnapshot(ctx, e.admin, e.spec.Schema); err != nil {
			return nil, fmt.Errorf("reading PostgreSQL statistics: %w", err)
		}
	}
	if e.spec.ProfileDir != "" {
		f, err := os.Create(filepath.Join(e.spec.ProfileDir, e.spec.name()+".cpu.pprof"))
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return nil, err
		}
		p.profile = f
		p.stopHeap = watchHeap(filepath.Join(e.spec.ProfileDir, e.spec.name()+".heap.pprof"))
		e.sql.Reset()
		p.logOffset = logSize(e.spec.PGLog)
	}
	p.cpu0, p.pg0, p.aux0, p.busy0 = measure.ProcessCPU(), e.backends.CPU(), measure.PostgresAuxCPU(), measure.MachineBusy()
	p.start = time.Now()
	return p, nil
}

// end stops the clock and records the CPU times and the peak RSS into r;
// events is the per-event denominator of the report.
func (p *phase) end(r *result, events int64) {
	elapsed := time.Since(p.start)
	r.Seconds = elapsed.Seconds()
	goCPU := measure.ProcessCPU() - p.cpu0
	pgCPU := p.e.backends.CPU() - p.pg0
	aux := measure.PostgresAuxCPU() - p.aux0
	busy := measure.MachineBusy() - p.busy0
	r.GoCPUSeconds = goCPU.Seconds()
	r.PGCPUSeconds = pgCPU.Seconds()
	// What the rest of the machine used meanwhile (other sessions' tests,
	// PostgreSQL serving them): a run sharing 2 cores is slowed by it.
	r.OtherCPUSeconds = max(0, (busy - goCPU - pgCPU - aux).Seconds())
	r.MachineCPUPercent = 100 * busy.Seconds() / elapsed.Seconds() / float64(runtime.NumCPU())
	if rss, err := measure.PeakRSSMB(); err == nil {
		r.PeakRSSMB = rss
	}
	if p.e.spec.ProfileDir == "" {
		return
	}
	pprof.StopCPUProfile()
	_ = p.profile.Close()
	p.stopHeap()
	w := p.e.report
	fmt.Fprintf(w, "measured phase: %s wall, %d events\n", elapsed.Round(time.Millisecond), events)
	fmt.Fprintf(w, "CPU: bench process (Go) %.2fs = %.0f%% of one core; PostgreSQL backends of this run %.2fs = %.0f%%; PostgreSQL auxiliary processes (WAL writer, checkpointer, autovacuum ...) %.2fs\n",
		goCPU.Seconds(), 100*goCPU.Seconds()/elapsed.Seconds(), pgCPU.Seconds(), 100*pgCPU.Seconds()/elapsed.Seconds(), aux.Seconds())
	fmt.Fprintf(w, "CPU per event: Go %.1fµs, PostgreSQL backends %.1fµs (%d backends)\n\n",
		float64(goCPU.Microseconds())/float64(max(events, 1)), float64(pgCPU.Microseconds())/float64(max(events, 1)), p.e.backends.Count())
	if p.e.sql != nil {
		p.e.sql.Report(w, events)
		fmt.Fprintln(w)
	}
}

// report completes the profile report with PostgreSQL's counters and the
// slow statements' plans; call it once the workers stopped, so that their
// counters are published.
func (p *phase) report(ctx context.Context, events int64) {
	w := p.e.report
	if p.e.spec.ProfileDir == "" {
		return
	}
	if p.e.admin != nil {
		p.e.flushStats(ctx)
		snap1, err := measure.TakePGSnapshot(ctx, p.e.admin, p.e.spec.Schema)
		if err == nil {
			measure.ReportDelta(w, p.snap0, snap1, events)
		} else {
			fmt.Fprintf(w, "reading PostgreSQL statistics: %v\n", err)
		}
		fmt.Fprintln(w)
		if err := measure.ReportPlans(w, p.e.spec.PGLog, p.logOffset, p.e.backends.PIDs(), classifySQL); err != nil {
			fmt.Fprintf(w, "reading the server log for plans: %v\n", err)
		}
	}
}

// countsWrites reports whether the run records the rows its tables wrote
// during the measured phase (see phase.writes).
func (e *env) countsWrites() bool {
	return e.admin != nil && e.spec.Scenario == scenarioLive
}

// writes records into r the rows each table of the run's schema inserted,
// updated and deleted since the phase started, from pg_stat_user_tables.
// Call it once the workers stopped: flushStats then reaches every
// connection of the run, idle in its pool.
//
// What the counters cannot tell apart: the writes of the workers' Stop
// (releasing what they hold, deregistering) are in the figures, a few rows
// per run rather than per event; so are the start-up writes of a
// connection that was in use when the baseline was read, and the rows of
// transactions that rolled back. A connection closed during the phase publishes its
// counters as it exits, which may be after the reading.
func (p *phase) writes(ctx context.Context, r *result) error {
	p.e.flushStats(ctx)
	snap, err := measure.TakePGSnapshot(ctx, p.e.admin, p.e.spec.Schema)
	if err != nil {
		return fmt.Errorf("reading PostgreSQL statistics: %w", err)
	}
	r.TableWrites = tableWrites(p.snap0.Tables, snap.Tables)
	return nil
}

// flushStats makes every idle connection of the run publish its pending
// statistics. A PostgreSQL 15 backend publishes them when a transaction
// ends at least a second after its previous report, or once it has been
// idle for 10 seconds; pg_stat_force_next_flush() forces the report the
// backend makes as it goes idle after the call, before it answers. A
// connection in use is not reached, and its counters may publish late.
func (e *env) flushStats(ctx context.Context) {
	for _, pool := range append([]*pgxpool.Pool{e.admin}, e.pools...) {
		for _, c := range pool.AcquireAllIdle(ctx) {
			_, _ = c.Exec(ctx, "SELECT pg_stat_force_next_flush()")
			c.Release()
		}
	}
	time.Sleep(200 * time.Millisecond)
}

func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// progress prints line() to stderr every second until ctx ends or stop is
// closed.
func progress(ctx context.Context, stop <-chan struct{}, name string, line func() string) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-t.C:
			fmt.Fprintf(os.Stderr, "  [%s] %5.1fs %s\n", name, time.Since(start).Seconds(), line())
		}
	}
}

// sqlLabels name the statements of the PostgreSQL adapter, then those of
// the raw pipeline and any other insert, matched on their
// whitespace-normalised text in this order.
var sqlLabels = []struct{ match, label string }{
	{"set_config('jit', 'off', true)", "work settings"},
	{"set_config('enable_hashjoin', 'off', true)", "joins by key"},
	{"set_config('enable_hashjoin', 'on', true)", "joins any"},
	{"pg_advisory_xact_lock", "append: stream lock"},
	{"stored AS (", "append: events + work rows"},
	{"ORDER BY b.pending", "claim: held streams"},
	{"vantage_claim_candidates(", "claim: select, pin, lease"},
	{"SELECT EXISTS ( SELECT 1 FROM", "claim: liveness"},
	{"THEN 1 ELSE 0 END", "fetch: lease"},
	{"bool_and(", "fetch: rows + events"},
	{"moved AS (", "model: save (model + cursor)"},
	{"SELECT data, last_event_id, last_version, updated_at", "model: load"},
	{"($2 = '' OR perspective = $2)", "cursors: get (rewind check)"},
	{"USING unnest($2::uuid[], $3::uuid[], $4::text[])", "complete: delete work rows"},
	{"AS u(stream_id, perspective, last_event_id, last_version), clock", "complete: upsert cursors"},
	{"pairs AS (", "complete: flag stragglers"},
	{"p.stream_id = ANY($1::uuid[])", "complete: unpin drained"},
	{"SET instance_id = NULL, lease_expiry = NULL, error = f.error", "fail: release rows"},
	{"vantage_instances AS i", "heartbeat: upsert"},
	{"SET instance_id = NULL, lease_expiry = NULL FROM", "heartbeat: abandon leases"},
	{"ON i.instance_id = p.instance_id", "heartbeat: abandon pins"},
	{"vantage_instances i USING clock", "heartbeat: abandon instances"},
	{"vantage_subscriptions", "subscriptions"},
	{"vantage_lifecycle", "lifecycle"},
	{"vantage_snapshots", "snapshots"},
	{"status & 32", "rewind: scan"},
	{"stream_lock", "rewind: lock"},
	{"FOR UPDATE SKIP LOCKED", "raw: claim + fetch"},
	{".work WHERE seq = ANY", "raw: delete work rows"},
	{".cursors AS c", "raw: upsert cursors"},
	{".models AS m", "raw: upsert models"},
	{"INSERT INTO", "insert"},
}

// classifySQL labels a statement for the SQL report: River's by their sqlc
// name, the others by sqlLabels, the rest by their first eight words.
func classifySQL(sql string) string {
	words := strings.Fields(sql)
	norm := strings.Join(words, " ")
	if rest, ok := strings.CutPrefix(norm, "-- name: "); ok { // River's sqlc queries
		name, _, _ := strings.Cut(rest, " ")
		return "river: " + name
	}
	for _, l := range sqlLabels {
		if strings.Contains(norm, l.match) {
			return l.label
		}
	}
	return strings.Join(words[:min(len(words), 8)], " ")
}

// quoted returns the schema of the run, quoted for SQL text.
func quoted(schema string) string { return pgx.Identifier{schema}.Sanitize() }
