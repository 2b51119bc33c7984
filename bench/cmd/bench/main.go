// Command bench measures Vantage against two references on the same
// database in the same run: River (one no-op job per work row) and the raw
// limit (the same work done by the shortest correct SQL pipeline, package
// raw). See BENCHMARKS.md at the repository root for the figures and how to
// read them.
//
//	go run ./cmd/bench -scenario all                       # make bench
//	go run ./cmd/bench -scenario catchup -events 200000 -instances 1,2,4
//	go run ./cmd/bench -scenario catchup -backend memory -events 200000
//	go run ./cmd/bench -scenario live -rate 1000,100 -duration 30s
//	go run ./cmd/bench -scenario failover
//	go run ./cmd/bench -scenario idle -idle-duration 60s
//	go run ./cmd/bench -scenario ramp -ramp-start 250 -ramp-step 1.25x -ramp-max 8000
//	go run ./cmd/bench -scenario soak                      # make soak, 30 minutes
//	go run ./cmd/bench -scenario rebuild -events 5000000 -timeout 60m
//
// Every run executes in a child process of its own (the same binary,
// re-executed), so its peak RSS (VmHWM) is its own; the child seeds a fresh
// schema, measures, checks the stored models and drops the schema.
// Progress goes to stderr, the table to stdout; with -json, one JSON object
// per result line goes to stdout and the table to stderr.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) == 3 && os.Args[1] == childFlag {
		if err := runChild(ctx, os.Args[2], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench child:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// childFlag marks a re-executed child; its argument is the JSON spec.
const childFlag = "-child-spec"

// resultPrefix starts the line on which a child reports its result.
const resultPrefix = "RESULT "

type config struct {
	backend       string
	database      string
	scenario      string
	events        []int
	streams       int
	perspectives  int
	widePersp     int
	instances     []int
	rates         []int
	failoverRate  int
	duration      time.Duration
	idleDuration  time.Duration
	warmup        time.Duration
	json          bool
	compare       string
	pool          int
	rawWorkers    int
	riverWorkers  int
	riverDefaults bool
	appendBatch   int
	appenders     int
	settings      []string
	stale         time.Duration
	killAfter     time.Duration
	timeout       time.Duration
	drainWait     time.Duration
	profileDir    string
	pgLog         string
	options       map[string]string
	ramp          rampConfig

	// soak
	rateSet      bool // -rate given: the soak's rate instead of its default
	soakCluster  bool
	pgBin        string
	soakDuration time.Duration
	soakSample   time.Duration

	// rebuild
	rebuildSample time.Duration
}

// rampConfig is what the ramp flags ask.
type rampConfig struct {
	start, top int
	growth     rampGrowth
	step       time.Duration
	p99        time.Duration
	appenders  int
	impls      []string
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	var events, instances, rates, settings, options, rampGrowthFlag, rampImpls string
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(out)
	defaultDB := os.Getenv("DATABASE_URL")
	if defaultDB == "" {
		defaultDB = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	fs.StringVar(&c.backend, "backend", "", "memory or postgres; empty: postgres, plus the memory catch-up under -scenario all")
	fs.StringVar(&c.database, "database", defaultDB, "PostgreSQL connection URL (default $DATABASE_URL)")
	fs.StringVar(&c.scenario, "scenario", "all", "catchup, live, failover, idle, all (the four), or ramp, soak or rebuild (each on its own)")
	fs.StringVar(&events, "events", "200000", "catch-up backlog: events already appended (comma list allowed)")
	fs.IntVar(&c.streams, "streams", 1000, "streams the events are spread over")
	fs.IntVar(&c.perspectives, "perspectives", 2, "perspectives applying every event (work rows = events × perspectives)")
	fs.IntVar(&c.widePersp, "wide-perspectives", 5, "-scenario all: one more catch-up (PostgreSQL with the references, and memory) with this many perspectives, at the first -events and -instances; 0: none")
	fs.StringVar(&instances, "instances", "1,2,4", "engine instances of the catch-up (comma list); live uses the first, failover 3")
	fs.StringVar(&rates, "rate", "1000", "live: events appended per second (comma list: every setting at each rate)")
	fs.IntVar(&c.failoverRate, "failover-rate", 100, "failover: events appended per second (a rate the instances sustain, so that recovery is what is measured)")
	fs.DurationVar(&c.duration, "duration", 30*time.Second, "live: measured appending time (after -warmup)")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "live and failover: appending time before measuring")
	fs.DurationVar(&c.idleDuration, "idle-duration", time.Minute, "idle: measured time, after the instance settled")
	fs.BoolVar(&c.json, "json", false, "write one JSON object per result line to stdout (the table goes to stderr)")
	fs.StringVar(&c.compare, "compare", "auto", "run the raw and River references too: on, off, or auto (on for the PostgreSQL catch-up)")
	fs.IntVar(&c.pool, "pool", 8, "PostgreSQL connections per engine instance (pgxpool MaxConns)")
	fs.IntVar(&c.rawWorkers, "raw-workers", 0, "raw pipeline workers; 0: instances × -pool, the engine's connections")
	fs.IntVar(&c.riverWorkers, "river-workers", 2000, "River MaxWorkers per client (one client per instance); 2000 as River's own benchmark")
	fs.BoolVar(&c.riverDefaults, "river-defaults", false, "run River with its default fetch cadence (FetchCooldown 100ms, FetchPollInterval 1s) instead of its benchmark's (2ms, 20ms)")
	fs.IntVar(&c.appendBatch, "append-batch", 50, "events per append when seeding")
	fs.IntVar(&c.appenders, "appenders", 4, "concurrent appenders (seeding, live)")
	fs.StringVar(&settings, "settings", settingDefaults+","+settingLowLatency+","+settingNoEngine,
		"live and idle: engine settings to measure (defaults, low-latency; no-engine: a live run of the appends alone, which idle skips)")
	fs.DurationVar(&c.stale, "stale", 0, "failover: Options.Claims.StaleInstanceThreshold (0: the engine's default, 30s)")
	fs.DurationVar(&c.killAfter, "kill-after", 10*time.Second, "failover: appending time before one instance is killed")
	fs.DurationVar(&c.drainWait, "drain-wait", 2*time.Minute, "live and failover: how long to wait, after the appends, for every event to be applied")
	fs.DurationVar(&c.timeout, "timeout", 15*time.Minute, "give up on one run after this long")
	fs.StringVar(&options, "opt", "", "override core.Options of every Vantage run: Field=value[,Struct.Field=value...], e.g. Drain.FetchMaxRows=50000,Drain.Batcher.SlidingWindow=20ms")
	fs.StringVar(&c.pgLog, "pglog", "/var/log/postgresql/postgresql-15-main.log", "PostgreSQL server log, read for auto_explain plans when profiling")
	fs.StringVar(&c.profileDir, "profile", "", "write a CPU profile and a SQL/PostgreSQL report of each run into this directory")
	fs.IntVar(&c.ramp.start, "ramp-start", 250, "ramp: the first step's rate, events/s")
	fs.StringVar(&rampGrowthFlag, "ramp-step", "1.25x", "ramp: how the rate rises from a step to the next: a factor (1.25x) or an increment (+250)")
	fs.DurationVar(&c.ramp.step, "ramp-step-duration", 10*time.Second, "ramp: how long each step appends")
	fs.IntVar(&c.ramp.top, "ramp-max", 8000, "ramp: the last step's rate, events/s")
	fs.DurationVar(&c.ramp.p99, "ramp-p99", 100*time.Millisecond, "ramp: the largest p99 of append-to-applied of a sustainable step")
	fs.IntVar(&c.ramp.appenders, "ramp-appenders", 16, "ramp: concurrent appenders, one connection each, one event (River: one job) per call")
	fs.StringVar(&rampImpls, "ramp-impls", implVantage+","+implRiver+","+implRaw, "ramp: the implementations to ramp, in order")
	fs.BoolVar(&c.soakCluster, "soak-cluster", true, "soak: run on a private PostgreSQL cluster made for the run (initdb's settings, autovacuum on, pg_stat_statements loaded when installed) and removed after it; false: on -database, whose statement costs are read if it has pg_stat_statements")
	fs.StringVar(&c.pgBin, "pg-bin", "/usr/lib/postgresql/15/bin", "soak: directory of the initdb and pg_ctl of the private cluster")
	fs.DurationVar(&c.soakDuration, "soak-duration", 30*time.Minute, "soak: measured appending time (after -warmup), at -rate (default 500 for the soak)")
	fs.DurationVar(&c.soakSample, "soak-sample", time.Minute, "soak: sample interval; each sample holds the latency, backlog, table sizes, memory, the CPU of the process, the server and the rest of the machine, and the costs of the top statements")
	fs.DurationVar(&c.rebuildSample, "rebuild-sample", 5*time.Second, "rebuild: how often the rebuild request's progress is read")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	fs.Visit(func(f *flag.Flag) { c.rateSet = c.rateSet || f.Name == "rate" })
	var err error
	if c.events, err = intList("events", events); err != nil {
		return c, err
	}
	if c.instances, err = intList("instances", instances); err != nil {
		return c, err
	}
	if c.rates, err = intList("rate", rates); err != nil {
		return c, err
	}
	if options != "" {
		c.options = map[string]string{}
		for _, kv := range strings.Split(options, ",") {
			k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok {
				return c, fmt.Errorf("-opt: %q is not Field=value", kv)
			}
			c.options[k] = val
		}
	}
	for _, s := range strings.Split(settings, ",") {
		s = strings.TrimSpace(s)
		if s != settingDefaults && s != settingLowLatency && s != settingNoEngine {
			return c, fmt.Errorf("-settings: unknown setting %q", s)
		}
		c.settings = append(c.settings, s)
	}
	switch c.backend {
	case "", "memory", "postgres":
	default:
		return c, fmt.Errorf("-backend must be memory or postgres, got %q", c.backend)
	}
	switch c.scenario {
	case "all", scenarioCatchup, scenarioLive, scenarioFailover, scenarioIdle, scenarioRamp, scenarioRebuild:
	case scenarioSoak:
		if err := checkSoakFlags(c); err != nil {
			return c, err
		}
	default:
		return c, fmt.Errorf("-scenario must be catchup, live, failover, idle, all, ramp, soak or rebuild, got %q", c.scenario)
	}
	if c.ramp.growth, err = parseRampGrowth(rampGrowthFlag); err != nil {
		return c, err
	}
	if c.ramp.start < 1 || c.ramp.top < c.ramp.start {
		return c, fmt.Errorf("-ramp-start must be at least 1 and -ramp-max at least -ramp-start, got %d and %d", c.ramp.start, c.ramp.top)
	}
	if c.ramp.p99 <= 0 || c.ramp.step < time.Second || c.ramp.step <= c.ramp.p99 {
		return c, fmt.Errorf("-ramp-p99 must be positive and -ramp-step-duration at least 1s and longer than it, got %s and %s", c.ramp.p99, c.ramp.step)
	}
	if c.ramp.appenders < 1 {
		return c, fmt.Errorf("-ramp-appenders must be at least 1, got %d", c.ramp.appenders)
	}
	for _, impl := range strings.Split(rampImpls, ",") {
		impl = strings.TrimSpace(impl)
		if impl != implVantage && impl != implRiver && impl != implRaw {
			return c, fmt.Errorf("-ramp-impls: unknown implementation %q", impl)
		}
		c.ramp.impls = append(c.ramp.impls, impl)
	}
	if c.idleDuration <= 0 {
		return c, fmt.Errorf("-idle-duration must be positive, got %s", c.idleDuration)
	}
	if c.rebuildSample <= 0 {
		return c, fmt.Errorf("-rebuild-sample must be positive, got %s", c.rebuildSample)
	}
	switch c.compare {
	case "auto", "on", "off":
	default:
		return c, fmt.Errorf("-compare must be on, off or auto, got %q", c.compare)
	}
	if c.widePersp < 0 {
		return c, fmt.Errorf("-wide-perspectives must not be negative, got %d", c.widePersp)
	}
	for name, v := range map[string]int{"streams": c.streams, "perspectives": c.perspectives, "failover-rate": c.failoverRate, "pool": c.pool, "append-batch": c.appendBatch, "appenders": c.appenders} {
		if v < 1 {
			return c, fmt.Errorf("-%s must be at least 1, got %d", name, v)
		}
	}
	return c, nil
}

func intList(name, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-%s: %q is not a positive number", name, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// plan lists the runs of the configuration in order.
func plan(c config) []spec {
	base := spec{
		Database: c.database, Streams: c.streams, Perspectives: c.perspectives,
		Pool: c.pool, AppendBatch: c.appendBatch, Appenders: c.appenders,
		Timeout: c.timeout, ProfileDir: c.profileDir, Warmup: c.warmup,
		Options: c.options, PGLog: c.pgLog, DrainWait: c.drainWait,
	}
	all := c.scenario == "all"
	pg := c.backend == "" || c.backend == "postgres"
	var out []spec
	// catchup appends the catch-up runs of one backlog, instance count and
	// perspective count: Vantage on PostgreSQL and the references, then
	// Vantage in memory.
	catchup := func(events, instances, perspectives int) {
		s := base
		s.Scenario, s.Events, s.Instances, s.Perspectives = scenarioCatchup, events, instances, perspectives
		if pg {
			s.Backend = "postgres"
			s.Impl = implVantage
			out = append(out, s)
			if c.compare == "on" || c.compare == "auto" {
				raw := s
				raw.Impl, raw.Workers = implRaw, c.rawWorkers
				if raw.Workers == 0 {
					raw.Workers = instances * c.pool
				}
				river := s
				river.Impl, river.Workers, river.RiverDefaults = implRiver, c.riverWorkers, c.riverDefaults
				out = append(out, raw, river)
			}
		}
		if c.backend == "memory" || (all && c.backend == "") {
			m := s
			m.Backend, m.Impl = "memory", implVantage
			out = append(out, m)
		}
	}
	if all || c.scenario == scenarioCatchup {
		for _, events := range c.events {
			for _, n := range c.instances {
				catchup(events, n, c.perspectives)
			}
		}
	}
	// How the cost grows with the perspectives, from one backlog: work rows
	// grow with them, events do not.
	if all && c.widePersp > 0 && c.widePersp != c.perspectives {
		catchup(c.events[0], c.instances[0], c.widePersp)
	}
	backend := "postgres"
	if c.backend == "memory" {
		backend = "memory"
	}
	if all || c.scenario == scenarioLive {
		// The settings of one rate one after the other, so their lines
		// sit side by side.
		for _, rate := range c.rates {
			for _, setting := range c.settings {
				s := base
				s.Scenario, s.Impl, s.Backend, s.Setting = scenarioLive, implVantage, backend, setting
				s.Instances, s.Rate, s.Duration = c.instances[0], rate, c.duration
				out = append(out, s)
			}
		}
	}
	if (all || c.scenario == scenarioFailover) && backend == "postgres" {
		s := base
		s.Scenario, s.Impl, s.Backend, s.Setting = scenarioFailover, implVantage, backend, settingDefaults
		s.Instances, s.Rate, s.Stale, s.KillAfter = 3, c.failoverRate, c.stale, c.killAfter
		out = append(out, s)
	}
	if c.scenario == scenarioRamp && backend == "postgres" {
		// Not part of all: a ramp takes minutes per implementation.
		rs := &rampSpec{Rates: rampRates(c.ramp.start, c.ramp.top, c.ramp.growth), Step: c.ramp.step, P99: c.ramp.p99, Appenders: c.ramp.appenders}
		for _, impl := range c.ramp.impls {
			s := base
			s.Scenario, s.Impl, s.Backend, s.Instances, s.Ramp = scenarioRamp, impl, backend, c.instances[0], rs
			switch impl {
			case implVantage:
				s.Setting = settingDefaults
			case implRiver:
				s.Workers, s.RiverDefaults, s.Setting = c.riverWorkers, c.riverDefaults, riverSetting(c.riverDefaults)
			case implRaw:
				s.Workers = c.rawWorkers
				if s.Workers == 0 {
					s.Workers = s.Instances * c.pool
				}
			}
			out = append(out, s)
		}
	}
	if (all || c.scenario == scenarioIdle) && backend == "postgres" {
		for _, setting := range c.settings {
			if setting == settingNoEngine {
				continue // an idle worker is what idle measures
			}
			s := base
			s.Scenario, s.Impl, s.Backend, s.Setting = scenarioIdle, implVantage, backend, setting
			s.Instances, s.Duration = 1, c.idleDuration
			out = append(out, s)
		}
	}
	if c.scenario == scenarioSoak {
		out = append(out, soakSpec(c, base))
	}
	if c.scenario == scenarioRebuild && backend == "postgres" {
		// Not part of all: it catches a backlog up, then replays it.
		for _, events := range c.events {
			s := base
			s.Scenario, s.Impl, s.Backend, s.Events, s.Instances, s.Sample = scenarioRebuild, implVantage, backend, events, 1, c.rebuildSample
			out = append(out, s)
		}
	}
	return out
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if c.scenario == scenarioSoak && c.soakCluster {
		cl, err := startSoakCluster(ctx, c.pgBin)
		if err != nil {
			return fmt.Errorf("starting the soak's cluster: %w", err)
		}
		defer func() {
			if err := cl.stop(); err != nil {
				fmt.Fprintf(stderr, "bench: stopping the soak's cluster: %v\n", err)
			}
		}()
		loaded := ""
		if cl.statements {
			loaded = ", pg_stat_statements loaded" // else the soak says the statements' costs are missing
		}
		fmt.Fprintf(stderr, "bench: private cluster on port %d in %s%s\n", cl.port, cl.dir, loaded)
		c.database, c.pgLog = cl.url(), cl.log
	}
	runs := plan(c)
	if len(runs) == 0 {
		return errors.New("nothing to run (failover, idle, ramp and rebuild need -backend postgres)")
	}
	if c.profileDir != "" {
		if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
			return err
		}
	}
	var admin *pgxpool.Pool
	for _, s := range runs {
		if s.Backend == "postgres" {
			if admin, err = pgxpool.New(ctx, c.database); err != nil {
				return fmt.Errorf("connecting to PostgreSQL: %w", err)
			}
			defer admin.Close()
			if err := admin.Ping(ctx); err != nil {
				return fmt.Errorf("connecting to PostgreSQL: %w", err)
			}
			break
		}
	}
	fmt.Fprintf(stderr, "bench: %d runs, each in a child process\n", len(runs))
	var results []*result
	for i, s := range runs {
		if s.Backend == "postgres" {
			s.Schema = "bench_" + s.Impl + "_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
		}
		fmt.Fprintf(stderr, "bench: [%d/%d] %s\n", i+1, len(runs), s.name())
		r, err := runInChild(ctx, s, stderr)
		if s.Schema != "" && admin != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			if _, derr := admin.Exec(dctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.Schema}.Sanitize()+" CASCADE"); derr != nil {
				fmt.Fprintf(stderr, "bench: dropping schema %s: %v\n", s.Schema, derr)
			}
			cancel()
		}
		if err != nil {
			r = newResult(s)
			r.Error = err.Error()
		}
		results = append(results, r)
		if ctx.Err() != nil {
			break
		}
	}
	compareResults(results)
	compareLive(results)
	compareRamp(results)
	if c.json {
		enc := json.NewEncoder(stdout)
		for _, r := range results {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		printTable(stderr, results)
	} else {
		printTable(stdout, results)
	}
	for _, r := range results {
		if r.Error != "" {
			return fmt.Errorf("%d of %d runs failed", countErrors(results), len(results))
		}
	}
	return nil
}

