package faults

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

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
	// after is how long, at least, the appends go on once inject
	// returned: a fault whose end (a resume, a released lock) comes late
	// in the run is then measured under traffic, as it would meet it.
	after time.Duration
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
	{
		// The others abandon the frozen worker after the stale threshold
		// and drain its streams, as after a kill (5s of margin for the
		// claims and the catch-up, as kill needs about 5.2s in all); the
		// budget ends before the resume, so a resumed worker that holds
		// streams back past the lag threshold fails the run.
		name: "pause", about: fmt.Sprintf("SIGSTOP of the worker holding the most streams, in a claim, for %s (past the stale threshold), then SIGCONT", pauseFor),
		workers: 3, budget: staleThreshold + 5*time.Second, after: afterFaultEnd,
		inject: injectPause,
	},
	{
		// Every claim, fetch, heartbeat and append waits for the lock; once
		// it is released nothing should wait any longer than the backlog
		// it left takes to apply: the lock's duration, plus the margin of
		// the event faults.
		name: "lease-lock", about: fmt.Sprintf("LOCK TABLE vantage_active_streams IN ACCESS EXCLUSIVE MODE for %s, then released", leaseLockFor),
		workers: 3, budget: leaseLockFor + eventFaultBudget, after: afterFaultEnd,
		inject: injectLeaseLock,
	},
	{
		// A cut costs the pair one infrastructure retry: the default
		// Retries.Infra waits about 100ms, 150ms, 225ms (±50%) for the three
		// cuts, under 1s in all; then the write itself takes slowWrite;
		// plus the margin of the event faults.
		name: "projection-cut", about: fmt.Sprintf("pg_terminate_backend of the connection of %d healthy events' projection writes, %d times each", slowEvents, cutsPerEvent),
		workers: 3, budget: slowWrite + time.Second + eventFaultBudget,
		inject: injectProjectionCut,
	},
}

// Parameters of the pause, lease-lock and projection-cut scenarios.
const (
	// pauseFor is how long a paused worker stays frozen: past the stale
	// threshold with room to spare, so the others have abandoned it and
	// taken its streams well before it resumes; about the length of a
	// virtual machine's suspension or a process stopped by mistake.
	pauseFor = 12 * time.Second
	// claimWatch bounds the wait for a claim of the worker to pause, and
	// claimPoll paces the looks: a claim takes milliseconds.
	claimWatch = 5 * time.Second
	claimPoll  = 2 * time.Millisecond
	// resumeWithin bounds the time from a worker's resume to its first
	// save: an instance that heartbeats but applies nothing for longer is
	// as stuck as one the others would abandon.
	resumeWithin = staleThreshold
	// leaseLockFor is how long the lease table stays locked: a long
	// migration's ALTER TABLE, or a session that took a lock and
	// stalled; longer than the stale threshold, so heartbeats that wait
	// for it let every instance look stale.
	leaseLockFor = 8 * time.Second
	// afterFaultEnd is how long, at least, the appends go on after a
	// pause or a lock ends.
	afterFaultEnd = 6 * time.Second
	// slowWrite is how long the projection write of a projection-cut
	// event sleeps in PostgreSQL (Step.WriteMS): well within ApplyTimeout
	// (2s), long enough to find the write and cut its connection.
	slowWrite = time.Second
	// slowEvents is how many healthy events get slow writes, each in a
	// stream of its own (never the fault stream: the healthy lag and the
	// delays measure their streams).
	slowEvents = 3
	// cutsPerEvent is how many times the suite cuts each slow write's
	// connection: Retries.MaxEventAttempts, so an engine that charges
	// the cuts to the event dead-letters it.
	cutsPerEvent = maxAttempts
	// cutPoll is how often the suite looks for slow writes in flight.
	cutPoll = 50 * time.Millisecond
)

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
	in, err := r.app.injectEventAt(lctx, faultStream, Step{}, placePastGap)
	later := in.version
	if err != nil {
		return fmt.Errorf("appending the event after the dead letter: %w", err)
	}
	if err := r.waitFor(ctx, r.suite.cfg.StepWait, func(ctx context.Context) (bool, error) {
		return r.appliedThrough(ctx, stream, later)
	}); err != nil {
		r.find(Finding{Check: CheckPairContinues, Stream: stream, Version: later,
			Detail: fmt.Sprintf("the event after the dead letter was not applied by every perspective: %v", err)})
	}
	in, err = r.app.injectEventAt(lctx, faultStream, Step{}, later-1)
	late := in.version
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

