package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/bench/internal/measure"
	"github.com/vantage-go/vantage/core"
)

// The soak scenario is a long live run at a constant rate, sampled at a
// fixed interval, that shows whether the engine stays flat over time on
// PostgreSQL with production settings: the latency, the sizes of the
// tables whose rows come and go with every event, and the memory of the
// process running the instances. So that a drift can be explained, each
// sample also holds the CPU time the interval cost (this process, the
// database server's processes, the rest of the machine) and, when the
// server has pg_stat_statements, what the statements of most execution
// time cost in it (soakstatements.go); the report compares their mean
// times in the first and the last verdict windows. Unlike the live
// scenario it keeps no record per event: what it holds does not grow with
// the run, so that the heap it reports is the engine's.

// Soak defaults and fixed figures.
const (
	// soakInstances is the number of engine instances, with default
	// options.
	soakInstances = 2
	// soakRateDefault is the soak's rate when -rate is not given. It is
	// meant to be half the sustainable rate the ramp scenario finds on the
	// machine: high enough to load the engine for the whole run, low
	// enough that a backlog never builds for reasons other than the ones
	// the soak looks for.
	soakRateDefault = 500
	// soakProgressKeep is how long a perspective's progress records are
	// kept once later ones exist: long enough to time an event whose
	// Append call returned after it was applied.
	soakProgressKeep = time.Minute
)

// soakTables are the tables of the run's schema whose sizes are sampled:
// those written for every event other than the events themselves.
var soakTables = []string{"vantage_work", "vantage_cursors", "vantage_models", "vantage_active_streams"}

// soakFigures are the soak's samples and verdicts.
type soakFigures struct {
	// SampleS is the sample interval, WarmupS the appending time before
	// the first interval, in seconds.
	SampleS float64 `json:"sample_s"`
	WarmupS float64 `json:"warmup_s"`
	// Origin is the end of the warm-up, where sample times count from.
	Origin time.Time `json:"origin"`
	// Window is the number of samples of each verdict window (soakWindow).
	Window int `json:"window"`
	// ServerPID is the postmaster of the database server, whose processes'
	// CPU time the samples count; 0 when the server does not run on this
	// machine, and the samples' PGCPUS are then 0.
	ServerPID int `json:"server_pid,omitempty"`
	// StatementsError says why the samples hold no statement costs:
	// pg_stat_statements could not be read at the start.
	StatementsError string        `json:"statements_error,omitempty"`
	Samples         []soakSample  `json:"samples"`
	Verdicts        []soakVerdict `json:"verdicts"`
}

// soakSample is one sample interval of the soak.
type soakSample struct {
	// AtS is the end of the interval, in seconds from the end of the
	// warm-up; Seconds its length as measured.
	AtS     float64 `json:"at_s"`
	Seconds float64 `json:"seconds"`
	// Appended counts the events whose Append call returned in the
	// interval, AchievedRate the same per second; Applied the events whose
	// last perspective applied them in the interval, those the latencies
	// are of.
	Appended     int64   `json:"appended"`
	AchievedRate float64 `json:"achieved_rate"`
	Applied      int64   `json:"applied"`
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
	MaxMs        float64 `json:"max_ms"`
	// Backlog is the events appended and not yet applied by every
	// perspective at the end of the interval.
	Backlog int64 `json:"backlog"`
	// Tables holds, by table name, the readings of soakTables.
	Tables map[string]soakTable `json:"tables,omitempty"`
	// HeapInuseMB is runtime.MemStats.HeapInuse, LiveHeapMB the heap
	// marked live by the latest garbage collection (runtime/metrics
	// /gc/heap/live:bytes), RSSMB the resident set (VmRSS), of the process
	// running the instances and the appenders. HeapInuse swings by up to
	// GOGC between collections; the live heap does not, which makes it
	// the figure the heap verdict judges.
	HeapInuseMB float64 `json:"heap_inuse_mb"`
	LiveHeapMB  float64 `json:"live_heap_mb"`
	RSSMB       float64 `json:"rss_mb"`
	// GoCPUS is the CPU time (user and system) this process used in the
	// interval, in seconds; PGCPUS that of the database server's
	// processes: its postmaster and every child, so the backends of every
	// connection (other sessions' too, on a shared server), autovacuum,
	// the WAL writer, the checkpointer; OtherCPUS that of the rest of the
	// machine (its busy time less the two, the server's included when it
	// cannot be read).
	GoCPUS    float64 `json:"go_cpu_s"`
	PGCPUS    float64 `json:"pg_cpu_s"`
	OtherCPUS float64 `json:"other_cpu_s"`
	// Statements are the soakTopStatements statement labels of most
	// execution time in the interval, most first; none without
	// pg_stat_statements or without a reading at the start of the
	// interval.
	Statements []soakStatement `json:"statements,omitempty"`
	// Error says why readings are missing.
	Error string `json:"error,omitempty"`
}

