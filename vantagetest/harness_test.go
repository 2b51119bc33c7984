package vantagetest_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
	"github.com/vantage-go/vantage/vantagetest"
)

type orderPlaced struct {
	Total int `json:"total"`
}

type orderShipped struct {
	Poison bool `json:"poison,omitempty"`
}

type orderSummary struct {
	Status string `json:"status"`
	Total  int    `json:"total"`
}

// testBundle is a registry with the order_summary perspective.
type testBundle struct {
	reg     *core.Registry
	summary *core.Perspective[orderSummary]
}

// setup registers the events and the order_summary perspective, whose
// apply of a shipment fails when ship says so.
func setup(t testing.TB, ship func(orderShipped) error) *testBundle {
	t.Helper()
	reg := core.NewRegistry()
	core.MustRegisterEvent[orderPlaced](reg, "orders.order_placed")
	core.MustRegisterEvent[orderShipped](reg, "orders.order_shipped")
	summary := core.NewPerspective[orderSummary]("order_summary")
	core.MustHandle(summary, func(_ context.Context, m orderSummary, e orderPlaced) (orderSummary, error) {
		m.Status, m.Total = "open", m.Total+e.Total
		return m, nil
	})
	core.MustHandle(summary, func(_ context.Context, m orderSummary, e orderShipped) (orderSummary, error) {
		if ship != nil {
			if err := ship(e); err != nil {
				return m, err
			}
		}
		m.Status = "shipped"
		return m, nil
	})
	if err := reg.AddPerspective(summary); err != nil {
		t.Fatal(err)
	}
	return &testBundle{reg: reg, summary: summary}
}

func TestAppendWaitLoad(t *testing.T) {
	t.Parallel()

	b := setup(t, nil)
	h := vantagetest.Start(t, b.reg, nil)
	order := uuid.New()

	if _, err := b.summary.Load(t.Context(), h.Backend.Models, order); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Load before any append: got %v, want ports.ErrNotFound", err)
	}
	events := h.Append(order, orderPlaced{Total: 40}, orderPlaced{Total: 2})
	h.WaitCaughtUp(order)
	if got, want := vantagetest.Load(h, b.summary, order), (orderSummary{Status: "open", Total: 42}); got != want {
		t.Fatalf("model = %+v, want %+v", got, want)
	}

	h.Append(order, orderShipped{})
	h.WaitCaughtUp(order, "order_summary")
	m, err := b.summary.Load(t.Context(), h.Backend.Models, order)
	if err != nil {
		t.Fatal(err)
	}
	if m.Value.Status != "shipped" || m.LastVersion != events[1].Version+1 {
		t.Fatalf("model = %+v at version %d, want shipped at version %d", m.Value, m.LastVersion, events[1].Version+1)
	}
}

func TestDeadLetterOfAnApplyThatAlwaysFails(t *testing.T) {
	t.Parallel()

	b := setup(t, func(orderShipped) error { return errors.New("carrier unknown") })
	h := vantagetest.Start(t, b.reg, nil)
	order := uuid.New()
	h.Append(order, orderPlaced{Total: 7}, orderShipped{})

	dl := h.WaitDeadLetter("order_summary", order)
	if dl.Reason != ports.ReasonFailed || dl.Error != "carrier unknown" {
		t.Fatalf("dead letter reason %q, error %q; want %q, %q", dl.Reason, dl.Error, ports.ReasonFailed, "carrier unknown")
	}
	if want := vantagetest.Options(t).Retries.MaxEventAttempts; dl.Attempts != want {
		t.Fatalf("dead letter after %d attempts, want %d", dl.Attempts, want)
	}
	if dl.EventVersion != 2 {
		t.Fatalf("dead-lettered version %d, want 2", dl.EventVersion)
	}
	if got := vantagetest.Load(h, b.summary, order); got.Status != "open" {
		t.Fatalf("model status %q, want open: the failed shipment is not applied", got.Status)
	}
}

func TestUserHooksKeepFiring(t *testing.T) {
	t.Parallel()

	b := setup(t, func(e orderShipped) error {
		if e.Poison {
			return errors.New("poison")
		}
		return nil
	})
	var processed, deadLettered, idle atomic.Int64
	idled := make(chan struct{}, 1)
	opts := vantagetest.Options(t)
	opts.Retries.MaxEventAttempts = 1
	opts.Hooks.OnPerspectiveEventProcessed = func(e core.PerspectiveEventProcessed) { processed.Add(int64(e.EventCount)) }
	opts.Hooks.OnDeadLettered = func(ports.DeadLetter) { deadLettered.Add(1) }
	opts.Hooks.OnWorkProcessingIdle = func() {
		idle.Add(1)
		select {
		case idled <- struct{}{}:
		default:
		}
	}
	h := vantagetest.Start(t, b.reg, &opts)

	order := uuid.New()
	h.Append(order, orderPlaced{Total: 1}, orderShipped{Poison: true}, orderPlaced{Total: 2})
	h.WaitDeadLetter("order_summary", order)
	h.WaitCaughtUp(order)
	h.WaitIdle()
	// The worker reads as idle as it turns so, just before the hook runs.
	select {
	case <-idled:
	case <-time.After(10 * time.Second):
		t.Fatal("the idle hook did not fire within 10s of the worker turning idle")
	}
	if processed.Load() != 2 || deadLettered.Load() != 1 || idle.Load() == 0 {
		t.Fatalf("hooks saw %d applied, %d dead letters, %d idle transitions; want 2, 1, at least 1",
			processed.Load(), deadLettered.Load(), idle.Load())
	}
}

