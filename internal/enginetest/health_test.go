package enginetest_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

type pinged struct {
	N int `json:"n"`
}

type pings struct {
	Count int `json:"count"`
}

// pingRegistry registers the event pinged and the perspective "pings",
// whose apply calls apply (when not nil) before counting the event.
func pingRegistry(t *testing.T, apply func(context.Context)) *core.Registry {
	t.Helper()
	reg := core.NewRegistry()
	require.NoError(t, core.RegisterEvent[pinged](reg, "pinged"))
	p := core.NewPerspective[pings]("pings")
	require.NoError(t, core.Handle(p, func(ctx context.Context, m pings, _ pinged) (pings, error) {
		if apply != nil {
			apply(ctx)
		}
		m.Count++
		return m, nil
	}))
	require.NoError(t, reg.AddPerspective(p))
	return reg
}

// flakyClaimer fails the heartbeats while fail is set, as a backend that
// is down does.
type flakyClaimer struct {
	ports.WorkClaimer
	fail atomic.Bool
}

var errBackendDown = errors.New("backend down")

func (c *flakyClaimer) InstanceHeartbeat(ctx context.Context, p *ports.InstanceHeartbeatParams) (*ports.InstanceHeartbeatResult, error) {
	if c.fail.Load() {
		return nil, errBackendDown
	}
	return c.WorkClaimer.InstanceHeartbeat(ctx, p)
}

// fakeStats serves the backlog figures the test sets, counting the reads.
type fakeStats struct {
	mu    sync.Mutex
	lags  []ports.PerspectiveLag
	err   error
	reads int
}

func (s *fakeStats) set(err error, lags ...ports.PerspectiveLag) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lags, s.err = lags, err
}

func (s *fakeStats) PerspectivesLag(context.Context, *ports.PerspectivesLagParams) ([]ports.PerspectiveLag, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	return s.lags, s.err
}

func (s *fakeStats) readCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

// blockingStats never answers until release is closed.
type blockingStats struct{ release chan struct{} }

func (s blockingStats) PerspectivesLag(context.Context, *ports.PerspectivesLagParams) ([]ports.PerspectiveLag, error) {
	<-s.release
	return nil, nil
}

type healthBundle struct {
	clock   *clocktest.Fake
	claimer *flakyClaimer
	stats   *fakeStats
	worker  *core.Worker
}

// setupHealth builds a worker on the memory backend and a fake clock, with
// a claimer whose heartbeats the test can fail and the Stats port that
// stats returns (none when it returns nil). The worker is stopped when the
// test ends.
func setupHealth(t *testing.T, opts core.Options, stats func(*fakeStats) ports.Stats) *healthBundle {
	t.Helper()
	b := &healthBundle{clock: clocktest.NewFake(), stats: &fakeStats{}}
	backend := memory.New(memory.Options{Clock: b.clock}).Backend()
	b.claimer = &flakyClaimer{WorkClaimer: backend.Claimer}
	backend.Claimer = b.claimer
	// Set either way: the adapters' own Stats must not decide what the
	// lag check reports here.
	backend.Stats = stats(b.stats)
	opts.Clock = b.clock
	opts.Logger = slog.New(slog.DiscardHandler)
	w, err := core.New(backend, pingRegistry(t, nil), &opts)
	require.NoError(t, err)
	b.worker = w
	t.Cleanup(func() { require.NoError(t, w.Stop(context.WithoutCancel(t.Context()))) })
	return b
}

func noStats(*fakeStats) ports.Stats { return nil }

func withStats(s *fakeStats) ports.Stats { return s }

// start starts the worker and waits for its startup scan.
func (b *healthBundle) start(t *testing.T) {
	t.Helper()
	require.NoError(t, b.worker.Start(t.Context()))
	await(t, b.worker.StartupScanComplete(), "the startup scan")
}

func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// statuses maps each check of r to its status.
func statuses(r core.HealthReport) map[string]core.HealthStatus {
	m := map[string]core.HealthStatus{}
	for _, c := range r.Checks {
		m[c.Name] = c.Status
	}
	return m
}