// soakTable is one table's reading at the end of a sample interval.
type soakTable struct {
	// TotalBytes is pg_total_relation_size (every fork, the indexes and
	// TOAST), TableBytes pg_relation_size (the table's main fork),
	// IndexBytes pg_indexes_size.
	TotalBytes int64 `json:"total_bytes"`
	TableBytes int64 `json:"table_bytes"`
	IndexBytes int64 `json:"index_bytes"`
	// From pg_stat_user_tables, as the backends last published them.
	LiveTuples     int64      `json:"live_tuples"`
	DeadTuples     int64      `json:"dead_tuples"`
	Autovacuums    int64      `json:"autovacuums"`
	LastAutovacuum *time.Time `json:"last_autovacuum,omitempty"`
}

// soakTracker follows each event from the start of its Append call to its
// application by the last perspective, as the live scenario measures it,
// and keeps the latencies of the current sample interval only. Per stream
// it holds the events appended and not yet applied, and each
// perspective's progress records of the last soakProgressKeep. Safe for
// concurrent use.
type soakTracker struct {
	streams []soakStream
	// appended and applied count events since the start.
	appended, applied atomic.Int64

	mu  sync.Mutex // guards lat
	lat []time.Duration
}

type soakStream struct {
	mu       sync.Mutex
	head     int64
	pending  []soakPending
	progress [][]progressRecord // per perspective, in time order
}

type soakPending struct {
	version int64
	at      time.Time
}

func newSoakTracker(streams, perspectives int) *soakTracker {
	t := &soakTracker{streams: make([]soakStream, streams)}
	for i := range t.streams {
		t.streams[i].progress = make([][]progressRecord, perspectives)
	}
	return t
}

// appendedEvent records that the Append call started at appended version
// to stream i. Its hooks may have run already.
func (t *soakTracker) appendedEvent(i int, version int64, at time.Time) {
	t.appended.Add(1) // before applied, so that the backlog is never negative
	ls := &t.streams[i]
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.head = max(ls.head, version)
	if last, ok := ls.appliedAt(version); ok {
		t.record(last.Sub(at))
		return
	}
	ls.pending = append(ls.pending, soakPending{version, at})
}

// progressed records that perspective p of stream i reached version at now,
// and completes the events it was the last perspective to reach.
func (t *soakTracker) progressed(i, p int, version int64, now time.Time) {
	ls := &t.streams[i]
	ls.mu.Lock()
	defer ls.mu.Unlock()
	recs := append(ls.progress[p], progressRecord{version, now})
	k := 0
	for k < len(recs)-1 && now.Sub(recs[k].at) > soakProgressKeep {
		k++
	}
	ls.progress[p] = slices.Delete(recs, 0, k)
	ls.pending = slices.DeleteFunc(ls.pending, func(a soakPending) bool {
		last, ok := ls.appliedAt(a.version)
		if ok {
			t.record(last.Sub(a.at))
		}
		return ok
	})
}

// appliedAt returns when the last perspective first reached version, if
// every one did. Call with ls.mu held.
func (ls *soakStream) appliedAt(version int64) (time.Time, bool) {
	var last time.Time
	for _, recs := range ls.progress {
		i := slices.IndexFunc(recs, func(r progressRecord) bool { return r.version >= version })
		if i < 0 {
			return time.Time{}, false
		}
		if recs[i].at.After(last) {
			last = recs[i].at
		}
	}
	return last, true
}

func (t *soakTracker) record(d time.Duration) {
	t.mu.Lock()
	t.lat = append(t.lat, d)
	t.mu.Unlock()
	t.applied.Add(1)
}

// take returns the latencies recorded since the previous take.
func (t *soakTracker) take() []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	lat := t.lat
	t.lat = make([]time.Duration, 0, len(lat))
	return lat
}

// heads returns every stream's highest appended version.
func (t *soakTracker) heads() []int64 {
	out := make([]int64, len(t.streams))
	for i := range t.streams {
		ls := &t.streams[i]
		ls.mu.Lock()
		out[i] = ls.head
		ls.mu.Unlock()
	}
	return out
}

// soakCounters is a reading of the tracker's counters, and of the CPU
// time used so far.
type soakCounters struct {
	at                time.Time
	appended, applied int64
	cpu               soakCPU
}

