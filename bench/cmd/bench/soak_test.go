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
	prev := soakCounters{at: origin.Add(30 * time.Second), appended: 9000, applied: 8990}
	cur := soakCounters{at: origin.Add(60 * time.Second), appended: 18000, applied: 17950}
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
	if e := intervalSample(origin, prev, prev, nil); e.P99Ms != 0 || e.AchievedRate != 0 || e.Applied != 0 {
		t.Errorf("empty interval %+v, want zeros", e)
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
	// 30 samples, windows of 5: the reference is samples 6-18.
	growing := flat(30, func(i int) float64 { return 1000 + 100*float64(i) })
	v := flatVerdict("t", "KiB", growing, 5, 256)
	if v.Pass || v.Value != 3900 || math.Abs(v.Limit-2970) > 1e-9 || !strings.Contains(v.Rule, "samples 6-18") {
		t.Errorf("steady growth: %+v, want a failure, 3900 against 1.1 x 2700 (sample 18)", v)
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
