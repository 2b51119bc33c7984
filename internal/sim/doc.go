// Package sim is a seeded simulator of the engine: it runs several
// core.Workers over one backend through random schedules of operations
// and faults, and then checks the guarantees the engine promises
// (core/doc.go, README and docs/, DESIGN decisions 2, 5-11) as invariants over what
// happened. sim_test.go is its runner (go test ./internal/sim; make sim).
//
// # A seed
//
// One seed drives everything: a math/rand/v2 PCG seeded with it draws the
// engine's options (Batched or Instant completions, snapshots, rewinds on
// or off, model cache sizes, batch sizes, attempts, every retry, lease,
// staleness and timeout duration, scaled down like vantagetest.Options),
// the number of instances (2 to 5), the streams, and the schedule of the
// fault phase: what is appended when, and which faults and operations
// happen when. One seed in three focuses on one instance fault (a lock on
// the lease table, most often, or a blocked backend, a failing one, a
// crash, a clock jump, a graceful stop), and half the other seeds with
// Instant completions on failing reports: it is the only one, with no
// rebuild, no retirement and no hung event, so that the events appended
// after it are held to the quiet bound, and nothing but the instance
// itself can resolve what it left undone (-sim.focus forces a kind). A
// replay of a seed repeats that schedule. It does not repeat the
// interleaving of goroutines: the engine is concurrent, real time paces
// the simulated clock, and which instance is live, which dead letter
// exists, which claim wins, all differ between two runs of one seed. A
// seed that failed once therefore may pass on replay; run it again
// (-sim.repeat) and read its trace, which a failing run prints: the
// options, every operation and fault with its sim time (and the real time
// elapsed), the engine's notable events (dead letters, rewinds, rebuilds,
// abandoned applies) and its latest warnings.
//
// # The world
//
// Time is a clocktest.Fake that a driver goroutine advances by a few
// milliseconds of sim time every real millisecond (pacing, not
// synchronization: a loaded machine delivers fewer ticks, so sim time
// slows down with the engine); clock jumps move it far ahead at once.
// Every duration the checks use is sim time. The clock is the engine's
// Options.Clock and the memory backend's clock.
//
// The backend is one memory.Store, or one migrated schema of the test
// database (internal/pgtest) with a postgres.Store on its own pool per
// instance. Each instance sees it through its own fault wrapper of every
// port of ports.Backend, whose mode is healthy, failing (calls fail with
// an error wrapping ports.ErrTransient, some before they reach the
// backend, some after they took effect: a lost acknowledgement), blocked
// (calls wait until the fault ends or their context is done: a lock, a
// paused process) or dead (a crash: every call fails at once). A failing
// or blocked wrapper may be limited to some calls: a lock on the lease
// table holds only the calls that write leases or instance rows, and
// failing reports fail only WorkComplete. The wrapper records when the
// instance last called WorkClaim. The memory backend has no
// ports.TxModelStore; the simulator provides one (a buffered transaction
// committed with the model save under one lock).
//
// The application registers three event types and three perspectives in
// one core.Registry: alpha (a model over every type), beta (a model over
// one type only, so subscriptions per type matter) and gamma (a table
// projection over two types, writing one row per event into a table of
// the run's schema, or the simulated store's). A model records each
// applied event with the "code version" in force when it was applied.
// The apply functions consult the fault plan of their event: healthy;
// flaky (fails its first k applies, possibly on one instance only);
// poison (always fails, naming the event); panicking; hung honouring its
// context (a timeout); hung ignoring it for a while (an abandonment);
// undecodable (its payload does not decode); and for the projection's
// writes: a lost connection (an infrastructure error), a poison write, a
// hung write. Every apply is logged, and its input model checked on the
// spot.
//
// Appends go through a live instance's wrapper: ordinary appends of one
// to three events (Registry.Append, retried safely after transient
// errors), late imports with explicit versions that leave gaps filled
// later (the filled event lands below the cursors: a rewind, or a dead
// letter with reason late when rewinds are off), and on PostgreSQL
// transactional appends of several streams committed in reverse order.
// Streams are clean (never a bad event: the delay checks use them), dirty
// or imported.
//
// During the fault phase (a few seconds of sim time) the schedule crashes
// instances without a flush (their wrapper dies, then Stop runs with a
// context already done; they never deregister), restarts them, stops and
// starts them gracefully (sometimes stopping one right after it started),
// makes an instance's backend fail or block for a while (sometimes past
// StaleInstanceThreshold), makes only its completions fail for a while
// (its heartbeats, claims and renewals go through, so it keeps its
// streams), locks the lease table (early on, in half the unfocused seeds
// besides their other faults), and then appends to clean streams three
// times as fast as before for as long as the lock or block lasted, pauses
// an instance right before it moves to dead letters an event that fails
// on it only (its lease renewals and fetches held, its claims slowed, a
// third instance stopped or the only peer restarted so that the
// partitions are dealt out again; the move lands once a peer that took
// the stream saved the event, before that peer completes its row), jumps
// the clock past leases and staleness, deploys new apply functions and
// rebuilds a perspective (Worker.Rebuild on an instance, or a request
// through Admin.RebuildRequest that the running workers carry out), fixes
// poison events and requeues their dead letters, and retires and revives
// a perspective. Then every fault ends (dead instances stay dead or
// restart), the clock runs on, a revived perspective is rebuilt as an
// operator must, and the simulator waits, bounded in sim time, until
// every live worker is idle, no work row is pending, no cursor waits for
// a rewind and no rebuild request is pending or running.
//
// # Invariants
//
//  1. Exactly once, in order: every pair's final state (its model, or the
//     table projection's rows) holds exactly the events of its stream of
//     the types it handles, minus its dead letters (dead or ignored), in
//     version order, each once: a clean replay. A perspective that was
//     retired holds that up to its cursor, and misses only events appended
//     while it was retired. On the spot, every apply is given a model whose
//     versions increase and are all below its event's.
//  2. No model from a stale base: after a successful rebuild of a pair
//     asked for at code version C, every entry of the pair's final state was
//     applied under code C or later.
//  3. Nothing pending, nothing parked: no work row pending, no cursor
//     waiting for a rewind (rewinds on) or failed without a dead letter
//     past it, no rebuild request pending or running, every live worker
//     idle, Worker.WaitForStream returns for every stream and perspective
//     (up to its newest event not dead-lettered) within a bound, every Stop
//     returns.
//  4. Dead letters carry their cause, and infrastructure errors are never
//     the event's: a dead letter's reason and error match its event's fault
//     (poison: failed with the error naming it; hung: timed_out;
//     undecodable: undecodable; late with rewinds off: late; attempts used
//     up by takeovers only after crashes); no event fails more than its
//     fault and the takeovers allow; no dead letter names an event its pair
//     holds, at the end nor on the spot (no save holds an event moved to
//     dead letters and not requeued since); no failure reported for an
//     event carries a backend's error.
//  5. Bounded delay: an event of a clean stream appended while nothing
//     disturbed the instances (no fault, hung apply, restart, rebuild of
//     its perspective, until its bound) is applied by every perspective
//     within a quiet bound (the claim and poll cadences, the drain window,
//     Retries.Infra.Max and a second); one still waiting when the faults
//     ended, within the thresholds (StaleInstanceThreshold, heartbeat,
//     LeaseDuration, the rewind lock, the settle time of retries) after
//     the heal. A hung apply disturbs its instance's other streams only
//     while as many hung applies as it has drain consumers hold all of
//     them (each holds its consumer until it ends or is abandoned): those
//     times count as disturbed, and after the heal the bound counts from
//     their end. The worst delay is reported. Once calls of an instance
//     that a block or a lock held are let go during the fault phase, the
//     instance calls WorkClaim again, and then at least as often, within
//     its claim cadence (the longer of Claims.Interval and
//     Claims.NotifyHealthyInterval), the drain window and half a second,
//     for three such spans, unless something else happens to it or the
//     clock jumps meanwhile: the time a claim was held counts against
//     none of the claims after it, and the claim loop does not stall.
//  6. Stage receptors: PostPerspective fires for every (event,
//     perspective) whose final state holds the event, PostAllPerspectives
//     and PostLifecycle for every event all its perspectives hold (after a
//     crash, within a reconciliation of lifecycle orphans), PrePerspective
//     for every event some perspective holds, before its first apply, and
//     PostLifecycle after PostAllPerspectives; at least once, and exactly
//     once in a run without crashes (or faults that make peers abandon an
//     instance, or heartbeats of an instance further apart than the stale
//     threshold, as when the machine running the simulator starves it).
//     An event appended after a revival below a position the
//     perspective's saves reached before a retirement that dropped its
//     state is excused from its stages and from the delay bound: a
//     completion sent before the retirement may bring that position back,
//     and the replay that repairs the pair (or the revival's rebuild) then
//     applies the event as one the pair held (the documented limit of
//     DropState while instances run).
//  7. Rewind reports: a rewind's RewindInfo.New never counts an event that
//     a save held before the rewind began.
//
// # What is not simulated
//
// Interleavings are not replayed (see A seed). Processes and the network
// are not: a crash is a dead wrapper and a stopped Worker in the same
// process, a lost connection an error injected at the port boundary (on
// PostgreSQL, a projection's write terminates its own connection for
// real). The PostgreSQL server itself never fails. Clock skew between
// instances is not simulated (one clock). Detached receptors, queries
// (ModelQuery) and the operator tool are not exercised. Durations are
// scaled down, so the checks hold the engine to its guarantees with short
// thresholds, not to production timings.
package sim
