package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vantage-go/vantage/bench/internal/measure"
)

// rowWrites are the rows one table wrote during a measured phase, from the
// n_tup_* counters of pg_stat_user_tables. Updates include the HOT ones:
// those that changed no indexed column and found room on the row's page,
// so that no index entry was written.
type rowWrites struct {
	Inserted   int64 `json:"inserted"`
	Updated    int64 `json:"updated"`
	HOTUpdated int64 `json:"hot_updated"`
	Deleted    int64 `json:"deleted"`
}

// total is the rows written: inserted, updated and deleted.
func (w rowWrites) total() int64 { return w.Inserted + w.Updated + w.Deleted }

// tableWrites returns, by table name (without its schema), what each table
// wrote between the before and after readings; tables that wrote nothing
// are left out. A table missing from before counts from zero.
func tableWrites(before, after map[string]measure.TableStat) map[string]rowWrites {
	out := map[string]rowWrites{}
	for name, a := range after {
		b := before[name]
		w := rowWrites{Inserted: a.Ins - b.Ins, Updated: a.Upd - b.Upd, HOTUpdated: a.HotUpd - b.HotUpd, Deleted: a.Del - b.Del}
		if w == (rowWrites{}) {
			continue
		}
		_, table, _ := strings.Cut(name, ".")
		out[table] = w
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// rowWritesPerEvent is the rows all tables wrote per event.
func rowWritesPerEvent(writes map[string]rowWrites, events int64) float64 {
	if events <= 0 {
		return 0
	}
	var n int64
	for _, w := range writes {
		n += w.total()
	}
	return float64(n) / float64(events)
}

// cpuMsPerEvent is the CPU time of the process and of its PostgreSQL
// backends, in milliseconds, per event.
func cpuMsPerEvent(goCPUSeconds, pgCPUSeconds float64, events int64) float64 {
	if events <= 0 {
		return 0
	}
	return (goCPUSeconds + pgCPUSeconds) * 1000 / float64(events)
}

// compareLive fills the CPU ratio of every live line with an engine from
// the no-engine line of the same backend, rate, instances and
// perspectives: the cost of an event applied over that of the append
// alone, both measured in the same invocation. Lines with an error give
// and get no ratio.
func compareLive(rs []*result) {
	type key struct {
		backend                       string
		rate, instances, perspectives int
	}
	appends := map[key]*result{}
	for _, r := range rs {
		if r.Scenario == scenarioLive && r.Setting == settingNoEngine && r.Error == "" {
			appends[key{r.Backend, r.Rate, r.Instances, r.Perspectives}] = r
		}
	}
	for _, r := range rs {
		if r.Scenario != scenarioLive || r.Setting == settingNoEngine || r.Error != "" {
			continue
		}
		if a := appends[key{r.Backend, r.Rate, r.Instances, r.Perspectives}]; a != nil && a.CPUMsPerEvent > 0 {
			r.CPUVsAppends = r.CPUMsPerEvent / a.CPUMsPerEvent
		}
	}
}

// writesOrder is the order of the adapter's tables in the writes note, that
// of an event's path: appended, queued, leased per stream, applied,
// acknowledged. Other tables follow by name.
var writesOrder = []string{"vantage_events", "vantage_work", "vantage_active_streams", "vantage_models", "vantage_cursors"}

// writesNote summarises writes per event: per table inserts (i), updates
// (u, with the HOT share) and deletes (d), leaving out the tables that
// wrote less than 0.005 rows per event.
func writesNote(writes map[string]rowWrites, events int64) string {
	if len(writes) == 0 || events <= 0 {
		return ""
	}
	names := make([]string, 0, len(writes))
	for n := range writes {
		names = append(names, n)
	}
	rank := func(n string) int {
		if i := slices.Index(writesOrder, n); i >= 0 {
			return i
		}
		return len(writesOrder)
	}
	slices.SortFunc(names, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	ev := float64(events)
	var b strings.Builder
	fmt.Fprintf(&b, "writes/event=%.2f:", rowWritesPerEvent(writes, events))
	for _, n := range names {
		w := writes[n]
		if float64(w.total())/ev < 0.005 {
			continue
		}
		var parts []string
		for _, p := range []struct {
			n    int64
			kind string
		}{{w.Inserted, "i"}, {w.Updated, "u"}, {w.Deleted, "d"}} {
			if p.n != 0 {
				parts = append(parts, fmt.Sprintf("%.2f%s", float64(p.n)/ev, p.kind))
			}
		}
		fmt.Fprintf(&b, " %s=%s", strings.TrimPrefix(n, "vantage_"), strings.Join(parts, "+"))
		if w.Updated > 0 {
			fmt.Fprintf(&b, "(hot %.0f%%)", 100*float64(w.HOTUpdated)/float64(w.Updated))
		}
	}
	return b.String()
}
