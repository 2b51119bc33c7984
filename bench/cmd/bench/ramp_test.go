package main

import (
	"io"
	"slices"
	"testing"
	"time"
)

func TestPlanRampRunsEachImplementationOnItsOwn(t *testing.T) {
	t.Parallel()

	got := planNames(t, "-scenario", "ramp")
	want := []string{
		"ramp-vantage-postgres-i1-e0-p2-defaults",
		"ramp-river-postgres-i1-e0-p2-fast",
		"ramp-raw-postgres-i1-e0-p2",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("planned %q, want %q", got, want)
	}
	for _, n := range planNames(t, "-scenario", "all") {
		if n[:4] == "ramp" {
			t.Fatalf("-scenario all planned %s: the ramp runs on its own", n)
		}
	}
	c, err := parseFlags([]string{"-scenario", "ramp", "-ramp-impls", "raw"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	runs := plan(c)
	if len(runs) != 1 || runs[0].Workers != 8 || runs[0].Ramp.Appenders != 16 {
		t.Fatalf("planned %+v, want one raw run with 8 workers and 16 appenders", runs)
	}
}

func TestRampFlagsAreChecked(t *testing.T) {
	t.Parallel()

	for _, args := range [][]string{
		{"-ramp-step", "1x"},
		{"-ramp-step", "+0"},
		{"-ramp-step", "250"},
		{"-ramp-start", "1000", "-ramp-max", "500"},
		{"-ramp-p99", "2s", "-ramp-step-duration", "2s"},
		{"-ramp-step-duration", "500ms", "-ramp-p99", "100ms"},
		{"-ramp-impls", "vantage,kafka"},
	} {
		if _, err := parseFlags(append([]string{"-scenario", "ramp"}, args...), io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}

func TestRampRates(t *testing.T) {
	t.Parallel()

	for _, c := range []struct {
		growth     string
		start, top int
		want       []int
	}{
		{"1.25x", 250, 1000, []int{250, 313, 391, 489, 611, 764, 955, 1000}},
		{"+250", 250, 1000, []int{250, 500, 750, 1000}},
		{"+300", 250, 1000, []int{250, 550, 850, 1000}},
		{"2x", 500, 500, []int{500}},
		// A factor too small to move a low rate still adds one.
		{"1.01x", 10, 13, []int{10, 11, 12, 13}},
	} {
		g, err := parseRampGrowth(c.growth)
		if err != nil {
			t.Fatalf("parseRampGrowth(%q): %v", c.growth, err)
		}
		if got := rampRates(c.start, c.top, g); !slices.Equal(got, c.want) {
			t.Errorf("rampRates(%d, %d, %s) = %v, want %v", c.start, c.top, c.growth, got, c.want)
		}
	}
}

func TestRampDueFollowsTheSchedule(t *testing.T) {
	t.Parallel()

	sched := rampSchedule([]int{100, 200}, 2*time.Second, 10*time.Second)
	want := []rampStep{
		{Rate: 100, From: 0, To: 2 * time.Second, Warmup: true},
		{Rate: 100, From: 2 * time.Second, To: 12 * time.Second},
		{Rate: 200, From: 12 * time.Second, To: 22 * time.Second},
	}
	if !slices.Equal(sched, want) {
		t.Fatalf("schedule %+v, want %+v", sched, want)
	}
	for _, c := range []struct {
		elapsed time.Duration
		want    int
	}{
		{0, 0},
		{5 * time.Millisecond, 0},
		{10 * time.Millisecond, 1},
		{2 * time.Second, 200},
		{12 * time.Second, 1200},
		{12*time.Second + 5*time.Millisecond, 1201},
		{22 * time.Second, 3200},
		{time.Hour, 3200},
	} {
		if got := rampDue(sched, c.elapsed); got != c.want {
			t.Errorf("rampDue(%s) = %d, want %d", c.elapsed, got, c.want)
		}
	}
}

func TestRampStepOf(t *testing.T) {
	t.Parallel()

	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	step := rampStep{Rate: 100, From: time.Second, To: 2 * time.Second}
	var samples []rampSample
	// Before the step, applied after its end: backlog, not a sample.
	samples = append(samples, rampSample{at: ms(900), done: ms(2100)})
	// Before the step, applied in time: neither.
	samples = append(samples, rampSample{at: ms(950), done: ms(1000)})
	// 98 of the step's events applied 10ms after their append.
	for i := range 98 {
		samples = append(samples, rampSample{at: ms(1000 + 10*i), done: ms(1010 + 10*i)})
	}
	// One applied 150ms after, past the step's end, and one never.
	samples = append(samples, rampSample{at: ms(1980), done: ms(2130)}, rampSample{at: ms(1990)})
	// After the step: neither.
	samples = append(samples, rampSample{at: ms(2000)})

	f := rampStepOf(samples, step, t0, ms(2100), 1, 100*time.Millisecond)
	if f.Samples != 100 || f.Unapplied != 1 || f.Backlog != 3 || f.Achieved != 100 {
		t.Fatalf("samples=%d unapplied=%d backlog=%d achieved=%v, want 100, 1, 3, 100", f.Samples, f.Unapplied, f.Backlog, f.Achieved)
	}
	// Nearest rank: the 99th of 100 latencies is the 110ms of the event
	// waiting since 1990ms when judged at 2100ms, the max the 150ms one.
	if f.P50Ms != 10 || f.P99Ms != 110 || f.MaxMs != 150 {
		t.Fatalf("p50=%v p99=%v max=%v, want 10, 110, 150", f.P50Ms, f.P99Ms, f.MaxMs)
	}
	if f.Sustainable || f.Verdict != "p99>100ms" {
		t.Fatalf("verdict %q (sustainable %v), want p99>100ms", f.Verdict, f.Sustainable)
	}
	// Two samples per event (River's jobs): the same samples are 50
	// events/s, under the step's rate.
	if f := rampStepOf(samples, step, t0, ms(2100), 2, time.Second); f.Achieved != 50 || f.Verdict != "achieved<95%" {
		t.Fatalf("per job: achieved=%v verdict %q, want 50 and achieved<95%%", f.Achieved, f.Verdict)
	}
}

func TestRampJudge(t *testing.T) {
	t.Parallel()

	ok := rampStepFigures{Rate: 1000, Achieved: 950, P99Ms: 100, Backlog: 1000}
	for _, c := range []struct {
		name     string
		change   func(*rampStepFigures)
		perEvent int
		want     string
	}{
		{"at every limit", func(*rampStepFigures) {}, 1, "ok"},
		{"appends short of 95%", func(f *rampStepFigures) { f.Achieved = 949 }, 1, "achieved<95%"},
		{"p99 over the limit", func(f *rampStepFigures) { f.P99Ms = 100.1 }, 1, "p99>100ms"},
		{"more than a second behind", func(f *rampStepFigures) { f.Backlog = 1001 }, 1, "backlog>1s"},
		{"a second of jobs", func(f *rampStepFigures) { f.Backlog = 2000 }, 2, "ok"},
		{"the first miss is named", func(f *rampStepFigures) { f.Achieved, f.P99Ms = 10, 500 }, 1, "achieved<95%"},
	} {
		f := ok
		c.change(&f)
		sustainable, verdict := rampJudge(f, c.perEvent, 100*time.Millisecond)
		if verdict != c.want || sustainable != (c.want == "ok") {
			t.Errorf("%s: %v %q, want %q", c.name, sustainable, verdict, c.want)
		}
	}
}

func TestRampHighest(t *testing.T) {
	t.Parallel()

	step := func(rate int, ok bool) rampStepFigures { return rampStepFigures{Rate: rate, Sustainable: ok} }
	for _, c := range []struct {
		steps []rampStepFigures
		rate  int
		all   bool
	}{
		{nil, 0, false},
		{[]rampStepFigures{step(250, false)}, 0, false},
		{[]rampStepFigures{step(250, true), step(313, true), step(391, false)}, 313, false},
		// A later step that passes again does not count: the ramp stops at
		// the first miss.
		{[]rampStepFigures{step(250, true), step(313, false), step(391, true)}, 250, false},
		{[]rampStepFigures{step(250, true), step(313, true)}, 313, true},
	} {
		rate, all := rampHighest(c.steps)
		if rate != c.rate || all != c.all {
			t.Errorf("rampHighest(%v) = %d, %v, want %d, %v", c.steps, rate, all, c.rate, c.all)
		}
	}
}

func TestStreamSamplesWaitForTheLastPerspective(t *testing.T) {
	t.Parallel()

	t0 := time.Unix(1000, 0)
	at := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	appended := []appendRecord{{version: 2, at: at(1)}, {version: 1, at: at(0)}, {version: 3, at: at(2)}}
	progress := [][]progressRecord{
		{{version: 2, at: at(10)}, {version: 3, at: at(30)}},
		// A report below the highest (a takeover) does not move it back.
		{{version: 1, at: at(5)}, {version: 3, at: at(20)}, {version: 2, at: at(25)}},
	}
	got := streamSamples(appended, progress)
	want := []rampSample{
		{at: at(0), done: at(10)},
		{at: at(1), done: at(20)},
		{at: at(2), done: at(30)},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("samples %v, want %v", got, want)
	}
	// A version one perspective has not reached is not applied.
	got = streamSamples(appended, [][]progressRecord{progress[0], {{version: 1, at: at(5)}}})
	if !got[1].done.IsZero() || !got[2].done.IsZero() || got[0].done != at(10) {
		t.Fatalf("samples %v, want versions 2 and 3 unapplied", got)
	}
}
