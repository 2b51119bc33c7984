package enginetest_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

func rewindOptions(t *testing.T) core.Options {
	o := quietOptions(t)
	o.Rewind.Debounce = 20 * time.Millisecond
	o.Rewind.MaxDebounce = 100 * time.Millisecond
	o.Rewind.LockTimeout = 5 * time.Second
	o.Rewind.KeepAlive = time.Second
	return o
}

// appendAt appends added events at explicit versions and returns them.
func appendAt(t *testing.T, reg *core.Registry, b ports.Backend, stream uuid.UUID, versions ...int64) []ports.Event {
	t.Helper()
	require.NoError(t, reg.RegisterSubscriptions(t.Context(), b.Events))
	evs := make([]ports.NewEvent, 0, len(versions))
	for _, v := range versions {
		ne, err := reg.Encode(added{N: int(v)})
		require.NoError(t, err)
		ne.Version = v
		evs = append(evs, ne)
	}
	res, err := b.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{StreamID: stream, Events: evs})
	require.NoError(t, err)
	return res.Events
}

// waitForVersion waits until a batch applied through version v is reported
// on processed.
func waitForVersion(t *testing.T, processed <-chan core.PerspectiveEventProcessed, v int64) {
	t.Helper()
	for e := waitFor(t, processed, "the first events"); e.LastVersion != v; e = waitFor(t, processed, "the first events") {
	}
}

// A burst of late events within the debounce window causes one rewind.
func TestRewindDebounceCoalescesBurst(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	reg := testRegistry(t)
	stream := uuid.New()
	rewinds := make(chan core.RewindInfo, 10)
	var rewindCount atomic.Int64
	opts := rewindOptions(t)
	opts.Rewind.Debounce = 300 * time.Millisecond
	opts.Rewind.MaxDebounce = 2 * time.Second
	processed := reportProcessed(&opts, 100)
	opts.Hooks.OnRewind = func(i core.RewindInfo) { rewindCount.Add(1); rewinds <- i }
	startWorker(t, b, reg, opts)
	appendAt(t, reg, b, stream, 1, 4, 6)
	waitForVersion(t, processed, 6)
	appendAt(t, reg, b, stream, 2)
	appendAt(t, reg, b, stream, 3)
	appendAt(t, reg, b, stream, 5)
	info := waitFor(t, rewinds, "the rewind")
	require.Equal(t, int64(2), info.TriggerVersion, "the earliest late event triggers")
	require.Equal(t, 3, info.New, "one rewind applied the whole burst")
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, loadTotal(t, b, stream).Seen)
	require.Equal(t, int64(1), rewindCount.Load())
}

// A rewind waits while another instance holds the pair's lock.
func TestRewindDeferredWhileLocked(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	reg := testRegistry(t)
	stream := uuid.New()
	rewinds := make(chan core.RewindInfo, 10)
	var released atomic.Bool
	var rewoundWhileLocked atomic.Bool
	opts := rewindOptions(t)
	processed := reportProcessed(&opts, 100)
	opts.Hooks.OnRewind = func(i core.RewindInfo) {
		if !released.Load() {
			rewoundWhileLocked.Store(true)
		}
		rewinds <- i
	}
	other := uuid.New()
	lock := &ports.StreamLockParams{StreamID: stream, Perspective: "total", InstanceID: other, Reason: "rewind", Duration: time.Hour}
	ok, err := b.Rewind.StreamLockAcquire(t.Context(), lock)
	require.NoError(t, err)
	require.True(t, ok)
	idleTicks := make(chan struct{}, 1)
	opts.Hooks.OnBatchCycleComplete = func(core.BatchCycle) {
		select {
		case idleTicks <- struct{}{}:
		default:
		}
	}
	startWorker(t, b, reg, opts)
	appendAt(t, reg, b, stream, 1, 3)
	waitForVersion(t, processed, 3)
	appendAt(t, reg, b, stream, 2)
	// Let several cycles pass with the lock held.
	for range 5 {
		waitFor(t, idleTicks, "a cycle")
	}
	require.True(t, cursorOf(t, b, stream).Status.Has(ports.CursorRewindRequired))
	released.Store(true)
	require.NoError(t, b.Rewind.StreamLockRelease(t.Context(), lock))
	waitFor(t, rewinds, "the deferred rewind")
	require.False(t, rewoundWhileLocked.Load())
	require.Equal(t, []int64{1, 2, 3}, loadTotal(t, b, stream).Seen)
}

// The blocking startup scan repairs a rewind a previous instance left
// behind before it signals StartupScanComplete.
func TestStartupScanRepairsInterruptedRewind(t *testing.T) {
	t.Parallel()

	for _, mode := range []core.StartupScanMode{core.StartupScanBlocking, core.StartupScanBackground} {
		t.Run(map[core.StartupScanMode]string{core.StartupScanBlocking: "Blocking", core.StartupScanBackground: "Background"}[mode], func(t *testing.T) {
			t.Parallel()
			b := memory.New(memory.Options{}).Backend()
			reg := testRegistry(t)
			stream := uuid.New()
			opts := rewindOptions(t)
			processed := reportProcessed(&opts, 100)
			first := startWorker(t, b, reg, opts)
			appendAt(t, reg, b, stream, 1, 3)
			waitForVersion(t, processed, 3)
			require.NoError(t, first.Stop(t.Context()))
			// The late event arrives while no instance runs, and its work
			// is dead-lettered, as if a crash had left the flag behind.
			appendAt(t, reg, b, stream, 2)
			require.True(t, cursorOf(t, b, stream).Status.Has(ports.CursorRewindRequired))

			rewinds := make(chan core.RewindInfo, 10)
			opts2 := rewindOptions(t)
			opts2.Rewind.StartupScan = mode
			opts2.Hooks.OnRewind = func(i core.RewindInfo) { rewinds <- i }
			second := startWorker(t, b, reg, opts2)
			waitFor(t, second.StartupScanComplete(), "the startup scan")
			if mode == core.StartupScanBlocking {
				require.False(t, cursorOf(t, b, stream).Status.Has(ports.CursorRewindRequired), "repaired before the signal")
				require.Equal(t, []int64{1, 2, 3}, loadTotal(t, b, stream).Seen)
			}
			waitFor(t, rewinds, "the repair")
		})
	}
}

