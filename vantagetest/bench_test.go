package vantagetest_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/vantagetest"
)

// BenchmarkAppendToRead measures one round trip of a perspective's unit
// test: append an event to a new stream, wait until it is applied, read the
// model. "TestOptions" runs with vantagetest.Options, "Defaults" with
// core.Options{} (the production defaults).
func BenchmarkAppendToRead(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts func(b *testing.B) *core.Options
	}{
		{"TestOptions", func(b *testing.B) *core.Options { o := vantagetest.Options(b); return &o }},
		{"Defaults", func(b *testing.B) *core.Options { return &core.Options{Logger: vantagetest.Logger(b)} }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tb := setup(b, nil)
			h := vantagetest.Start(b, tb.reg, bc.opts(b))
			for b.Loop() {
				order := uuid.New()
				h.Append(order, orderPlaced{Total: 1})
				h.WaitCaughtUp(order)
				if vantagetest.Load(h, tb.summary, order).Total != 1 {
					b.Fatal("the model does not reflect the append")
				}
			}
		})
	}
}
