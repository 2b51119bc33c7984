package vantagetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// WaitTimeoutDefault bounds every wait of a Harness unless its Timeout
// says otherwise.
const WaitTimeoutDefault = 10 * time.Second

// stopTimeout bounds the worker's Stop at the end of the test.
const stopTimeout = 10 * time.Second

// Harness is a started core.Worker on a fresh in-memory backend, with
// waits that end as soon as the engine reports what they wait for. Its
// waits and reads fail the test (tb.Fatalf) on error or after Timeout, so
// call them from the goroutine of the test that called Start.
type Harness struct {
	// Store is the in-memory backend; Backend is its ports.Backend, for
	// reads and appends of the test's own (the worker sees them all).
	Store   *memory.Store
	Backend ports.Backend
	// Registry is the registry the worker runs.
	Registry *core.Registry
	// Worker is the started worker. It stops when the test ends.
	Worker *core.Worker
	// Timeout bounds each wait. Defaults to WaitTimeoutDefault; set it
	// before waiting.
	Timeout time.Duration

	tb testing.TB
	// changed is poked by the hooks and claims the waits care about; a
	// wait checks its condition again on each poke.
	changed chan struct{}

	// claims numbers the worker's claims as they start; emptyClaim is the
	// number of the latest one that found no work.
	claims     atomic.Uint64
	emptyClaim atomic.Uint64

	mu          sync.Mutex
	deadLetters []ports.DeadLetter
}

// Start builds a memory backend and a worker over it for reg, starts the
// worker and returns the harness; the worker stops, and the backend closes,
// when the test ends. A nil opts means Options(tb); a test that needs other
// values changes fields of Options(tb), since the zero fields of opts take
// core's production defaults. The hooks of opts keep working: the harness
// calls them before its own. When opts has a Clock, the backend uses it as
// well.
func Start(tb testing.TB, reg *core.Registry, opts *core.Options) *Harness {
	tb.Helper()
	var o core.Options
	if opts == nil {
		o = Options(tb)
	} else {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = Logger(tb)
	}
	store := memory.New(memory.Options{Clock: o.Clock})
	tb.Cleanup(func() { _ = store.Close() })
	h := &Harness{
		Store:    store,
		Backend:  store.Backend(),
		Registry: reg,
		Timeout:  WaitTimeoutDefault,
		tb:       tb,
		changed:  make(chan struct{}, 1),
	}
	o.Hooks = h.hooks(o.Hooks)
	backend := h.Backend
	backend.Claimer = claimWatcher{WorkClaimer: backend.Claimer, h: h}
	w, err := core.New(backend, reg, &o)
	if err != nil {
		tb.Fatalf("vantagetest: %v", err)
	}
	h.Worker = w
	if err := w.Start(tb.Context()); err != nil {
		tb.Fatalf("vantagetest: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			tb.Errorf("vantagetest: stopping worker: %v", err)
		}
	})
	return h
}

// hooks returns user's hooks with the harness's observations added after
// the two the waits use: the idle transition (WaitIdle) and dead letters
// (WaitDeadLetter). WaitCaughtUp and WaitLifecycle rely on the worker's own
// signals.
func (h *Harness) hooks(user core.Hooks) core.Hooks {
	hk := user
	hk.OnWorkProcessingIdle = then0(user.OnWorkProcessingIdle, h.poke)
	hk.OnDeadLettered = then(user.OnDeadLettered, func(dl ports.DeadLetter) {
		h.mu.Lock()
		h.deadLetters = append(h.deadLetters, dl)
		h.mu.Unlock()
		h.poke()
	})
	return hk
}

// then returns a hook that calls first, when set, then next.
func then[T any](first, next func(T)) func(T) {
	if first == nil {
		return next
	}
	return func(v T) {
		first(v)
		next(v)
	}
}

// then0 is then for hooks without arguments.
func then0(first, next func()) func() {
	if first == nil {
		return next
	}
	return func() {
		first()
		next()
	}
}

// claimWatcher numbers the worker's claims and records the latest that
// found no work: WaitIdle's evidence that nothing is left to drain, since a
// claim returns every stream with work leased to the caller until that work
// completes.
type claimWatcher struct {
	ports.WorkClaimer
	h *Harness
}

func (c claimWatcher) WorkClaim(ctx context.Context, params *ports.WorkClaimParams) (*ports.WorkClaimResult, error) {
	n := c.h.claims.Add(1)
	res, err := c.WorkClaimer.WorkClaim(ctx, params)
	if err == nil && len(res.StreamIDs) == 0 && !res.HasMore {
		for {
			prev := c.h.emptyClaim.Load()
			if prev >= n || c.h.emptyClaim.CompareAndSwap(prev, n) {
				break
			}
		}
		c.h.poke()
	}
	return res, err
}

// poke tells a waiter to check its condition again.
func (h *Harness) poke() {
	select {
	case h.changed <- struct{}{}:
	default: // a poke is pending: the waiter checks again anyway
	}
}

