// Package vantagetest helps unit-test perspectives and receptors: it runs a
// real core.Worker on the in-memory backend with options tuned for tests,
// waits on the engine's hooks instead of sleeping, and reads models typed.
//
// A test registers its perspectives as the application does, starts a
// Harness, appends, waits and reads:
//
//	func TestOrderSummary(t *testing.T) {
//		reg := core.NewRegistry()
//		core.MustRegisterEvent[OrderPlaced](reg, "orders.order_placed")
//		summary := NewOrderSummary() // a *core.Perspective[OrderSummary]
//		if err := reg.AddPerspective(summary); err != nil {
//			t.Fatal(err)
//		}
//		h := vantagetest.Start(t, reg, nil) // stopped when the test ends
//
//		order := uuid.New()
//		h.Append(order, OrderPlaced{Total: 42})
//		h.WaitCaughtUp(order)
//		if got := vantagetest.Load(h, summary, order); got.Status != "open" {
//			t.Errorf("status = %q, want open", got.Status)
//		}
//	}
//
// The production defaults of core.Options favour many instances sharing a
// database: polls every second when no notification comes, a first retry
// after a minute and dead letters after 10 attempts. [Options] returns
// cadences and retry delays of milliseconds instead, so that an append
// reaches its model, and an event that always fails reaches dead letters,
// within a few of them (BENCHMARKS.md has the measurements); start from it
// when a test needs other values.
//
// The waits of a [Harness] ([Harness.WaitCaughtUp],
// [Harness.WaitDeadLetter], [Harness.WaitIdle], [Harness.WaitLifecycle])
// check their condition whenever the engine reports progress through its
// hooks, and fail the test after Harness.Timeout. The hooks set in the
// options passed to [Start] keep firing. [Load] reads a model, typed.
//
// [FakeClock] and [OffsetClock] drive the engine's time: the first moves
// only when the test advances it, the second runs real timers but lets a
// test jump Now forward.
//
// The package is for tests only: library and application code never
// import it.
package vantagetest
