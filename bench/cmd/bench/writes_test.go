package main

import (
	"maps"
	"testing"

	"github.com/vantage-go/vantage/bench/internal/measure"
)

func TestCPUMsPerEvent(t *testing.T) {
	t.Parallel()

	if got := cpuMsPerEvent(0.5, 1.5, 2000); got != 1 {
		t.Fatalf("2 CPU-seconds over 2,000 events: %v ms, want 1", got)
	}
	if got := cpuMsPerEvent(0.5, 1.5, 0); got != 0 {
		t.Fatalf("no event: %v ms, want 0", got)
	}
}

func TestCompareLiveDividesByTheAppendsOfTheSameRate(t *testing.T) {
	t.Parallel()

	line := func(setting string, rate int, cpu float64) *result {
		return &result{Scenario: scenarioLive, Backend: "postgres", Setting: setting, Rate: rate, Instances: 1, Perspectives: 2, CPUMsPerEvent: cpu}
	}
	defaults1000, lowLatency1000, appends1000 := line(settingDefaults, 1000, 3), line(settingLowLatency, 1000, 4), line(settingNoEngine, 1000, 1.25)
	defaults100, appends100 := line(settingDefaults, 100, 2), line(settingNoEngine, 100, 0.5)
	appends100.Error = "append failed"
	alone := line(settingDefaults, 10, 2) // no appends line at this rate
	otherPersp := line(settingDefaults, 1000, 6)
	otherPersp.Perspectives = 5
	catchup := &result{Scenario: scenarioCatchup, Backend: "postgres", Rate: 1000, Instances: 1, Perspectives: 2, CPUMsPerEvent: 1}

	compareLive([]*result{defaults1000, lowLatency1000, appends1000, defaults100, appends100, alone, otherPersp, catchup})

	for _, c := range []struct {
		name string
		r    *result
		want float64
	}{
		{"defaults at 1000/s", defaults1000, 2.4},
		{"low-latency at 1000/s", lowLatency1000, 3.2},
		{"the appends themselves", appends1000, 0},
		{"appends line with an error", defaults100, 0},
		{"no appends line", alone, 0},
		{"other perspective count", otherPersp, 0},
		{"catch-up", catchup, 0},
	} {
		if c.r.CPUVsAppends != c.want {
			t.Errorf("%s: CPUVsAppends = %v, want %v", c.name, c.r.CPUVsAppends, c.want)
		}
	}
}

func TestTableWritesAreDeltasByTable(t *testing.T) {
	t.Parallel()

	before := map[string]measure.TableStat{
		"bench_x.vantage_work":      {Ins: 100, Del: 80, SeqScan: 3},
		"bench_x.vantage_cursors":   {Ins: 2, Upd: 10, HotUpd: 6},
		"bench_x.vantage_instances": {Ins: 1, Upd: 5, HotUpd: 5},
	}
	after := map[string]measure.TableStat{
		"bench_x.vantage_work":           {Ins: 2100, Del: 2060, SeqScan: 9},
		"bench_x.vantage_cursors":        {Ins: 2, Upd: 4010, HotUpd: 3206},
		"bench_x.vantage_instances":      {Ins: 1, Upd: 5, HotUpd: 5, SeqScan: 1}, // read, not written
		"bench_x.vantage_active_streams": {Ins: 500, Upd: 1000, HotUpd: 900, Del: 480},
	}
	writes := tableWrites(before, after)
	want := map[string]rowWrites{
		"vantage_work":           {Inserted: 2000, Deleted: 1980},
		"vantage_cursors":        {Updated: 4000, HOTUpdated: 3200},
		"vantage_active_streams": {Inserted: 500, Updated: 1000, HOTUpdated: 900, Deleted: 480},
	}
	if !maps.Equal(writes, want) {
		t.Fatalf("tableWrites = %v, want %v", writes, want)
	}
	if got := tableWrites(before, before); got != nil {
		t.Fatalf("no change: %v, want nil (left out of the JSON)", got)
	}

	if got, want := rowWritesPerEvent(writes, 1000), 9.96; got != want {
		t.Fatalf("rowWritesPerEvent = %v, want %v", got, want)
	}
	if got := rowWritesPerEvent(writes, 0); got != 0 {
		t.Fatalf("rowWritesPerEvent of no event = %v, want 0", got)
	}
}

func TestWritesNote(t *testing.T) {
	t.Parallel()

	writes := map[string]rowWrites{
		"vantage_cursors":        {Updated: 4000, HOTUpdated: 3200},
		"vantage_work":           {Inserted: 2000, Deleted: 1980},
		"vantage_events":         {Inserted: 1000},
		"vantage_instances":      {Updated: 4, HOTUpdated: 4}, // under 0.005 per event
		"vantage_active_streams": {Inserted: 500, Updated: 1000, HOTUpdated: 900, Deleted: 480},
		"vantage_zeta":           {Inserted: 10},
	}
	want := "writes/event=10.97: events=1.00i work=2.00i+1.98d active_streams=0.50i+1.00u+0.48d(hot 90%) cursors=4.00u(hot 80%) zeta=0.01i"
	if got := writesNote(writes, 1000); got != want {
		t.Fatalf("writesNote =\n%s\nwant\n%s", got, want)
	}
	if got := writesNote(nil, 1000); got != "" {
		t.Fatalf("writesNote without figures = %q, want empty", got)
	}
}