// waitUntil checks cond on every poke of the engine until it holds, and
// fails the test, naming what it waited for, if Timeout passes first.
func (h *Harness) waitUntil(what string, cond func() bool) {
	h.tb.Helper()
	deadline := time.NewTimer(h.Timeout)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-h.changed:
		case <-deadline.C:
			h.fatalTimeout(what, nil)
		case <-h.tb.Context().Done():
			h.tb.Fatalf("vantagetest: test ended while waiting for %s", what)
		}
	}
}

func (h *Harness) fatalTimeout(what string, detail func() string) {
	h.tb.Helper()
	msg := fmt.Sprintf("vantagetest: timed out after %s waiting for %s", h.Timeout, what)
	if detail != nil {
		if d := detail(); d != "" {
			msg += "; " + d
		}
	}
	h.tb.Fatal(msg)
}

// waitContext returns a context ending after Timeout or with the test.
func (h *Harness) waitContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(h.tb.Context(), h.Timeout)
}

// Append appends events (values of types registered with the registry) to
// a stream, whatever its version, and returns the stored events.
func (h *Harness) Append(streamID uuid.UUID, events ...any) []ports.Event {
	h.tb.Helper()
	res, err := h.Registry.Append(h.tb.Context(), h.Backend.Events, streamID, 0, events...)
	if err != nil {
		h.tb.Fatalf("vantagetest: %v", err)
	}
	return res.Events
}

// WaitCaughtUp waits until the named perspectives (every registered one
// when none is named) have applied every event appended to the stream so
// far that they handle, and their models are saved (see
// Worker.WaitForStream). A dead-lettered event is never applied: when it
// is a stream's last, wait for it with WaitDeadLetter instead.
func (h *Harness) WaitCaughtUp(streamID uuid.UUID, perspectives ...string) {
	h.tb.Helper()
	ctx, cancel := h.waitContext()
	defer cancel()
	err := h.Worker.WaitForStream(ctx, streamID, math.MaxInt64, perspectives...)
	switch {
	case errors.Is(err, context.DeadlineExceeded) && h.tb.Context().Err() == nil:
		h.fatalTimeout(fmt.Sprintf("stream %s to catch up", streamID), func() string { return h.deadLettersOf(streamID) })
	case err != nil:
		h.tb.Fatalf("vantagetest: waiting for stream %s: %v", streamID, err)
	}
}

// deadLettersOf describes the dead letters of a stream, for a timeout's
// message.
func (h *Harness) deadLettersOf(streamID uuid.UUID) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var parts []string
	for _, dl := range h.deadLetters {
		if dl.StreamID == streamID {
			parts = append(parts, fmt.Sprintf("%s v%d (%s: %s)", dl.Perspective, dl.EventVersion, dl.Reason, dl.Error))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "dead-lettered, never applied: " + strings.Join(parts, ", ")
}

// WaitDeadLetter waits until an event of the stream was moved to dead
// letters for the perspective, and returns the first such dead letter
// (its Reason, Error and Attempts say why). Dead letters moved before the
// call count.
func (h *Harness) WaitDeadLetter(perspective string, streamID uuid.UUID) ports.DeadLetter {
	h.tb.Helper()
	var found ports.DeadLetter
	h.waitUntil(fmt.Sprintf("a dead letter of perspective %q for stream %s", perspective, streamID), func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, dl := range h.deadLetters {
			if dl.Perspective == perspective && dl.StreamID == streamID {
				found = dl
				return true
			}
		}
		return false
	})
	return found
}

// WaitIdle waits until the worker has nothing left to do: a claim made
// after the call found no work (every event appended before the call was
// applied and completed, or dead-lettered), and then no batch was running
// and the worker reported idle (Worker.IsIdle). Events scheduled for a
// later retry do not count as work until their retry is due. The worker's
// clock must run: with a FakeClock standing still, WaitIdle times out.
func (h *Harness) WaitIdle() {
	h.tb.Helper()
	after := h.claims.Load()
	h.Worker.RequestImmediatePoll()
	h.waitUntil("the worker to be idle", func() bool {
		return h.emptyClaim.Load() > after && h.Worker.IsIdle()
	})
}

// WaitLifecycle waits until the worker is idle (see WaitIdle), then until
// the lifecycle receptors it started by then returned, detached ones
// included (Worker.WaitLifecycle): after it, the receptors of the events
// appended before the call ran.
func (h *Harness) WaitLifecycle() {
	h.tb.Helper()
	h.WaitIdle()
	ctx, cancel := h.waitContext()
	defer cancel()
	if err := h.Worker.WaitLifecycle(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) && h.tb.Context().Err() == nil {
			h.fatalTimeout("the lifecycle receptors", nil)
		}
		h.tb.Fatalf("vantagetest: waiting for the lifecycle receptors: %v", err)
	}
}

// Load returns the perspective's model of a stream, decoded (see
// core.Perspective.Load). It fails the test when the stream has no model
// yet; to check that a stream has none, call p.Load and compare the error
// with ports.ErrNotFound.
func Load[M any](h *Harness, p *core.Perspective[M], streamID uuid.UUID) M {
	h.tb.Helper()
	m, err := p.Load(h.tb.Context(), h.Backend.Models, streamID)
	if err != nil {
		h.tb.Fatalf("vantagetest: %v", err)
	}
	return m.Value
}
