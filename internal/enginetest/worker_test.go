package enginetest_test

import (
	"context"
	"encoding/json"
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
	"github.com/vantage-go/vantage/core/completion"
	"github.com/vantage-go/vantage/ports"
)

const waitTimeout = 20 * time.Second

type added struct {
	N int `json:"n"`
}

type total struct {
	Sum    int     `json:"sum"`
	Events int     `json:"events"`
	Seen   []int64 `json:"seen"`
}

// testRegistry registers added and a "total" perspective that sums them and
// records the versions it applied.
func testRegistry(t *testing.T) *core.Registry {
	t.Helper()
	return registryWith(t, func(ctx context.Context, m total, e added) (total, error) {
		ev, _ := core.EventFromContext(ctx)
		m.Sum += e.N
		m.Events++
		m.Seen = append(m.Seen, ev.Version)
		return m, nil
	})
}

// registryWith registers added and a "total" perspective that applies it
// with apply.
func registryWith(t *testing.T, apply func(context.Context, total, added) (total, error)) *core.Registry {
	t.Helper()
	reg := core.NewRegistry()
	require.NoError(t, core.RegisterEvent[added](reg, "added"))
	p := core.NewPerspective[total]("total")
	core.MustHandle(p, apply)
	require.NoError(t, reg.AddPerspective(p))
	return reg
}

// appendAdded appends one added event per n to stream.
func appendAdded(t *testing.T, reg *core.Registry, b ports.Backend, stream uuid.UUID, ns ...int) *ports.EventsAppendResult {
	t.Helper()
	evs := make([]any, len(ns))
	for i, n := range ns {
		evs[i] = added{N: n}
	}
	res, err := reg.Append(t.Context(), b.Events, stream, 0, evs...)
	require.NoError(t, err)
	return res
}

func quietOptions(t *testing.T) core.Options {
	return core.Options{
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		Drain: core.DrainOptions{
			PollingInterval:              10 * time.Millisecond,
			NotifyHealthyPollingInterval: 10 * time.Millisecond,
			Batcher:                      core.DrainBatcherOptions{SlidingWindow: time.Millisecond, MaxWait: 5 * time.Millisecond},
		},
		Claims: core.ClaimOptions{
			Interval:              10 * time.Millisecond,
			NotifyHealthyInterval: 10 * time.Millisecond,
			HeartbeatInterval:     100 * time.Millisecond,
		},
	}
}

// wakeOnlyOptions is quietOptions with polls, periodic claims and looks for
// rebuild requests an hour apart, heartbeats a minute apart and instances
// stale only after an hour: once started, the worker claims only when
// something wakes it.
func wakeOnlyOptions(t *testing.T) core.Options {
	o := quietOptions(t)
	o.Drain.PollingInterval = time.Hour
	o.Drain.NotifyHealthyPollingInterval = time.Hour
	o.Claims.Interval = time.Hour
	o.Claims.NotifyHealthyInterval = time.Hour
	o.Claims.HeartbeatInterval = time.Minute
	o.Claims.StaleInstanceThreshold = time.Hour
	o.Rewind.RebuildPollInterval = time.Hour
	return o
}

// reportProcessed sets opts' OnPerspectiveEventProcessed hook to send every
// report on the returned channel, which buffers size of them.
func reportProcessed(opts *core.Options, size int) <-chan core.PerspectiveEventProcessed {
	processed := make(chan core.PerspectiveEventProcessed, size)
	opts.Hooks.OnPerspectiveEventProcessed = func(e core.PerspectiveEventProcessed) { processed <- e }
	return processed
}

func startWorker(t *testing.T, b ports.Backend, reg *core.Registry, opts core.Options) *core.Worker {
	t.Helper()
	w, err := core.New(b, reg, &opts)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})
	return w
}

func waitFor[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func loadTotal(t *testing.T, b ports.Backend, stream uuid.UUID) total {
	t.Helper()
	m, err := b.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: stream, Perspective: "total"})
	require.NoError(t, err)
	var tot total
	require.NoError(t, json.Unmarshal(m.Data, &tot))
	return tot
}

// cursorOf returns the one cursor of stream, the "total" perspective's.
func cursorOf(t *testing.T, b ports.Backend, stream uuid.UUID) ports.Cursor {
	t.Helper()
	cs, err := b.Cursors.CursorsGet(t.Context(), &ports.CursorsGetParams{StreamIDs: []uuid.UUID{stream}, Perspective: "total"})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	return cs[0]
}

func TestNewValidates(t *testing.T) {
	t.Parallel()

	reg := testRegistry(t)
	_, err := core.New(ports.Backend{}, reg, nil)
	require.ErrorContains(t, err, "ports.Backend.Claimer is nil")
	require.ErrorContains(t, err, "ports.Backend.Models is nil")
	require.NotContains(t, err.Error(), "Notifier", "the Notifier is optional")

	b := memory.New(memory.Options{}).Backend()
	_, err = core.New(b, nil, nil)
	require.ErrorContains(t, err, "nil registry")

	_, err = core.New(b, reg, &core.Options{Claims: core.ClaimOptions{MaxStreamsPerBatch: -1}})
	require.ErrorContains(t, err, "Options.Claims.MaxStreamsPerBatch must be positive")
}