func countErrors(rs []*result) int {
	n := 0
	for _, r := range rs {
		if r.Error != "" {
			n++
		}
	}
	return n
}

// runInChild re-executes this binary for s and returns the result it
// reports.
func runInChild(ctx context.Context, s spec, stderr io.Writer) (*result, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, s.Timeout+2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, exe, childFlag, string(b))
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var r *result
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, resultPrefix); ok {
			r = &result{}
			if err := json.Unmarshal([]byte(rest), r); err != nil {
				return nil, fmt.Errorf("reading the child's result: %w", err)
			}
			continue
		}
		fmt.Fprintln(stderr, line)
	}
	werr := cmd.Wait()
	if r == nil {
		if werr == nil {
			werr = errors.New("the child reported no result")
		}
		return nil, werr
	}
	return r, nil
}

// compareResults fills the comparison fields of Vantage's PostgreSQL
// catch-up lines from the raw and River lines of the same backlog, instance
// count and perspective count.
func compareResults(rs []*result) {
	type key struct {
		events       int64
		instances    int
		perspectives int
	}
	raw, river := map[key]*result{}, map[key]*result{}
	for _, r := range rs {
		if r.Scenario != scenarioCatchup || r.Error != "" {
			continue
		}
		k := key{r.Events, r.Instances, r.Perspectives}
		switch r.Impl {
		case implRaw:
			raw[k] = r
		case implRiver:
			river[k] = r
		}
	}
	for _, r := range rs {
		if r.Scenario != scenarioCatchup || r.Impl != implVantage || r.Backend != "postgres" || r.Error != "" {
			continue
		}
		k := key{r.Events, r.Instances, r.Perspectives}
		if x := raw[k]; x != nil && x.EventsPerS > 0 {
			r.RawEventsPerS = x.EventsPerS
			r.RatioVsRaw = r.EventsPerS / x.EventsPerS
		}
		if x := river[k]; x != nil && x.WorkRowsPerS > 0 {
			r.RiverJobsPerS = x.WorkRowsPerS
			r.RatioVsRiver = r.WorkRowsPerS / x.WorkRowsPerS
		}
	}
}