func check(t *testing.T, r core.HealthReport, name string) core.HealthCheck {
	t.Helper()
	c, ok := r.Check(name)
	require.True(t, ok, "the report has a %s check", name)
	return c
}

func TestHealth(t *testing.T) {
	t.Parallel()

	t.Run("AfterStop", func(t *testing.T) {
		t.Parallel()

		b := setupHealth(t, core.Options{}, noStats)
		b.start(t)
		require.NoError(t, b.worker.Stop(t.Context()))

		r := b.worker.Health(t.Context())
		require.False(t, r.Live, "a stopped worker never runs again: only a new process helps")
		require.False(t, r.Ready)
		running := check(t, r, core.HealthCheckRunning)
		require.Equal(t, core.HealthFailing, running.Status)
		require.Equal(t, "stopped", running.Message)
		require.Equal(t, core.HealthSkipped, check(t, r, core.HealthCheckHeartbeat).Status)
	})

	t.Run("BeforeStart", func(t *testing.T) {
		t.Parallel()

		b := setupHealth(t, core.Options{}, noStats)
		r := b.worker.Health(t.Context())
		require.False(t, r.Live)
		require.False(t, r.Ready)
		require.Equal(t, core.HealthFailing, r.Status)
		require.Equal(t, clocktest.Start, r.CheckedAt)
		require.Equal(t, map[string]core.HealthStatus{
			core.HealthCheckRunning:      core.HealthFailing,
			core.HealthCheckHeartbeat:    core.HealthSkipped,
			core.HealthCheckStartupScan:  core.HealthSkipped,
			core.HealthCheckLag:          core.HealthSkipped,
			core.HealthCheckListener:     core.HealthSkipped,
			core.HealthCheckStuckApplies: core.HealthOK,
		}, statuses(r))
		running := check(t, r, core.HealthCheckRunning)
		require.True(t, running.Liveness)
		require.Equal(t, "not started", running.Message)
	})

	t.Run("HeartbeatFailingIsNotReadyButLive", func(t *testing.T) {
		t.Parallel()

		b := setupHealth(t, core.Options{}, noStats)
		b.start(t)
		b.claimer.fail.Store(true)

		// Past twice the interval the age is worth a warning, nothing more.
		b.clock.Advance(2*core.HeartbeatIntervalDefault + time.Second)
		r := b.worker.Health(t.Context())
		require.True(t, r.Live)
		require.True(t, r.Ready)
		require.Equal(t, core.HealthWarn, r.Status)
		hb := check(t, r, core.HealthCheckHeartbeat)
		require.Equal(t, core.HealthWarn, hb.Status)
		require.Equal(t, 11.0, hb.Values["age_seconds"])

		// Past the stale threshold the other instances take this one's
		// streams: not ready. The loop keeps trying while the backend is
		// down, which a restart would not cure: live.
		b.clock.Set(clocktest.Start.Add(core.StaleInstanceThresholdDefault + time.Second))
		r = b.worker.Health(t.Context())
		require.True(t, r.Live, "a backend that is down is no reason to restart")
		require.False(t, r.Ready)
		require.Equal(t, core.HealthFailing, r.Status)
		hb = check(t, r, core.HealthCheckHeartbeat)
		require.Equal(t, core.HealthFailing, hb.Status)
		require.False(t, hb.Liveness)
		require.Contains(t, hb.Message, "past the stale threshold (30s)")
		require.Equal(t, core.HealthOK, check(t, r, core.HealthCheckRunning).Status)
	})

	t.Run("LagOverMaxPendingAgeIsNotReadyButLive", func(t *testing.T) {
		t.Parallel()

		b := setupHealth(t, core.Options{Health: core.HealthOptions{MaxPendingAge: time.Minute}}, withStats)
		b.stats.set(nil, ports.PerspectiveLag{Perspective: "pings", Pending: 7, OldestAge: 2 * time.Minute})
		b.start(t)

		r := b.worker.Health(t.Context())
		require.True(t, r.Live, "lag is the cluster's: a restart would not help")
		require.False(t, r.Ready)
		lag := check(t, r, core.HealthCheckLag)
		require.Equal(t, core.HealthFailing, lag.Status)
		require.False(t, lag.Liveness)
		require.Equal(t, "the oldest pending event waited 2m0s, past Options.Health.MaxPendingAge (1m0s); 7 pending", lag.Message)
		require.Equal(t, map[string]any{
			"oldest_pending_age_seconds": 120.0,
			"pending":                    int64(7),
			"max_pending_age_seconds":    60.0,
			"read_at":                    clocktest.Start,
			"perspectives":               []map[string]any{{"perspective": "pings", "pending": int64(7), "oldest_age_seconds": 120.0}},
		}, lag.Values)

		// The figures are read at most once per Telemetry.StatsInterval.
		b.stats.set(nil, ports.PerspectiveLag{Perspective: "pings", Pending: 1, OldestAge: time.Second})
		require.False(t, b.worker.Health(t.Context()).Ready, "the figures of the first read still stand")
		require.Equal(t, 1, b.stats.readCount())
		b.clock.Advance(core.StatsIntervalDefault)
		r = b.worker.Health(t.Context())
		require.True(t, r.Ready)
		require.Equal(t, "the oldest pending event waited 1s; 1 pending", check(t, r, core.HealthCheckLag).Message)
		require.Equal(t, 2, b.stats.readCount())
	})

	t.Run("LagReadErrorWarns", func(t *testing.T) {
		t.Parallel()

		b := setupHealth(t, core.Options{Health: core.HealthOptions{MaxPendingAge: time.Minute}}, withStats)
		b.stats.set(errBackendDown)
		b.start(t)

		r := b.worker.Health(t.Context())
		require.True(t, r.Ready, "figures that cannot be read are no lag")
		lag := check(t, r, core.HealthCheckLag)
		require.Equal(t, core.HealthWarn, lag.Status)
		require.Equal(t, "reading the backlog: backend down", lag.Message)
	})

	t.Run("LagReadBoundedByContext", func(t *testing.T) {
		t.Parallel()

		release := make(chan struct{})
		b := setupHealth(t, core.Options{}, func(*fakeStats) ports.Stats { return blockingStats{release} })
		t.Cleanup(func() { close(release) }) // runs before the worker's Stop
		b.start(t)

		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		r := b.worker.Health(ctx)
		require.True(t, r.Ready)
		lag := check(t, r, core.HealthCheckLag)
		require.Equal(t, core.HealthWarn, lag.Status)
		require.Equal(t, "reading the backlog: context canceled", lag.Message)
	})

	t.Run("Running", func(t *testing.T) {
		t.Parallel()

		b := setupHealth(t, core.Options{}, noStats)
		b.start(t)

		// Probes and operators may ask at once.
		var wg sync.WaitGroup
		reports := make([]core.HealthReport, 4)
		for i := range reports {
			wg.Go(func() { reports[i] = b.worker.Health(t.Context()) })
		}
		wg.Wait()
		for _, r := range reports {
			require.True(t, r.Live)
			require.True(t, r.Ready)
			require.Equal(t, core.HealthOK, r.Status)
			require.Equal(t, map[string]core.HealthStatus{
				core.HealthCheckRunning:      core.HealthOK,
				core.HealthCheckHeartbeat:    core.HealthOK,
				core.HealthCheckStartupScan:  core.HealthOK,
				core.HealthCheckLag:          core.HealthSkipped,
				core.HealthCheckListener:     core.HealthOK,
				core.HealthCheckStuckApplies: core.HealthOK,
			}, statuses(r))
		}
		hb := check(t, reports[0], core.HealthCheckHeartbeat)
		require.Contains(t, hb.Message, "last heartbeat 0s ago")
		require.Equal(t, 0.0, hb.Values["age_seconds"])
		require.Equal(t, map[string]any{"notifier": true, "healthy": true}, check(t, reports[0], core.HealthCheckListener).Values)
	})
}

