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
