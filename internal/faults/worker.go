package faults

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// WorkerEnv is set (to "1") in the environment of the worker processes the
// suite starts by running its own executable again.
const WorkerEnv = "VANTAGE_FAULTS_WORKER"

// readyLine starts the line a worker prints on its standard output once
// its core.Worker started, followed by the instance id.
const readyLine = "ready "

// workerStopTimeout bounds the graceful stop of a worker process.
const workerStopTimeout = 10 * time.Second

// IsWorker reports whether this process was started by the suite as a
// worker process: the caller then runs WorkerMain instead of its own main.
func IsWorker() bool { return os.Getenv(WorkerEnv) == "1" }

// workerConfig holds the flags of a worker process.
type workerConfig struct {
	db         string
	schema     string
	logPath    string
	generation string
	fixed      bool
}

// WorkerMain runs a worker process and returns its exit code: it connects
// to the database, migrates the schema (and creates RowsTable unless it
// exists), runs one core.Worker over the PostgreSQL backend with the
// suite's short options until SIGTERM or SIGINT, then stops it gracefully
// (bounded). It prints "ready <instance-id>" on stdout once started; logs
// are JSON lines in -log.
//
// Flags: -db URL (its application_name names the process in
// pg_stat_activity), -schema, -log, -generation (core.Options.Generation),
// -fixed (poison events apply successfully).
func WorkerMain(args []string) int {
	var c workerConfig
	fs := flag.NewFlagSet("faultworker", flag.ContinueOnError)
	fs.StringVar(&c.db, "db", "", "PostgreSQL URL (required)")
	fs.StringVar(&c.schema, "schema", postgres.SchemaDefault, "schema of the Vantage tables")
	fs.StringVar(&c.logPath, "log", "", "JSON log file (default stderr)")
	fs.StringVar(&c.generation, "generation", "", "deploy generation (core.Options.Generation)")
	fs.BoolVar(&c.fixed, "fixed", false, "apply poison events successfully: the deploy with the fix")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if c.db == "" {
		fmt.Fprintln(os.Stderr, "faultworker: -db is required")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runWorker(ctx, c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "faultworker:", err)
		return 1
	}
	return 0
}

func runWorker(ctx context.Context, c workerConfig, ready io.Writer) error {
	var logOut io.Writer = os.Stderr
	if c.logPath != "" {
		f, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		logOut = f
	}
	logger := slog.New(slog.NewJSONHandler(logOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
	reg, err := NewRegistry(c.schema, c.fixed)
	if err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(c.db)
	if err != nil {
		return fmt.Errorf("parsing -db: %w", err)
	}
	// The engine drains up to MaxConcurrentStreams streams at once;
	// pgxpool's default (4 connections on 2 cores) would serialize them.
	cfg.MaxConns = 12
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(startCtx, cfg)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer pool.Close()
	if err := postgres.Migrate(startCtx, pool, c.schema); err != nil {
		return err // names the schema and the step
	}
	// The suite creates the table before it starts the workers; a worker
	// run by hand creates it.
	if _, err := pool.Exec(startCtx, rowsTableSQL(c.schema)); err != nil {
		return fmt.Errorf("creating %s: %w", RowsTable, err)
	}
	store, err := postgres.New(pool, postgres.Options{Schema: c.schema, Logger: logger})
	if err != nil {
		return err
	}
	defer store.Close()
	w, err := core.New(store.Backend(), reg, workerOptions(c.generation, logger))
	if err != nil {
		return err
	}
	if err := w.Start(startCtx); err != nil {
		return err
	}
	logger.Info("faultworker started", slog.String("instance_id", w.InstanceID().String()),
		slog.String("generation", c.generation), slog.Bool("fixed", c.fixed), slog.Int("pid", os.Getpid()))
	fmt.Fprintf(ready, "%s%s\n", readyLine, w.InstanceID())

	<-ctx.Done()
	stopCtx, cancelStop := context.WithTimeout(context.Background(), workerStopTimeout)
	defer cancelStop()
	if err := w.Stop(stopCtx); err != nil {
		return fmt.Errorf("stopping the worker: %w", err)
	}
	logger.Info("faultworker stopped")
	return nil
}

// Worker options the scenarios and checks depend on.
const (
	// staleThreshold is StaleInstanceThreshold: a killed worker's streams
	// wait that long for a survivor.
	staleThreshold = 5 * time.Second
	// maxAttempts is Retries.MaxEventAttempts: the attempts a dead
	// letter of a fault event records.
	maxAttempts = 3
)

// workerOptions are the suite's options: short enough that a stale
// instance, a hung apply or a poison event plays out in seconds, not
// minutes. RELIABILITY.md lists them.
func workerOptions(generation string, logger *slog.Logger) *core.Options {
	return &core.Options{
		ServiceName: "faultworker",
		Generation:  generation,
		Logger:      logger,

		Claims: core.ClaimOptions{
			StaleInstanceThreshold: staleThreshold,
			HeartbeatInterval:      time.Second,
			LeaseDuration:          20 * time.Second,
			Interval:               100 * time.Millisecond,
			NotifyHealthyInterval:  time.Second,
		},
		Drain: core.DrainOptions{
			ApplyTimeout:                 2 * time.Second,
			ApplyAbandonGrace:            2 * time.Second,
			PollingInterval:              500 * time.Millisecond,
			NotifyHealthyPollingInterval: time.Second,
			// The sliding window would otherwise slide up to 3s under the
			// suite's steady appends and hide a fault's lag in its own.
			Batcher: core.DrainBatcherOptions{SlidingWindow: 50 * time.Millisecond, MaxWait: 200 * time.Millisecond},
		},
		Retries: core.RetryOptions{
			MaxEventAttempts: maxAttempts,
			Event:            core.Backoff{Initial: 400 * time.Millisecond, Max: time.Second},
			CompletionResend: core.Backoff{Initial: 500 * time.Millisecond, Max: 2 * time.Second},
		},

		DeadLetterRecovery: core.DeadLetterRecoveryOptions{Interval: time.Second},
		Rewind: core.RewindOptions{
			Debounce:    200 * time.Millisecond,
			MaxDebounce: time.Second,
			LockTimeout: 10 * time.Second,
			KeepAlive:   2 * time.Second,
		},
		Hooks: core.Hooks{
			OnDeadLettered: func(dl ports.DeadLetter) {
				logger.Warn("faultworker: dead-lettered", slog.String("stream_id", dl.StreamID.String()),
					slog.String("perspective", dl.Perspective), slog.Int64("version", dl.EventVersion),
					slog.String("reason", dl.Reason), slog.Int("attempts", dl.Attempts), slog.String("error", dl.Error))
			},
			OnApplyAbandoned: func(a core.AbandonedApply) {
				logger.Warn("faultworker: apply abandoned", slog.String("stream_id", a.StreamID.String()),
					slog.String("perspective", a.Perspective), slog.Int64("version", a.Version),
					slog.Duration("elapsed", a.Elapsed))
			},
		},
	}
}