// soakCPU is a reading of the CPU time used so far by this process, by the
// database server's processes, and by the whole machine (busy time).
type soakCPU struct {
	goCPU, server, busy time.Duration
}

// readSoakCPU reads the CPU times; the server's when postmaster is not 0.
func readSoakCPU(postmaster int) soakCPU {
	c := soakCPU{goCPU: measure.ProcessCPU(), busy: measure.MachineBusy()}
	if postmaster != 0 {
		c.server = measure.ServerCPU(postmaster)
	}
	return c
}

func (t *soakTracker) counters(at time.Time) soakCounters {
	// applied first: an event counted in applied is then counted in
	// appended too.
	applied := t.applied.Load()
	return soakCounters{at: at, applied: applied, appended: t.appended.Load()}
}

// intervalSample fills the figures of the interval from prev to cur, with
// its latencies and CPU times, origin being the end of the warm-up.
func intervalSample(origin time.Time, prev, cur soakCounters, lat []time.Duration) soakSample {
	s := soakSample{
		AtS:      cur.at.Sub(origin).Seconds(),
		Seconds:  cur.at.Sub(prev.at).Seconds(),
		Appended: cur.appended - prev.appended,
		Applied:  int64(len(lat)),
		Backlog:  max(cur.appended-cur.applied, 0),
	}
	if s.Seconds > 0 {
		s.AchievedRate = float64(s.Appended) / s.Seconds
	}
	goCPU := max(cur.cpu.goCPU-prev.cpu.goCPU, 0)
	server := max(cur.cpu.server-prev.cpu.server, 0)
	s.GoCPUS, s.PGCPUS = goCPU.Seconds(), server.Seconds()
	s.OtherCPUS = max(cur.cpu.busy-prev.cpu.busy-goCPU-server, 0).Seconds()
	ps := measure.Percentiles(lat, 0.5, 0.99, 1)
	s.P50Ms, s.P99Ms, s.MaxMs = ps[0], ps[1], ps[2]
	return s
}

// soakSampleCount is the number of whole sample intervals in duration.
func soakSampleCount(duration, every time.Duration) int {
	if every <= 0 {
		return 0
	}
	return int(duration / every)
}

