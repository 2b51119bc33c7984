package faults

import (
	"context"
	"fmt"
	"time"

	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// scenario is one fault the suite injects, with what it may cost.
type scenario struct {
	name  string
	about string
	// workers is how many worker processes the run starts.
	workers int
	// budget is the longest recovery that passes: how long the healthy
	// lag may stay above the threshold after the injection.
	budget time.Duration
	// inject injects the fault, and takes the scenario's further steps;
	// failed steps are findings of the run (see run.find).
	inject func(ctx context.Context, r *run) error
}

// eventFaultBudget is the recovery budget of a bad event: its own stream
// waits for it, but the healthy lag measures the other streams, which must
// not wait at all; the budget absorbs a busy machine's noise.
const eventFaultBudget = 3 * time.Second

// scenarios lists every scenario, in the order the suite runs them.
var scenarios = []scenario{
	{
		name: "none", about: "no fault: the control run", workers: 3, budget: 5 * time.Second,
		inject: func(context.Context, *run) error { return nil },
	},
	{
		name: "kill", about: "kill -9 of the worker holding the most streams", workers: 3, budget: staleThreshold + 10*time.Second,
		inject: injectKill,
	},
	{
		name: "terminate", about: "pg_terminate_backend of every connection of the worker holding the most streams", workers: 3, budget: 10 * time.Second,
		inject: injectTerminate,
	},
	{
		name: "pg-restart-fast", about: "pg_ctl restart -m fast while appending", workers: 3, budget: 15 * time.Second,
		inject: func(ctx context.Context, r *run) error { return r.restartPostgres(ctx, pgtest.ShutdownFast) },
	},
	{
		name: "pg-restart-immediate", about: "pg_ctl restart -m immediate (a crash) while appending", workers: 3, budget: 15 * time.Second,
		inject: func(ctx context.Context, r *run) error { return r.restartPostgres(ctx, pgtest.ShutdownImmediate) },
	},
	{
		name: "hang-ctx", about: "an apply that blocks until its context is done", workers: 3, budget: eventFaultBudget,
		inject: injectEventFault(FaultHangCtx),
	},
	{
		name: "hang", about: "an apply that blocks ignoring its context", workers: 3, budget: eventFaultBudget,
		inject: injectEventFault(FaultHang),
	},
	{
		name: "poison", about: "an apply that returns an error", workers: 3, budget: eventFaultBudget,
		inject: injectEventFault(FaultPoison),
	},
	{
		name: "undecodable", about: "a payload that does not decode into the event type", workers: 3, budget: eventFaultBudget,
		inject: injectEventFault(FaultUndecodable),
	},
	{
		name: "requeue", about: "poison, a later event, a late event below the cursor, then a deploy with the fix (new generation) that requeues it", workers: 3, budget: 10 * time.Second,
		inject: injectRequeue,
	},
	{
		name: "abandon", about: "kill -9 of one of 5 workers: 4 survivors abandon it at once", workers: 5, budget: staleThreshold + 10*time.Second,
		inject: injectKill,
	},
}

// Scenarios returns the names of the scenarios, in the order the suite runs
// them, each with a one-line description.
func Scenarios() [][2]string {
	out := make([][2]string, len(scenarios))
	for i, s := range scenarios {
		out[i] = [2]string{s.name, s.about}
	}
	return out
}

func scenarioNamed(name string) (scenario, bool) {
	for _, s := range scenarios {
		if s.name == name {
			return s, true
		}
	}
	return scenario{}, false
}

func injectKill(ctx context.Context, r *run) error {
	p, err := r.busiest(ctx)
	if err != nil {
		return err
	}
	p.kill()
	r.note("killed %s (instance %s) with SIGKILL", p.name, p.instanceID)
	return nil
}

func injectTerminate(ctx context.Context, r *run) error {
	p, err := r.busiest(ctx)
	if err != nil {
		return err
	}
	var n int
	if err := r.suite.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, p.name).Scan(&n); err != nil {
		return fmt.Errorf("terminating the connections of %s: %w", p.name, err)
	}
	if n == 0 {
		return fmt.Errorf("%s has no connection to terminate", p.name)
	}
	r.note("terminated %d connections of %s (instance %s)", n, p.name, p.instanceID)
	return nil
}

func (r *run) restartPostgres(ctx context.Context, mode pgtest.ShutdownMode) error {
	start := time.Now()
	if err := r.suite.cluster.Restart(ctx, mode); err != nil {
		return err
	}
	r.note("pg_ctl restart -m %s took %s", mode, time.Since(start).Round(10*time.Millisecond))
	return nil
}