func TestWaitIdleCoversEveryStream(t *testing.T) {
	t.Parallel()

	b := setup(t, nil)
	h := vantagetest.Start(t, b.reg, nil)
	h.WaitIdle() // nothing appended yet: returns after one empty claim

	orders := make([]uuid.UUID, 20)
	for i := range orders {
		orders[i] = uuid.New()
		h.Append(orders[i], orderPlaced{Total: i}, orderShipped{})
	}
	h.WaitIdle()
	for i, order := range orders {
		m, err := b.summary.Load(t.Context(), h.Backend.Models, order)
		if err != nil {
			t.Fatalf("order %d: %v", i, err)
		}
		if m.LastVersion != 2 || m.Value != (orderSummary{Status: "shipped", Total: i}) {
			t.Fatalf("order %d: model %+v at version %d", i, m.Value, m.LastVersion)
		}
	}
}

func TestWaitLifecycle(t *testing.T) {
	t.Parallel()

	b := setup(t, nil)
	var inline, detached atomic.Int64
	err := core.AddReceptor(b.reg, core.PostLifecycle, core.Inline, func(context.Context, orderShipped, core.StageInfo) error {
		inline.Add(1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = core.AddReceptor(b.reg, core.PostAllPerspectives, core.Detached, func(context.Context, orderPlaced, core.StageInfo) error {
		detached.Add(1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	h := vantagetest.Start(t, b.reg, nil)

	const orders = 5
	for i := range orders {
		h.Append(uuid.New(), orderPlaced{Total: i}, orderShipped{})
	}
	h.WaitLifecycle()
	if inline.Load() != orders || detached.Load() != orders {
		t.Fatalf("receptors ran %d inline and %d detached times, want %d each", inline.Load(), detached.Load(), orders)
	}
}

// An OffsetClock lets a test keep the production retry delay and still see
// the retry at once: it jumps the worker's Now past the retry.
func TestOffsetClockMakesARetryDue(t *testing.T) {
	t.Parallel()

	var failed atomic.Bool
	b := setup(t, func(orderShipped) error {
		if failed.CompareAndSwap(false, true) {
			return errors.New("carrier down")
		}
		return nil
	})
	clock := vantagetest.NewOffsetClock()
	failures := make(chan ports.Failure, 1)
	opts := vantagetest.Options(t)
	opts.Clock = clock
	opts.Retries.Event = core.Backoff{Initial: time.Hour, Max: time.Hour}
	opts.Hooks.OnFailure = func(f ports.Failure) { failures <- f }
	h := vantagetest.Start(t, b.reg, &opts)

	order := uuid.New()
	h.Append(order, orderPlaced{Total: 1}, orderShipped{})
	var f ports.Failure
	select {
	case f = <-failures:
	case <-time.After(h.Timeout):
		t.Fatal("timed out waiting for the failure")
	}
	if f.Error != "carrier down" {
		t.Fatalf("failure %q, want carrier down", f.Error)
	}
	clock.Jump(time.Hour)
	h.WaitCaughtUp(order)
	if got := vantagetest.Load(h, b.summary, order); got.Status != "shipped" {
		t.Fatalf("model status %q, want shipped after the retry", got.Status)
	}
}

func TestFakeClockMovesOnlyWhenAdvanced(t *testing.T) {
	t.Parallel()

	clock := vantagetest.NewFakeClock()
	if !clock.Now().Equal(vantagetest.ClockStart) {
		t.Fatalf("a new FakeClock stands at %s, want %s", clock.Now(), vantagetest.ClockStart)
	}
	var _ ports.Clock = clock
	timer := clock.NewTimer(time.Minute)
	<-clock.WaitTimers(1)
	clock.Advance(time.Minute - time.Nanosecond)
	select {
	case <-timer.C():
		t.Fatal("the timer fired before its deadline")
	default:
	}
	clock.Advance(time.Nanosecond)
	if got := <-timer.C(); !got.Equal(vantagetest.ClockStart.Add(time.Minute)) {
		t.Fatalf("the timer fired at %s", got)
	}
}