func TestStartStopLifecycle(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	w, err := core.New(b, testRegistry(t), ptr(quietOptions(t)))
	require.NoError(t, err)
	require.True(t, w.IsIdle(), "a new worker is idle")
	require.NoError(t, w.Start(t.Context()))
	require.NoError(t, w.Start(t.Context()), "second Start is a no-op")
	instances, err := b.Admin.InstancesList(t.Context())
	require.NoError(t, err)
	require.Len(t, instances, 1)
	require.Equal(t, w.InstanceID(), instances[0].ID)

	require.NoError(t, w.Stop(t.Context()))
	require.NoError(t, w.Stop(t.Context()), "second Stop is a no-op")
	require.ErrorIs(t, w.Start(t.Context()), core.ErrStopped)
	instances, err = b.Admin.InstancesList(t.Context())
	require.NoError(t, err)
	require.Empty(t, instances, "Stop deregisters the instance")

	never, err := core.New(b, testRegistry(t), nil)
	require.NoError(t, err)
	require.NoError(t, never.Stop(t.Context()), "Stop without Start")
}

func TestConcurrentStartStop(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	w, err := core.New(b, testRegistry(t), ptr(quietOptions(t)))
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { _ = w.Start(t.Context()) })
		wg.Go(func() { _ = w.Stop(t.Context()) })
	}
	wg.Wait()
	require.NoError(t, w.Stop(t.Context()))
}

func ptr[T any](v T) *T { return &v }

// silentNotifier never wakes anyone, so only polls and explicit requests do.
type silentNotifier struct{}

func (silentNotifier) NotifierListen(context.Context, *ports.NotifierListenParams) (<-chan ports.Wake, error) {
	return nil, errors.New("notifications disabled in this test")
}
func (silentNotifier) NotifierHealthy() bool { return false }

// claimWatcher reports the streams of every claim once it returned.
type claimWatcher struct {
	ports.WorkClaimer
	claims chan []uuid.UUID
}

func (c claimWatcher) WorkClaim(ctx context.Context, params *ports.WorkClaimParams) (*ports.WorkClaimResult, error) {
	res, err := c.WorkClaimer.WorkClaim(ctx, params)
	if err == nil {
		c.claims <- res.StreamIDs
	}
	return res, err
}

// TestRequestImmediatePollWakes appends once the worker's start-up claim
// found nothing: with notifications off and hour-long poll and claim
// intervals, only RequestImmediatePoll can make it claim and apply the
// event.
func TestRequestImmediatePollWakes(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	b.Notifier = silentNotifier{}
	claims := make(chan []uuid.UUID, 10)
	b.Claimer = claimWatcher{WorkClaimer: b.Claimer, claims: claims}
	opts := wakeOnlyOptions(t)
	processed := reportProcessed(&opts, 10)
	reg := testRegistry(t)
	w := startWorker(t, b, reg, opts)
	require.Empty(t, waitFor(t, claims, "the start-up claim"))

	stream := uuid.New()
	appendAdded(t, reg, b, stream, 5)
	w.RequestImmediatePoll()
	w.RequestImmediatePoll() // redundant calls coalesce
	require.Equal(t, []uuid.UUID{stream}, waitFor(t, claims, "the requested claim"))
	e := waitFor(t, processed, "the requested poll to apply the event")
	require.Equal(t, stream, e.StreamID)
	require.Equal(t, 5, loadTotal(t, b, stream).Sum)
}

func TestNotificationWakes(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	opts := wakeOnlyOptions(t)
	processed := reportProcessed(&opts, 10)
	reg := testRegistry(t)
	startWorker(t, b, reg, opts)

	appendAdded(t, reg, b, uuid.New(), 1, 2)
	e := waitFor(t, processed, "the append's notification to wake the worker")
	require.Equal(t, 2, e.EventCount)
}

func TestIdleHooks(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	started := make(chan struct{}, 10)
	idle := make(chan struct{}, 10)
	idleTicks := make(chan struct{}, 1)
	opts := quietOptions(t)
	opts.Hooks.OnWorkProcessingStarted = func() { started <- struct{}{} }
	opts.Hooks.OnWorkProcessingIdle = func() { idle <- struct{}{} }
	opts.Hooks.OnBatchCycleComplete = func(c core.BatchCycle) {
		if c.Streams == 0 {
			select {
			case idleTicks <- struct{}{}:
			default:
			}
		}
	}
	reg := testRegistry(t)
	w := startWorker(t, b, reg, opts)
	waitFor(t, idleTicks, "OnBatchCycleComplete on an idle tick")

	appendAdded(t, reg, b, uuid.New(), 1)
	waitFor(t, started, "OnWorkProcessingStarted")
	waitFor(t, idle, "OnWorkProcessingIdle")
	require.True(t, w.IsIdle())
	require.GreaterOrEqual(t, w.ConsecutiveEmptyPolls(), 2)
}

