// Package conformance is the contract suite of the Vantage ports. Every
// adapter runs it from its own tests, and so can a third-party adapter:
// [Run] checks each port method against the contract package ports
// documents, then runs real core Workers on the adapter (exactly once in
// order across instances, failover, dead letters, lifecycle stages,
// rewinds). [Features] declares what the adapter can do that the suite
// cannot assume. It is for tests only; applications never import it.
//
//	func TestConformance(t *testing.T) {
//		t.Parallel()
//
//		conformance.Run(t, func(t *testing.T) conformance.Opener {
//			store := memory.New(memory.Options{})
//			t.Cleanup(func() { _ = store.Close() })
//			return func(*testing.T) ports.Backend { return store.Backend() }
//		}, conformance.Features{})
//	}
//
// The suite tests only through the ports. Each case is a parallel subtest,
// named Port method/Behaviour (WorkClaim/ScheduledRetryBlocksLaterRows), on a
// fresh backend, and passes an explicit Now in every parameter struct that has
// one, derived by hand from a fixed base time, so lease expiry and instance
// staleness are deterministic on every backend: a backend must use the given
// Now, never its own clock, when Now is set.
//
// Several engine instances are simulated by opening several handles on the
// same backend (one Opener call each), so a backend whose handles are
// separate connections or pools is exercised as in production.
package conformance

import (
	"testing"

	"github.com/vantage-go/vantage/ports"
)

// Features declares optional behaviour of the adapter under test. Optional
// ports need no flag: the suite skips the cases of a port whose Backend
// field is nil.
type Features struct {
	// BreakConnections, when set, makes the next port call on b fail the
	// way a call fails when the connection to the database is lost, and
	// the calls in flight on b too, such as a TxModelStore transaction
	// whose Apply calls it (the PostgreSQL adapter's test terminates the
	// server processes behind all of b's pooled connections); later calls
	// reconnect. The suite then checks that the adapter reports such
	// failures as ports.ErrTransient. Nil skips those cases (an in-process
	// backend has no connection to lose).
	BreakConnections func(t *testing.T, b ports.Backend)
}

// Opener returns another handle (one simulated engine instance's view) on the
// same backend. Handles of one backend share all state. The backend, not the
// caller, releases a handle's resources, through t.Cleanup.
type Opener func(t *testing.T) ports.Backend

// NewBackendFunc creates a fresh, isolated backend for one test and registers
// its cleanup with t.Cleanup. Backends of different tests share nothing: the
// suite runs its tests in parallel.
type NewBackendFunc func(t *testing.T) Opener

// Run verifies an adapter against every contract documented in package
// ports, then runs the engine scenarios on it. It runs subtests in parallel
// and returns before they finish, like any parallel t.Run.
func Run(t *testing.T, newBackend NewBackendFunc, features Features) {
	t.Helper()
	runPorts(t, newBackend, features)
	runEngine(t, newBackend)
}

// runPorts runs the contract tests of every port, one group per port method.
// The groups of an optional port are skipped when the adapter leaves its
// Backend field nil, and those of an optional feature when features lacks
// it.
func runPorts(t *testing.T, newBackend NewBackendFunc, features Features) {
	t.Helper()

	probe := newBackend(t)(t) // tells which optional ports the adapter implements
	admin := probe.Admin != nil

	runClaimer(t, newBackend)
	runFetcher(t, newBackend)
	runCursors(t, newBackend)
	runNotifier(t, newBackend, probe.Notifier != nil)
	runDeadLetters(t, newBackend, admin)
	runEvents(t, newBackend)
	runModels(t, newBackend)
	runTransient(t, newBackend, features.BreakConnections)
	runValidate(t, newBackend)

	runLifecycle(t, newBackend, probe.Lifecycle != nil)
	runRewind(t, newBackend, probe.Rewind != nil, admin)
	runSnapshots(t, newBackend, probe.Snapshots != nil)
	runAdmin(t, newBackend, admin)
	runModelBatch(t, newBackend, probe.ModelBatch != nil)
	runModelTx(t, newBackend, probe.ModelTx != nil, features.BreakConnections)
	runModelQuery(t, newBackend, probe.ModelQuery != nil)
	runStats(t, newBackend, probe.Stats != nil)
	runRebuilds(t, newBackend, probe.Rebuilds != nil && admin)
}

// group runs the cases of one port method as parallel subtests of a parallel
// subtest named name.
func group(t *testing.T, name string, cases map[string]func(t *testing.T)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		for _, caseName := range sortedKeys(cases) {
			test := cases[caseName]
			t.Run(caseName, func(t *testing.T) {
				t.Parallel()
				test(t)
			})
		}
	})
}

// optionalGroup is group for a method of an optional port: when the adapter
// does not implement the port, the group is skipped with the port's name.
func optionalGroup(t *testing.T, name, port string, implemented bool, cases map[string]func(t *testing.T)) {
	t.Helper()
	if implemented {
		group(t, name, cases)
		return
	}
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		t.Skip("adapter does not implement ports." + port)
	})
}