// WaitForStream waits for an event appended below a perspective's position
// (a late event) to be applied by its rewind, or given up on, not only for
// the model to reach the version.
func TestWaitForStreamWaitsForLateEvents(t *testing.T) {
	t.Parallel()

	for _, disabled := range []bool{false, true} {
		name := "Rewound"
		if disabled {
			name = "DeadLetteredWithRewindsOff"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := memory.New(memory.Options{}).Backend()
			reg := testRegistry(t)
			opts := rewindOptions(t)
			opts.Rewind.Disabled = disabled
			opts.Rewind.Debounce = 200 * time.Millisecond // the rewind comes well after the append
			opts.Rewind.MaxDebounce = time.Second
			deadLettered := make(chan ports.DeadLetter, 1)
			opts.Hooks.OnDeadLettered = func(dl ports.DeadLetter) { deadLettered <- dl }
			w := startWorker(t, b, reg, opts)
			ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
			defer cancel()

			stream := uuid.New()
			appendAt(t, reg, b, stream, 1, 3)
			require.NoError(t, w.WaitForStream(ctx, stream, 3))
			require.Equal(t, 4, loadTotal(t, b, stream).Sum)

			appendAt(t, reg, b, stream, 2)
			require.NoError(t, w.WaitForStream(ctx, stream, 3))
			if disabled {
				// Nothing to wait for: the late event is never applied.
				dl := waitFor(t, deadLettered, "the late event's dead letter")
				require.Equal(t, ports.ReasonLate, dl.Reason)
				require.Equal(t, 4, loadTotal(t, b, stream).Sum, "the late event is dead-lettered, never applied")
				return
			}
			require.Equal(t, 6, loadTotal(t, b, stream).Sum, "WaitForStream returned once the late event was applied")
		})
	}
}

// A rewind whose first replay fails on an event applied long ago counts,
// once a retry succeeds, only the late event as new: the row the failure
// stored for the applied event (to charge it the attempt) does not make it
// new, and its stages do not fire again.
func TestRewindRetriedAfterReplayFailureCountsOnlyNewEvents(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	var (
		mu      sync.Mutex
		applies = map[int64]int{}
		stages  = map[core.Stage][]int64{}
	)
	reg := registryWith(t, func(ctx context.Context, m total, e added) (total, error) {
		ev, _ := core.EventFromContext(ctx)
		mu.Lock()
		applies[ev.Version]++
		n := applies[ev.Version]
		mu.Unlock()
		if ev.Version == 1 && n == 2 {
			return m, errors.New("the first replay of version 1 fails")
		}
		m.Sum += e.N
		m.Seen = append(m.Seen, ev.Version)
		return m, nil
	})
	for _, stage := range []core.Stage{core.PrePerspective, core.PostPerspective} {
		require.NoError(t, core.AddReceptor(reg, stage, core.Inline, func(_ context.Context, _ added, info core.StageInfo) error {
			mu.Lock()
			defer mu.Unlock()
			stages[info.Stage] = append(stages[info.Stage], info.Event.Version)
			return nil
		}))
	}
	stream := uuid.New()
	opts := rewindOptions(t)
	opts.Retries.Event = core.Backoff{Initial: 20 * time.Millisecond, Max: 20 * time.Millisecond, Multiplier: 1}
	processed := reportProcessed(&opts, 100)
	failures := make(chan ports.Failure, 10)
	opts.Hooks.OnFailure = func(f ports.Failure) { failures <- f }
	rewinds := make(chan core.RewindInfo, 10)
	opts.Hooks.OnRewind = func(i core.RewindInfo) { rewinds <- i }
	startWorker(t, b, reg, opts)
	appendAt(t, reg, b, stream, 1, 3)
	waitForVersion(t, processed, 3)

	appendAt(t, reg, b, stream, 2)
	f := waitFor(t, failures, "the failed replay")
	require.Equal(t, int64(1), f.FailedEventVersion, "the replay failed on version 1, applied long ago")
	info := waitFor(t, rewinds, "the retried rewind")

	require.Equal(t, 3, info.Replayed)
	require.Equal(t, 1, info.New, "only version 2 had never been applied")
	require.Equal(t, []int64{1, 2, 3}, loadTotal(t, b, stream).Seen)
	mu.Lock()
	defer mu.Unlock()
	require.ElementsMatch(t, []int64{1, 2, 3}, stages[core.PrePerspective], "PrePerspective fired once per event")
	require.ElementsMatch(t, []int64{1, 2, 3}, stages[core.PostPerspective], "PostPerspective fired once per event")
}