// An apply that ignores its cancelled context is abandoned; while it runs
// on, the worker warns about it, naming its pair, and stays live and ready:
// its pair is retried meanwhile.
func TestHealthWarnsOfStuckApplies(t *testing.T) {
	t.Parallel()

	release := make(chan struct{})
	entered := make(chan struct{})
	var first sync.Once
	reg := pingRegistry(t, func(context.Context) {
		first.Do(func() {
			close(entered)
			<-release // ignores its context
		})
	})
	backend := memory.New(memory.Options{}).Backend()
	backend.Stats = nil
	abandoned := make(chan core.AbandonedApply, 1)
	w, err := core.New(backend, reg, &core.Options{
		Logger: slog.New(slog.DiscardHandler),
		Drain: core.DrainOptions{
			ApplyTimeout:      10 * time.Millisecond,
			ApplyAbandonGrace: 10 * time.Millisecond,
		},
		Hooks: core.Hooks{OnApplyAbandoned: func(a core.AbandonedApply) {
			select {
			case abandoned <- a:
			default:
			}
		}},
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.WithoutCancel(t.Context()))) })
	t.Cleanup(func() { close(release) }) // runs first

	stream := uuid.New()
	_, err = reg.Append(t.Context(), backend.Events, stream, ports.ExpectNoStream, pinged{N: 1})
	require.NoError(t, err)
	await(t, entered, "the apply")
	a := await(t, abandoned, "the abandonment")
	require.Equal(t, stream, a.StreamID)

	r := w.Health(t.Context())
	require.True(t, r.Live)
	require.True(t, r.Ready)
	require.Equal(t, core.HealthWarn, r.Status)
	stuck := check(t, r, core.HealthCheckStuckApplies)
	require.Equal(t, core.HealthWarn, stuck.Status)
	require.Contains(t, stuck.Message, "1 abandoned apply still running: pings of stream "+stream.String()+" at version 1 for ")
	require.Equal(t, 1, stuck.Values["count"])
	applies, ok := stuck.Values["applies"].([]map[string]any)
	require.True(t, ok)
	require.Len(t, applies, 1)
	require.Equal(t, stream.String(), applies[0]["stream_id"])
	require.Equal(t, "pings", applies[0]["perspective"])
	require.Equal(t, int64(1), applies[0]["version"])
}

