package conformance_test

import (
	"testing"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/conformance"
	"github.com/vantage-go/vantage/ports"
)

// An adapter runs the suite from a test of its own package: newBackend
// creates a fresh, isolated backend per case, and the Opener it returns
// hands out handles on that backend, one per simulated engine instance.
// Features declares what the adapter can do beyond the ports; an adapter
// with a connection to lose sets BreakConnections.
func Example() {
	testConformance := func(t *testing.T) {
		t.Parallel()

		conformance.Run(t, func(t *testing.T) conformance.Opener {
			store := memory.New(memory.Options{})
			t.Cleanup(func() { _ = store.Close() })
			return func(*testing.T) ports.Backend { return store.Backend() }
		}, conformance.Features{})
	}
	_ = testConformance // func TestConformance(t *testing.T) in the adapter's package
}