// soak appends at the spec's rate to the spec's instances (engine
// defaults) for the warm-up, then for SoakSample-long intervals over
// Duration, and records a sample at the end of each (with the CPU times
// and the statements' costs since the previous one); then it waits until
// every event is applied, checks the models and judges the samples
// (soakVerdicts).
func (v *vantage) soak(ctx context.Context) (*result, error) {
	s := v.spec
	r := newResult(s)
	n := soakSampleCount(s.Duration, s.SoakSample)
	if n < soakMinSamples {
		return r, fmt.Errorf("the soak needs at least %d samples, got %d", soakMinSamples, n)
	}
	fig := &soakFigures{SampleS: s.SoakSample.Seconds(), WarmupS: s.Warmup.Seconds(), Window: soakWindow(n, s.SoakSample)}
	r.Soak = fig
	streams := make([]uuid.UUID, s.Streams)
	index := make(map[uuid.UUID]int, s.Streams)
	for i := range streams {
		streams[i] = uuid.Must(uuid.NewV7())
		index[streams[i]] = i
	}
	tr := newSoakTracker(s.Streams, s.Perspectives)
	hooks := func(int) core.Hooks {
		return core.Hooks{OnPerspectiveEventProcessed: func(e core.PerspectiveEventProcessed) {
			now := time.Now()
			if i, ok := index[e.StreamID]; ok {
				tr.progressed(i, v.nameIdx[e.Perspective], e.LastVersion, now)
			}
		}}
	}
	// Subscriptions must exist before the first append fans out.
	if err := v.reg.RegisterSubscriptions(ctx, v.events); err != nil {
		return r, err
	}
	if err := v.startWorkers(ctx, hooks); err != nil {
		return r, err
	}
	fig.ServerPID = v.serverPID(ctx)
	if fig.ServerPID == 0 {
		fmt.Fprintf(os.Stderr, "  [%s] the database server's CPU is unavailable: its processes are not on this machine\n", s.name())
	}
	ph, err := v.startPhase(ctx)
	if err != nil {
		return r, err
	}
	origin := ph.start.Add(s.Warmup)
	fig.Origin = origin
	total := s.Warmup + time.Duration(n)*s.SoakSample

	// The pacer releases event i at start + i/rate, as in the live
	// scenario; appenders append one event per call to stream i mod
	// streams, with no version check.
	jobs := pace(ctx, ph.start, total, s.Rate*2, nil, steady(s.Rate))
	var appendErrs atomic.Int64
	wg := v.appendSteady(ctx, jobs, streams, &appendErrs, tr.appendedEvent)

	// The warm-up's latencies are dropped with the first take.
	select {
	case <-time.After(time.Until(origin)):
	case <-ctx.Done():
	}
	_ = tr.take()
	prev := tr.counters(time.Now())
	prev.cpu = readSoakCPU(fig.ServerPID)
	stmts, err := readStatements(ctx, v.admin, s.Schema)
	if err != nil {
		fig.StatementsError = err.Error()
		fmt.Fprintf(os.Stderr, "  [%s] statement costs unavailable (the soak's cluster loads pg_stat_statements when -pg-bin's PostgreSQL has it): %v\n", s.name(), err)
	}
	for k := 1; k <= n && ctx.Err() == nil; k++ {
		select {
		case <-time.After(time.Until(origin.Add(time.Duration(k) * s.SoakSample))):
		case <-ctx.Done():
			continue
		}
		cur := tr.counters(time.Now())
		cur.cpu = readSoakCPU(fig.ServerPID)
		smp := intervalSample(origin, prev, cur, tr.take())
		prev = cur
		v.soakReadings(ctx, &smp)
		if fig.StatementsError == "" {
			stmts = v.soakStatements(ctx, &smp, stmts)
		}
		fig.Samples = append(fig.Samples, smp)
		fmt.Fprintf(os.Stderr, "  [%s] sample %d/%d %s\n", s.name(), k, n, soakProgressLine(smp))
	}
	wg.Wait() // the pacer stops at the end of the last interval
	appendEnd := time.Now()
	r.Events = tr.appended.Load()
	r.WorkRows = r.Events * int64(s.Perspectives)
	r.AchievedRate = float64(r.Events) / appendEnd.Sub(ph.start).Seconds()
	switch {
	case ctx.Err() != nil:
		r.Error = fmt.Sprintf("interrupted after %d of %d samples", len(fig.Samples), n)
	case appendErrs.Load() > 0:
		r.Error = fmt.Sprintf("%d appends failed", appendErrs.Load())
	}

	// Wait until every event is applied.
	deadline := time.Now().Add(min(s.DrainWait, runLimit(ctx)))
	for tr.applied.Load() < tr.appended.Load() && ctx.Err() == nil {
		if time.Now().After(deadline) {
			if r.Error == "" {
				r.Error = fmt.Sprintf("%d events not applied %s after the appends ended", tr.appended.Load()-tr.applied.Load(), s.DrainWait)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	ph.end(r, r.Events)
	r.Seconds = appendEnd.Sub(ph.start).Seconds()
	soakSummary(r, fig.Samples)
	v.stopWorkers(30 * time.Second)
	if ctx.Err() == nil {
		if err := v.check(ctx, r, streams, tr.heads()); err != nil {
			return r, err
		}
	}
	fig.Verdicts = soakVerdicts(fig.Samples, fig.Window, r)
	if failed := failedTargets(fig.Verdicts); len(failed) > 0 && r.Error == "" {
		r.Error = fmt.Sprintf("%d of %d verdicts failed: %s", len(failed), len(fig.Verdicts), failed)
	}
	return r, nil
}

// soakReadings adds the table readings and the memory of the process to
// smp.
func (v *vantage) soakReadings(ctx context.Context, smp *soakSample) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	smp.HeapInuseMB = float64(ms.HeapInuse) / (1 << 20)
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	if live[0].Value.Kind() == metrics.KindUint64 {
		smp.LiveHeapMB = float64(live[0].Value.Uint64()) / (1 << 20)
	}
	if rss, err := measure.RSSMB(); err == nil {
		smp.RSSMB = rss
	}
	tables, err := readSoakTables(ctx, v, v.spec.Schema)
	if err != nil {
		smp.Error = err.Error()
		return
	}
	smp.Tables = tables
}

// soakStatements adds to smp the costs of its interval's statements, from
// prev, the previous reading (nil if it failed), and returns the reading
// the next sample starts from. A failed reading leaves the sample and the
// next one without statements: a delta over two intervals would not
// compare with the others.
func (v *vantage) soakStatements(ctx context.Context, smp *soakSample, prev map[int64]statementReading) map[int64]statementReading {
	cur, err := readStatements(ctx, v.admin, v.spec.Schema)
	if err != nil {
		smp.Error = strings.TrimPrefix(smp.Error+"; "+err.Error(), "; ")
		return nil
	}
	if prev != nil {
		smp.Statements = topStatements(prev, cur, soakTopStatements)
	}
	return cur
}

// serverPID returns the pid of the database server's postmaster, found
// from a backend of the admin pool; 0 when the server does not run on this
// machine.
func (v *vantage) serverPID(ctx context.Context) int {
	var backend int32
	if err := v.admin.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return 0
	}
	pid, _ := measure.Postmaster(int(backend))
	return pid
}

// readSoakTables reads the sizes and the vacuum statistics of soakTables.
func readSoakTables(ctx context.Context, v *vantage, schema string) (map[string]soakTable, error) {
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := v.admin.Query(qctx, `SELECT c.relname, pg_total_relation_size(c.oid), pg_relation_size(c.oid), pg_indexes_size(c.oid),
       coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0), coalesce(s.autovacuum_count, 0), s.last_autovacuum
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE n.nspname = $1 AND c.relname = ANY($2) AND c.relkind = 'r'`, schema, soakTables)
	if err != nil {
		return nil, fmt.Errorf("reading table sizes: %w", err)
	}
	defer rows.Close()
	out := map[string]soakTable{}
	for rows.Next() {
		var name string
		var t soakTable
		if err := rows.Scan(&name, &t.TotalBytes, &t.TableBytes, &t.IndexBytes, &t.LiveTuples, &t.DeadTuples, &t.Autovacuums, &t.LastAutovacuum); err != nil {
			return nil, fmt.Errorf("reading table sizes: %w", err)
		}
		out[name] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading table sizes: %w", err)
	}
	return out, nil
}

// soakSummary fills the result line's latency figures from the samples:
// the highest p50, p99 and maximum of any sample, and the events timed.
func soakSummary(r *result, samples []soakSample) {
	for _, smp := range samples {
		r.P50Ms = max(r.P50Ms, smp.P50Ms)
		r.P99Ms = max(r.P99Ms, smp.P99Ms)
		r.MaxMs = max(r.MaxMs, smp.MaxMs)
		r.Samples += int(smp.Applied)
	}
}

// soakProgressLine is a sample's progress line.
func soakProgressLine(smp soakSample) string {
	line := fmt.Sprintf("at %s: p50=%.1fms p99=%.1fms rate=%.0f/s backlog=%d heap=%.1fMiB live=%.1fMiB rss=%.1fMiB cpu: go=%.1fs pg=%.1fs others=%.1fs",
		clock(smp.AtS), smp.P50Ms, smp.P99Ms, smp.AchievedRate, smp.Backlog, smp.HeapInuseMB, smp.LiveHeapMB, smp.RSSMB, smp.GoCPUS, smp.PGCPUS, smp.OtherCPUS)
	if w, ok := smp.Tables["vantage_work"]; ok {
		line += fmt.Sprintf(" work=%dKiB dead=%d autovacuums=%d", w.TotalBytes>>10, w.DeadTuples, w.Autovacuums)
	}
	if len(smp.Statements) > 0 {
		st := smp.Statements[0]
		line += fmt.Sprintf(" top=%q %.3fms x %d", st.Label, st.MeanMs, st.Calls)
	}
	if smp.Error != "" {
		line += " (" + smp.Error + ")"
	}
	return line
}

// checkSoakFlags validates the flags of -scenario soak.
func checkSoakFlags(c config) error {
	if c.backend == "memory" {
		return fmt.Errorf("-scenario soak runs on PostgreSQL only")
	}
	if c.rateSet && len(c.rates) != 1 {
		return fmt.Errorf("-scenario soak takes one -rate, got %d", len(c.rates))
	}
	if c.soakSample <= 0 {
		return fmt.Errorf("-soak-sample must be positive, got %s", c.soakSample)
	}
	if n := soakSampleCount(c.soakDuration, c.soakSample); n < soakMinSamples {
		return fmt.Errorf("-soak-duration %s holds %d samples of -soak-sample %s; the verdicts need at least %d", c.soakDuration, n, c.soakSample, soakMinSamples)
	}
	return nil
}

// soakSpec is the soak's run: soakInstances instances with default
// options at -rate (soakRateDefault unless given). -timeout cannot cut it
// short: its limit is at least the warm-up, the duration and the drain
// wait, plus 5 minutes for starting, sampling and checking.
func soakSpec(c config, base spec) spec {
	s := base
	s.Scenario, s.Impl, s.Backend, s.Setting = scenarioSoak, implVantage, "postgres", settingDefaults
	s.Instances, s.Rate, s.Duration, s.SoakSample = soakInstances, soakRateDefault, c.soakDuration, c.soakSample
	if c.rateSet {
		s.Rate = c.rates[0]
	}
	s.Timeout = max(c.timeout, c.warmup+c.soakDuration+c.drainWait+5*time.Minute)
	return s
}
