package sim

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// Config selects one simulation run.
type Config struct {
	// Seed drives every choice of the run.
	Seed uint64
	// Backend is Memory or Postgres.
	Backend string
	// Short makes the fault phase shorter (the smoke run of go test).
	Short bool
	// Calm makes a run without any fault or operation: appends only. A
	// calm run checks the simulator's own bounds.
	Calm bool
	// Focus, when set, makes every instance fault of the run one kind:
	// crash, stop, fail, block, lock (the lease table), jump or reports
	// (an instance's completions fail), and leaves
	// hung events out. Without it, one run in three draws a focus, a lock
	// or a block most often, and half the other runs with Instant
	// completions focus on reports.
	Focus string
	// Watch, when set, adds to the trace every completion, failure, fetch
	// and save of the streams whose id starts with it, to debug a seed.
	Watch string
}

// Result is what a run found.
type Result struct {
	Seed       uint64
	Backend    string
	Violations []Violation
	// Trace is the schedule as it ran: the options, every operation and
	// fault with its sim time, and the engine's notable events.
	Trace string
	// Logs are the engine's last warnings and errors.
	Logs string
	// Events counts the events stored; Applies the apply calls.
	Events  int
	Applies int
	// SimTime is how much sim time the run took, RealTime how much real
	// time.
	SimTime  time.Duration
	RealTime time.Duration
	// WorstDelay is the longest time an event checked by the delay
	// invariant waited for a perspective to apply it, and WorstWhat says
	// which.
	WorstDelay time.Duration
	WorstWhat  string
	// Shape sums up the run's options.
	Shape string
	// Notes are what the run observed that no invariant forbids but a
	// reader should know (stages that waited for the reconciliation).
	Notes []string
}

// Failed reports whether an invariant did not hold.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

// Summary is one line about the run.
func (r *Result) Summary() string {
	status := "ok"
	if r.Failed() {
		kinds := map[string]int{}
		for _, v := range r.Violations {
			kinds[v.Kind()]++
		}
		var parts []string
		for _, k := range sortedKeys(kinds) {
			parts = append(parts, fmt.Sprintf("%s:%d", k, kinds[k]))
		}
		status = fmt.Sprintf("FAILED (%s)", strings.Join(parts, " "))
	}
	if len(r.Notes) > 0 {
		status += fmt.Sprintf(" notes=%d", len(r.Notes))
	}
	return fmt.Sprintf("sim: backend=%s seed=%d %s events=%d applies=%d sim=%s real=%s worst-delay=%s [%s]",
		r.Backend, r.Seed, status, r.Events, r.Applies, r.SimTime.Round(time.Millisecond), r.RealTime.Round(time.Millisecond), r.WorstDelay.Round(time.Millisecond), r.Shape)
}

// Report is the full account of a failed run: the violations, then the
// trace.
func (r *Result) Report() string {
	var b strings.Builder
	for _, v := range r.Violations {
		b.WriteString(v.String())
		b.WriteByte('\n')
	}
	for _, n := range r.Notes {
		b.WriteString("note: " + n + "\n")
	}
	b.WriteString("--- trace\n")
	b.WriteString(r.Trace)
	if r.Logs != "" {
		b.WriteString("\n--- engine warnings (latest)\n")
		b.WriteString(r.Logs)
	}
	return b.String()
}

// instance is one incarnation of an engine instance in a slot: a Worker
// over its own fault wrapper.
type instance struct {
	slot    int
	name    string
	id      uuid.UUID
	worker  *core.Worker
	faults  *faults
	backend ports.Backend
	closeFn func()
	state   string // live, stopping, stopped, dead
}

// simStream is a stream of the run.
type simStream struct {
	id   uuid.UUID
	kind string // clean, dirty, import
}

// window is a disturbance: a fault or an operation during which (and for
// a settle time after which) events may wait longer than the quiet bound.
type window struct {
	from, to  time.Duration
	what      string
	persp     string // "" for every perspective
	crashLike bool   // may make peers abandon an instance (charging its events)
	infra     bool   // a backend fault: a crash, a failing or blocked backend, a lock
	inst      string // the instance whose consumers hung applies held ("" otherwise)
}

