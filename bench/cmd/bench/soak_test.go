package main

import (
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vantage-go/vantage/core"
)

func TestPlanSoakRunsAloneAtItsOwnDefaultRate(t *testing.T) {
	t.Parallel()

	if got, want := planNames(t, "-scenario", "soak"), []string{"soak-vantage-postgres-i2-e0-p2-r500-defaults"}; !slices.Equal(got, want) {
		t.Fatalf("planned %q, want %q", got, want)
	}
	if got, want := planNames(t, "-scenario", "soak", "-rate", "300"), []string{"soak-vantage-postgres-i2-e0-p2-r300-defaults"}; !slices.Equal(got, want) {
		t.Fatalf("planned %q with -rate 300, want %q", got, want)
	}
	for _, name := range planNames(t, "-scenario", "all") {
		if strings.HasPrefix(name, scenarioSoak) {
			t.Fatalf("-scenario all planned %s: the soak is a command of its own", name)
		}
	}
}

func TestSoakSpecOutlastsTheTimeout(t *testing.T) {
	t.Parallel()

	c, err := parseFlags([]string{"-scenario", "soak", "-timeout", "5m"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := plan(c)[0]
	if min := 30*time.Minute + 2*time.Minute + 2*time.Minute; s.Timeout < min {
		t.Fatalf("the soak's timeout is %s, want at least the warm-up, duration and drain wait (%s)", s.Timeout, min)
	}
	if s.SoakSample != time.Minute || s.Duration != 30*time.Minute || s.Instances != 2 {
		t.Fatalf("soak spec %+v, want 2 instances sampled every minute for 30 minutes", s)
	}
}

func TestSoakFlagsRejected(t *testing.T) {
	t.Parallel()

	for _, args := range [][]string{
		{"-soak-duration", "3m", "-soak-sample", "1m"}, // 3 samples
		{"-soak-sample", "0s"},
		{"-rate", "100,200"},
		{"-backend", "memory"},
	} {
		if _, err := parseFlags(append([]string{"-scenario", "soak"}, args...), io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}

func TestSoakWarmupCoversTheDedupRetention(t *testing.T) {
	t.Parallel()

	if soakWindowSpan < core.LeaseDurationDefault {
		t.Fatalf("the flat rules' warm-up (%s) is shorter than the dedup retention (%s), over which the heap grows", soakWindowSpan, core.LeaseDurationDefault)
	}
}

func TestSoakSampleCountAndWindow(t *testing.T) {
	t.Parallel()

	for _, c := range []struct {
		duration, every time.Duration
		samples, window int
	}{
		{30 * time.Minute, time.Minute, 30, 5},    // the default: 5-minute windows
		{4 * time.Minute, 30 * time.Second, 8, 2}, // short: a quarter of the samples
		{4*time.Minute + 50*time.Second, time.Minute, 4, 1},
		{time.Hour, 30 * time.Second, 120, 10},
		{20 * time.Minute, 90 * time.Second, 13, 3}, // 5 minutes of 90s samples, rounded up: 4, capped at 13/4
	} {
		n := soakSampleCount(c.duration, c.every)
		if n != c.samples {
			t.Errorf("soakSampleCount(%s, %s) = %d, want %d", c.duration, c.every, n, c.samples)
		}
		if w := soakWindow(n, c.every); w != c.window {
			t.Errorf("soakWindow(%d, %s) = %d, want %d", n, c.every, w, c.window)
		}
	}
	if n := soakSampleCount(time.Minute, 0); n != 0 {
		t.Errorf("soakSampleCount with no interval = %d, want 0", n)
	}
}

func TestIntervalSample(t *testing.T) {
	t.Parallel()

	origin := time.Unix(1000, 0)
	prev := soakCounters{at: origin.Add(30 * time.Second), appended: 9000, applied: 8990,
		cpu: soakCPU{goCPU: 100 * time.Second, server: 200 * time.Second, busy: 900 * time.Second}}
	cur := soakCounters{at: origin.Add(60 * time.Second), appended: 18000, applied: 17950,
		cpu: soakCPU{goCPU: 112 * time.Second, server: 230 * time.Second, busy: 950 * time.Second}}
	lat := make([]time.Duration, 0, 100)
	for i := 100; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	s := intervalSample(origin, prev, cur, lat)
	if s.AtS != 60 || s.Seconds != 30 || s.Appended != 9000 || s.AchievedRate != 300 {
		t.Errorf("interval %+v, want at 60s, 30s long, 9000 appended at 300/s", s)
	}
	if s.Backlog != 50 {
		t.Errorf("backlog %d, want 50: appended less applied since the start", s.Backlog)
	}
	if s.Applied != 100 || s.P50Ms != 50 || s.P99Ms != 99 || s.MaxMs != 100 {
		t.Errorf("latencies applied=%d p50=%v p99=%v max=%v, want 100, 50, 99, 100 (nearest rank)", s.Applied, s.P50Ms, s.P99Ms, s.MaxMs)
	}
	if s.GoCPUS != 12 || s.PGCPUS != 30 || s.OtherCPUS != 8 {
		t.Errorf("cpu go=%v pg=%v others=%v, want 12, 30 and 8: the machine's 50 busy seconds less the process's and the server's", s.GoCPUS, s.PGCPUS, s.OtherCPUS)
	}
	if e := intervalSample(origin, prev, prev, nil); e.P99Ms != 0 || e.AchievedRate != 0 || e.Applied != 0 || e.GoCPUS != 0 || e.OtherCPUS != 0 {
		t.Errorf("empty interval %+v, want zeros", e)
	}
	// The server's processes not found: 0 for it, its CPU in the others'.
	noServer := cur
	noServer.cpu.server = 0
	if e := intervalSample(origin, soakCounters{at: prev.at, cpu: soakCPU{goCPU: prev.cpu.goCPU, busy: prev.cpu.busy}}, noServer, nil); e.PGCPUS != 0 || e.OtherCPUS != 38 {
		t.Errorf("no server reading: pg=%v others=%v, want 0 and 38", e.PGCPUS, e.OtherCPUS)
	}
}

// p99Samples returns samples with these p99s, each with events applied.
func p99Samples(p99s ...float64) []soakSample {
	out := make([]soakSample, len(p99s))
	for i, p := range p99s {
		out[i] = soakSample{P99Ms: p, Applied: 1000}
	}
	return out
}

func TestLatencyVerdict(t *testing.T) {
	t.Parallel()

	// Mean of the first two p99s: 20; limit 25.
	if v := latencyVerdict(p99Samples(10, 30, 50, 60, 25, 25), 2); !v.Pass || v.Limit != 25 || v.Value != 25 {
		t.Errorf("p99s at exactly 1.25 x the baseline: %+v, want a pass with limit 25", v)
	}
	if v := latencyVerdict(p99Samples(10, 30, 10, 10, 10, 25.1), 2); v.Pass || v.Value != 25.1 {
		t.Errorf("the last p99 above the limit: %+v, want a failure on 25.1", v)
	}
	// The middle of the run is not judged: a spike there passes.
	if v := latencyVerdict(p99Samples(20, 20, 500, 20, 20, 20), 2); !v.Pass {
		t.Errorf("a spike in the middle: %+v, want a pass", v)
	}
	stalled := p99Samples(20, 20, 20, 20, 20, 0)
	stalled[5].Applied = 0
	if v := latencyVerdict(stalled, 2); v.Pass {
		t.Errorf("no event applied in the last sample: %+v, want a failure", v)
	}
	if v := latencyVerdict(p99Samples(0, 0, 0, 0), 1); v.Pass {
		t.Errorf("no baseline: %+v, want a failure", v)
	}
}

func TestFlatVerdict(t *testing.T) {
	t.Parallel()

	flat := func(n int, f func(i int) float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	// 30 samples, windows of 5: the reference is samples 6-25.
	growing := flat(30, func(i int) float64 { return 1000 + 100*float64(i) })
	v := flatVerdict("t", "KiB", growing, 5, 256)
	if v.Pass || v.Value != 3900 || math.Abs(v.Limit-3740) > 1e-9 || !strings.Contains(v.Rule, "samples 6-25") {
		t.Errorf("steady growth: %+v, want a failure, 3900 against 1.1 x 3400 (sample 25)", v)
	}
	// A late step to a plateau, as the work table's indexes of the second
	// 30-minute soak (1,928 to 2,256 KiB at minute 19): the reference
	// holds the plateau.
	lateStep := flat(30, func(i int) float64 {
		if i >= 18 {
			return 2256
		}
		return 1928
	})
	if v := flatVerdict("t", "KiB", lateStep, 5, 256); !v.Pass || v.Limit != 2512 {
		t.Errorf("a step to a plateau at sample 19: %+v, want a pass against 2256 + 256", v)
	}
	// The same step in the last window, as the models' indexes at minute
	// 27 (3,160 to 4,152 KiB): growth at the end, not told from a plateau.
	endStep := flat(30, func(i int) float64 {
		if i >= 26 {
			return 4152
		}
		return 3160
	})
	if v := flatVerdict("t", "KiB", endStep, 5, 256); v.Pass || math.Abs(v.Limit-3476) > 1e-9 {
		t.Errorf("a step at sample 27, in the last window: %+v, want a failure against 1.1 x 3160", v)
	}
	// Growth that starts in the last window fails however flat the run
	// was before it.
	lateGrowth := flat(30, func(i int) float64 { return 1000 + 60*float64(max(i-24, 0)) })
	if v := flatVerdict("t", "KiB", lateGrowth, 5, 0); v.Pass || v.Value != 1300 || math.Abs(v.Limit-1100) > 1e-9 {
		t.Errorf("growth over the last window: %+v, want a failure, 1300 against 1100", v)
	}
	// Growth in the warm-up window only, then flat with noise.
	settles := flat(30, func(i int) float64 { return min(float64(i), 5)*1000 + float64(i%3)*50 })
	if v := flatVerdict("t", "KiB", settles, 5, 256); !v.Pass {
		t.Errorf("growth in the warm-up, flat after: %+v, want a pass", v)
	}
	// A small figure may grow by the slack, not by 10% only.
	small := flat(8, func(i int) float64 { return 100 })
	small[7] = 350
	if v := flatVerdict("t", "KiB", small, 2, 256); !v.Pass || v.Limit != 356 {
		t.Errorf("small table grown by less than the slack: %+v, want a pass with limit 356", v)
	}
	small[7] = 357
	if v := flatVerdict("t", "KiB", small, 2, 256); v.Pass {
		t.Errorf("small table grown by more than the slack: %+v, want a failure", v)
	}
	// Failed readings: left out of the reference, failing at the end.
	holes := flat(8, func(i int) float64 { return 1000 })
	holes[2] = math.NaN()
	if v := flatVerdict("t", "KiB", holes, 2, 0); !v.Pass || v.Limit != 1100 {
		t.Errorf("a failed reading in the reference: %+v, want a pass against 1100", v)
	}
	holes[7] = math.NaN()
	if v := flatVerdict("t", "KiB", holes, 2, 0); v.Pass {
		t.Errorf("no reading at the end: %+v, want a failure", v)
	}
}

func TestSoakVerdictsJudgeEveryTarget(t *testing.T) {
	t.Parallel()

	samples := p99Samples(10, 10, 10, 10)
	for i := range samples {
		samples[i].HeapInuseMB, samples[i].LiveHeapMB, samples[i].RSSMB = 20, 12, 50
		samples[i].Tables = map[string]soakTable{}
		for _, table := range soakTables {
			samples[i].Tables[table] = soakTable{TotalBytes: 1 << 20}
		}
	}
	r := &result{Checked: true}
	vs := soakVerdicts(samples, 1, r)
	var targets []string
	for _, v := range vs {
		targets = append(targets, v.Target)
		if !v.Pass {
			t.Errorf("verdict %+v failed on flat samples", v)
		}
	}
	want := []string{"p99 latency", "vantage_work size", "vantage_cursors size", "vantage_models size", "vantage_active_streams size", "Go live heap", "RSS", "models"}
	if !slices.Equal(targets, want) {
		t.Fatalf("targets %q, want %q", targets, want)
	}
	r.PendingAfter = 3
	if failed := failedTargets(soakVerdicts(samples, 1, r)); !slices.Equal(failed, []string{"models"}) {
		t.Fatalf("failed %q with 3 work rows pending, want models", failed)
	}
	if failed := failedTargets(soakVerdicts(samples, 1, &result{})); !slices.Equal(failed, []string{"models"}) {
		t.Fatalf("failed %q without a check, want models", failed)
	}
}

func TestSoakTrackerTimesTheLastPerspective(t *testing.T) {
	t.Parallel()

	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tr := newSoakTracker(2, 2)

	// Appended, then applied by perspective 1 and then 0.
	tr.appendedEvent(0, 1, at(0))
	tr.progressed(0, 1, 1, at(5))
	if n := tr.appended.Load() - tr.applied.Load(); n != 1 {
		t.Fatalf("backlog %d after one perspective, want 1", n)
	}
	tr.progressed(0, 0, 1, at(8))
	// Applied by both perspectives before its Append call returned.
	tr.progressed(1, 0, 1, at(20))
	tr.progressed(1, 1, 1, at(22))
	tr.appendedEvent(1, 1, at(10))
	// One progress record covering two events.
	tr.appendedEvent(0, 2, at(30))
	tr.appendedEvent(0, 3, at(31))
	tr.progressed(0, 0, 3, at(40))
	tr.progressed(0, 1, 3, at(41))

	got := tr.take()
	want := []time.Duration{8 * time.Millisecond, 12 * time.Millisecond, 11 * time.Millisecond, 10 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Fatalf("latencies %v, want %v", got, want)
	}
	if n := tr.appended.Load() - tr.applied.Load(); n != 0 {
		t.Fatalf("backlog %d, want 0", n)
	}
	if got := tr.take(); len(got) != 0 {
		t.Fatalf("second take %v, want nothing: take empties the interval", got)
	}
	if heads := tr.heads(); !slices.Equal(heads, []int64{3, 1}) {
		t.Fatalf("heads %v, want [3 1]", heads)
	}
}

func TestSoakTrackerForgetsOldProgress(t *testing.T) {
	t.Parallel()

	t0 := time.Unix(1000, 0)
	tr := newSoakTracker(1, 1)
	for i := range 200 {
		tr.progressed(0, 0, int64(i+1), t0.Add(time.Duration(i)*time.Second))
	}
	recs := tr.streams[0].progress[0]
	// Records of the last minute are kept, from 139s to 199s.
	if len(recs) != 61 || recs[0].version != 140 {
		t.Fatalf("kept %d records from version %d, want the 61 of the last minute from 140", len(recs), recs[0].version)
	}
	tr.progressed(0, 0, 201, t0.Add(time.Hour))
	if recs := tr.streams[0].progress[0]; len(recs) != 1 || recs[0].version != 201 {
		t.Fatalf("after an hour kept %v, want the latest record only", recs)
	}
}

func TestClock(t *testing.T) {
	t.Parallel()

	for s, want := range map[float64]string{0: "0:00", 59.6: "1:00", 90: "1:30", 1830: "30:30", -4: "-0:04"} {
		if got := clock(s); got != want {
			t.Errorf("clock(%v) = %q, want %q", s, got, want)
		}
	}
}

func TestTopStatements(t *testing.T) {
	t.Parallel()

	prev := map[int64]statementReading{
		1: {label: "model: save (model + cursor)", calls: 1000, execMs: 500, rows: 1000},
		2: {label: "COMMIT", calls: 5000, execMs: 4000},
		3: {label: "claim: liveness", calls: 10, execMs: 1},
		4: {label: "fetch: rows + events", calls: 800, execMs: 900, rows: 4000},
		5: {label: "fetch: rows + events", calls: 100, execMs: 50, rows: 500},
		6: {label: "heartbeat: upsert", calls: 90000, execMs: 9000},
	}
	cur := map[int64]statementReading{
		1: {label: "model: save (model + cursor)", calls: 1600, execMs: 1400, rows: 1600}, // 600 calls, 900ms
		2: {label: "COMMIT", calls: 6000, execMs: 5200},                                   // 1000 calls, 1200ms
		3: {label: "claim: liveness", calls: 10, execMs: 1},                               // no call: left out
		// Two statements of one label: added up, 300 calls, 400ms.
		4: {label: "fetch: rows + events", calls: 1000, execMs: 1200, rows: 5000},
		5: {label: "fetch: rows + events", calls: 200, execMs: 150, rows: 1000},
		// Fewer calls than before: evicted and counted anew, 50 calls, 20ms.
		6: {label: "heartbeat: upsert", calls: 50, execMs: 20},
		// Not in prev: all of it, 4 calls, 600ms.
		7: {label: "rewind: scan", calls: 4, execMs: 600, rows: 8},
		8: {label: "append: stream lock", calls: 70, execMs: 7},
	}
	got := topStatements(prev, cur, 5)
	want := []soakStatement{
		{Label: "COMMIT", Calls: 1000, TotalMs: 1200, MeanMs: 1.2},
		{Label: "model: save (model + cursor)", Calls: 600, TotalMs: 900, MeanMs: 1.5, Rows: 600},
		{Label: "rewind: scan", Calls: 4, TotalMs: 600, MeanMs: 150, Rows: 8},
		{Label: "fetch: rows + events", Calls: 300, TotalMs: 400, MeanMs: 400.0 / 300, Rows: 1500},
		{Label: "heartbeat: upsert", Calls: 50, TotalMs: 20, MeanMs: 0.4},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("top statements\n got %+v\nwant %+v", got, want)
	}
	if got := topStatements(cur, cur, 5); len(got) != 0 {
		t.Fatalf("no call between two equal readings, got %+v", got)
	}
	if got := topStatements(nil, cur, 2); len(got) != 2 || got[0].Label != "COMMIT" || got[0].Calls != 6000 {
		t.Fatalf("from no reading: %+v, want the cumulative figures, COMMIT first", got)
	}
}

func TestStatementLabel(t *testing.T) {
	t.Parallel()

	schema := "bench_vantage_0a1b2c3d"
	for _, c := range []struct{ query, want string }{
		// The run's schema dropped, whitespace collapsed.
		{"SELECT pg_advisory_xact_lock(hashtext($1),\n\t hashtext($2))", "SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))"},
		{"SELECT   count(*)\n  FROM " + quoted(schema) + ".vantage_work WHERE instance_id = $1", "SELECT count(*) FROM vantage_work WHERE instance_id = $1"},
		// Statements that start alike told apart by their common table
		// expressions: materialized, recursive, with column lists,
		// nested parentheses and quoted parentheses.
		{"WITH clock AS (SELECT coalesce($2::timestamptz, now()) AS now),\n drainable AS (SELECT a.stream_id FROM t a, clock WHERE f(a.x, (clock.now)))\nSELECT d.stream_id FROM drainable d",
			"WITH clock, drainable: SELECT d.stream_id FROM drainable d"},
		{"WITH clock AS (SELECT coalesce($2::timestamptz, now()) AS now), held AS MATERIALIZED (SELECT $1 FROM h), moved AS NOT MATERIALIZED (SELECT ')(' FROM \"a)\") UPDATE m SET x = $3",
			"WITH clock, held, moved: UPDATE m SET x = $3"},
		{"with recursive walk(id, depth) as (select $1, $2 union all select id, depth + 1 from walk) select * from walk",
			"WITH walk: select * from walk"},
		// A WITH it cannot follow: the text.
		{"WITH broken AS (SELECT 1", "WITH broken AS (SELECT 1"},
		{"-- 001_init: the tables\n-- of the worker.\nCREATE TABLE vantage_work (id bigint)", "CREATE TABLE vantage_work (id bigint)"},
	} {
		if got := statementLabel(c.query, schema); got != c.want {
			t.Errorf("statementLabel(%q) = %q, want %q", c.query, got, c.want)
		}
	}
	long := "SELECT aaaaaaaaaa, bbbbbbbbbb, cccccccccc, dddddddddd, eeeeeeeeee, ffffffffff, gggggggggg FROM t"
	if got := statementLabel(long, schema); len([]rune(got)) != soakLabelMax || !strings.HasSuffix(got, "…") {
		t.Errorf("label %q, want %d characters ending in …", got, soakLabelMax)
	}
}

// stmtSample returns a sample, with events applied, whose top holds sts.
func stmtSample(sts ...soakStatement) soakSample {
	return soakSample{P99Ms: 10, Applied: 1, Statements: sts}
}

func TestStatementTrends(t *testing.T) {
	t.Parallel()

	save := func(calls int64, ms float64) soakStatement {
		return soakStatement{Label: "save", Calls: calls, TotalMs: ms}
	}
	commit := func(calls int64, ms float64) soakStatement {
		return soakStatement{Label: "COMMIT", Calls: calls, TotalMs: ms}
	}
	samples := []soakSample{
		stmtSample(save(100, 50), commit(100, 100)),
		stmtSample(save(100, 70), commit(100, 100)),
		stmtSample(save(100, 80), soakStatement{Label: "vacuum", Calls: 1, TotalMs: 900}), // the middle only
		stmtSample(commit(100, 100)),
		stmtSample(save(100, 130), commit(100, 110)),
		stmtSample(save(100, 110), commit(100, 90)),
	}
	trends := statementTrends(samples, 2)
	var labels []string
	for _, tr := range trends {
		labels = append(labels, tr.Label)
	}
	// By time in the last window, then in the run.
	if want := []string{"save", "COMMIT", "vacuum"}; !slices.Equal(labels, want) {
		t.Fatalf("labels %q, want %q", labels, want)
	}
	s := trends[0]
	if s.First != (statementWindow{Samples: 2, Calls: 200, TotalMs: 120}) || s.Last != (statementWindow{Samples: 2, Calls: 200, TotalMs: 240}) {
		t.Errorf("save's windows first %+v last %+v, want 2 samples, 200 calls, 120ms and 240ms", s.First, s.Last)
	}
	if s.Run.Samples != 5 || s.First.MeanMs() != 0.6 || s.Last.MeanMs() != 1.2 {
		t.Errorf("save in %d samples, means %v and %v, want 5, 0.6ms and 1.2ms", s.Run.Samples, s.First.MeanMs(), s.Last.MeanMs())
	}
	if v := trends[2]; v.First.Samples != 0 || v.Last.Samples != 0 || v.Run.Samples != 1 || v.First.MeanMs() != 0 {
		t.Errorf("vacuum %+v, want in one sample of the middle only", v)
	}
}

func TestPrintSoakShowsCPUAndStatements(t *testing.T) {
	t.Parallel()

	samples := []soakSample{
		stmtSample(soakStatement{Label: "model: save (model + cursor)", Calls: 100, TotalMs: 50}),
		stmtSample(soakStatement{Label: "model: save (model + cursor)", Calls: 100, TotalMs: 60}),
		stmtSample(soakStatement{Label: "model: save (model + cursor)", Calls: 100, TotalMs: 90}),
		stmtSample(soakStatement{Label: "model: save (model + cursor)", Calls: 100, TotalMs: 100}),
	}
	for i := range samples {
		samples[i].GoCPUS, samples[i].PGCPUS, samples[i].OtherCPUS = 1.5, 2.5, 0.5
	}
	r := &result{Instances: 2, Rate: 100, Soak: &soakFigures{SampleS: 30, Window: 1, ServerPID: 1, Samples: samples}}
	var b strings.Builder
	printSoak(&b, r)
	out := b.String()
	for _, want := range []string{"go_cpu", "pg_cpu", "oth_cpu", "    1.5     2.5     0.5", "first = sample 1, last = sample 4", "2.00x"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	r.Soak.ServerPID, r.Soak.StatementsError = 0, "reading pg_stat_statements: no such relation"
	b.Reset()
	printSoak(&b, r)
	out = b.String()
	if !strings.Contains(out, "statements: unavailable: reading pg_stat_statements: no such relation") || strings.Contains(out, "2.00x") {
		t.Errorf("without pg_stat_statements the report should say so once, and list none:\n%s", out)
	}
	if !strings.Contains(out, "    1.5       -     0.5") {
		t.Errorf("without the server's processes the pg_cpu column should read -:\n%s", out)
	}
}