// countingModels counts saves, to check PerspectiveBatchSize.
type countingModels struct {
	ports.ModelStore
	saves atomic.Int64
}

func (c *countingModels) ModelSave(ctx context.Context, p *ports.ModelSaveParams) error {
	c.saves.Add(1)
	return c.ModelStore.ModelSave(ctx, p)
}

func TestPerspectiveBatchSizeChunksSaves(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	models := &countingModels{ModelStore: b.Models}
	b.Models = models
	b.ModelBatch = nil // every save goes through countingModels
	reg := testRegistry(t)
	stream := uuid.New()
	// Appended before the worker starts, so one fetch sees all ten.
	appendAdded(t, reg, b, stream, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	opts := quietOptions(t)
	opts.Drain.PerspectiveBatchSize = 3
	processed := reportProcessed(&opts, 10)
	startWorker(t, b, reg, opts)
	e := waitFor(t, processed, "the stream to be applied")
	require.Equal(t, 10, e.EventCount)
	require.Equal(t, int64(4), models.saves.Load(), "3+3+3+1")
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, loadTotal(t, b, stream).Seen)
}

func TestInstantCompletion(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	flushed := make(chan core.CompletionsFlushed, 10)
	opts := quietOptions(t)
	opts.Completion = completion.InstantFactory
	opts.Hooks.OnCompletionsFlushed = func(c core.CompletionsFlushed) { flushed <- c }
	reg := testRegistry(t)
	startWorker(t, b, reg, opts)
	stream := uuid.New()
	appendAdded(t, reg, b, stream, 1, 2)
	c := waitFor(t, flushed, "an instant completion")
	require.Len(t, c.Completions, 1)
	require.Equal(t, int64(2), c.Completions[0].LastVersion)
	require.True(t, cursorOf(t, b, stream).Status.Has(ports.CursorCompleted))
}

func TestWaitForStream(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	reg := testRegistry(t)
	w := startWorker(t, b, reg, quietOptions(t))
	stream := uuid.New()
	res := appendAdded(t, reg, b, stream, 1, 2, 3)
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	require.NoError(t, w.WaitForStream(ctx, stream, res.Events[2].Version))
	require.Equal(t, 6, loadTotal(t, b, stream).Sum, "the caller reads its own writes")

	expired, cancel2 := context.WithCancel(t.Context())
	cancel2()
	require.ErrorIs(t, w.WaitForStream(expired, uuid.New(), 1), context.Canceled)
}

func TestStopFlushesCompletions(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	opts := quietOptions(t)
	// Nothing flushes before Stop: idle ticks are an hour apart.
	opts.Drain.PollingInterval = time.Hour
	opts.Drain.NotifyHealthyPollingInterval = time.Hour
	processed := reportProcessed(&opts, 10)
	reg := testRegistry(t)
	w := startWorker(t, b, reg, opts)
	stream := uuid.New()
	appendAdded(t, reg, b, stream, 1)
	waitFor(t, processed, "the event to be applied")
	require.NoError(t, w.Stop(t.Context()))
	cursor := cursorOf(t, b, stream)
	require.True(t, cursor.Status.Has(ports.CursorCompleted), "the completion was flushed at Stop")
	require.Equal(t, int64(1), cursor.LastVersion)
}

// The perspectives of one stream apply its events in parallel: each apply
// below waits until the other perspective's has started.
func TestStreamPerspectivesApplyInParallel(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	var (
		mu      sync.Mutex
		arrived = map[string]bool{}
		both    = make(chan struct{})
	)
	reg := core.NewRegistry()
	require.NoError(t, core.RegisterEvent[added](reg, "added"))
	for _, name := range []string{"left", "right"} {
		p := core.NewPerspective[total](name)
		core.MustHandle(p, func(_ context.Context, m total, e added) (total, error) {
			mu.Lock()
			if !arrived[name] {
				if arrived[name] = true; len(arrived) == 2 {
					close(both)
				}
			}
			mu.Unlock()
			select {
			case <-both:
			case <-time.After(waitTimeout):
				t.Errorf("%s applied alone: the perspectives of a stream ran one after another", name)
			}
			m.Sum += e.N
			return m, nil
		})
		require.NoError(t, reg.AddPerspective(p))
	}
	opts := quietOptions(t)
	processed := reportProcessed(&opts, 2)
	startWorker(t, b, reg, opts)
	appendAdded(t, reg, b, uuid.New(), 1)
	got := []string{waitFor(t, processed, "a perspective").Perspective, waitFor(t, processed, "the other").Perspective}
	require.ElementsMatch(t, []string{"left", "right"}, got)
}