// world is one run: the backend, the instances, the clock that drives
// them, the schedule and what was observed.
type world struct {
	t      testing.TB
	cfg    Config
	p      params
	opts   core.Options
	rng    *rand.Rand // the schedule
	clock  *clocktest.Fake
	origin time.Time
	kit    kit
	table  table
	reg    *core.Registry
	plan   *plan
	rec    *recorder
	code   atomic.Int64
	logs   *logRing
	logger *slog.Logger
	pace   atomic.Int64 // sim nanoseconds per real millisecond
	ctx    context.Context
	cancel context.CancelFunc
	ops    sync.WaitGroup // operations running in the background
	healed atomic.Bool
	jumps  atomic.Int32  // clock jumps so far
	phase  time.Duration // when the fault phase began

	mu        sync.Mutex
	live      *rand.Rand // choices made while running
	slots     []*instance
	all       []*instance
	nextK     int64
	streams   []*simStream
	windows   []window
	rebuilt   []rebuildDone
	rewinds   []rewindDone
	requested []rebuildAsk
	retires   []retireSpan
	uuids     *rand.Rand
	// pauses are the instances paused at a move to dead letters, by the
	// row moved; movePauses counts the pauses of the run.
	pauses     map[uuid.UUID]*movePause
	movePauses int

	notes []string

	// Figures for the Result, set by the checks.
	eventsStored int
	worstDelay   time.Duration
	worstWhat    string
}

// rebuildAsk is a rebuild the simulator asked for, at a code version.
type rebuildAsk struct {
	persp   string
	streams []uuid.UUID // nil: all
	code    int64
	at      time.Duration
	matched map[uuid.UUID]bool
}

// rebuildDone is a pair an instance reported rebuilt (Hooks.OnRewind).
type rebuildDone struct {
	stream uuid.UUID
	persp  string
	at     time.Duration
	inst   string
}

// rewindDone is a rewind an instance reported (Hooks.OnRewind).
type rewindDone struct {
	info  core.RewindInfo
	start time.Duration
	at    time.Duration
	inst  string
}

// retireSpan is a time a perspective was retired.
type retireSpan struct {
	persp    string
	from, to time.Duration // to is when the revive returned (0: not yet)
	drop     bool          // the retirement dropped the perspective's state
}

func (w *world) now() time.Duration { return w.clock.Now().Sub(w.origin) }

// Run runs one seed and checks the invariants. t provides the PostgreSQL
// database (internal/pgtest) and the cleanups; the caller reports the
// result.
func Run(t testing.TB, cfg Config) *Result {
	realStart := time.Now()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x51ed))
	p := newParams(rng, cfg.Backend, cfg.Short)
	if cfg.Focus != "" {
		p.focus = cfg.Focus
		p.focused()
	}
	if cfg.Calm {
		p.episodes, p.rebuilds, p.requeues, p.retire, p.faultP, p.txAppends = 0, 0, 0, false, 0, 0
	}
	w := &world{
		t: t, cfg: cfg, p: p, rng: rng, plan: newPlan(),
		live:   rand.New(rand.NewPCG(cfg.Seed, 0x11fe)),
		uuids:  rand.New(rand.NewPCG(cfg.Seed, 0x1d)),
		logs:   newLogRing(200),
		pauses: map[uuid.UUID]*movePause{},
	}
	w.opts = newOptions(rng, &w.p)
	focusReports(rng, &w.p)
	// The clock starts at the wall time, so that PostgreSQL's own now()
	// (used for the rows the engine gives no time) and the sim clock agree
	// to within the run's length.
	w.clock = clocktest.NewFake()
	w.clock.Set(time.Now().UTC().Truncate(time.Millisecond))
	w.origin = w.clock.Now()
	w.rec = newRecorder(w.now)
	w.logger = slog.New(w.logs.handler())
	w.ctx, w.cancel = context.WithCancel(context.Background())
	defer w.cancel()
	res := &Result{Seed: cfg.Seed, Backend: cfg.Backend, Shape: shape(w.opts, w.p)}
	fail := func(err error) *Result {
		res.Violations = append(res.Violations, Violation{0, "setting up: " + err.Error()})
		res.Trace = w.rec.traceText()
		return res
	}
	switch cfg.Backend {
	case Memory:
		w.kit = newMemKit(w.clock)
	case Postgres:
		k, err := newPgKit(t, w.logger)
		if err != nil {
			return fail(err)
		}
		w.kit = k
	default:
		return fail(fmt.Errorf("unknown backend %q", cfg.Backend))
	}
	defer w.kit.close()
	w.table = w.kit.table()
	reg, err := w.newRegistry()
	if err != nil {
		return fail(err)
	}
	w.reg = reg
	w.rec.tracef("seed %d on %s\n%s", cfg.Seed, cfg.Backend, describeOptions(w.opts, w.p))

	w.pace.Store(int64(w.p.step))
	stopDrive := make(chan struct{})
	driven := make(chan struct{})
	go w.drive(stopDrive, driven)
	defer func() {
		close(stopDrive)
		<-driven
	}()

	violations := w.run()
	w.shutdown()
	res.Violations = violations
	res.Notes = w.notes
	res.Trace = w.rec.traceText()
	res.Logs = w.logs.text()
	res.SimTime = w.now()
	res.RealTime = time.Since(realStart)
	res.Applies = len(w.rec.applies)
	res.Events = w.eventsStored
	res.WorstDelay, res.WorstWhat = w.worstDelay, w.worstWhat
	return res
}