// printTable writes the result lines: those of the scenarios that move
// events, then those of the idle, ramp and rebuild scenarios, whose figures
// are their own.
func printTable(w io.Writer, rs []*result) {
	var moving, idle, ramp, rebuilds []*result
	for _, r := range rs {
		switch r.Scenario {
		case scenarioIdle:
			idle = append(idle, r)
		case scenarioRamp:
			ramp = append(ramp, r)
		case scenarioRebuild:
			rebuilds = append(rebuilds, r)
		default:
			moving = append(moving, r)
		}
	}
	if len(moving) > 0 {
		printMoving(w, moving)
	}
	if len(idle) > 0 {
		printIdle(w, idle)
	}
	if len(ramp) > 0 {
		printRamp(w, ramp)
	}
	if len(rebuilds) > 0 {
		printRebuilds(w, rebuilds)
	}
	for _, r := range rs {
		if r.Soak != nil {
			printSoak(w, r)
		}
	}
}

// printMoving writes the lines of the scenarios that move events:
// catch-up, live and failover.
func printMoving(w io.Writer, rs []*result) {
	fmt.Fprintf(w, "\n%-9s %-8s %-8s %-11s %4s %5s %5s %8s %9s %8s %10s %11s %9s %9s %8s %12s %9s %7s %8s  %s\n",
		"scenario", "backend", "impl", "setting", "inst", "persp", "rate", "events", "work_rows", "seconds", "events/s", "work_rows/s", "p50_ms", "p99_ms", "rss_mb",
		"cpu_ms/event", "x_appends", "vs_raw", "vs_river", "notes")
	for _, r := range rs {
		notes := ""
		switch {
		case r.Error != "":
			notes = "ERROR: " + r.Error
		case r.Checked:
			notes = fmt.Sprintf("skipped=%d double=%d pending=%d", r.Skipped, r.DoubleApplied, r.PendingAfter)
		}
		if r.Error != "" && r.Checked {
			notes += fmt.Sprintf("; skipped=%d double=%d pending=%d", r.Skipped, r.DoubleApplied, r.PendingAfter)
		}
		if r.Scenario == scenarioFailover {
			notes += fmt.Sprintf(" victim_streams=%d recovery_max=%.0fms p50=%.0fms (from last heartbeat %.0fms) target=%.0fms not_recovered=%d",
				r.VictimStreams, r.RecoveryMaxMs, r.RecoveryP50Ms, r.RecoveryFromLastBeatMs, r.TargetMs, r.NotRecovered)
		}
		if r.Scenario != scenarioCatchup {
			notes += fmt.Sprintf(" achieved=%.0f/s samples=%d max=%.0fms", r.AchievedRate, r.Samples, r.MaxMs)
		}
		switch {
		case r.Scenario == scenarioLive && r.Setting == settingNoEngine:
			notes += " no engine: p50 and p99 are the appends'"
		case r.Scenario == scenarioLive:
			notes += fmt.Sprintf(" p99_target=%.0fms append_p50=%.1fms append_p99=%.1fms", r.TargetMs, r.AppendP50Ms, r.AppendP99Ms)
		}
		notes += cpuNote(r, 1)
		if n := writesNote(r.TableWrites, r.Events); n != "" {
			notes += " " + n
		}
		if r.Deferred > 0 {
			notes += fmt.Sprintf(" deferred=%d", r.Deferred)
		}
		setting, rate := r.Setting, "-"
		if setting == "" {
			setting = "-"
		}
		if r.Rate > 0 {
			rate = strconv.Itoa(r.Rate)
		}
		cpuPerEvent := "-"
		if r.CPUMsPerEvent > 0 {
			cpuPerEvent = fmt.Sprintf("%.3f", r.CPUMsPerEvent)
		}
		fmt.Fprintf(w, "%-9s %-8s %-8s %-11s %4d %5d %5s %8d %9d %8.2f %10.0f %11.0f %9.1f %9.1f %8.1f %12s %9s %7s %8s  %s\n",
			r.Scenario, r.Backend, r.Impl, setting, r.Instances, r.Perspectives, rate, r.Events, r.WorkRows, r.Seconds, r.EventsPerS, r.WorkRowsPerS,
			r.P50Ms, r.P99Ms, r.PeakRSSMB, cpuPerEvent, ratio(r.CPUVsAppends), ratio(r.RatioVsRaw), ratio(r.RatioVsRiver), strings.TrimSpace(notes))
	}
}