// injectPause freezes the busiest worker for pauseFor, in the middle of a
// claim when it catches one, checks that the others abandoned it and hold
// its streams, resumes it, and checks that it applies again within
// resumeWithin.
func injectPause(ctx context.Context, r *run) error {
	p, err := r.busiest(ctx)
	if err != nil {
		return err
	}
	inClaim, err := r.awaitClaim(ctx, p)
	if err != nil {
		return err
	}
	if err := p.pause(); err != nil {
		return err
	}
	// The fault starts here, not when the watch for a claim did: the
	// recovery is measured from the pause.
	r.t0 = time.Now()
	resumed := false
	defer func() {
		if !resumed {
			_ = p.resume()
		}
	}()
	if inClaim {
		r.note("paused %s (instance %s) with SIGSTOP, its claim in flight", p.name, p.instanceID)
	} else {
		r.note("paused %s (instance %s) with SIGSTOP; no claim of it seen within %s", p.name, p.instanceID, claimWatch)
	}
	if err := sleep(ctx, pauseFor); err != nil {
		return err
	}
	var registered, held int
	if err := r.suite.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM `+r.table("vantage_instances")+` WHERE instance_id = $1),
		(SELECT count(*) FROM `+r.table("vantage_active_streams")+` WHERE instance_id = $1)`, p.instanceID).Scan(&registered, &held); err != nil {
		return fmt.Errorf("reading the paused worker's registration: %w", err)
	}
	if registered > 0 || held > 0 {
		r.find(Finding{Check: CheckTakeover, Detail: fmt.Sprintf("after %s frozen (stale threshold %s), %s is still registered (%t) or holds %d streams; its connections: %s",
			pauseFor, staleThreshold, p.name, registered > 0, held, r.sessionsOf(ctx, p))})
	}
	if err := p.resume(); err != nil {
		return err
	}
	resumed = true
	at := time.Now()
	r.note("resumed %s with SIGCONT after %s", p.name, time.Since(r.t0).Round(100*time.Millisecond))
	var first time.Time
	if err := r.waitFor(ctx, resumeWithin, func(ctx context.Context) (bool, error) {
		t, ok, err := firstMoveBy(ctx, r.suite.pool, r.schema, p.name, at)
		first = t
		return ok, err
	}); err != nil {
		r.find(Finding{Check: CheckResume, Detail: fmt.Sprintf("%s saved nothing within %s of its resume: %v", p.name, resumeWithin, err)})
		return nil
	}
	r.note("%s saved again %s after its resume", p.name, first.Sub(at).Round(10*time.Millisecond))
	return nil
}

// sessionsOf describes p's connections as the server sees them, for a
// finding: state, the age of the transaction and of the state, the locks
// held on the lease table (a row lock shows as the table's RowShareLock or
// RowExclusiveLock) and the last statement, cut short (the clock CTE
// that opens most of the adapter's statements left out). A connection idle
// in transaction that holds such a lock is what keeps the others from
// taking p's streams while it is frozen (abandonment skips locked rows).
func (r *run) sessionsOf(ctx context.Context, p *process) string {
	rows, err := r.suite.pool.Query(ctx, `SELECT s.pid, coalesce(s.state, ''),
			coalesce(extract(epoch FROM clock_timestamp() - s.xact_start), -1)::float8,
			coalesce(extract(epoch FROM clock_timestamp() - s.state_change), -1)::float8,
			coalesce((SELECT string_agg(l.mode, ',' ORDER BY l.mode) FROM pg_locks l
			          WHERE l.pid = s.pid AND l.granted AND l.relation = to_regclass($2)), ''),
			left(regexp_replace(regexp_replace(s.query, '\s+', ' ', 'g'), '^WITH clock AS \(.*? AS now\), ', 'WITH clock AS (...), '), 160)
		FROM pg_stat_activity s WHERE s.application_name = $1 ORDER BY s.pid`, p.name, r.table("vantage_active_streams"))
	if err != nil {
		return fmt.Sprintf("(reading pg_stat_activity: %v)", err)
	}
	var (
		b                  strings.Builder
		pid                int
		state, locks, text string
		xactAge, stateAge  float64
	)
	_, err = pgx.ForEachRow(rows, []any{&pid, &state, &xactAge, &stateAge, &locks, &text}, func() error {
		if state == "idle" {
			return nil // no transaction, no lock
		}
		fmt.Fprintf(&b, " [pid %d %s for %.1fs, transaction %.1fs, locks on vantage_active_streams %q: %s]", pid, state, stateAge, xactAge, locks, text)
		return nil
	})
	if err != nil {
		return fmt.Sprintf("(reading pg_stat_activity: %v)", err)
	}
	if b.Len() == 0 {
		return "none in a transaction"
	}
	return b.String()[1:]
}

// awaitClaim watches p's connections until one runs a claim (the
// statement that calls vantage_claim_streams) and returns true then, or
// false after claimWatch. Frozen then, the process finds the claim's
// answer waiting on resume: the claim took the whole pause, which is what
// a pause at any instant does to whatever the process was waiting for,
// and the claim loop is where it matters most.
func (r *run) awaitClaim(ctx context.Context, p *process) (bool, error) {
	deadline := time.Now().Add(claimWatch)
	for time.Now().Before(deadline) {
		var n int
		if err := r.suite.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'active' AND strpos(query, 'vantage_claim_streams(') > 0`, p.name).Scan(&n); err != nil {
			return false, fmt.Errorf("watching the claims of %s: %w", p.name, err)
		}
		if n > 0 {
			return true, nil
		}
		if err := sleep(ctx, claimPoll); err != nil {
			return false, err
		}
	}
	return false, nil
}