// drive advances the sim clock by the pace every real millisecond: the
// clock paces the run, it synchronizes nothing. A loaded machine delivers
// fewer ticks, which slows sim time down with the engine.
func (w *world) drive(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			w.clock.Advance(time.Duration(w.pace.Load()))
		}
	}
}

// sleep waits for d of sim time; false if the run was cancelled.
func (w *world) sleep(d time.Duration) bool {
	if d <= 0 {
		return w.ctx.Err() == nil
	}
	t := w.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-w.ctx.Done():
		return false
	}
}

// sleepUntil waits until the sim time at.
func (w *world) sleepUntil(at time.Duration) bool { return w.sleep(at - w.now()) }

// newUUID returns a UUID drawn from the run's random source (stream and
// instance ids repeat on every replay of the run, which makes traces
// comparable).
func (w *world) newUUID() uuid.UUID {
	w.mu.Lock()
	defer w.mu.Unlock()
	var id uuid.UUID
	for i := 0; i < 16; i += 8 {
		v := w.uuids.Uint64()
		for j := range 8 {
			id[i+j] = byte(v >> (8 * j))
		}
	}
	id[6] = id[6]&0x0f | 0x40
	id[8] = id[8]&0x3f | 0x80
	return id
}

// run sets up the instances, runs the fault phase, heals and checks.
func (w *world) run() []Violation {
	for i := range w.p.instances {
		w.slots = append(w.slots, nil)
		if _, err := w.startInstance(i); err != nil {
			return []Violation{{0, "starting instance: " + err.Error()}}
		}
	}
	w.makeStreams()
	sched := w.schedule()
	// The schedule's times count from the end of the set-up.
	w.phase = w.now()
	w.rec.tracef("fault phase begins")
	for _, o := range sched {
		if !w.sleepUntil(w.phase + o.at) {
			break
		}
		o.run()
	}
	if !w.sleepUntil(w.phase + w.p.faultPhase) {
		return nil
	}
	return w.healAndCheck()
}

// startInstance starts a new incarnation in slot.
func (w *world) startInstance(slot int) (*instance, error) {
	b, closeFn, err := w.kit.handle()
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	inc := len(w.all)
	name := fmt.Sprintf("i%d.%d", slot, inc)
	// Instances carry the generation of the deploy they were started
	// under: one per deploy of new apply functions (a rebuild), so an
	// instance started before a deploy runs alongside later ones, and a
	// dead letter may be recovered by three generations or more.
	gen := ""
	if w.p.generation {
		gen = fmt.Sprintf("g%d", w.code.Load()+1)
	}
	w.mu.Unlock()
	in := &instance{slot: slot, name: name, id: w.newUUID(), closeFn: closeFn, state: "live"}
	in.faults = newFaults(name, w.cfg.Seed+uint64(inc), w.rec)
	in.faults.watch, in.faults.tracef, in.faults.now = w.cfg.Watch, w.rec.tracef, w.now
	in.faults.pause = func(ctx context.Context, p *ports.DeadLetterMoveParams, move func(context.Context) (*ports.DeadLetterMoveResult, error)) (*ports.DeadLetterMoveResult, error, bool) {
		return w.pauseAtMove(ctx, in, p, move)
	}
	in.faults.fetched = func(res *ports.EventsFetchPendingResult) { w.fetchedRows(in, res) }
	in.faults.saved = func(ctx context.Context, stream uuid.UUID, persp string, versions func() []int64) {
		w.savedRows(ctx, in, stream, persp, versions)
	}
	in.faults.claiming = func(ctx context.Context) { w.claimGate(ctx, in) }
	in.faults.beat = func(prev, at time.Duration) { w.heartbeatLapse(in, prev, at) }
	in.backend = wrap(b, in.faults)
	o := w.opts
	o.InstanceID = in.id
	o.Clock = w.clock
	o.Generation = gen
	o.Logger = w.logger.With(slog.String("sim_instance", name))
	o.Hooks = w.hooks(in)
	wk, err := core.New(in.backend, w.reg, &o)
	if err != nil {
		closeFn()
		return nil, err
	}
	in.worker = wk
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), instKey{}, in), time.Minute)
	defer cancel()
	if err := wk.Start(ctx); err != nil {
		_ = wk.Stop(context.Background())
		closeFn()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	w.mu.Lock()
	w.slots[slot] = in
	w.all = append(w.all, in)
	w.mu.Unlock()
	w.rec.tracef("start %s (id %s, generation %q)", name, in.id, gen)
	return in, nil
}

