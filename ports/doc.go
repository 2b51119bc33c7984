// Package ports declares the seams between the Vantage engine and its storage
// backends: the domain values they exchange, the port interfaces with their
// contracts, the sentinel errors, and the Clock.
//
// The engine (package core) talks only to these interfaces. Two adapters
// implement every port: adapters/postgres for production and adapters/memory
// for tests, examples and embedded use. The conformance package verifies any
// implementation against the contracts documented here.
//
// An application uses this package for the values it exchanges with the
// engine and a backend ([Event], [Metadata], [Scope], [DeadLetter],
// [ExpectNoStream], the sentinel errors) and for the ports it calls
// itself: [EventStore] to append, [ModelStore] to read models (core.Perspective.Load decodes them),
// [DeadLetterStore] and [AdminStore] for operator actions. An adapter
// author implements the ports and checks them with the conformance suite.
//
// # Ports
//
// [Backend] bundles the ports one engine instance needs; an adapter's
// Backend method returns it. Seven are required: [WorkClaimer] (instances,
// claims and leases), [EventFetcher], [CursorStore], [Notifier],
// [DeadLetterStore], [EventStore] and [ModelStore]. Four are optional, and
// the engine does without them as their docs say: [LifecycleStore]
// (durable lifecycle stages), [RewindStore] (rewinds of late events),
// [SnapshotStore] and [AdminStore]. [ModelBatchStore] is an extension the
// engine uses when the Models port implements it, and [TxEventStore] the
// port core.AppendTx appends through, in the caller's transaction.
//
// # Time
//
// Every parameter struct whose operation depends on the current time carries a
// Now field. A zero Now means "the backend's own clock" (the database clock on
// PostgreSQL, the injected Clock in memory). The engine fills Now only when the
// host injected a Clock, so tests drive time on every backend alike while
// production instances share the database's notion of time.
//
// # Errors
//
// Adapters translate their drivers' errors into the sentinels of this
// package at their edge, wrapping the original for detail: ErrNotFound,
// ErrVersionConflict, ErrInvalidArgument, ErrClosed, ErrInstanceNotAlive,
// and ErrTransient for the failures of the infrastructure that may pass
// (connections, timeouts, serialization failures, restarts). The engine
// never charges an error of a port to an event: only an apply or decode
// error, or a model the backend refuses as invalid, costs an event an
// attempt.
//
// # Concurrency
//
// All port implementations must be safe for concurrent use by multiple
// goroutines and, for shared backends, by multiple engine instances.
package ports
