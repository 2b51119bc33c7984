package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// registry holds receptors for one event type, "added", applied by the
// perspectives of subscribers.
type registry struct {
	receptors map[Stage][]Receptor
}

func (r *registry) Receptors(s Stage, typ string) []Receptor {
	if typ != "added" {
		return nil
	}
	return r.receptors[s]
}

func (r *registry) HasReceptors(stages ...Stage) bool {
	for _, s := range stages {
		if len(r.receptors[s]) > 0 {
			return true
		}
	}
	return false
}

func (r *registry) Decode(e ports.Event) (any, error) { return string(e.Data), nil }

func (r *registry) Subscribers() map[string][]string { return map[string][]string{"added": {"p"}} }

// add registers a receptor at s in mode; calls records its calls.
func (r *registry) add(s Stage, mode Mode, fn func(ctx context.Context, event any, info Info) error) {
	if r.receptors == nil {
		r.receptors = map[Stage][]Receptor{}
	}
	n := 0
	for _, rs := range r.receptors {
		n += len(rs)
	}
	r.receptors[s] = append(r.receptors[s], Receptor{Index: n, Mode: mode, Call: fn})
}

type telemetry struct{ failed atomic.Int64 }

func (*telemetry) StartStage(ctx context.Context, _ Stage, _ string, _ []ports.Event) (context.Context, func(int, error)) {
	return ctx, func(int, error) {}
}

func (*telemetry) StageRan(context.Context, Stage, int, error) {}

func (t *telemetry) ReceptorFailed(context.Context, Stage, int, bool, error) { t.failed.Add(1) }

// failingClaims fails the claims of a stage with a transient error while
// failing is set, and sends on tried after each failed claim.
type failingClaims struct {
	ports.LifecycleStore
	failing atomic.Bool
	tried   chan struct{}
}

func (f *failingClaims) LifecycleClaim(ctx context.Context, p *ports.LifecycleClaimParams) ([]uuid.UUID, error) {
	if f.failing.Load() {
		select {
		case f.tried <- struct{}{}:
		default:
		}
		return nil, fmt.Errorf("claiming: connection refused: %w", ports.ErrTransient)
	}
	return f.LifecycleStore.LifecycleClaim(ctx, p)
}

type harness struct {
	l      *Lifecycle
	reg    *registry
	store  ports.LifecycleStore
	clock  *clocktest.Fake
	tel    *telemetry
	events []ports.Event
}

// newHarness returns a Lifecycle over store (nil: stages guarded in
// memory), started, with one stream of n events.
func newHarness(t *testing.T, store ports.LifecycleStore, n int) *harness {
	t.Helper()
	clock := clocktest.NewFake()
	log := slog.New(slog.DiscardHandler)
	h := &harness{reg: &registry{}, store: store, clock: clock, tel: &telemetry{}}
	h.l = New(base.NewEnv(clock, true, log), Config{
		Lifecycle: store, InstanceID: uuid.New(), StaleThreshold: time.Minute, Registry: h.reg,
		Scope: func(ctx context.Context, _ ports.Event) (context.Context, error) { return ctx, nil }, Telemetry: h.tel,
	})
	h.l.Start(t.Context())
	stream := uuid.New()
	for i := range n {
		h.events = append(h.events, ports.Event{ID: uuid.New(), StreamID: stream, Version: int64(i + 1), Type: "added", Data: []byte(fmt.Sprint(i + 1))})
	}
	return h
}