// hooks returns the hooks of an instance: what they report goes to the
// trace, and rebuilt pairs to the rebuild check.
func (w *world) hooks(in *instance) core.Hooks {
	return core.Hooks{
		OnDeadLettered: func(dl ports.DeadLetter) {
			w.rec.tracef("%s dead-lettered %s %s v%d: %s (%s, attempts %d)", in.name, dl.Perspective, short(dl.StreamID), dl.EventVersion, dl.Reason, dl.Error, dl.Attempts)
		},
		OnRewind: func(info core.RewindInfo) {
			kind := "rewound"
			if !info.Rebuild {
				at := w.now()
				w.mu.Lock()
				start := w.rec.rewindStart(in.name, info.StreamID, info.Perspective, at, info.Duration)
				w.rewinds = append(w.rewinds, rewindDone{info: info, start: start, at: at, inst: in.name})
				w.mu.Unlock()
			}
			if info.Rebuild {
				kind = "rebuilt"
				w.mu.Lock()
				w.rebuilt = append(w.rebuilt, rebuildDone{stream: info.StreamID, persp: info.Perspective, at: w.now(), inst: in.name})
				w.mu.Unlock()
			}
			w.rec.tracef("%s %s %s %s (from v%d, trigger v%d, replayed %d, new %d)", in.name, kind, info.Perspective, short(info.StreamID), info.FromVersion, info.TriggerVersion, info.Replayed, info.New)
		},
		OnFailure: func(f ports.Failure) {
			if isInfraError(f.Error) {
				w.rec.violate(Violation{4, fmt.Sprintf("%s charged an infrastructure error to an event of %s of %s (the one after v%d): %q",
					in.name, f.Perspective, w.streamName(f.StreamID), f.LastVersion, f.Error)})
			}
		},
		OnApplyAbandoned: func(a core.AbandonedApply) {
			w.rec.tracef("%s abandoned the apply of %s %s v%d", in.name, a.Perspective, short(a.StreamID), a.Version)
		},
		OnRebuildRequest: func(r ports.RebuildRequest) {
			w.rec.tracef("%s rebuild request %s of %s: %s (%d/%d) %s", in.name, short(r.ID), r.Perspective, r.Status, r.StreamsDone, r.StreamsTotal, r.Error)
		},
		OnDeadLettersRequeued: func(dls []ports.DeadLetter) {
			w.rec.tracef("%s requeued %d dead letters of other generations", in.name, len(dls))
		},
	}
}

func short(id uuid.UUID) string { return id.String()[:8] }

// isInfraError reports whether an error text is the backend's: an error
// wrapping ports.ErrTransient, or a lost PostgreSQL connection.
func isInfraError(text string) bool {
	for _, s := range []string{ports.ErrTransient.Error(), "SQLSTATE 57P01", "conn closed", "unexpected EOF", "connection reset"} {
		if strings.Contains(text, s) {
			return true
		}
	}
	return false
}

// instances returns the current incarnations in the given state.
func (w *world) instances(state string) []*instance {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*instance
	for _, in := range w.slots {
		if in != nil && in.state == state {
			out = append(out, in)
		}
	}
	return out
}

// anyLive returns a live instance chosen at random, nil when none is.
func (w *world) anyLive() *instance {
	live := w.instances("live")
	if len(live) == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return live[w.live.IntN(len(live))]
}

