package main

import (
	"context"
	"fmt"
	"time"

	"github.com/vantage-go/vantage/bench/internal/measure"
	"github.com/vantage-go/vantage/bench/internal/raw"
	"github.com/vantage-go/vantage/bench/internal/riverref"
	"github.com/vantage-go/vantage/bench/internal/workload"
)

// heads returns the last version of every stream of the catch-up backlog.
func heads(s spec) []int64 {
	out := make([]int64, s.Streams)
	for i := range out {
		out[i] = workload.StreamLength(s.Events, s.Streams, i)
	}
	return out
}

// streamLatencies turns per-stream completion times into percentiles.
func streamLatencies(r *result, doneAt []time.Duration) {
	var l measure.Latencies
	for _, d := range doneAt {
		if d > 0 {
			l.Add(d)
		}
	}
	ps := l.Percentiles(0.5, 0.99, 1)
	r.P50Ms, r.P99Ms, r.MaxMs = ps[0], ps[1], ps[2]
}

// recordCheck puts the verdict over the stored models and the work rows
// left pending into r and the profile report.
func (e *env) recordCheck(r *result, check workload.Check, pending int64) {
	r.Skipped, r.DoubleApplied, r.PendingAfter, r.Checked = check.Skipped, check.DoubleApplied, pending, true
	fmt.Fprintf(e.report, "\ncheck: %s, %d work rows pending\n", check, pending)
}

// runRaw measures the raw SQL pipeline's catch-up or ramp.
func runRaw(ctx context.Context, s spec) (*result, error) {
	if s.Scenario == scenarioRamp && s.Backend == "postgres" {
		return rampRaw(ctx, s)
	}
	if s.Scenario != scenarioCatchup || s.Backend != "postgres" {
		return nil, fmt.Errorf("the raw pipeline runs the PostgreSQL catch-up and ramp only")
	}
	e, err := newEnv(ctx, s)
	if err != nil {
		return nil, err
	}
	defer e.close()
	r := newResult(s)
	pool, err := e.pool(ctx, max(s.Workers, s.Appenders))
	if err != nil {
		return r, err
	}
	if err := raw.Setup(ctx, e.admin, s.Schema); err != nil {
		return r, fmt.Errorf("creating the raw schema: %w", err)
	}
	t0 := time.Now()
	streams, err := raw.Seed(ctx, pool, s.Schema, s.Events, s.Streams, s.Perspectives, s.AppendBatch, s.Appenders)
	if err != nil {
		return r, fmt.Errorf("seeding: %w", err)
	}
	r.SeedSeconds = time.Since(t0).Seconds()
	r.SeedEventsPerS = float64(s.Events) / r.SeedSeconds
	if _, err := e.admin.Exec(ctx, "ANALYZE "+quoted(s.Schema)+".work, "+quoted(s.Schema)+".events"); err != nil {
		return r, err
	}
	if err := warm(ctx, pool); err != nil {
		return r, err
	}
	hs := heads(s)
	var stats raw.Stats
	target := int64(s.Events * s.Perspectives)
	stop := make(chan struct{})
	go progress(ctx, stop, s.name(), func() string {
		return fmt.Sprintf("applied %d/%d work rows, %d claims, %d deferred", stats.Applied.Load(), target, stats.Claims.Load(), stats.Deferred.Load())
	})
	ph, err := e.startPhase(ctx)
	if err != nil {
		return r, err
	}
	doneAt, err := raw.Run(ctx, raw.Options{
		Pool: pool, Schema: s.Schema, Streams: streams, Heads: hs,
		Perspectives: s.Perspectives, Workers: s.Workers,
	}, &stats)
	close(stop)
	r.Events, r.WorkRows = int64(s.Events), stats.Applied.Load()
	ph.end(r, r.Events)
	r.Deferred = stats.Deferred.Load()
	ph.report(ctx, r.Events)
	if err != nil {
		return r, err
	}
	streamLatencies(r, doneAt)
	check, pending, err := raw.Check(ctx, e.admin, s.Schema, streams, hs, s.Perspectives)
	if err != nil {
		return r, fmt.Errorf("checking: %w", err)
	}
	e.recordCheck(r, check, pending)
	return r, nil
}

// runRiver measures River working one no-op job per work row, in the
// catch-up or the ramp.
func runRiver(ctx context.Context, s spec) (*result, error) {
	if s.Scenario == scenarioRamp && s.Backend == "postgres" {
		return rampRiver(ctx, s)
	}
	if s.Scenario != scenarioCatchup || s.Backend != "postgres" {
		return nil, fmt.Errorf("the River reference runs the PostgreSQL catch-up and ramp only")
	}
	e, err := newEnv(ctx, s)
	if err != nil {
		return nil, err
	}
	defer e.close()
	r := newResult(s)
	if err := riverref.Setup(ctx, e.admin, s.Schema); err != nil {
		return r, fmt.Errorf("migrating River: %w", err)
	}
	opts := riverref.Options{Schema: s.Schema, Heads: heads(s), Perspectives: s.Perspectives, Workers: s.Workers, ClientDefaults: s.RiverDefaults}
	for range s.Instances {
		p, err := e.pool(ctx, s.Pool)
		if err != nil {
			return r, err
		}
		opts.Pools = append(opts.Pools, p)
	}
	t0 := time.Now()
	total, err := riverref.Seed(ctx, opts)
	if err != nil {
		return r, fmt.Errorf("inserting jobs: %w", err)
	}
	r.SeedSeconds = time.Since(t0).Seconds()
	r.SeedEventsPerS = float64(s.Events) / r.SeedSeconds
	if err := warm(ctx, opts.Pools...); err != nil {
		return r, err
	}
	var stats riverref.Stats
	stop := make(chan struct{})
	go progress(ctx, stop, s.name(), func() string {
		return fmt.Sprintf("worked %d/%d jobs", stats.Worked.Load(), total)
	})
	ph, err := e.startPhase(ctx)
	if err != nil {
		return r, err
	}
	r.Events, r.WorkRows = int64(s.Events), int64(total)
	doneAt, err := riverref.Run(ctx, opts, total, &stats, func() { ph.end(r, r.Events) })
	close(stop)
	ph.report(ctx, r.Events)
	if err != nil {
		return r, err
	}
	streamLatencies(r, doneAt)
	return r, nil
}
