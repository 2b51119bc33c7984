package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/bench/internal/measure"
	"github.com/vantage-go/vantage/bench/internal/raw"
	"github.com/vantage-go/vantage/bench/internal/workload"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// vantage is one Vantage run: the registry, one backend per instance (one
// pool and Store each on PostgreSQL, one shared Store in memory) and the
// workers.
type vantage struct {
	*env
	reg      *core.Registry
	names    []string
	nameIdx  map[string]int
	mem      *memory.Store
	stores   []*postgres.Store
	backends []ports.Backend
	// events is where the application appends: on PostgreSQL a Store on a
	// pool of its own, so appends never wait for the engines' connections.
	events      ports.EventStore
	appStore    *postgres.Store
	enginePools []*pgxpool.Pool
	logger      *slog.Logger
	workers     []*core.Worker
}

func newRegistry(perspectives int) (*core.Registry, error) {
	reg := core.NewRegistry()
	if err := core.RegisterEvent[workload.Incremented](reg, workload.EventType); err != nil {
		return nil, err
	}
	for _, name := range workload.Perspectives(perspectives) {
		p := core.NewPerspective[workload.Model](name)
		if err := core.Handle(p, applyIncremented); err != nil {
			return nil, err
		}
		if err := reg.AddPerspective(p); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

func applyIncremented(ctx context.Context, m workload.Model, e workload.Incremented) (workload.Model, error) {
	ev, ok := core.EventFromContext(ctx)
	if !ok {
		return m, errors.New("no event in the apply context")
	}
	return workload.Apply(m, ev.Version, e), nil
}

func newVantage(ctx context.Context, s spec) (*vantage, error) {
	e, err := newEnv(ctx, s)
	if err != nil {
		return nil, err
	}
	v := &vantage{env: e, names: workload.Perspectives(s.Perspectives), nameIdx: map[string]int{}}
	for i, n := range v.names {
		v.nameIdx[n] = i
	}
	// The engine logs only what no caller can receive; errors are worth
	// seeing in a benchmark, the expected warnings of a failover are not.
	v.logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	if s.Scenario == scenarioFailover {
		v.logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
	}
	if v.reg, err = newRegistry(s.Perspectives); err != nil {
		e.close()
		return nil, err
	}
	switch s.Backend {
	case "memory":
		v.mem = memory.New(memory.Options{})
		for range s.Instances {
			v.backends = append(v.backends, v.mem.Backend())
		}
		v.events = v.mem
	case "postgres":
		if err := postgres.Migrate(ctx, e.admin, s.Schema); err != nil {
			e.close()
			return nil, err // names the schema and the step
		}
		appPool, err := e.pool(ctx, appenders(s))
		if err != nil {
			v.close()
			return nil, err
		}
		appStore, err := postgres.New(appPool, postgres.Options{Schema: s.Schema, Logger: v.logger})
		if err != nil {
			v.close()
			return nil, err
		}
		v.appStore, v.events = appStore, appStore
		for range s.Instances {
			pool, err := e.pool(ctx, s.Pool)
			if err != nil {
				v.close()
				return nil, err
			}
			store, err := postgres.New(pool, postgres.Options{Schema: s.Schema, Logger: v.logger})
			if err != nil {
				v.close()
				return nil, err
			}
			v.stores = append(v.stores, store)
			v.enginePools = append(v.enginePools, pool)
			v.backends = append(v.backends, store.Backend())
		}
	default:
		e.close()
		return nil, fmt.Errorf("unknown backend %q", s.Backend)
	}
	return v, nil
}

func (v *vantage) close() {
	v.stopWorkers(30 * time.Second)
	for _, s := range v.stores {
		_ = s.Close()
	}
	if v.appStore != nil {
		_ = v.appStore.Close()
	}
	if v.mem != nil {
		_ = v.mem.Close()
	}
	v.env.close()
}

// options returns the engine options of the run's setting, with the -opt
// overrides on top.
func (v *vantage) options(hooks core.Hooks) (*core.Options, error) {
	o := &core.Options{Logger: v.logger, Hooks: hooks}
	if v.spec.Setting == settingLowLatency {
		lowLatency(o)
	}
	if v.spec.Stale > 0 {
		o.Claims.StaleInstanceThreshold = v.spec.Stale
	}
	return o, applyOverrides(o, v.spec.Options)
}

// lowLatency is the low-latency setting: the drain batcher closes a batch
// 2ms after the latest arrival (at most 10ms after the first) instead of
// 300ms (3s); a notification waits at most 10ms for its claim (instead of
// 250ms); the safety-net polls run every 100ms, and so do the claims while
// notifications are healthy (every 10ms while they are not).
func lowLatency(o *core.Options) {
	o.Drain.Batcher = core.DrainBatcherOptions{SlidingWindow: 2 * time.Millisecond, MaxWait: 10 * time.Millisecond}
	o.Drain.PollingInterval = 100 * time.Millisecond
	o.Drain.NotifyHealthyPollingInterval = 100 * time.Millisecond
	o.Claims.Interval = 10 * time.Millisecond
	o.Claims.NotifyHealthyInterval = 100 * time.Millisecond
}

func (v *vantage) startWorkers(ctx context.Context, hooks func(i int) core.Hooks) error {
	for i, b := range v.backends {
		o, err := v.options(hooks(i))
		if err != nil {
			return err
		}
		w, err := core.New(b, v.reg, o)
		if err != nil {
			return err
		}
		if err := w.Start(ctx); err != nil {
			return err
		}
		v.workers = append(v.workers, w)
	}
	return nil
}

func (v *vantage) stopWorkers(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, w := range v.workers {
		wg.Go(func() { _ = w.Stop(ctx) })
	}
	wg.Wait()
	v.workers = nil
}

// seed appends the catch-up backlog with the spec's appenders and returns
// the stream ids.
func (v *vantage) seed(ctx context.Context) ([]uuid.UUID, error) {
	s := v.spec
	streams := make([]uuid.UUID, s.Streams)
	for i := range streams {
		streams[i] = uuid.Must(uuid.NewV7())
	}
	var wg sync.WaitGroup
	errs := make([]error, s.Appenders)
	for a := range s.Appenders {
		wg.Go(func() {
			for _, b := range workload.Plan(s.Events, s.Streams, s.AppendBatch, s.Appenders, a) {
				events := make([]any, b.Count)
				for i := range events {
					events[i] = workload.NewIncremented(b.From + int64(i))
				}
				expected := b.From - 1
				if expected == 0 {
					expected = ports.ExpectNoStream
				}
				if _, err := v.reg.Append(ctx, v.events, streams[b.Stream], expected, events...); err != nil {
					errs[a] = fmt.Errorf("appending to stream %d: %w", b.Stream, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return streams, errors.Join(errs...)
}

// check reads every model and reports skipped and double-applied events
// and the pending work rows (PostgreSQL only).
func (v *vantage) check(ctx context.Context, r *result, streams []uuid.UUID, heads []int64) error {
	var (
		check   workload.Check
		pending int64
	)
	if v.admin != nil {
		var err error
		check, pending, err = raw.CheckModels(ctx, v.admin,
			fmt.Sprintf(`SELECT stream_id, perspective, data FROM %s.vantage_models`, quoted(v.spec.Schema)),
			fmt.Sprintf(`SELECT count(*) FROM %s.vantage_work`, quoted(v.spec.Schema)),
			streams, heads, v.spec.Perspectives)
		if err != nil {
			return fmt.Errorf("checking: %w", err)
		}
	} else {
		for i, id := range streams {
			for _, name := range v.names {
				m, err := v.backends[0].Models.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: id, Perspective: name})
				var model workload.Model
				switch {
				case errors.Is(err, ports.ErrNotFound):
				case err != nil:
					return fmt.Errorf("checking: %w", err)
				default:
					if err := json.Unmarshal(m.Data, &model); err != nil {
						return fmt.Errorf("checking: %w", err)
					}
				}
				check.Add(model, heads[i])
			}
		}
	}
	v.recordCheck(r, check, pending)
	return nil
}

// appendSteady starts the appenders of a run paced by jobs: for each
// number n the pacer releases, one of them appends an event to stream n mod
// len(streams), with no version check (several appenders may write one
// stream), counts a failed append in errs (printing the first) and hands
// what it stored to stored. The WaitGroup's wait ends once jobs is closed
// and drained.
func (v *vantage) appendSteady(ctx context.Context, jobs <-chan int, streams []uuid.UUID, errs *atomic.Int64, stored func(i int, version int64, at time.Time)) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range appenders(v.spec) {
		wg.Go(func() {
			for n := range jobs {
				i := n % len(streams)
				at := time.Now()
				res, err := v.reg.Append(ctx, v.events, streams[i], 0, workload.NewIncremented(int64(i)))
				if err != nil {
					if errs.Add(1) == 1 && ctx.Err() == nil {
						fmt.Fprintf(os.Stderr, "  append failed: %v\n", err)
					}
					continue
				}
				stored(i, res.Events[0].Version, at)
			}
		})
	}
	return &wg
}

// appenders is the number of concurrent appenders: the spec's when seeding,
// at least 16 when appending at a fixed rate (one event per call), so the
// rate holds while single appends wait on commits, and the ramp's own
// (-ramp-appenders) on a ramp.
func appenders(s spec) int {
	if s.Ramp != nil {
		return s.Ramp.Appenders
	}
	if s.Scenario == scenarioCatchup || s.Scenario == scenarioRebuild {
		return s.Appenders // seeding
	}
	return max(s.Appenders, 16)
}

func runVantage(ctx context.Context, s spec) (*result, error) {
	v, err := newVantage(ctx, s)
	if err != nil {
		return nil, err
	}
	defer v.close()
	switch s.Scenario {
	case scenarioCatchup:
		return v.catchup(ctx)
	case scenarioLive, scenarioFailover:
		return v.live(ctx)
	case scenarioIdle:
		return v.idle(ctx)
	case scenarioRamp:
		return v.ramp(ctx)
	case scenarioSoak:
		return v.soak(ctx)
	case scenarioRebuild:
		return v.rebuild(ctx)
	default:
		return nil, fmt.Errorf("unknown scenario %q", s.Scenario)
	}
}

// catchup measures the time from the workers' start until every
// perspective applied every event of the backlog and every completion was
// acknowledged (every work row deleted).
func (v *vantage) catchup(ctx context.Context) (*result, error) {
	r := newResult(v.spec)
	b, ph, err := v.catchUp(ctx, r, core.Hooks{})
	v.stopWorkers(30 * time.Second)
	if ph != nil {
		ph.report(ctx, r.Events)
	}
	if err != nil {
		return r, err
	}
	streamLatencies(r, b.doneAt)
	return r, v.check(ctx, r, b.streams, b.heads)
}

// backlog is what catchUp seeded: the streams, their heads, and when each
// stream was caught up, from the start of the measured phase (zero for
// none).
type backlog struct {
	streams []uuid.UUID
	heads   []int64
	doneAt  []time.Duration
}

// catchUp seeds the backlog, starts the workers with hooks (its own
// OnPerspectiveEventProcessed and OnCompletionsFlushed replacing those of
// hooks) and records into r the measured phase from their start until they
// caught the backlog up; it returns the phase, ended, once it started, and
// leaves the workers running: the caller stops them, then calls
// phase.report.
func (v *vantage) catchUp(ctx context.Context, r *result, hooks core.Hooks) (backlog, *phase, error) {
	s := v.spec
	t0 := time.Now()
	streams, err := v.seed(ctx)
	if err != nil {
		return backlog{}, nil, fmt.Errorf("seeding: %w", err)
	}
	r.SeedSeconds = time.Since(t0).Seconds()
	r.SeedEventsPerS = float64(s.Events) / r.SeedSeconds
	if v.admin != nil {
		if _, err := v.admin.Exec(ctx, "ANALYZE "+quoted(s.Schema)+".vantage_work, "+quoted(s.Schema)+".vantage_events"); err != nil {
			return backlog{}, nil, err
		}
	}
	hs := heads(s)
	index := make(map[uuid.UUID]int, len(streams))
	for i, id := range streams {
		index[id] = i
	}
	target := int64(s.Events * s.Perspectives)
	var applied, acked atomic.Int64
	pairsDone := make([]atomic.Int32, len(streams))
	doneAt := make([]time.Duration, len(streams))
	caughtUp := make(chan struct{})
	var once sync.Once
	var start time.Time
	// Caught up means applied by every perspective and every work row
	// completed. On PostgreSQL the work table says so (an acknowledgement
	// may be counted twice when a slow flush was re-sent): it is read as
	// soon as the acknowledgements reach the target, and every 50ms in
	// case they never seem to; in memory the acknowledgements say so.
	reached := func() bool { return applied.Load() >= target && acked.Load() >= target }
	checkDone := func() {
		if reached() {
			once.Do(func() { close(caughtUp) })
		}
	}
	if v.admin != nil {
		maybe := make(chan struct{}, 1)
		checkDone = func() {
			if reached() {
				select {
				case maybe <- struct{}{}:
				default:
				}
			}
		}
		go func() {
			t := time.NewTicker(50 * time.Millisecond)
			defer t.Stop()
			q := fmt.Sprintf(`SELECT NOT EXISTS (SELECT 1 FROM %s.vantage_work WHERE processed_at IS NULL)`, quoted(s.Schema))
			for {
				select {
				case <-ctx.Done():
					return
				case <-caughtUp:
					return
				case <-maybe:
				case <-t.C:
				}
				if applied.Load() < target {
					continue
				}
				var drained bool
				if err := v.admin.QueryRow(ctx, q).Scan(&drained); err == nil && drained {
					once.Do(func() { close(caughtUp) })
					return
				}
			}
		}()
	}
	hooks.OnPerspectiveEventProcessed = func(e core.PerspectiveEventProcessed) {
		applied.Add(int64(e.EventCount))
		i, ok := index[e.StreamID]
		if ok && e.LastVersion >= hs[i] && int(pairsDone[i].Add(1)) == s.Perspectives {
			doneAt[i] = time.Since(start)
		}
		checkDone()
	}
	hooks.OnCompletionsFlushed = func(c core.CompletionsFlushed) {
		for _, cc := range c.Completions {
			acked.Add(int64(len(cc.WorkIDs)))
		}
		checkDone()
	}
	stop := make(chan struct{})
	go progress(ctx, stop, s.name(), func() string {
		return fmt.Sprintf("applied %d/%d work rows, %d acknowledged", applied.Load(), target, acked.Load())
	})
	defer close(stop)
	b := backlog{streams: streams, heads: hs, doneAt: doneAt}
	if err := warm(ctx, v.enginePools...); err != nil {
		return b, nil, err
	}
	ph, err := v.startPhase(ctx)
	if err != nil {
		return b, nil, err
	}
	start = ph.start
	if err := v.startWorkers(ctx, func(int) core.Hooks { return hooks }); err != nil {
		return b, nil, err
	}
	// Leave a minute of the run's timeout for stopping and checking; a run
	// cut short still reports the rates it reached.
	limit := time.NewTimer(runLimit(ctx))
	defer limit.Stop()
	select {
	case <-caughtUp:
	case <-limit.C:
		r.Events, r.WorkRows = applied.Load()/int64(s.Perspectives), applied.Load()
		ph.end(r, r.Events)
		return b, ph, fmt.Errorf("not caught up after %.0fs (-timeout): applied %d and acknowledged %d of %d work rows; the rates are those reached", r.Seconds, applied.Load(), acked.Load(), target)
	}
	r.Events, r.WorkRows = int64(s.Events), applied.Load()
	ph.end(r, r.Events)
	return b, ph, nil
}

// liveStream is what the live scenario knows of one stream.
type liveStream struct {
	mu       sync.Mutex
	appended []appendRecord
	head     int64
	progress [][]progressRecord // per perspective, in time order
	// the instance that applied its latest event, -1 before any (failover)
	servedBy int
	// first apply by a surviving instance after the kill (failover)
	recovered time.Time
}

type appendRecord struct {
	version  int64
	at       time.Time
	took     time.Duration // the Append call
	measured bool
}

type progressRecord struct {
	version int64
	at      time.Time
}

// reached returns when perspective p first reached version, if it did.
func (ls *liveStream) reached(p int, version int64) (time.Time, bool) {
	// A linear scan: records are in time order, and their versions need not
	// grow (two instances may report the same pair around a takeover).
	for _, rec := range ls.progress[p] {
		if rec.version >= version {
			return rec.at, true
		}
	}
	return time.Time{}, false
}

// live appends at the spec's rate for warmup + duration while the workers
// run and measures append-to-applied latency: from the start of the Append
// call to the moment the last perspective saved a model covering the event.
// In the failover scenario one of the instances is killed after KillAfter.
// With settingNoEngine no worker runs: the latency is the Append call's.
func (v *vantage) live(ctx context.Context) (*result, error) {
	s := v.spec
	r := newResult(s)
	failover := s.Scenario == scenarioFailover
	noEngine := s.Setting == settingNoEngine
	duration := s.Duration
	var staleThreshold time.Duration
	if failover {
		o, err := v.options(core.Hooks{})
		if err != nil {
			return r, err
		}
		staleThreshold = o.Claims.StaleInstanceThreshold
		if staleThreshold == 0 {
			staleThreshold = core.StaleInstanceThresholdDefault
		}
		// Appending goes on until well after the takeover.
		duration = s.KillAfter + staleThreshold + core.HeartbeatIntervalDefault + 10*time.Second
		r.TargetMs = float64((staleThreshold + core.PollingIntervalDefault).Milliseconds())
	}
	streams := make([]uuid.UUID, s.Streams)
	state := make([]*liveStream, s.Streams)
	index := make(map[uuid.UUID]int, s.Streams)
	for i := range streams {
		streams[i] = uuid.Must(uuid.NewV7())
		state[i] = &liveStream{progress: make([][]progressRecord, s.Perspectives), servedBy: -1}
		index[streams[i]] = i
	}
	var (
		killed   atomic.Bool
		victim   = 0
		victims  map[int]bool
		killedAt time.Time
	)
	hooks := func(inst int) core.Hooks {
		return core.Hooks{OnPerspectiveEventProcessed: func(e core.PerspectiveEventProcessed) {
			now := time.Now()
			i, ok := index[e.StreamID]
			if !ok {
				return
			}
			ls := state[i]
			ls.mu.Lock()
			p := v.nameIdx[e.Perspective]
			ls.progress[p] = append(ls.progress[p], progressRecord{e.LastVersion, now})
			if !killed.Load() {
				ls.servedBy = inst
			} else if inst != victim && victims[i] && ls.recovered.IsZero() {
				ls.recovered = now
			}
			ls.mu.Unlock()
		}}
	}
	if s.Backend == "postgres" {
		// Subscriptions must exist before the first append fans out.
		if err := v.reg.RegisterSubscriptions(ctx, v.events); err != nil {
			return r, err
		}
	}
	if !noEngine {
		if err := v.startWorkers(ctx, hooks); err != nil {
			return r, err
		}
	}
	ph, err := v.startPhase(ctx)
	if err != nil {
		return r, err
	}
	measureFrom := ph.start.Add(s.Warmup)
	total := s.Warmup + duration

	// The pacer releases event i at start + i/rate; appenders append one
	// event per call to stream i mod streams, with no version check (several
	// appenders may write one stream).
	jobs := pace(ctx, ph.start, total, s.Rate*2, nil, steady(s.Rate))
	var appended, appendErrs atomic.Int64
	wg := v.appendSteady(ctx, jobs, streams, &appendErrs, func(i int, ver int64, at time.Time) {
		appended.Add(1)
		ls := state[i]
		ls.mu.Lock()
		ls.appended = append(ls.appended, appendRecord{version: ver, at: at, took: time.Since(at), measured: !at.Before(measureFrom)})
		ls.head = max(ls.head, ver)
		ls.mu.Unlock()
	})
	stop := make(chan struct{})
	go progress(ctx, stop, s.name(), func() string {
		return fmt.Sprintf("appended %d (%d errors)", appended.Load(), appendErrs.Load())
	})
	defer close(stop)

	var lastBeat time.Time
	if failover {
		select {
		case <-time.After(s.KillAfter):
		case <-ctx.Done():
			return r, ctx.Err()
		}
		leased, beat, err := v.victimStreams(ctx, v.workers[victim].InstanceID(), index)
		if err != nil {
			return r, err
		}
		lastBeat = beat
		// The victim's streams: those it holds, and those it served last (a
		// stream is leased only while it is drained, but the victim's
		// partitions stay its own until it is stale).
		victims = maps.Clone(leased)
		for i, ls := range state {
			ls.mu.Lock()
			if ls.servedBy == victim {
				victims[i] = true
			}
			ls.mu.Unlock()
		}
		killedAt = time.Now()
		killed.Store(true)
		// A crash: the instance's connections drop, nothing it holds is
		// released, it never heartbeats again. Its goroutines keep failing
		// against a closed store until the end.
		_ = v.stores[victim].Close()
		go v.enginePools[victim].Close()
		fmt.Fprintf(os.Stderr, "  killed instance %d serving %d streams, %d of them leased (last heartbeat %s before the kill)\n",
			victim, len(victims), len(leased), killedAt.Sub(lastBeat).Round(time.Millisecond))
		r.VictimStreams = len(victims)
	}
	wg.Wait()
	appendEnd := time.Now()
	r.AchievedRate = float64(appended.Load()) / appendEnd.Sub(ph.start).Seconds()

	// Wait until every perspective reached every stream's head.
	waitLimit := s.DrainWait
	deadline := time.Now().Add(min(waitLimit, runLimit(ctx)))
	for !noEngine && !allApplied(state) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.Error = fmt.Sprintf("not every event was applied %s after the appends ended", waitLimit)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.Events = appended.Load()
	r.WorkRows = r.Events * int64(s.Perspectives)
	ph.end(r, r.Events)
	r.Seconds = appendEnd.Sub(ph.start).Seconds()

	var lat, appendLat measure.Latencies
	unapplied := 0
	var recovery measure.Latencies
	for i, ls := range state {
		ls.mu.Lock()
		for _, a := range ls.appended {
			if !a.measured {
				continue
			}
			appendLat.Add(a.took)
			if noEngine {
				continue
			}
			var last time.Time
			ok := true
			for p := range s.Perspectives {
				at, reached := ls.reached(p, a.version)
				if !reached {
					ok = false
					break
				}
				if at.After(last) {
					last = at
				}
			}
			if !ok {
				unapplied++
				continue
			}
			lat.Add(last.Sub(a.at))
		}
		if failover && victims[i] && appendedAfter(ls.appended, killedAt) {
			if ls.recovered.IsZero() {
				r.NotRecovered++
			} else {
				recovery.Add(ls.recovered.Sub(killedAt))
			}
		}
		ls.mu.Unlock()
	}
	measured := &lat
	if noEngine {
		measured = &appendLat
	}
	ps := measured.Percentiles(0.5, 0.99, 1)
	r.P50Ms, r.P99Ms, r.MaxMs, r.Samples = ps[0], ps[1], ps[2], measured.Len()
	aps := appendLat.Percentiles(0.5, 0.99)
	r.AppendP50Ms, r.AppendP99Ms = aps[0], aps[1]
	if unapplied > 0 && r.Error == "" {
		r.Error = fmt.Sprintf("%d measured events never applied", unapplied)
	}
	if s.Scenario == scenarioLive {
		r.TargetMs = liveTargetMs(s.Setting, s.Rate)
	}
	if failover {
		rp := recovery.Percentiles(0.5, 1)
		r.RecoveryP50Ms, r.RecoveryMaxMs = rp[0], rp[1]
		r.RecoveryFromLastBeatMs = rp[1] + float64(killedAt.Sub(lastBeat).Milliseconds())
	}
	// Survivors stop gracefully; the victim's Stop gives up quickly.
	v.stopWorkers(15 * time.Second)
	if v.countsWrites() {
		if err := ph.writes(ctx, r); err != nil {
			fmt.Fprintf(os.Stderr, "  (no table writes: %v)\n", err)
		}
	}
	ph.report(ctx, r.Events)
	if noEngine {
		return r, nil // nothing was applied to check
	}
	hs := make([]int64, len(state))
	for i, ls := range state {
		hs[i] = ls.head
	}
	if err := v.check(ctx, r, streams, hs); err != nil {
		return r, err
	}
	return r, nil
}

// allApplied reports whether every perspective reached every stream's head.
func allApplied(state []*liveStream) bool {
	for _, ls := range state {
		ls.mu.Lock()
		for p := range ls.progress {
			if _, ok := ls.reached(p, ls.head); ls.head > 0 && !ok {
				ls.mu.Unlock()
				return false
			}
		}
		ls.mu.Unlock()
	}
	return true
}

// appendedAfter reports whether an event was appended after t: a victim's
// stream that received none has nothing to recover.
func appendedAfter(appended []appendRecord, t time.Time) bool {
	return slices.ContainsFunc(appended, func(a appendRecord) bool { return a.at.After(t) })
}

// victimStreams returns the streams (by index) leased to instance and its
// last heartbeat.
func (v *vantage) victimStreams(ctx context.Context, instance uuid.UUID, index map[uuid.UUID]int) (map[int]bool, time.Time, error) {
	rows, err := v.admin.Query(ctx, fmt.Sprintf(`SELECT stream_id FROM %s.vantage_active_streams WHERE instance_id = $1`, quoted(v.spec.Schema)), instance)
	if err != nil {
		return nil, time.Time{}, err
	}
	victims := map[int]bool{}
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, time.Time{}, err
		}
		if i, ok := index[id]; ok {
			victims[i] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, err
	}
	var beat time.Time
	if err := v.admin.QueryRow(ctx, fmt.Sprintf(`SELECT last_heartbeat_at FROM %s.vantage_instances WHERE instance_id = $1`, quoted(v.spec.Schema)), instance).Scan(&beat); err != nil {
		return nil, time.Time{}, err
	}
	return victims, beat, nil
}

// applyOverrides sets core.Options fields named in overrides ("Field=value"
// or "Struct.Field=value", as -opt gives them) on o.
func applyOverrides(o *core.Options, overrides map[string]string) error {
	for path, value := range overrides {
		f := reflect.ValueOf(o).Elem()
		for _, name := range strings.Split(path, ".") {
			if f.Kind() != reflect.Struct {
				return fmt.Errorf("-opt %s: %s is not a struct", path, name)
			}
			f = f.FieldByName(name)
			if !f.IsValid() {
				return fmt.Errorf("-opt %s: core.Options has no field %s", path, name)
			}
		}
		switch {
		case f.Type() == reflect.TypeFor[time.Duration]():
			d, err := time.ParseDuration(value)
			if err != nil {
				return fmt.Errorf("-opt %s: %w", path, err)
			}
			f.SetInt(int64(d))
		case f.Kind() == reflect.Int:
			n, err := strconv.Atoi(value)
			if err != nil {
				return fmt.Errorf("-opt %s: %w", path, err)
			}
			f.SetInt(int64(n))
		case f.Kind() == reflect.Float64:
			x, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return fmt.Errorf("-opt %s: %w", path, err)
			}
			f.SetFloat(x)
		case f.Kind() == reflect.Bool:
			b, err := strconv.ParseBool(value)
			if err != nil {
				return fmt.Errorf("-opt %s: %w", path, err)
			}
			f.SetBool(b)
		default:
			return fmt.Errorf("-opt %s: fields of type %s cannot be set", path, f.Type())
		}
	}
	return nil
}

// runLimit is how long a measured phase may last: the run's timeout less a
// minute for stopping and checking.
func runLimit(ctx context.Context) time.Duration {
	deadline, ok := ctx.Deadline()
	if !ok {
		return time.Hour
	}
	return max(time.Until(deadline)-time.Minute, 10*time.Second)
}

// liveTargetMs is the p99 a live run aims at: with default options 10ms
// up to 100 events/s and 25ms above (a batch starts at once when none is
// in flight, so the latency is a claim, a fetch and a save, plus the wait
// behind the batch in flight under load); 50ms with the low-latency
// setting, which polls and claims on short timers instead; none (0) for
// the appends alone.
func liveTargetMs(setting string, rate int) float64 {
	switch {
	case setting == settingNoEngine:
		return 0
	case setting != settingDefaults:
		return 50
	case rate <= 100:
		return 10
	default:
		return 25
	}
}
