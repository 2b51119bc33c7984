// Package riverref is the job-queue reference of the benchmark: River with
// one no-op job per work row (per event and perspective). In the catch-up
// (Seed, Run) the jobs are inserted with InsertMany in batches before the
// clients start and worked until every one is completed in the database;
// live (NewInserter, Start) they are inserted one per Insert call while a
// client works them. It measures the queue alone: the jobs read no event
// and save no model, so River's figure is an upper bound of what a
// job-per-event design can do.
package riverref

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// insertBatch is the jobs one InsertMany call inserts.
const insertBatch = 1000

// NoopArgs identify the work row a job stands for.
type NoopArgs struct {
	Stream      int   `json:"s"`
	Perspective int   `json:"p"`
	Version     int64 `json:"v"`
}

// Kind implements river.JobArgs.
func (NoopArgs) Kind() string { return "bench_noop" }

// noopWorker does nothing but report the job to worked, as its Work
// begins.
type noopWorker struct {
	river.WorkerDefaults[NoopArgs]
	worked func(NoopArgs)
}

func (w *noopWorker) Work(_ context.Context, job *river.Job[NoopArgs]) error {
	w.worked(job.Args)
	return nil
}

// Setup creates schema and runs River's migrations in it.
func Setup(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return err
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: quiet()})
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError + 4}))
}

// Options configure Seed and Run.
type Options struct {
	// Pools are one per client (instance); the first also inserts.
	Pools  []*pgxpool.Pool
	Schema string
	// Heads are the versions of each stream; every version of every stream
	// gets Perspectives jobs.
	Heads        []int64
	Perspectives int
	// Workers is MaxWorkers of each client's queue. Defaults to 2000, as
	// River's own benchmark (riverbench) configures it.
	Workers int
	// ClientDefaults keeps River's default fetch cadence (FetchCooldown
	// 100ms, FetchPollInterval 1s) instead of riverbench's throughput
	// settings (2ms, 20ms).
	ClientDefaults bool
}

// Seed inserts one job per (stream, version, perspective) with InsertMany
// in batches and returns how many.
func Seed(ctx context.Context, opts Options) (int, error) {
	client, err := newClient(opts, opts.Pools[0], nil)
	if err != nil {
		return 0, err
	}
	var params []river.InsertManyParams
	total := 0
	flush := func() error {
		if len(params) == 0 {
			return nil
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return err
		}
		total += len(params)
		params = params[:0]
		return nil
	}
	// Versions in the outer loop: jobs of many streams interleave, as the
	// work rows of the other pipelines do.
	var maxHead int64
	for _, h := range opts.Heads {
		maxHead = max(maxHead, h)
	}
	for v := int64(1); v <= maxHead; v++ {
		for s, h := range opts.Heads {
			if v > h {
				continue
			}
			for p := range opts.Perspectives {
				params = append(params, river.InsertManyParams{Args: NoopArgs{Stream: s, Perspective: p, Version: v}})
				if len(params) == insertBatch {
					if err := flush(); err != nil {
						return total, err
					}
				}
			}
		}
	}
	return total, flush()
}

func newClient(opts Options, pool *pgxpool.Pool, worked func(NoopArgs)) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{worked: worked})
	maxWorkers := opts.Workers
	if maxWorkers <= 0 {
		maxWorkers = 2000
	}
	cfg := &river.Config{
		Logger:  quiet(),
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Schema:  opts.Schema,
		Workers: workers,
	}
	if !opts.ClientDefaults {
		// River's own benchmark (cmd/river/riverbench) uses these to
		// maximise job throughput; the defaults are 100ms and 1s.
		cfg.FetchCooldown = 2 * time.Millisecond
		cfg.FetchPollInterval = 20 * time.Millisecond
	}
	return river.NewClient(riverpgxv5.New(pool), cfg)
}

// Stats are the counters of a Run, safe to read while it runs.
type Stats struct {
	// Worked counts jobs whose Work returned.
	Worked atomic.Int64
}

// Run starts one client per pool and waits until every one of total jobs
// is completed in the database; then it calls completed, stops the clients
// and returns the time from the start at which each stream's last job was
// worked (River records completions in batches shortly after).
func Run(ctx context.Context, opts Options, total int, stats *Stats, completed func()) ([]time.Duration, error) {
	jobsLeft := make([]atomic.Int64, len(opts.Heads))
	for i, h := range opts.Heads {
		jobsLeft[i].Store(h * int64(opts.Perspectives))
	}
	doneAt := make([]time.Duration, len(opts.Heads))
	start := time.Now()
	worked := func(a NoopArgs) {
		stats.Worked.Add(1)
		if jobsLeft[a.Stream].Add(-1) == 0 {
			doneAt[a.Stream] = time.Since(start)
		}
	}
	var clients []*river.Client[pgx.Tx]
	for _, pool := range opts.Pools {
		c, err := newClient(opts, pool, worked)
		if err != nil {
			return nil, err
		}
		if err := c.Start(ctx); err != nil {
			return nil, err
		}
		clients = append(clients, c)
	}
	defer stopAll(ctx, clients)
	q := fmt.Sprintf(`SELECT count(*) FROM %s.river_job WHERE state <> 'completed'`, pgx.Identifier{opts.Schema}.Sanitize())
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return doneAt, ctx.Err()
		case <-tick.C:
		}
		if stats.Worked.Load() < int64(total) {
			continue
		}
		var left int64
		if err := opts.Pools[0].QueryRow(ctx, q).Scan(&left); err != nil {
			return doneAt, err
		}
		if left == 0 {
			completed()
			return doneAt, nil
		}
	}
}

// Inserter inserts jobs one per Insert call, as an application enqueuing
// work as it happens does. Its client is never started: it only inserts.
type Inserter struct {
	client *river.Client[pgx.Tx]
}

// NewInserter returns an Inserter on pool.
func NewInserter(pool *pgxpool.Pool, opts Options) (*Inserter, error) {
	c, err := newClient(opts, pool, nil)
	if err != nil {
		return nil, err
	}
	return &Inserter{client: c}, nil
}

// Insert inserts the job of one work row in a transaction of its own.
func (in *Inserter) Insert(ctx context.Context, args NoopArgs) error {
	_, err := in.client.Insert(ctx, args, nil)
	return err
}

// Start starts one client per pool of opts, each calling started as the
// Work of a job begins, and returns a stop that stops them and returns once
// they stopped (River records the last completions as it stops). Calls of
// stop after the first return at once.
func Start(ctx context.Context, opts Options, started func(NoopArgs)) (stop func(), err error) {
	var clients []*river.Client[pgx.Tx]
	var once sync.Once
	stop = func() {
		once.Do(func() { stopAll(ctx, clients) })
	}
	for _, pool := range opts.Pools {
		c, err := newClient(opts, pool, started)
		if err != nil {
			stop()
			return nil, err
		}
		if err := c.Start(ctx); err != nil {
			stop()
			return nil, err
		}
		clients = append(clients, c)
	}
	return stop, nil
}

// Unfinished returns the jobs of schema not completed in the database.
func Unfinished(ctx context.Context, pool *pgxpool.Pool, schema string) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.river_job WHERE state <> 'completed'`, pgx.Identifier{schema}.Sanitize())).Scan(&n)
	return n, err
}

// stopAll stops clients together and returns once they stopped (River
// records the last completions as it stops), within 30 seconds whatever
// becomes of ctx.
func stopAll(ctx context.Context, clients []*river.Client[pgx.Tx]) {
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() { _ = c.Stop(stopCtx) })
	}
	wg.Wait()
}
