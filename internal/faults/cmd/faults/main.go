// Command faults runs Vantage's fault suite (package internal/faults)
// against a private PostgreSQL cluster and real worker processes, prints a
// table of the results, and exits 1 when a check failed (2 when the suite
// could not run).
//
//	go run ./internal/faults/cmd/faults                      # every fault once (make faults)
//	go run ./internal/faults/cmd/faults -faults kill,hang -runs 5
//	go run ./internal/faults/cmd/faults -short -json          # the short mode of go test
//	go run ./internal/faults/cmd/faults -list
//
// The worker processes are this executable run again (see faults.IsWorker).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/vantage-go/vantage/internal/faults"
)

func main() {
	if faults.IsWorker() {
		os.Exit(faults.WorkerMain(os.Args[1:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("faults", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		short    = fs.Bool("short", false, "the short mode (every fault but the control once, small rates); other flags override it")
		list     = fs.Bool("list", false, "list the faults and exit")
		asJSON   = fs.Bool("json", false, "print the report as JSON instead of a table")
		quiet    = fs.Bool("q", false, "no progress lines on stderr")
		which    = fs.String("faults", "", "comma-separated faults to run (default all; see -list)")
		runs     = fs.Int("runs", 0, fmt.Sprintf("runs per fault (default %d)", faults.RunsDefault))
		rate     = fs.Int("rate", 0, fmt.Sprintf("events appended per second (default %d)", faults.RateDefault))
		streams  = fs.Int("streams", 0, fmt.Sprintf("streams appended to (default %d)", faults.StreamsDefault))
		warmup   = fs.Duration("warmup", 0, fmt.Sprintf("appending before the fault (default %s)", faults.WarmupDefault))
		duration = fs.Duration("duration", 0, fmt.Sprintf("appending from the fault on (default %s)", faults.DurationDefault))
		settle   = fs.Duration("settle", 0, fmt.Sprintf("bound on the wait for the workers to catch up (default %s)", faults.SettleDefault))
		lag      = fs.Duration("lag", 0, fmt.Sprintf("healthy lag threshold of the recovery time (default %s)", faults.LagThresholdDefault))
		out      = fs.String("out", "", "directory for the logs of the runs (default a new temporary directory)")
		keep     = fs.Bool("keep", false, "keep the logs of the runs that passed too")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *list {
		for _, s := range faults.Scenarios() {
			fmt.Fprintf(stdout, "%-22s %s\n", s[0], s[1])
		}
		return 0
	}
	var cfg faults.Config
	if *short {
		cfg = faults.ShortConfig()
	}
	if *which != "" {
		cfg.Faults = strings.Split(*which, ",")
	}
	set := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	setDur := func(dst *time.Duration, v time.Duration) {
		if v != 0 {
			*dst = v
		}
	}
	set(&cfg.Runs, *runs)
	set(&cfg.Rate, *rate)
	set(&cfg.Streams, *streams)
	setDur(&cfg.Warmup, *warmup)
	setDur(&cfg.Duration, *duration)
	setDur(&cfg.Settle, *settle)
	setDur(&cfg.LagThreshold, *lag)
	cfg.OutDir, cfg.KeepLogs = *out, *keep
	if !*quiet {
		cfg.Progress = stderr
	}

	report, err := faults.Run(ctx, cfg)
	if report == nil {
		fmt.Fprintln(stderr, "faults:", err)
		return 2
	}
	report.Commit = commit()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			fmt.Fprintln(stderr, "faults:", err)
			return 2
		}
	} else {
		fmt.Fprintf(stdout, "commit %s, %s\n", report.Commit, report.Elapsed.Round(time.Second))
		if err := report.WriteTable(stdout); err != nil {
			fmt.Fprintln(stderr, "faults:", err)
			return 2
		}
	}
	switch {
	case err != nil:
		fmt.Fprintln(stderr, "faults:", err)
		return 2
	case !report.Passed():
		return 1
	}
	return 0
}

// commit names the checked-out commit, "+dirty" when the tree has changes,
// or "unknown" outside a git checkout.
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if status, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(status))) > 0 {
		c += "+dirty"
	}
	return c
}
