package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// The soak's verdicts. Each compares the start of the run with its end,
// over windows of samples: the first window is the warm-up of the flat
// rules and the baseline of the latency rule, the last window the end the
// latency rule judges and the growth the flat rules look for, the
// samples between them the flat rules' reference.
const (
	// soakWindowSpan is the time each verdict window covers, when the run
	// is long enough (soakWindow). As the warm-up of the flat rules it
	// must cover the dedup retention of the default options
	// (core.LeaseDurationDefault): the engine remembers the events it
	// applied for that long, so under a steady load its heap grows over
	// that time before it levels.
	soakWindowSpan = 5 * time.Minute
	// soakMinSamples is the fewest samples a soak may have: four windows
	// of one sample.
	soakMinSamples = 4
	// soakLatencyRatio bounds every p99 of the last window against the
	// mean p99 of the first.
	soakLatencyRatio = 1.25
	// soakFlatRatio bounds a size or a memory figure at the end against
	// the largest of the samples between the warm-up and the last
	// window.
	soakFlatRatio = 1.10
	// soakTableSlackKiB is the growth allowed to a table of any size, 32
	// pages: room for the free-space maps (three pages each) and the
	// visibility map that a vacuum adds to a table and its indexes, and
	// for the page-by-page growth of a small table, which 10% of it would
	// not cover.
	soakTableSlackKiB = 256
	// soakMemorySlackMiB is the growth allowed to the heap and the RSS of
	// any size: a few spans and the runtime's own structures.
	soakMemorySlackMiB = 2
)

// soakVerdict is the verdict on one target of the soak.
type soakVerdict struct {
	Target string `json:"target"`
	Pass   bool   `json:"pass"`
	// Value is the figure judged and Limit its bound, in Unit.
	Value float64 `json:"value"`
	Limit float64 `json:"limit"`
	Unit  string  `json:"unit"`
	// Rule says what Value and Limit are.
	Rule string `json:"rule"`
}

// soakWindow is the number of samples of each verdict window: those of
// soakWindowSpan, at most a quarter of the samples so that the windows of
// a short run stay apart, at least one.
func soakWindow(samples int, every time.Duration) int {
	if every <= 0 {
		return 1
	}
	w := int((soakWindowSpan + every - 1) / every)
	return max(min(w, samples/4), 1)
}

// soakVerdicts judges the samples with windows of w samples, and the
// checks of r.
func soakVerdicts(samples []soakSample, w int, r *result) []soakVerdict {
	var out []soakVerdict
	if len(samples) >= soakMinSamples {
		out = append(out, latencyVerdict(samples, w))
		for _, table := range soakTables {
			values := make([]float64, len(samples))
			for i, smp := range samples {
				values[i] = math.NaN()
				if t, ok := smp.Tables[table]; ok {
					values[i] = float64(t.TotalBytes) / (1 << 10)
				}
			}
			out = append(out, flatVerdict(table+" size", "KiB", values, w, soakTableSlackKiB))
		}
		heap, rss := make([]float64, len(samples)), make([]float64, len(samples))
		for i, smp := range samples {
			heap[i], rss[i] = smp.LiveHeapMB, smp.RSSMB
		}
		out = append(out, flatVerdict("Go live heap", "MiB", heap, w, soakMemorySlackMiB), flatVerdict("RSS", "MiB", rss, w, soakMemorySlackMiB))
	}
	checks := soakVerdict{Target: "models", Unit: "events", Rule: "skipped, double-applied and work rows pending after the drain, all 0"}
	if r.Checked {
		checks.Value = float64(r.Skipped + r.DoubleApplied + r.PendingAfter)
		checks.Pass = r.Skipped == 0 && r.DoubleApplied == 0 && r.PendingAfter == 0
		checks.Rule = fmt.Sprintf("skipped=%d double=%d pending=%d, all 0", r.Skipped, r.DoubleApplied, r.PendingAfter)
	} else {
		checks.Rule = "not checked: " + checks.Rule
	}
	return append(out, checks)
}

// latencyVerdict: every p99 of the last w samples is at most
// soakLatencyRatio times the arithmetic mean of the p99s of the first w
// samples; a sample of the last window in which no event was applied
// fails. Value is the highest p99 of the last window.
func latencyVerdict(samples []soakSample, w int) soakVerdict {
	n := len(samples)
	var base float64
	for _, smp := range samples[:w] {
		base += smp.P99Ms
	}
	base /= float64(w)
	v := soakVerdict{Target: "p99 latency", Unit: "ms", Limit: soakLatencyRatio * base, Pass: base > 0}
	for _, smp := range samples[n-w:] {
		v.Value = max(v.Value, smp.P99Ms)
		if smp.Applied == 0 {
			v.Pass = false
		}
	}
	if v.Value > v.Limit {
		v.Pass = false
	}
	v.Rule = fmt.Sprintf("highest p99 of %s <= %.2f x the mean p99 of %s (%.1fms)",
		span(n-w+1, n), soakLatencyRatio, span(1, w), base)
	return v
}