// printIdle writes the idle lines: CPU and statements per minute.
func printIdle(w io.Writer, rs []*result) {
	fmt.Fprintf(w, "\n%-9s %-8s %-11s %4s %5s %8s %12s %12s %9s %9s %9s %8s  %s\n",
		"scenario", "backend", "setting", "inst", "persp", "seconds", "go_cpu_s/min", "pg_cpu_s/min", "cpu_s/min", "stmts/min", "pings/min", "rss_mb", "notes")
	for _, r := range rs {
		var f idleFigures
		if r.Idle != nil {
			f = *r.Idle
		}
		notes := ""
		if r.Error != "" {
			notes = "ERROR: " + r.Error
		}
		notes += cpuNote(r, 2)
		fmt.Fprintf(w, "%-9s %-8s %-11s %4d %5d %8.2f %12.3f %12.3f %9.3f %9.1f %9.1f %8.1f  %s\n",
			r.Scenario, r.Backend, r.Setting, r.Instances, r.Perspectives, r.Seconds, f.GoCPUSPerMin, f.PGCPUSPerMin, f.CPUSPerMin,
			f.StatementsPerMin, f.PingsPerMin, r.PeakRSSMB, strings.TrimSpace(notes))
	}
}

// cpuNote describes where the CPU went during the measured phase, in
// seconds with prec decimals.
func cpuNote(r *result, prec int) string {
	if r.Seconds == 0 {
		return ""
	}
	return fmt.Sprintf(" cpu: go=%.*fs pg=%.*fs others=%.*fs machine=%.0f%%",
		prec, r.GoCPUSeconds, prec, r.PGCPUSeconds, prec, r.OtherCPUSeconds, r.MachineCPUPercent)
}

func ratio(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", v)
}
