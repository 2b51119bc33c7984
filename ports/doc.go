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
// itself: [EventStore] to append, [ModelStore] to read models
// (core.Perspective.Load decodes them), [DeadLetterStore] and [Admin] for
// operator actions. An adapter author implements the ports and checks them
// with the conformance suite; [TxEventStore] is the port core.AppendTx
// appends through, in the caller's transaction.
//
// # Ports
//
// A Backend bundles the ports. Backend.Validate requires these, which the
// engine cannot run without:
//
//   - Claimer (WorkClaimer): heartbeats, claims and lease renewals.
//   - Fetcher (EventFetcher): leases and reads the pending events.
//   - Cursors (CursorStore): cursors and the outcome of applies.
//   - DeadLetters (DeadLetterStore): gives up on events and retries them
//     per deploy generation.
//   - Events (EventStore): appends and subscriptions.
//   - Models (ModelStore): models with their cursor position.
//
// The others are optional; without each, the engine:
//
//   - Notifier: polls at Options.PollingInterval and ClaimInterval instead
//     of being woken by appends.
//   - ModelBatch (ModelBatchStore): loads and saves models one pair per
//     call instead of grouping concurrent ones.
//   - Lifecycle (LifecycleStore): guards lifecycle stages in memory only,
//     so a crash may lose a stage.
//   - Rewind (RewindStore): never rewinds; a late event is dead-lettered
//     with ReasonLate.
//   - Snapshots (SnapshotStore): replays a rewind from the start of the
//     stream.
//   - Admin: skips its start-up warning about retired perspectives. The
//     engine calls nothing else of it: Admin serves operator tools
//     (instances, stream locks, requeueing and ignoring dead letters,
//     retiring perspectives).
//
// Every method takes a context and a params struct (a method without
// inputs takes the context alone) and returns at most one value besides
// the error. A params type whose fields can be invalid has a Validate
// method, which an adapter calls before anything else: the argument checks
// are the same in every adapter.
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