// flatVerdict: the value of the last sample is at most the larger of
// soakFlatRatio times the reference and the reference plus slack, the
// reference being the largest value of the samples after the first w and
// before the last w. A figure that settles on a plateau at any time before
// the last window passes, however late; one that grows by more than the
// ratio or the slack within the last window fails, whether it grows
// steadily or steps up. A slower growth passes: only a longer run, or a
// longer window, tells it from a plateau. NaN values (readings that
// failed) are left out of the reference; a NaN at the end fails. The
// caller keeps n > 2w (soakWindow takes at most a quarter of the
// samples).
func flatVerdict(target, unit string, values []float64, w int, slack float64) soakVerdict {
	n := len(values)
	from, to := w, max(n-w, w) // indices of the reference: [from, to)
	ref := math.NaN()
	for _, x := range values[from:to] {
		if !math.IsNaN(x) && (math.IsNaN(ref) || x > ref) {
			ref = x
		}
	}
	v := soakVerdict{Target: target, Unit: unit, Value: values[n-1]}
	v.Limit = max(soakFlatRatio*ref, ref+slack)
	v.Pass = !math.IsNaN(v.Value) && !math.IsNaN(v.Limit) && v.Value <= v.Limit
	v.Rule = fmt.Sprintf("sample %d <= max(%.2f x, +%g%s) the largest of %s, between the warm-up and the last window (%.1f%s)",
		n, soakFlatRatio, slack, unit, span(from+1, to), ref, unit)
	return v
}

// span names samples a to b, numbered from 1.
func span(a, b int) string {
	if a == b {
		return fmt.Sprintf("sample %d", a)
	}
	return fmt.Sprintf("samples %d-%d", a, b)
}

// failedTargets lists the targets whose verdict failed.
func failedTargets(vs []soakVerdict) []string {
	var out []string
	for _, v := range vs {
		if !v.Pass {
			out = append(out, v.Target)
		}
	}
	return out
}

// clock formats seconds as [-]m:ss.
func clock(seconds float64) string {
	sign := ""
	if seconds < 0 {
		sign, seconds = "-", -seconds
	}
	s := int(math.Round(seconds))
	return fmt.Sprintf("%s%d:%02d", sign, s/60, s%60)
}

// printSoak writes a soak's samples, one line each, the statements' costs
// in the first and the last windows, and its verdicts.
func printSoak(w io.Writer, r *result) {
	f := r.Soak
	fmt.Fprintf(w, "\nsoak: %d instances, %d events/s asked, %d samples of %s after a %s warm-up, verdict windows of %d samples\n",
		r.Instances, r.Rate, len(f.Samples), time.Duration(f.SampleS*float64(time.Second)), time.Duration(f.WarmupS*float64(time.Second)), f.Window)
	fmt.Fprintf(w, "%6s %6s %7s %7s %8s %8s %7s %7s %7s %7s %7s %7s %7s %7s %7s %7s %9s %13s %8s %8s %8s %7s %7s %7s\n",
		"sample", "at", "applied", "p50_ms", "p99_ms", "max_ms", "rate/s", "backlog",
		"work_t", "work_i", "curs_t", "curs_i", "mod_t", "mod_i", "act_t", "act_i", "work_dead", "autovac", "heap_mb", "live_mb", "rss_mb",
		"go_cpu", "pg_cpu", "oth_cpu")
	for i, smp := range f.Samples {
		kib := func(table string, index bool) string {
			t, ok := smp.Tables[table]
			switch {
			case !ok:
				return "-"
			case index:
				return fmt.Sprint(t.IndexBytes >> 10)
			default:
				return fmt.Sprint(t.TableBytes >> 10)
			}
		}
		dead, vac := "-", "-"
		if t, ok := smp.Tables["vantage_work"]; ok {
			dead = fmt.Sprint(t.DeadTuples)
			vac = fmt.Sprint(t.Autovacuums)
			if t.LastAutovacuum != nil {
				vac += " @" + clock(t.LastAutovacuum.Sub(f.Origin).Seconds())
			}
		}
		pg := "-"
		if f.ServerPID != 0 {
			pg = fmt.Sprintf("%.1f", smp.PGCPUS)
		}
		fmt.Fprintf(w, "%6d %6s %7d %7.1f %8.1f %8.1f %7.0f %7d %7s %7s %7s %7s %7s %7s %7s %7s %9s %13s %8.1f %8.1f %8.1f %7.1f %7s %7.1f\n",
			i+1, clock(smp.AtS), smp.Applied, smp.P50Ms, smp.P99Ms, smp.MaxMs, smp.AchievedRate, smp.Backlog,
			kib("vantage_work", false), kib("vantage_work", true), kib("vantage_cursors", false), kib("vantage_cursors", true),
			kib("vantage_models", false), kib("vantage_models", true), kib("vantage_active_streams", false), kib("vantage_active_streams", true),
			dead, vac, smp.HeapInuseMB, smp.LiveHeapMB, smp.RSSMB, smp.GoCPUS, pg, smp.OtherCPUS)
	}
	printStatements(w, f)
	fmt.Fprintln(w, "verdicts:")
	for _, v := range f.Verdicts {
		mark := "PASS"
		if !v.Pass {
			mark = "FAIL"
		}
		figures := fmt.Sprintf("%.1f %s <= %.1f %s", v.Value, v.Unit, v.Limit, v.Unit)
		if v.Target == "models" {
			figures = ""
		}
		fmt.Fprintf(w, "  %s  %-29s %-25s %s\n", mark, v.Target, figures, strings.TrimSpace(v.Rule))
	}
}
