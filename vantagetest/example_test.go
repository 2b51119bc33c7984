package vantagetest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/vantagetest"
)

type CartItemAdded struct {
	SKU string `json:"sku"`
}

type CartCheckedOut struct{}

type Cart struct {
	Items      []string `json:"items"`
	CheckedOut bool     `json:"checked_out"`
}

// The common flow of a perspective's unit test: register, start a harness,
// append, wait until the stream is caught up, read the model.
func ExampleStart() {
	t := newExampleT() // in a test: its *testing.T
	defer t.end()

	reg := core.NewRegistry()
	core.MustRegisterEvent[CartItemAdded](reg, "shop.cart_item_added")
	core.MustRegisterEvent[CartCheckedOut](reg, "shop.cart_checked_out")
	carts := core.NewPerspective[Cart]("carts")
	core.MustHandle(carts, func(_ context.Context, c Cart, e CartItemAdded) (Cart, error) {
		c.Items = append(c.Items, e.SKU)
		return c, nil
	})
	core.MustHandle(carts, func(_ context.Context, c Cart, _ CartCheckedOut) (Cart, error) {
		c.CheckedOut = true
		return c, nil
	})
	if err := reg.AddPerspective(carts); err != nil {
		t.Fatal(err)
	}

	h := vantagetest.Start(t, reg, nil) // fast test options; stops with the test
	cart := uuid.New()
	h.Append(cart, CartItemAdded{SKU: "tea"}, CartItemAdded{SKU: "cups"}, CartCheckedOut{})
	h.WaitCaughtUp(cart)

	got := vantagetest.Load(h, carts, cart)
	fmt.Println(got.Items, got.CheckedOut)
	// Output:
	// [tea cups] true
}

// A test of a failure: the test options retry a failing event after
// milliseconds and dead-letter it at its third failure, so the test sees
// the dead letter at once, and the events after it applied.
func ExampleHarness_WaitDeadLetter() {
	t := newExampleT() // in a test: its *testing.T
	defer t.end()

	reg := core.NewRegistry()
	core.MustRegisterEvent[CartItemAdded](reg, "shop.cart_item_added")
	carts := core.NewPerspective[Cart]("carts")
	core.MustHandle(carts, func(_ context.Context, c Cart, e CartItemAdded) (Cart, error) {
		if e.SKU == "" {
			return c, errors.New("item without a SKU")
		}
		c.Items = append(c.Items, e.SKU)
		return c, nil
	})
	if err := reg.AddPerspective(carts); err != nil {
		t.Fatal(err)
	}

	h := vantagetest.Start(t, reg, nil)
	cart := uuid.New()
	h.Append(cart, CartItemAdded{SKU: "tea"}, CartItemAdded{}, CartItemAdded{SKU: "cups"})

	dl := h.WaitDeadLetter("carts", cart)
	fmt.Printf("version %d: %s after %d attempts: %s\n", dl.EventVersion, dl.Reason, dl.Attempts, dl.Error)
	h.WaitCaughtUp(cart)
	fmt.Println(vantagetest.Load(h, carts, cart).Items)
	// Output:
	// version 2: failed after 3 attempts: item without a SKU
	// [tea cups]
}

// exampleT stands in for the *testing.T of a test, which an example has
// not: it panics where a test would fail and runs the cleanups at end.
type exampleT struct {
	testing.TB
	ctx      context.Context
	cancel   context.CancelFunc
	cleanups []func()
}

func newExampleT() *exampleT {
	ctx, cancel := context.WithCancel(context.Background())
	return &exampleT{ctx: ctx, cancel: cancel}
}

func (t *exampleT) Helper()                           {}
func (t *exampleT) Context() context.Context          { return t.ctx }
func (t *exampleT) Output() io.Writer                 { return io.Discard }
func (t *exampleT) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (t *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *exampleT) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// end cancels the context and runs the cleanups, last registered first, as
// a test's end does.
func (t *exampleT) end() {
	t.cancel()
	for _, f := range slices.Backward(t.cleanups) {
		f()
	}
}
