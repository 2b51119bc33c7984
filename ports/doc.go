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
// (core.Perspective.Load decodes them) and [ModelQuery] to find them
// (core.Perspective.Find), [DeadLetterStore] and [Admin] for
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
//   - Notifier: polls at Options.Drain.PollingInterval and Claims.Interval
//     instead of being woken by appends.
//   - ModelBatch (ModelBatchStore): loads and saves models one pair per
//     call instead of grouping concurrent ones.
//   - ModelTx (TxModelStore): refuses to build a worker whose registry has
//     a table projection (core.NewProjection); models work as before.
//   - ModelQuery: builds no index of the models. The engine calls nothing
//     else of it: ModelsFind serves the application's queries, which
//     cannot find models without it (see Reading models).
//   - Lifecycle (LifecycleStore): guards lifecycle stages in memory only,
//     so a crash may lose a stage.
//   - Rewind (RewindStore): never rewinds; a late event is dead-lettered
//     with ReasonLate.
//   - Snapshots (SnapshotStore): replays a rewind from the start of the
//     stream.
//   - Admin: skips its start-up warning about retired perspectives. The
//     engine calls nothing else of it: Admin serves operator tools
//     (status, instances, dead letters, rebuild requests, retiring
//     perspectives; see Operator tools).
//   - Stats: reports no lag.
//   - Rebuilds (RebuildQueue): carries out no rebuild request; Worker.Rebuild
//     still rebuilds in process.
//
// Two interfaces the engine never calls serve tests and tools: a Notifier
// may be a Publisher (wakes every listener without an append), a
// RewindStore a LockReader (reads the rewind locks of a stream). The
// conformance cases that need them skip without them.
//
// # Operator tools
//
// A command-line tool or a status page needs no engine: it opens the
// backend and calls Admin. PerspectivesStatus gives the state of every
// perspective in one call (streams applied and caught up, pairs behind,
// failed or awaiting a retry, rewinds required, the backlog and the age of
// its oldest event, dead letters waiting, retired ones flagged);
// InstancesList the instances with their heartbeats and the streams each
// holds; DeadLettersList, DeadLetterGet and DeadLettersRequeue list, show and
// requeue dead letters (newest first, since a time, page by page with
// DeadLetter.Cursor). A rebuild is a request, not a call: RebuildRequest
// stores it, a running instance of the perspective claims it through
// RebuildQueue and records its progress, and RebuildGet, RebuildsList and
// RebuildRequest.Remaining show how far it is; RebuildCancel stops it. A
// request outlives the instance running it: a claim that expires, or that
// the instance hands back at stop, lets another resume it after the last
// stream it recorded done.
//
// Every method takes a context and a params struct (a method without
// inputs takes the context alone) and returns at most one value besides
// the error. A params type whose fields can be invalid has a Validate
// method, which an adapter calls before anything else: the argument checks
// are the same in every adapter.
//
// # Reading models
//
// A model is read by its stream with ModelStore.ModelLoad. ModelQuery finds
// the models of a perspective by the values of their fields (equality on a
// field, top-level or nested, and jsonb-style containment), ordered by
// stream id, update time or a field, page by page with a cursor that stays
// stable while models are saved. Perspectives declare the fields they are
// queried by; the engine hands the declarations to
// ModelQuery.ModelIndexesEnsure when it starts, and the PostgreSQL adapter
// builds matching indexes. A filter on a field no index covers still works,
// model by model.
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
// ErrLeaseLost, and ErrTransient for the failures of the infrastructure
// that may pass (connections, timeouts, serialization failures, restarts).
// The engine never charges an error of a port to an event: only an apply or
// decode error, or a model the backend refuses as invalid, costs an event
// an attempt.
//
// # Concurrency
//
// All port implementations must be safe for concurrent use by multiple
// goroutines and, for shared backends, by multiple engine instances.
package ports
