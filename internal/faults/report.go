package faults

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// findingsKept bounds the findings a run keeps per check; the counts of
// the rest are kept.
const findingsKept = 10

// RunResult is the result of one run of one scenario.
type RunResult struct {
	Fault string `json:"fault"`
	Run   int    `json:"run"`
	// Events is how many events the run's streams hold. Appended is how
	// many appends were acknowledged: an append cut short by the end of
	// the appending may be stored unacknowledged.
	Events   int `json:"events"`
	Appended int `json:"appended"`
	Counts
	// Recovery is how long the healthy lag stayed above the threshold
	// after the injection; Recovered is false when it never came back
	// under it. PeakLag is the largest healthy lag read after the fault.
	Recovery  time.Duration `json:"-"`
	Recovered bool          `json:"recovered"`
	PeakLag   time.Duration `json:"-"`
	// MaxDelay is the largest delay of a healthy event of the streams the
	// healthy lag measures: from its append to its event applied by every
	// perspective (see maxDelay and RELIABILITY.md).
	MaxDelay time.Duration `json:"-"`
	// Passed is true when no check failed.
	Passed bool `json:"passed"`
	// Failed counts the findings per failed check (a finding may stand
	// for several events: a count model short by n is one finding).
	Failed map[string]int `json:"failed,omitempty"`
	// Findings are the findings, at most findingsKept per check.
	Findings []Finding `json:"findings,omitempty"`
	// Notes are what the run did and saw besides the checks.
	Notes   []string      `json:"notes,omitempty"`
	Dir     string        `json:"dir,omitempty"` // its logs, when kept
	Elapsed time.Duration `json:"-"`
}

// MarshalJSON writes the durations in seconds.
func (r RunResult) MarshalJSON() ([]byte, error) {
	type plain RunResult
	return json.Marshal(struct {
		plain
		RecoverySeconds float64 `json:"recovery_s"`
		PeakLagSeconds  float64 `json:"peak_lag_s"`
		MaxDelaySeconds float64 `json:"max_delay_s"`
		ElapsedSeconds  float64 `json:"elapsed_s"`
	}{plain(r), r.Recovery.Seconds(), r.PeakLag.Seconds(), r.MaxDelay.Seconds(), r.Elapsed.Seconds()})
}

func (r *RunResult) setFindings(findings []Finding) {
	r.Failed = map[string]int{}
	r.Findings = nil
	for _, f := range findings {
		r.Failed[f.Check]++
		if r.Failed[f.Check] <= findingsKept {
			r.Findings = append(r.Findings, f)
		}
	}
	r.Passed = len(findings) == 0
	if r.Passed {
		r.Failed = nil
	}
}

// failedChecks returns the names of the failed checks, sorted.
func (r *RunResult) failedChecks() []string {
	var out []string
	for c := range r.Failed {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

func (r *RunResult) summary() string {
	verdict := "PASS"
	if !r.Passed {
		verdict = "FAIL (" + strings.Join(r.failedChecks(), ", ") + ")"
	}
	return fmt.Sprintf("%s: %d events, lost %d, skipped %d, double %d, healthy dead-lettered %d, max delay %.1fs, recovery %s (peak lag %.1fs), in %s",
		verdict, r.Events, r.Lost, r.Skipped, r.Double, r.HealthyDeadLettered, r.MaxDelay.Seconds(), r.recoveryText(), r.PeakLag.Seconds(), r.Elapsed.Round(time.Second))
}

func (r *RunResult) recoveryText() string {
	if !r.Recovered {
		return "none"
	}
	return fmt.Sprintf("%.1fs", r.Recovery.Seconds())
}

// ConfigSummary is the configuration a report ran with.
type ConfigSummary struct {
	Faults          []string `json:"faults"`
	Runs            int      `json:"runs"`
	Rate            int      `json:"rate"`
	Streams         int      `json:"streams"`
	WarmupSeconds   float64  `json:"warmup_s"`
	DurationSeconds float64  `json:"duration_s"`
	SettleSeconds   float64  `json:"settle_s"`
	LagThresholdSec float64  `json:"lag_threshold_s"`
}

func summarize(c Config) ConfigSummary {
	return ConfigSummary{
		Faults: c.Faults, Runs: c.Runs, Rate: c.Rate, Streams: c.Streams,
		WarmupSeconds: c.Warmup.Seconds(), DurationSeconds: c.Duration.Seconds(),
		SettleSeconds: c.Settle.Seconds(), LagThresholdSec: c.LagThreshold.Seconds(),
	}
}

// Report is the result of Run.
type Report struct {
	// Commit names the code the suite ran, when the caller knows it.
	Commit  string        `json:"commit,omitempty"`
	Started time.Time     `json:"started"`
	Elapsed time.Duration `json:"-"`
	Config  ConfigSummary `json:"config"`
	Runs    []RunResult   `json:"runs"`
}

// MarshalJSON adds the verdict and writes the duration in seconds.
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report
	return json.Marshal(struct {
		plain
		Passed         bool    `json:"passed"`
		ElapsedSeconds float64 `json:"elapsed_s"`
	}{plain(r), r.Passed(), r.Elapsed.Seconds()})
}

// Passed reports whether every run passed.
func (r *Report) Passed() bool {
	for _, run := range r.Runs {
		if !run.Passed {
			return false
		}
	}
	return len(r.Runs) > 0
}

// WriteTable writes one row per fault (runs summed, the worst delay and
// recovery), then the findings of the failed runs and where their logs
// are.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\truns\tevents\tlost\tskipped\tdouble\thealthy DL\tmax delay\trecovery\tresult\t")
	var order []string
	byFault := map[string][]RunResult{}
	for _, run := range r.Runs {
		if _, ok := byFault[run.Fault]; !ok {
			order = append(order, run.Fault)
		}
		byFault[run.Fault] = append(byFault[run.Fault], run)
	}
	for _, fault := range order {
		runs := byFault[fault]
		var (
			c        Counts
			events   int
			worst    time.Duration
			delay    time.Duration
			never    bool
			failures = map[string]bool{}
		)
		for _, run := range runs {
			c.add(run.Counts)
			events += run.Events
			worst = max(worst, run.Recovery)
			delay = max(delay, run.MaxDelay)
			never = never || !run.Recovered
			for _, check := range run.failedChecks() {
				failures[check] = true
			}
		}
		recovery := fmt.Sprintf("%.1fs", worst.Seconds())
		if never {
			recovery = "none"
		}
		result := "PASS"
		if len(failures) > 0 {
			var checks []string
			for check := range failures {
				checks = append(checks, check)
			}
			slices.Sort(checks)
			result = "FAIL: " + strings.Join(checks, ", ")
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.1fs\t%s\t%s\t\n", fault, len(runs), events, c.Lost, c.Skipped, c.Double, c.HealthyDeadLettered, delay.Seconds(), recovery, result)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, run := range r.Runs {
		if run.Passed {
			continue
		}
		fmt.Fprintf(w, "\nFAIL %s run %d:\n", run.Fault, run.Run)
		for _, f := range run.Findings {
			fmt.Fprintf(w, "  %s\n", f)
		}
		for _, check := range run.failedChecks() {
			if n := run.Failed[check]; n > findingsKept {
				fmt.Fprintf(w, "  %s: %d more\n", check, n-findingsKept)
			}
		}
		for _, n := range run.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		if run.Dir != "" {
			fmt.Fprintf(w, "  logs: %s\n", run.Dir)
		}
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