// liveHealthy returns a live instance whose wrapper is healthy, if any, or
// else any live one.
func (w *world) liveHealthy() *instance {
	var ok []*instance
	for _, in := range w.instances("live") {
		if in.faults.current() == modeHealthy {
			ok = append(ok, in)
		}
	}
	if len(ok) == 0 {
		return w.anyLive()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return ok[w.live.IntN(len(ok))]
}

// crash kills an instance without a flush: its wrapper turns dead (nothing
// more reaches the backend), then it is stopped with a context already
// done and waited for in the background. It never deregisters.
func (w *world) crash(in *instance) {
	w.mu.Lock()
	if in.state != "live" {
		w.mu.Unlock()
		return
	}
	in.state = "dead"
	w.mu.Unlock()
	in.faults.set(modeDead, 0, 0)
	w.rec.tracef("crash %s", in.name)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	_ = in.worker.Stop(done)
	w.ops.Go(func() {
		w.stopWorker(in, "crashed")
	})
}

// stopWorker waits for in's Worker to stop, bounded in real time: a Stop
// that does not return is a finding.
func (w *world) stopWorker(in *instance, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := in.worker.Stop(ctx); err != nil {
		w.rec.violate(Violation{3, fmt.Sprintf("the Stop of %s (%s) did not return within 2 minutes: %v", in.name, why, err)})
	}
	in.closeFn()
}

// stop stops an instance gracefully, in the background.
func (w *world) stop(in *instance) {
	w.mu.Lock()
	if in.state != "live" {
		w.mu.Unlock()
		return
	}
	in.state = "stopping"
	w.mu.Unlock()
	w.rec.tracef("stop %s", in.name)
	from := w.now()
	w.ops.Go(func() {
		w.stopWorker(in, "graceful stop")
		w.mu.Lock()
		in.state = "stopped"
		w.mu.Unlock()
		w.rec.tracef("stopped %s", in.name)
		w.disturb(window{from: from, to: w.now() + w.settle(), what: "stop " + in.name})
	})
}

// settle is how long after a disturbance ends the engine may take to be
// back to its quiet pace: a pair that met backend errors retries after
// Retries.Infra, an unacknowledged outcome is re-sent after
// Retries.CompletionResend, a flush retries in place, the claim and poll
// cadences run.
func (w *world) settle() time.Duration {
	o := &w.opts
	flush := time.Duration(o.Retries.Flush.MaxAttempts) * o.Retries.Flush.Max
	return o.Retries.Infra.Max*3/2 + o.Retries.CompletionResend.Max + flush + max(o.Claims.Interval, o.Claims.NotifyHealthyInterval) +
		max(o.Drain.PollingInterval, o.Drain.NotifyHealthyPollingInterval) + o.Drain.Batcher.MaxWait + 300*time.Millisecond
}

// settleHeld is settle after calls that were held, not failed: nothing
// retries, the claim and poll cadences run.
func (w *world) settleHeld() time.Duration {
	o := &w.opts
	return max(o.Claims.Interval, o.Claims.NotifyHealthyInterval) + max(o.Drain.PollingInterval, o.Drain.NotifyHealthyPollingInterval) +
		o.Drain.Batcher.MaxWait + 300*time.Millisecond
}

// quietBound is how long an event of a clean stream may wait for a
// perspective while nothing disturbs the instances.
func (w *world) quietBound() time.Duration {
	o := &w.opts
	return max(o.Claims.Interval, o.Claims.NotifyHealthyInterval) + max(o.Drain.PollingInterval, o.Drain.NotifyHealthyPollingInterval) +
		o.Drain.Batcher.MaxWait + time.Second
}

func (w *world) note(n string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notes = append(w.notes, n)
}

func (w *world) disturb(win window) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.windows = append(w.windows, win)
}

// shutdown stops every instance and waits for the background operations.
func (w *world) shutdown() {
	w.plan.releaseHangs()
	closeOnce(&w.plan.mu, w.plan.final)
	for _, in := range w.instances("live") {
		in.faults.set(modeHealthy, 0, 0)
		w.mu.Lock()
		in.state = "stopping"
		w.mu.Unlock()
		w.ops.Go(func() { w.stopWorker(in, "the end of the run") })
	}
	w.ops.Wait()
	w.cancel()
}

func (pl *plan) releaseHangs() { closeOnce(&pl.mu, pl.release) }

// closeOnce closes ch unless it is closed, under mu.
func closeOnce(mu *sync.Mutex, ch chan struct{}) {
	mu.Lock()
	defer mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// sortedKeys returns the keys of m in order.
func sortedKeys[K interface{ ~int64 | ~string }, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
