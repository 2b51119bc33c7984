package enginetest_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// recordHandler sends every log record's message and attributes to a
// channel.
type recordHandler struct{ records chan<- slog.Record }

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.records <- r.Clone()
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

// TestPanickingReceptorsAreLoggedErrors registers an inline and a detached
// receptor that panic: each panic is logged as the receptor's error, as a
// returned error would be, and the worker goes on applying events (a panic
// in a detached receptor's goroutine would otherwise end the process).
func TestPanickingReceptorsAreLoggedErrors(t *testing.T) {
	t.Parallel()

	for _, mode := range []core.Mode{core.Inline, core.Detached} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b := memory.New(memory.Options{}).Backend()
			records := make(chan slog.Record, 100)
			opts := quietOptions(t)
			opts.Logger = slog.New(recordHandler{records})
			processed := reportProcessed(&opts, 10)
			reg := testRegistry(t)
			require.NoError(t, core.AddReceptor(reg, core.PostPerspective, mode, func(context.Context, added, core.StageInfo) error {
				panic("receptor bug")
			}))
			startWorker(t, b, reg, opts)

			first, second := uuid.New(), uuid.New()
			appendAdded(t, reg, b, first, 1)
			require.Equal(t, first, waitFor(t, processed, "the first event applied").StreamID)
			for {
				r := waitFor(t, records, "the receptor's panic logged")
				var logged string
				r.Attrs(func(a slog.Attr) bool {
					if a.Key == "error" {
						logged = a.Value.String()
					}
					return true
				})
				if logged != "" {
					require.Contains(t, r.Message, "receptor failed")
					require.Contains(t, logged, "receptor panicked: receptor bug")
					break
				}
			}
			appendAdded(t, reg, b, second, 2)
			require.Equal(t, second, waitFor(t, processed, "the next event applied").StreamID)
			require.Equal(t, 2, loadTotal(t, b, second).Sum)
		})
	}
}

// flakyStages fails the first claims of each per-perspective stage with
// ports.ErrTransient, as a database that lost its connections would.
type flakyStages struct {
	ports.LifecycleStore
	mu    sync.Mutex
	fails map[ports.LifecycleStage]int
}

func (f *flakyStages) LifecycleClaim(ctx context.Context, p *ports.LifecycleClaimParams) ([]uuid.UUID, error) {
	f.mu.Lock()
	if f.fails[p.Stage] > 0 {
		f.fails[p.Stage]--
		f.mu.Unlock()
		return nil, fmt.Errorf("claiming: connection reset: %w", ports.ErrTransient)
	}
	f.mu.Unlock()
	return f.LifecycleStore.LifecycleClaim(ctx, p)
}

// A stage whose claim fails on a backend error is not lost: a failed
// PrePerspective claim holds the apply back until a retry claims it (the
// stage still runs first), and a failed PostPerspective claim is retried in
// place once the model is saved.
func TestStageClaimFailuresAreRetried(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	b.Lifecycle = &flakyStages{LifecycleStore: b.Lifecycle, fails: map[ports.LifecycleStage]int{
		ports.StagePrePerspective:  2,
		ports.StagePostPerspective: 2,
	}}
	var pre, post, applies, appliedBeforePre atomic.Int64
	reg := registryWith(t, func(_ context.Context, m total, e added) (total, error) {
		applies.Add(1)
		if pre.Load() == 0 {
			appliedBeforePre.Add(1)
		}
		m.Sum += e.N
		return m, nil
	})
	require.NoError(t, core.AddReceptor(reg, core.PrePerspective, core.Inline, func(context.Context, added, core.StageInfo) error {
		pre.Add(1)
		return nil
	}))
	posted := make(chan struct{}, 10)
	require.NoError(t, core.AddReceptor(reg, core.PostPerspective, core.Inline, func(context.Context, added, core.StageInfo) error {
		post.Add(1)
		posted <- struct{}{}
		return nil
	}))
	w := startWorker(t, b, reg, quietOptions(t))

	stream := uuid.New()
	appendAdded(t, reg, b, stream, 5)
	waitFor(t, posted, "PostPerspective after its claim failed twice")
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	require.NoError(t, w.WaitLifecycle(ctx))

	require.Equal(t, int64(1), pre.Load(), "PrePerspective ran once")
	require.Zero(t, appliedBeforePre.Load(), "nothing was applied before PrePerspective")
	require.Equal(t, int64(1), applies.Load())
	require.Equal(t, int64(1), post.Load(), "PostPerspective ran once")
	require.Equal(t, 5, loadTotal(t, b, stream).Sum)
}

