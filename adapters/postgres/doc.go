// Package postgres is the PostgreSQL backend of Vantage: every port of
// package ports, the optional lifecycle, rewind, snapshot, admin and stats
// stores included, on a pgx v5 pool, with wake-ups through a lib/pq listener.
//
// Use it in production: events, work, models and dead letters are durable
// and shared by every instance of a service, in any number of processes,
// and core.AppendTx appends events in the application's own transaction.
// [Migrate] (or a [Migrator], to read, apply or revert versions) brings
// the schema up, [New] builds a [Store] on the application's pool, and
// [Store.Backend] is what core.New takes; [Module] does the same under fx.
//
// # Setup
//
// The application owns the pool. Migrate the schema, then build the Store:
//
//	if err := postgres.Migrate(ctx, pool, "vantage"); err != nil { ... }
//	store, err := postgres.New(pool, postgres.Options{Schema: "vantage"})
//	if err != nil { ... }
//	defer store.Close()
//	backend := store.Backend()
//
// Under fx, Module does the same: it migrates on start and holds every SQL
// call on a Gate until the migrations finished.
//
// # Schema
//
// All tables live in one schema per service (SchemaDefault unless
// configured), so several services can share a database without sharing
// work. The migrations are embedded (package sql/migrations), versioned and
// append-only; Migrator applies each version with its row in
// vantage_migrations in one transaction under an advisory lock, so
// instances starting together migrate once.
//
// # Transactions and round trips
//
// Operations that touch several tables run as one pgx.Batch, which
// PostgreSQL executes as one implicit transaction: one network round trip,
// and an error in any statement rolls back all of them. Appends take a
// per-stream advisory lock for the rest of their transaction, so within a
// stream version order is commit order and a late commit can never land
// below an event already processed. AppendTx appends inside the caller's
// transaction, so business writes and events commit together.
//
// # Frozen processes
//
// The explicit transactions the Store opens (a table projection's save, a
// retirement) bound how long they may stay idle, their process sending
// nothing: each begins with SET LOCAL idle_in_transaction_session_timeout,
// in the round trip of its BEGIN. A save takes its
// ports.ModelSaveTxParams.IdleTimeout (the engine sets
// Options.Drain.ApplyTimeout plus ApplyAbandonGrace), lowered to the time
// left to its context's deadline plus a quarter of a second; the adapter's
// own transactions take 10 seconds. Without the bound, a process frozen
// in the middle of one (a long pause of its runtime, a suspended virtual
// machine, SIGSTOP) would keep its locks until it resumed: a save
// share-locks its stream's row of vantage_active_streams (the lease
// fence), abandonment passes over a locked stream row and keeps its holder
// registered, and so the instances taking over from the frozen one could
// not take that stream. Past the bound the server ends the session, the
// others take the stream, and the resumed process finds its connection
// closed: pgx drops it from the pool, and the call fails with
// ports.ErrTransient, which the engine charges to no event. A save whose
// IdleTimeout is zero and whose context has no deadline keeps the
// server's setting. The implicit transactions of the batches need no
// bound: a batch reaches the server whole, and the server runs and
// commits it whether or not its client reads the answer.
//
// # Stream leases
//
// Work is leased per stream: vantage_active_streams has a row for every
// stream with pending work, holding its lease (holder and expiry) and, per
// perspective, the highest version a fetch under the lease handed out.
// Claims and fetches write that row, never the work rows, which are written
// only when stored, failed or deleted. Claims walk the stream rows oldest
// work first (vantage_claim_streams) and lock them with FOR UPDATE SKIP
// LOCKED, so concurrent instances never take the same stream and a claim
// never waits; fetches lock the rows of the streams they fetch before they
// read their work, which orders them with a late append (see Late rows).
// Completions and failures take effect only in the streams whose lease the
// caller holds, which they lock first (the fence). A stream taken from a
// holder that is not live charges the rows handed out under its lease an
// attempt. A stream's row is deleted once it has no pending row, only by
// vantage_release_drained, which leaves alone the streams whose append
// lock is held and decides in a snapshot taken after it got the others':
// every statement that stores pending rows holds that lock and inserts the
// row, so a stream with pending work always has one.
//
// Statements that wait for locks take them in one order (instance rows,
// then stream rows, then work rows, then cursors and dead letters, several
// rows of a table in key order; a requeue, whose work rows are new, takes
// its dead letters first; the append locks are waited for only before any
// row lock), so instances never deadlock each other. Survivors abandoning
// the same dead instance queue on its instance row, and the first abandons
// it alone. CLAIMING.md at the repository root describes the whole claim
// policy.
//
// # Late rows
//
// A work row is late (vantage_work.late, ports.WorkItem.Late) when its event
// is below its pair's cursor without having been applied: stored there by
// an append with an explicit version, a requeue or a failed replay, or
// found pending below the position a completion or failure reported; or
// when it is stored below its pair's handed-out mark, whose apply may move
// the cursor past it. A writer of such a row share-locks the stream's row
// and then locks the pair's cursor before it reads marks and position (an
// append only when one of its versions is at or below the stream head, the
// only case in which a mark or a cursor can be past it), while a fetch
// locks the stream's row before it reads the rows it hands out and a
// completion marks the stragglers after its cursor upsert locked the
// cursor: whichever commits second sees the other's write, so a concurrent
// fetch, completion and late arrival never leave a late row unmarked. One
// case no row lock orders: the save or completion that creates a pair's
// first cursor, which an append in flight cannot lock before it exists.
// The mark stays until the row is deleted. Marking stragglers takes the
// pair's rows after its cursor, which only the cursor's holder does.
//
// # Lifecycle stages
//
// vantage_lifecycle_stages holds one row per (event, stage, perspective):
// a claim (the claimer, which must stay live for the claim to stand) until
// the stage is completed. Claims and completions upsert the rows in event
// id order, so concurrent claims of a stage have one winner and never
// deadlock.
//
// # Attempts and dead letters
//
// A work row's attempts count the applies that failed (WorkFail) and the
// times it was handed out to an instance that died holding it (its stream
// taken from a holder that is not live, by abandonment or by a claim or
// fetch), never a claim or a fetch, nor a lease that expired while its
// holder lives: a slow instance, or one whose database was briefly
// unreachable, costs its events nothing. A dead letter keeps its status (dead, requeued,
// recovered, ignored) and the deploy generation that gave up on it; a
// requeued work row names its dead letter (vantage_work.dead_letter_id),
// so its completion marks the dead letter recovered and its failure marks
// the same dead letter dead again. DeadLettersRecover requeues the oldest
// dead ones of other generations with FOR UPDATE SKIP LOCKED, so that
// instances of a new deploy recover each once between them.
//
// # Retiring perspectives
//
// PerspectiveRetire records the perspective in
// vantage_retired_perspectives and deletes its subscriptions under a lock
// on vantage_subscriptions that every append and registration conflicts
// with, so that no append stores its rows afterwards; then it deletes its
// pending rows (and, with DropState, its cursors, models and snapshots),
// which it finds by scans: no index leads with the perspective, as one
// would cost every append and completion for a rare operator action.
//
// # Retries
//
// An append repeated with the event ids of one that took effect (its
// commit acknowledged on a connection that then broke) returns the stored
// events with AlreadyStored and stores nothing; the statement finds them
// before it inserts, so AppendTx's transaction is not aborted.
//
// # Cost
//
// The work statements cost O((pairs + rows they touch) · log n), however
// long a stream's backlog: per (stream, perspective) they find the rows that
// decide what they may take (the first pending row, the first row waiting
// for its retry time) with bounded index probes, then range-scan only the
// rows they return, charge or delete (see pairs.go and the indexes of the
// migrations). Taking, extending and renewing a lease is one write of the
// stream's row, whatever its backlog; a fetch records its marks in the
// same row, in no index, so heap-only. Their batches run with JIT
// compilation off, random_page_cost at 1.1 and generic plans (see
// sqlWorkSettings).
//
// # Time
//
// A zero Now in a parameter struct means the database clock (now(), the
// start of the transaction); a set Now is used as given, truncated to the
// microseconds PostgreSQL keeps. Times come back in UTC.
//
// # Notifications
//
// Appends, requeues and NotifierPublish NOTIFY the schema's channel (see
// Store.Channel) when they commit. NotifierListen starts one lib/pq Listener
// per Store on first use, on Options.ConnString or the pool's connection
// string, which New checks with lib/pq's parser and requires to name one
// host: NOTIFY reaches only the listeners of the server that commits it. A
// reconnect, after which notifications may have been lost, arrives as
// ports.Wake{Reconnected: true}; NotifierListen does not wait for a
// listener whose connection fails, whose subscribers get that wake once it
// is up. The listener warns once per outage and reports at info when it is
// back. NOTIFY is a hint: the engine polls regardless. A Store made with
// Options.PollOnly has no listener: its Backend has no Notifier, so the
// engine polls only, and NotifierListen returns ErrPollOnly; its appends
// still NOTIFY.
//
// # PgBouncer
//
// The Store works on a pool behind PgBouncer in transaction pooling mode,
// which lends each transaction whichever server connection is free.
// Every call is one statement, one batch (an implicit transaction) or one
// explicit transaction that leaves nothing on its server connection: the
// batches' planner settings are set_config(..., true) and the idle bound
// of the explicit transactions is SET LOCAL, each local to its
// transaction, and the append and migration locks are
// pg_advisory_xact_lock. Parameters encode in every pgx query exec mode
// (uuids as pgtype.UUID, JSON as text). Two settings remain the
// application's:
//
//   - The pool's ConnConfig.DefaultQueryExecMode: pgx.QueryExecModeExec
//     (or default_query_exec_mode=exec in the connection string) before
//     PgBouncer 1.21, whose server connections keep no prepared statement
//     of the default mode across transactions. QueryExecModeCacheDescribe
//     and QueryExecModeSimpleProtocol work too; QueryExecModeDescribeExec
//     does not.
//   - The listener's route: LISTEN is state of a server session, and a
//     listener dialing PgBouncer in transaction mode receives nothing while
//     it reports healthy. Set Options.ConnString to the server itself (or
//     to a PgBouncer database in session pooling mode), or set
//     Options.PollOnly.
//
// # Errors
//
// Errors are translated at the edge into ports sentinels: no rows is
// ports.ErrNotFound, a unique violation (taken version or event id) is
// ports.ErrVersionConflict, malformed input is ports.ErrInvalidArgument, a
// closed Store or pool is ports.ErrClosed. Failures of the infrastructure
// that may pass wrap ports.ErrTransient around the driver's error: a lost,
// refused or timed-out connection, connection exceptions (SQLSTATE class
// 08), serialization failures and deadlocks, a server shutting down,
// starting up or out of connection slots, a lock not available, a session
// the server ended for idling (SQLSTATE 25P03, 25P04, 57P05). The caller's
// own cancellation or deadline stays context.Canceled or
// context.DeadlineExceeded.
package postgres