// Receptors of a stage run in their modes' order for each event:
// detached ones first, then the inline ones in registration order (an
// error or a panic of one does not keep the next from running), then the
// immediately detached ones; each gets the delivery's Info.
func TestFireRunsReceptorsByMode(t *testing.T) {
	t.Parallel()

	h := newHarness(t, nil, 1)
	var (
		mu    sync.Mutex
		order []string
	)
	detachedRan, immediateRan := make(chan struct{}), make(chan struct{})
	note := func(what string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, what)
	}
	release := make(chan struct{})
	h.reg.add(PostPerspective, ImmediateDetached, func(_ context.Context, _ any, _ Info) error {
		defer close(immediateRan)
		note("immediate")
		return nil
	})
	h.reg.add(PostPerspective, Inline, func(_ context.Context, _ any, _ Info) error {
		note("inline 1")
		return errors.New("refused")
	})
	h.reg.add(PostPerspective, Inline, func(_ context.Context, _ any, _ Info) error {
		note("inline 2")
		panic("boom")
	})
	var got Info
	h.reg.add(PostPerspective, Inline, func(_ context.Context, event any, info Info) error {
		note("inline 3 " + event.(string))
		got = info
		return nil
	})
	h.reg.add(PostPerspective, Detached, func(_ context.Context, _ any, _ Info) error {
		<-release // started before the inline ones, which do not wait for it
		note("detached")
		close(detachedRan)
		return nil
	})

	require.NoError(t, h.l.PostPerspective(t.Context(), "p", h.events))
	<-immediateRan
	close(release)
	<-detachedRan
	require.NoError(t, h.l.Wait(t.Context()))
	require.Equal(t, []string{"inline 1", "inline 2", "inline 3 1", "immediate", "detached"}, order)
	require.Equal(t, Info{Stage: PostPerspective, Mode: Inline, Event: h.events[0], Perspective: "p", Receptor: 3}, got)
	require.Equal(t, fmt.Sprintf("%s/PostPerspective/p/3", h.events[0].ID), got.DeliveryKey())
	require.Equal(t, int64(2), h.tel.failed.Load(), "the error and the panic counted")
}

// A stage runs once per event (and perspective) for as long as its record
// says it ran: with the backend's records across Lifecycles (instances),
// in memory within one.
func TestStageRunsOncePerEvent(t *testing.T) {
	t.Parallel()

	for name, store := range map[string]func() ports.LifecycleStore{
		"records":   func() ports.LifecycleStore { return memory.New(memory.Options{}).Backend().Lifecycle },
		"in memory": func() ports.LifecycleStore { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, store(), 3)
			var fired atomic.Int64
			h.reg.add(PostPerspective, Inline, func(context.Context, any, Info) error {
				fired.Add(1)
				return nil
			})
			require.NoError(t, h.l.PostPerspective(t.Context(), "p", h.events[:2]))
			require.NoError(t, h.l.PostPerspective(t.Context(), "p", h.events))
			require.Equal(t, int64(3), fired.Load(), "each event once")
			require.NoError(t, h.l.PostPerspective(t.Context(), "q", h.events[:1]))
			require.Equal(t, int64(4), fired.Load(), "once per perspective")
		})
	}
}

// A PostPerspective whose claim fails holds its caller (the report of its
// rows) back and is retried until the backend answers, for longer than
// the backoff takes to reach its cap: nothing else would run it once the
// rows complete. Once the caller's context ends, the caller is told that
// the stage did not run.
func TestPostPerspectiveRetriedUntilItRuns(t *testing.T) {
	t.Parallel()

	store := &failingClaims{LifecycleStore: memory.New(memory.Options{}).Backend().Lifecycle, tried: make(chan struct{}, 1)}
	store.failing.Store(true)
	h := newHarness(t, store, 1)
	var fired atomic.Int64
	h.reg.add(PostPerspective, Inline, func(context.Context, any, Info) error {
		fired.Add(1)
		return nil
	})

	done := make(chan error, 1)
	timers := h.clock.Timers()
	go func() { done <- h.l.PostPerspective(t.Context(), "p", h.events) }()
	for range 2 * stageClaimRetries {
		<-store.tried
		<-h.clock.WaitTimers(timers + 1)
		h.clock.Advance(time.Hour)
	}
	<-store.tried
	store.failing.Store(false)
	<-h.clock.WaitTimers(timers + 1)
	h.clock.Advance(time.Hour)
	require.NoError(t, <-done)
	require.Equal(t, int64(1), fired.Load())

	store.failing.Store(true)
	ctx, cancel := context.WithCancelCause(t.Context())
	stopping := errors.New("stopping")
	go func() { done <- h.l.PostPerspective(ctx, "q", h.events) }()
	<-store.tried
	<-h.clock.WaitTimers(timers + 1)
	cancel(stopping)
	require.ErrorIs(t, <-done, stopping)
	require.Equal(t, int64(1), fired.Load(), "not run for q")
}