// injectLeaseLock holds an ACCESS EXCLUSIVE lock on the lease table
// (vantage_active_streams) for leaseLockFor, as a long ALTER TABLE would:
// every claim, fetch, heartbeat and append that touches the table waits.
func injectLeaseLock(ctx context.Context, r *run) error {
	tx, err := r.suite.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning the lock's transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// The lock waits for the transactions on the table to end, and blocks
	// every newcomer meanwhile: a bound keeps a stuck one from stalling
	// the run.
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
		return fmt.Errorf("bounding the lock wait: %w", err)
	}
	start := time.Now()
	if _, err := tx.Exec(ctx, `LOCK TABLE `+r.table("vantage_active_streams")+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		return fmt.Errorf("locking vantage_active_streams: %w", err)
	}
	locked := time.Now()
	r.note("locked vantage_active_streams in ACCESS EXCLUSIVE mode (after waiting %s)", locked.Sub(start).Round(time.Millisecond))
	if err := sleep(ctx, leaseLockFor); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("releasing the lock: %w", err)
	}
	r.note("released the lock after %s", time.Since(locked).Round(100*time.Millisecond))
	return nil
}

// slowEvent is a healthy event whose projection write the suite cuts.
type slowEvent struct {
	injected
	cuts     int
	attempts int    // the most attempts its projection row showed
	cause    string // the error recorded with them
	done     bool   // written, or dead-lettered
}