// While Stop drains the work in flight the worker stays live and ready: a
// probe failing then would cut the drain short.
func TestHealthWhileStopping(t *testing.T) {
	t.Parallel()

	release := make(chan struct{})
	entered := make(chan struct{})
	var first sync.Once
	reg := pingRegistry(t, func(context.Context) {
		first.Do(func() {
			close(entered)
			<-release
		})
	})
	backend := memory.New(memory.Options{}).Backend()
	backend.Stats = nil
	w, err := core.New(backend, reg, &core.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	_, err = reg.Append(t.Context(), backend.Events, uuid.New(), ports.ExpectNoStream, pinged{N: 1})
	require.NoError(t, err)
	await(t, entered, "the apply")

	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(context.WithoutCancel(t.Context())) }()
	// Stop begins on a goroutine of its own, which signals nothing.
	require.Eventually(t, func() bool {
		return check(t, w.Health(t.Context()), core.HealthCheckRunning).Status == core.HealthWarn
	}, 10*time.Second, time.Millisecond, "the worker reports that it stops")
	r := w.Health(t.Context())
	require.True(t, r.Live)
	require.True(t, r.Ready)
	running := check(t, r, core.HealthCheckRunning)
	require.Equal(t, "stopping: draining the work in flight", running.Message)
	require.Equal(t, "stopping", running.Values["state"])

	close(release)
	require.NoError(t, await(t, stopped, "Stop"))
	require.False(t, w.Health(t.Context()).Live)
}
