package main

import (
	"io"
	"slices"
	"testing"
)

// planNames returns the names of the runs the flags plan.
func planNames(t *testing.T, args ...string) []string {
	t.Helper()
	c, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	var names []string
	for _, s := range plan(c) {
		names = append(names, s.name())
	}
	return names
}

func TestPlanAllAddsOneWideCatchup(t *testing.T) {
	t.Parallel()

	got := planNames(t, "-scenario", "all", "-events", "20000", "-instances", "1,2", "-settings", "defaults")
	want := []string{
		"catchup-vantage-postgres-i1-e20000-p2",
		"catchup-raw-postgres-i1-e20000-p2",
		"catchup-river-postgres-i1-e20000-p2",
		"catchup-vantage-memory-i1-e20000-p2",
		"catchup-vantage-postgres-i2-e20000-p2",
		"catchup-raw-postgres-i2-e20000-p2",
		"catchup-river-postgres-i2-e20000-p2",
		"catchup-vantage-memory-i2-e20000-p2",
		// the wide catch-up, at the first backlog and instance count
		"catchup-vantage-postgres-i1-e20000-p5",
		"catchup-raw-postgres-i1-e20000-p5",
		"catchup-river-postgres-i1-e20000-p5",
		"catchup-vantage-memory-i1-e20000-p5",
		"live-vantage-postgres-i1-e0-p2-r1000-defaults",
		"failover-vantage-postgres-i3-e0-p2-r100-defaults",
		"idle-vantage-postgres-i1-e0-p2-defaults",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("planned\n%q\nwant\n%q", got, want)
	}
}

func TestPlanLiveRunsEverySettingOfARateTogether(t *testing.T) {
	t.Parallel()

	got := planNames(t, "-scenario", "live", "-rate", "1000,100")
	want := []string{
		"live-vantage-postgres-i1-e0-p2-r1000-defaults",
		"live-vantage-postgres-i1-e0-p2-r1000-low-latency",
		"live-vantage-postgres-i1-e0-p2-r1000-no-engine",
		"live-vantage-postgres-i1-e0-p2-r100-defaults",
		"live-vantage-postgres-i1-e0-p2-r100-low-latency",
		"live-vantage-postgres-i1-e0-p2-r100-no-engine",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("planned %q, want %q", got, want)
	}
}

func TestPlanIdleRunsEverySettingOnPostgreSQL(t *testing.T) {
	t.Parallel()

	got := planNames(t, "-scenario", "idle", "-instances", "2")
	want := []string{
		"idle-vantage-postgres-i1-e0-p2-defaults",
		"idle-vantage-postgres-i1-e0-p2-low-latency",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("planned %q, want %q", got, want)
	}
	if got := planNames(t, "-scenario", "idle", "-settings", "no-engine"); len(got) != 0 {
		t.Fatalf("planned %q for no-engine, want nothing: idle measures a worker", got)
	}
	if got := planNames(t, "-scenario", "idle", "-backend", "memory"); len(got) != 0 {
		t.Fatalf("planned %q on the memory backend, want nothing: idle measures PostgreSQL too", got)
	}
}

func TestPlanCatchupAloneHasNoWideRun(t *testing.T) {
	t.Parallel()

	got := planNames(t, "-scenario", "catchup", "-events", "1000", "-instances", "1", "-compare", "off")
	want := []string{"catchup-vantage-postgres-i1-e1000-p2"}
	if !slices.Equal(got, want) {
		t.Fatalf("planned %q, want %q", got, want)
	}
}

func TestLiveTargets(t *testing.T) {
	t.Parallel()

	for _, c := range []struct {
		setting string
		rate    int
		want    float64
	}{
		{settingDefaults, 100, 10},
		{settingDefaults, 1000, 25},
		{settingLowLatency, 100, 50},
		{settingLowLatency, 1000, 50},
		{settingNoEngine, 1000, 0}, // no target: the floor under the others
	} {
		if got := liveTargetMs(c.setting, c.rate); got != c.want {
			t.Errorf("liveTargetMs(%s, %d) = %v, want %v", c.setting, c.rate, got, c.want)
		}
	}
}