// injectProjectionCut appends slowEvents healthy events whose projection
// writes are slow (Step.WriteMS), each in a stream of its own, and
// terminates the connection of each write in flight cutsPerEvent times;
// then it lets the writes run. The events must end applied, never
// dead-lettered (the checks), and charged no attempt (CheckCharged: the
// projection's work rows are read while they are pending).
func injectProjectionCut(ctx context.Context, r *run) error {
	slow := map[int64]*slowEvent{}
	for i := range slowEvents {
		in, err := r.app.injectEvent(ctx, faultStream+1+i, Step{WriteMS: slowWrite.Milliseconds()})
		if err != nil {
			return fmt.Errorf("appending a slow event: %w", err)
		}
		slow[in.seq] = &slowEvent{injected: in}
		r.note("appended a healthy event with a slow projection write: stream %s version %d (seq %d)", in.stream, in.version, in.seq)
	}
	deadline := time.Now().Add(r.suite.cfg.StepWait)
	for {
		if err := r.cutSlowWrites(ctx, slow); err != nil {
			return err
		}
		done := true
		for _, e := range slow {
			if err := r.readSlowEvent(ctx, e); err != nil {
				return err
			}
			done = done && e.done && e.cuts == cutsPerEvent
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, e := range slow {
				fmt.Fprintf(&b, " [stream %s version %d: cut %d times, written or dead-lettered %t]", e.stream, e.version, e.cuts, e.done)
			}
			r.find(Finding{Check: CheckStep, Detail: fmt.Sprintf("the slow writes were not all cut %d times and then done within %s:%s",
				cutsPerEvent, r.suite.cfg.StepWait, b.String())})
			break
		}
		if err := sleep(ctx, cutPoll); err != nil {
			return err
		}
	}
	for _, e := range slow {
		if e.attempts > 0 {
			r.find(Finding{Check: CheckCharged, Stream: e.stream, Perspective: RowsProjection, Version: e.version,
				Detail: fmt.Sprintf("the connection of this healthy event's write was cut %d times; the event was charged %d attempts (error %q)",
					e.cuts, e.attempts, e.cause)})
		}
	}
	return nil
}

// cutSlowWrites terminates the backends running the slow write of an
// event of slow that was cut fewer than cutsPerEvent times.
func (r *run) cutSlowWrites(ctx context.Context, slow map[int64]*slowEvent) error {
	rows, err := r.suite.pool.Query(ctx, `SELECT pid, query FROM pg_stat_activity
		WHERE state = 'active' AND pid <> pg_backend_pid() AND starts_with(query, $1)`, slowWriteMarker)
	if err != nil {
		return fmt.Errorf("finding the slow writes: %w", err)
	}
	type inFlight struct {
		pid int
		seq int64
	}
	var found []inFlight
	var (
		pid   int
		query string
	)
	if _, err := pgx.ForEachRow(rows, []any{&pid, &query}, func() error {
		if seq, ok := slowWriteSeq(query); ok {
			found = append(found, inFlight{pid, seq})
		}
		return nil
	}); err != nil {
		return fmt.Errorf("finding the slow writes: %w", err)
	}
	for _, f := range found {
		e := slow[f.seq]
		if e == nil || e.cuts >= cutsPerEvent {
			continue
		}
		var cut bool
		if err := r.suite.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, f.pid).Scan(&cut); err != nil {
			return fmt.Errorf("terminating backend %d: %w", f.pid, err)
		}
		if cut {
			e.cuts++
			r.note("cut the connection of the write of stream %s version %d (%d of %d)", e.stream, e.version, e.cuts, cutsPerEvent)
		}
	}
	return nil
}

// readSlowEvent reads the attempts of e's pending projection row, and
// whether e is written or dead-lettered for the projection.
func (r *run) readSlowEvent(ctx context.Context, e *slowEvent) error {
	var (
		attempts *int
		cause    *string
	)
	err := r.suite.pool.QueryRow(ctx, `SELECT
		(SELECT max(attempts) FROM `+r.table("vantage_work")+` WHERE stream_id = $1 AND perspective = $2 AND event_version = $3 AND processed_at IS NULL),
		(SELECT max(error) FROM `+r.table("vantage_work")+` WHERE stream_id = $1 AND perspective = $2 AND event_version = $3 AND processed_at IS NULL),
		EXISTS (SELECT 1 FROM `+r.table(RowsTable)+` WHERE stream_id = $1 AND version = $3)
		OR EXISTS (SELECT 1 FROM `+r.table("vantage_dead_letters")+` WHERE stream_id = $1 AND perspective = $2 AND event_version = $3)`,
		e.stream, RowsProjection, e.version).Scan(&attempts, &cause, &e.done)
	if err != nil {
		return fmt.Errorf("reading the projection row of stream %s version %d: %w", e.stream, e.version, err)
	}
	if attempts != nil && *attempts > e.attempts {
		e.attempts = *attempts
		if cause != nil {
			e.cause = *cause
		}
	}
	return nil
}