// injectEventFault appends one event carrying fault to the fault stream.
func injectEventFault(fault string) func(context.Context, *run) error {
	return func(ctx context.Context, r *run) error {
		_, _, err := r.injectFault(ctx, fault)
		return err
	}
}

// injectRequeue: a poison event is dead-lettered; a later event of its
// stream must still be applied; then the workers are replaced by a new
// generation with the fix, which must requeue the dead letter (else the
// scenario requeues it as an operator would); in the end the stream's
// models must equal a replay of all its events in order.
func injectRequeue(ctx context.Context, r *run) error {
	stream, version, err := r.injectFault(ctx, FaultPoison)
	if err != nil {
		return err
	}
	r.mustApply[eventKey{stream, version}] = true
	r.replayed = append(r.replayed, stream)

	deadLetters := func(ctx context.Context, dead bool) ([]ports.DeadLetter, error) {
		dls, err := r.store.DeadLettersList(ctx, &ports.DeadLettersListParams{StreamID: stream})
		if err != nil {
			return nil, err
		}
		var out []ports.DeadLetter
		for _, dl := range dls {
			if dl.EventVersion == version && isDead(dl) == dead {
				out = append(out, dl)
			}
		}
		return out, nil
	}
	if err := r.waitFor(ctx, r.suite.cfg.StepWait, func(ctx context.Context) (bool, error) {
		dls, err := deadLetters(ctx, true)
		return len(dls) == len(Perspectives), err
	}); err != nil {
		r.find(Finding{Check: CheckStep, Stream: stream, Version: version,
			Detail: fmt.Sprintf("the poison event was not dead-lettered by every perspective: %v", err)})
		return nil
	}
	r.note("poison event %d of stream %s dead-lettered after %s", version, stream, time.Since(r.t0).Round(100*time.Millisecond))

	// A later event, one version past a gap, must be applied past the dead
	// letter; then a late event fills the gap, below the cursor: the rewind
	// it causes replays history that holds the dead letter, and must leave
	// it out and complete.
	lctx, cancel := context.WithTimeout(ctx, r.suite.cfg.StepWait)
	defer cancel()
	_, later, err := r.app.injectEventAt(lctx, faultStream, "", 0, placePastGap)
	if err != nil {
		return fmt.Errorf("appending the event after the dead letter: %w", err)
	}
	if err := r.waitFor(ctx, r.suite.cfg.StepWait, func(ctx context.Context) (bool, error) {
		return r.appliedThrough(ctx, stream, later)
	}); err != nil {
		r.find(Finding{Check: CheckPairContinues, Stream: stream, Version: later,
			Detail: fmt.Sprintf("the event after the dead letter was not applied by every perspective: %v", err)})
	}
	_, late, err := r.app.injectEventAt(lctx, faultStream, "", 0, later-1)
	if err != nil {
		return fmt.Errorf("appending the late event: %w", err)
	}
	if err := r.waitFor(ctx, r.suite.cfg.StepWait, func(ctx context.Context) (bool, error) {
		return r.settled(ctx, stream)
	}); err != nil {
		r.find(Finding{Check: CheckPairContinues, Stream: stream, Version: late,
			Detail: fmt.Sprintf("the late event below the dead letter's pair cursor was not applied by a rewind: %v", err)})
	}
	r.note("late event %d applied by a rewind past the dead letter", late)

	// The deploy with the fix, rolling: the new generation starts before
	// the old one stops, as a deploy would.
	old := r.live()
	if _, err := r.startWorkers(ctx, len(old), fixedGeneration, true); err != nil {
		return fmt.Errorf("deploying generation %s: %w", fixedGeneration, err)
	}
	r.stopProcesses(old)
	r.note("deployed generation %s with the fix: stopped %d workers, started %d", fixedGeneration, len(old), len(old))

	if err := r.waitFor(ctx, r.suite.cfg.StepWait, func(ctx context.Context) (bool, error) {
		dls, err := deadLetters(ctx, true)
		return len(dls) == 0, err
	}); err != nil {
		r.find(Finding{Check: CheckGenerationRequeue, Stream: stream, Version: version,
			Detail: fmt.Sprintf("generation %s did not requeue the dead letters of generation %s: %v; requeueing them with DeadLetterRequeue",
				fixedGeneration, failedGeneration, err)})
		dls, err := deadLetters(ctx, true)
		if err != nil {
			return fmt.Errorf("listing the dead letters to requeue: %w", err)
		}
		for _, dl := range dls {
			if err := r.store.DeadLetterRequeue(ctx, &ports.DeadLetterRequeueParams{ID: dl.ID, Generation: fixedGeneration}); err != nil {
				return fmt.Errorf("requeueing dead letter %s: %w", dl.ID, err)
			}
		}
	}
	return nil
}