// heldCompletions holds the first completion of stream in the backend
// until release is closed, after closing entered.
type heldCompletions struct {
	ports.CursorStore
	stream  uuid.UUID
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (h *heldCompletions) WorkComplete(ctx context.Context, p *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	for _, c := range p.Completions {
		if c.StreamID != h.stream {
			continue
		}
		first := false
		h.once.Do(func() { first = true })
		if first {
			close(h.entered)
			select {
			case <-h.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		break
	}
	return h.CursorStore.WorkComplete(ctx, p)
}

// A graceful Stop runs the terminal stages that the startup scan's repair
// of an interrupted rewind queued, even when Stop begins while they wait
// for the repair's completion to be acknowledged: the late event's
// PostAllPerspectives and PostLifecycle fire before Stop returns.
func TestStopRunsStagesTheStartupRepairQueued(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	reg := testRegistry(t)
	var mu sync.Mutex
	fired := map[core.Stage][]int64{}
	for _, stage := range []core.Stage{core.PostAllPerspectives, core.PostLifecycle} {
		require.NoError(t, core.AddReceptor(reg, stage, core.Inline, func(_ context.Context, _ added, info core.StageInfo) error {
			mu.Lock()
			defer mu.Unlock()
			fired[info.Stage] = append(fired[info.Stage], info.Event.Version)
			return nil
		}))
	}
	stream, late := interruptedRewind(t, b, reg)

	held := &heldCompletions{CursorStore: b.Cursors, stream: stream, entered: make(chan struct{}), release: make(chan struct{})}
	b2 := b
	b2.Cursors = held
	scanned := make(chan struct{})
	opts2 := rewindOptions(t)
	opts2.Claims.Disabled = true // only the startup scan takes up the pair
	opts2.Hooks.OnStartupScanComplete = func() { close(scanned) }
	second := startWorker(t, b2, reg, opts2)
	waitFor(t, held.entered, "the repair's completion to reach the backend")

	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), waitTimeout)
		defer cancel()
		stopped <- second.Stop(ctx)
	}()
	// The scan ends once Stop cancelled it; only then is the completion
	// acknowledged.
	waitFor(t, scanned, "the startup scan to end at Stop")
	close(held.release)
	require.NoError(t, waitFor(t, stopped, "Stop"))

	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, fired[core.PostAllPerspectives], late.Version, "the late event's PostAllPerspectives fired before Stop returned")
	require.Contains(t, fired[core.PostLifecycle], late.Version, "the late event's PostLifecycle fired before Stop returned")
}

// interruptedRewind applies versions 1 and 3 of a new stream on a worker
// that then stops, and appends version 2, late, as if a crash had left its
// rewind undone. It returns the stream and the late event.
func interruptedRewind(t *testing.T, b ports.Backend, reg *core.Registry) (uuid.UUID, ports.Event) {
	t.Helper()
	stream := uuid.New()
	opts := rewindOptions(t)
	processed := reportProcessed(&opts, 100)
	first := startWorker(t, b, reg, opts)
	appendAt(t, reg, b, stream, 1, 3)
	waitForVersion(t, processed, 3)
	require.NoError(t, first.Stop(t.Context()))
	late := appendAt(t, reg, b, stream, 2)[0]
	require.True(t, cursorOf(t, b, stream).Status.Has(ports.CursorRewindRequired))
	return stream, late
}

// heldClaims holds the first claim of stage in the backend until release
// is closed, after closing entered.
type heldClaims struct {
	ports.LifecycleStore
	stage   ports.LifecycleStage
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (h *heldClaims) LifecycleClaim(ctx context.Context, p *ports.LifecycleClaimParams) ([]uuid.UUID, error) {
	first := false
	if p.Stage == h.stage {
		h.once.Do(func() { first = true })
	}
	if first {
		close(h.entered)
		select {
		case <-h.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return h.LifecycleStore.LifecycleClaim(ctx, p)
}

// listenWatcher closes ended once the context its listener listens under
// ends: Stop ends it first, with every loop of the worker.
type listenWatcher struct {
	ports.Notifier
	once  sync.Once
	ended chan struct{}
}

func (n *listenWatcher) NotifierListen(ctx context.Context, p *ports.NotifierListenParams) (<-chan ports.Wake, error) {
	context.AfterFunc(ctx, func() { n.once.Do(func() { close(n.ended) }) })
	return n.Notifier.NotifierListen(ctx, p)
}

// A graceful Stop lets the PostPerspective stage of the events the startup
// scan's repair saved run to its end, even when Stop begins while the
// stage is being claimed: those events' rows complete, and nothing else
// would run the stage.
func TestStopRunsPostPerspectiveOfTheStartupRepair(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	reg := testRegistry(t)
	var mu sync.Mutex
	var fired []int64
	require.NoError(t, core.AddReceptor(reg, core.PostPerspective, core.Inline, func(_ context.Context, _ added, info core.StageInfo) error {
		mu.Lock()
		defer mu.Unlock()
		fired = append(fired, info.Event.Version)
		return nil
	}))
	_, late := interruptedRewind(t, b, reg)

	held := &heldClaims{LifecycleStore: b.Lifecycle, stage: ports.StagePostPerspective, entered: make(chan struct{}), release: make(chan struct{})}
	watcher := &listenWatcher{Notifier: b.Notifier, ended: make(chan struct{})}
	b2 := b
	b2.Lifecycle, b2.Notifier = held, watcher
	opts := rewindOptions(t)
	opts.Claims.Disabled = true // only the startup scan takes up the pair
	second := startWorker(t, b2, reg, opts)
	waitFor(t, held.entered, "the repair's PostPerspective claim")

	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), waitTimeout)
		defer cancel()
		stopped <- second.Stop(ctx)
	}()
	waitFor(t, watcher.ended, "Stop to end the worker's loops")
	close(held.release)
	require.NoError(t, waitFor(t, stopped, "Stop"))

	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, fired, late.Version, "the late event's PostPerspective fired before Stop returned")
}
