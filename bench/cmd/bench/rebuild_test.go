package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vantage-go/vantage/ports"
)

func TestPlanRebuildRunsAloneOnPostgreSQL(t *testing.T) {
	t.Parallel()

	got := planNames(t, "-scenario", "rebuild", "-events", "20000,50000", "-instances", "2,4")
	want := []string{
		"rebuild-vantage-postgres-i1-e20000-p2", // one instance, whatever -instances says
		"rebuild-vantage-postgres-i1-e50000-p2",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("planned %q, want %q", got, want)
	}
	for _, name := range planNames(t, "-scenario", "all") {
		if strings.HasPrefix(name, scenarioRebuild) {
			t.Fatalf("-scenario all planned %s: the rebuild is a command of its own", name)
		}
	}
	if got := planNames(t, "-scenario", "rebuild", "-backend", "memory"); len(got) != 0 {
		t.Fatalf("planned %q on the memory backend, want nothing: the rebuild is requested through PostgreSQL", got)
	}
}

func TestRebuildSampleFlag(t *testing.T) {
	t.Parallel()

	c, err := parseFlags([]string{"-scenario", "rebuild"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s := plan(c)[0]; s.Sample != 5*time.Second || s.Appenders != 4 || s.Events != 200000 {
		t.Fatalf("rebuild spec %+v, want the catch-up's backlog and seeding, sampled every 5s", s)
	}
	c, err = parseFlags([]string{"-scenario", "rebuild", "-rebuild-sample", "250ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s := plan(c)[0]; s.Sample != 250*time.Millisecond {
		t.Fatalf("sample %s, want 250ms", s.Sample)
	}
	if _, err := parseFlags([]string{"-scenario", "rebuild", "-rebuild-sample", "0s"}, io.Discard); err == nil {
		t.Fatal("-rebuild-sample 0s accepted")
	}
}

func TestNextRebuildSample(t *testing.T) {
	t.Parallel()

	t0 := time.Unix(1000, 0)
	req := ports.RebuildRequest{
		Status: ports.RebuildRunning, StartedAt: t0, UpdatedAt: t0.Add(4 * time.Second),
		RebuildFigures: ports.RebuildFigures{StreamsTotal: 1000, StreamsDone: 200, EventsReplayed: 4000},
	}
	first := nextRebuildSample(rebuildSample{}, req, 5*time.Second)
	if first.EventsPerS != 800 || first.StreamsPerS != 40 {
		t.Errorf("first sample %+v, want 800 events/s and 40 streams/s since the request", first)
	}
	if first.RemainingS == nil || *first.RemainingS != 16 {
		t.Errorf("remaining %v, want the request's estimate: 4s per 200 streams, 800 left: 16s", first.RemainingS)
	}
	req.StreamsDone, req.EventsReplayed = 1000, 20000
	req.Status, req.UpdatedAt = ports.RebuildDone, t0.Add(8*time.Second)
	last := nextRebuildSample(first, req, 7*time.Second)
	if last.EventsPerS != 8000 || last.StreamsPerS != 400 {
		t.Errorf("last sample %+v, want 8000 events/s and 400 streams/s over its 2s", last)
	}
	if last.RemainingS != nil {
		t.Errorf("remaining %v for a done request, want none", *last.RemainingS)
	}
	if same := nextRebuildSample(last, req, 7*time.Second); same.EventsPerS != 0 {
		t.Errorf("a reading at the time of the previous: %+v, want no rate", same)
	}
}

func TestRebuildProblems(t *testing.T) {
	t.Parallel()

	s := spec{Events: 20000, Streams: 1000}
	sums := map[string]modelSum{"p0": {Models: 1000, MD5: "aa"}, "p1": {Models: 1000, MD5: "bb"}}
	rebuilt := map[string]modelSum{"p0": {Models: 1000, MD5: "aa", MinEpoch: 1, MaxEpoch: 1}, "p1": sums["p1"]}
	done := ports.RebuildRequest{Status: ports.RebuildDone, RebuildFigures: ports.RebuildFigures{StreamsTotal: 1000, StreamsDone: 1000, EventsReplayed: 20000}}
	settled := []ports.PerspectiveStatus{{Perspective: "p0", Streams: 1000, CaughtUp: 1000}, {Perspective: "p1", Streams: 1000, CaughtUp: 1000}}
	if got := rebuildProblems(s, "p0", done, sums, rebuilt, settled); len(got) != 0 {
		t.Fatalf("problems %q after a clean rebuild, want none", got)
	}
	if got := rebuildProblems(s, "p0", done, sums, sums, settled); len(got) != 1 || !strings.Contains(got[0], "not rebuilt: epochs 0-0 before, 0-0 after") {
		t.Errorf("problems %q with no model saved again, want the epochs that did not move", got)
	}

	changed := map[string]modelSum{"p0": {Models: 1000, MD5: "ab", MinEpoch: 1, MaxEpoch: 1}, "p1": sums["p1"], "p2": {Models: 1, MD5: "cc"}}
	got := rebuildProblems(s, "p0", done, sums, changed, settled)
	if len(got) != 2 || !strings.Contains(got[0], "models of p0 changed") || !strings.Contains(got[1], "models of p2 changed") {
		t.Errorf("problems %q, want p0's models changed and p2's new", got)
	}

	failed := done
	failed.Status, failed.Error, failed.StreamsDone, failed.EventsReplayed = ports.RebuildFailed, "decoding event 7", 10, 200
	got = rebuildProblems(s, "p0", failed, sums, rebuilt, settled)
	if len(got) != 3 || got[0] != "the request ended failed: decoding event 7" {
		t.Errorf("problems %q, want the failure, the streams and the events left out", got)
	}

	pending := slices.Clone(settled)
	pending[1].RewindRequired = 1
	if got := rebuildProblems(s, "p0", done, sums, rebuilt, pending); len(got) != 1 || !strings.Contains(got[0], "p1 is not settled") {
		t.Errorf("problems %q, want p1 not settled", got)
	}
	if got := rebuildProblems(s, "p0", done, nil, nil, settled); len(got) != 1 || !strings.Contains(got[0], "had 0 models") {
		t.Errorf("problems %q without models, want the missing models", got)
	}
}

func TestRebuildClockTimesClaimToFinish(t *testing.T) {
	t.Parallel()

	var begun int
	var ended []ports.RebuildRequest
	c := newRebuildClock("p0", func() { begun++ }, func(req ports.RebuildRequest) { ended = append(ended, req) })
	running := ports.RebuildRequest{Perspective: "p0", Status: ports.RebuildRunning}
	c.observe(ports.RebuildRequest{Perspective: "p1", Status: ports.RebuildRunning}) // another perspective's
	c.observe(running)                                                               // the claim
	c.observe(running)                                                               // a progress report
	c.observe(ports.RebuildRequest{Perspective: "p0", Status: ports.RebuildPending})
	if begun != 1 || len(ended) != 0 {
		t.Fatalf("begun %d, ended %d after the claim and a report, want 1 and 0", begun, len(ended))
	}
	select {
	case <-c.done:
		t.Fatal("done before the finish")
	default:
	}
	c.observe(ports.RebuildRequest{Perspective: "p0", Status: ports.RebuildDone, RebuildFigures: ports.RebuildFigures{EventsReplayed: 5}})
	<-c.done
	c.stop(ports.RebuildRequest{})
	if begun != 1 || len(ended) != 1 || ended[0].EventsReplayed != 5 {
		t.Fatalf("begun %d, ended %+v, want once each, with the finished figures", begun, ended)
	}

	// Stopped before any claim: the phase never begins, nor does a later
	// claim begin it.
	begun, ended = 0, nil
	c = newRebuildClock("p0", func() { begun++ }, func(req ports.RebuildRequest) { ended = append(ended, req) })
	c.stop(ports.RebuildRequest{})
	c.observe(running)
	<-c.done
	if begun != 0 || len(ended) != 1 {
		t.Fatalf("begun %d, ended %d, want 0 and 1", begun, len(ended))
	}
}
