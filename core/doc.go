// Package core is the Vantage engine: it materializes event-sourced read
// models ("perspectives") in the background, across many instances, on any
// backend that implements the ports of package ports.
//
// An application registers its event types and perspectives in a
// [Registry], builds a [Worker] with [New] over a backend
// (adapters/memory in process, adapters/postgres in production), starts
// it, and appends events with [Registry.Append]; the worker applies them to
// the models, which [Perspective.Load] reads one by one and
// [Perspective.Find] queries (see Reading). ExampleNew is the whole flow
// in one function; package app runs the worker in an fx application, and
// package vantagetest tests perspectives in milliseconds.
//
// # Glossary
//
//   - Event: an immutable fact of a type registered with [RegisterEvent],
//     stored as a [ports.Event]: a type name, a JSON payload, metadata
//     (correlation, causation, scope, headers) and its version in its
//     stream.
//   - Stream: the events of one aggregate (an order, an account), named by
//     a UUID and numbered 1, 2, 3...: the version is the stream's
//     processing order.
//   - Perspective: a named set of apply functions ([NewPerspective],
//     [Handle]) that fold the events of a stream into a model of a Go type,
//     stored as JSON, one model per stream.
//   - Pair: a (stream, perspective), the unit of ordering and of failure:
//     a pair applies its stream's events in version order, one at a time,
//     and a failing event holds back only its own pair.
//   - Cursor: how far a pair has applied its stream (the last applied
//     version, [ports.Cursor]), saved together with the model in one
//     atomic step, so an event delivered again is skipped.
//   - Work row: one per (stream, perspective, event), stored by the append
//     for each perspective subscribed to the event's type
//     ([ports.WorkItem]); it is completed (deleted) once its event was
//     applied, or failed and retried, or moved to dead letters.
//   - Lease and pin: an instance claims work by leasing rows for
//     [ClaimOptions.LeaseDuration], renewed while it drains them, and pins
//     their stream to itself: a stream is drained by one live instance at a
//     time, and an instance that stops heartbeating loses its leases and
//     pins to the others.
//   - Receptor and lifecycle stage: a function of yours ([AddReceptor])
//     run at a [Stage] of an event's life (PrePerspective, PostPerspective,
//     PostAllPerspectives, PostLifecycle), in a [Mode] (Inline, Detached,
//     ImmediateDetached), for effects outside the models.
//   - Late event and rewind: an event stored below its pair's cursor (an
//     import with explicit versions, a dead letter requeued after its pair
//     went on) is late; the
//     engine applies it by a rewind, which replays the pair from the latest
//     snapshot before it or from the start ([RewindOptions]).
//   - Dead letter: an event a pair gave up on ([ports.DeadLetter]): it
//     used up its [RetryOptions.MaxEventAttempts] (applies or decodes
//     that failed, takeovers from dead instances), or it is late while the
//     engine cannot rewind. The pair goes on with its next event; an
//     operator requeues or ignores the dead letter through the backend's
//     [ports.DeadLetterStore].
//   - Generation: the deploy generation of an instance
//     ([Options.Generation]), recorded with the dead letters it moves; an
//     instance with a Generation retries, once, the dead letters of other
//     generations, so a deploy that fixes a handler applies what the old
//     code gave up on.
//   - Instance: one running [Worker], named by [Options.InstanceID], that
//     heartbeats to the backend; any number run against one backend.
//
// # Registering
//
// A [Registry] holds the event types ([RegisterEvent]) and the perspectives
// ([NewPerspective], [Handle], [Registry.AddPerspective]) of an
// application. [Registry.Append] encodes events and appends them to a
// stream; the backend stores one work row per perspective that applies
// each event.
//
// # Running
//
// [New] builds a [Worker] over a ports.Backend; [Worker.Start] registers
// the instance and starts its loops (heartbeat, claims, consumers);
// [Worker.Stop] drains what is in flight, flushes completions and
// deregisters. Instances coordinate only through the backend: a stream is
// drained by one live instance at a time, and an instance that stops
// heartbeating loses its streams to the others.
//
// # Reading
//
// A model is read typed, from any process, with or without a Worker:
// [Perspective.Load] reads the model of one stream from the backend's
// ModelStore; [Perspective.Find] reads a page of the models of the
// perspective that a [Query] selects from its ModelQuery: filters ([Eq]
// on a field, top-level or nested, [Contains] on the document), an order
// ([ByStreamID], [ByUpdatedAt], [ByField], each [Order.Desc] too, ties
// broken by stream id) and a cursor ([Page].Next) that continues the
// listing without repeating or skipping the models that did not change
// meanwhile. A perspective declares the fields it is queried by with
// [Perspective.Index] ([TextField], [NumberField], [TimeField]), which
// ByField requires and, on PostgreSQL, each Worker builds indexes of when
// it starts, in the background; a filter on another field still works,
// checked model by model. Models lag their streams' latest events:
// [Worker.WaitForStream] waits until one reflects a version.
// ExamplePerspective_Find pages through a query.
//
// # Guarantees
//
// Within a (stream, perspective), events are applied in version order, each
// exactly once to the stored model: a model is saved together with its
// cursor, so a re-delivered event is skipped. An apply function receives
// the model that reflects exactly the events before its event (the
// dead-lettered ones excepted), never one that another instance moved past
// since, and its result is never saved over a model that a rewind or a
// rebuild replaced meanwhile, on whichever instance it ran (the replay
// moves the pair's epoch, which every save checks). Nothing is skipped: an event stored below a cursor (a late import,
// a requeued dead letter) is applied by a rewind that replays the pair, or,
// when the engine cannot rewind ([RewindOptions].Disabled, a backend without
// a RewindStore), moved to dead letters with reason "late", never completed
// unapplied. An append through a [Registry] registers its perspectives'
// subscriptions with the events, so it never creates fewer work rows than
// they call for.
//
// # Lifecycle stages
//
// Receptors ([AddReceptor]) run at four stages of an event: PrePerspective,
// PostPerspective (per perspective), PostAllPerspectives and PostLifecycle,
// the last two once every perspective registered for the event's type
// applied it. A stage is claimed in the backend, its receptors run, then it
// is recorded done, so Inline and ImmediateDetached receptors run exactly
// once while no instance crashes and at least once across crashes, with a
// stable [StageInfo.DeliveryKey]; Detached receptors run at most once.
//
// # Failures
//
// A bad or slow event costs only its own (stream, perspective); the other
// perspectives of its stream, and every other stream, flow meanwhile,
// except that a batch holds its drain consumer until its slowest apply
// ends or is abandoned: an instance whose every consumer
// ([DrainOptions.Consumers]) waits on a hung apply drains
// nothing else until one of them ends.
//
//   - An apply that returns an error, panics or runs past
//     [DrainOptions.ApplyTimeout] (its context is then cancelled) counts one
//     attempt; the event is retried after [RetryOptions.Event] while its
//     pair waits, and the failure that uses up
//     [RetryOptions.MaxEventAttempts] moves it to dead letters at
//     once, keeping the error, the reason and the [Options.Generation]; the
//     pair goes on with the next event.
//   - An apply that ignores its cancelled context is abandoned after
//     [DrainOptions.ApplyAbandonGrace]: logged, counted
//     ([Worker.AbandonedApplies], [Hooks].OnApplyAbandoned), charged an
//     attempt, and its pair retried while it runs on; what it returns is
//     discarded.
//   - An error of the backend (a lost connection, a timeout, a failover) is
//     never the event's: the pair keeps its work and is drained again after
//     [RetryOptions.Infra]. Adapters report such errors as ports.ErrTransient.
//   - The leases of the work being drained are renewed for as long as it
//     runs.
//
// Dead letters come back by an operator's requeue (the backend's
// DeadLetterStore) or, once per generation, when an instance of a new
// [Options.Generation] runs: the events are then applied in order.
//
// # Rebuilding
//
// A perspective whose code changed is rebuilt: its models are replayed from
// scratch, for some of its streams or all of them, while everything else
// flows; handlers do not fire. A rebuild leaves out the dead letters and
// the late events still waiting for their rewind, which then applies them
// (with rewinds off, they are dead-lettered as late); it completes no row
// and reports no position, so the rows the holder applied whose
// completion is on its way stay its own. [Worker.Rebuild] does it in the calling
// process. An operator with no engine at hand stores a request through the
// backend's ports.Admin (RebuildRequest) instead: the running workers that
// run the perspective look for requests every
// [RewindOptions.RebuildPollInterval], one of them claims it and carries it
// out, recording its progress (streams done of the total, events replayed)
// for RebuildGet and RebuildsList to show, and [Hooks].OnRebuildRequest to
// report. Should that instance die, or stop (it hands the request back),
// another resumes the request after the last stream recorded done. An
// event the perspective cannot replay fails the request with the error; an
// operator may cancel one (RebuildCancel). The instance that rebuilds a
// stream need not hold it: the instance that does drops its cached model
// and any apply it had in flight, and applies the next events to the
// rebuilt model; when it saves the model while the stream is replayed, the
// replay starts again from that model (a few times at most). A snapshot
// ([RewindOptions].SnapshotEvery) carries the epoch of the model it copies,
// and a rewind starts only from one of the pair's current epoch: a snapshot
// of the model from before the rebuild, even one that instance stored
// after the rebuild deleted the pair's snapshots, is never replayed from.
//
// # Observing
//
// [Hooks] are called synchronously from the engine's loops; [Worker.IsIdle],
// [Worker.WaitForStream], [Worker.WaitLifecycle] and
// [Worker.AbandonedApplies] report its state.
//
// The worker logs to [Options.Logger], and hands it to the backend's
// Notifier (ports.NotifierListenParams.Logger), so that the lines of a
// listener join the engine's. Every line carries instance_id and one
// component attribute. The start and stop are logged at Info with the
// service, host and generation. A background operation that fails (a
// claim, a heartbeat, a fetch, a flush, a lease renewal ...) is logged at
// its first failure, then summed up at most every 10s, and its recovery at
// Info with how long it failed and how often, so an outage costs a few
// lines per operation. What recurs with each batch (a batch given up on, a
// lifecycle stage given up on, the work of a perspective this instance
// does not have) is logged at most once per interval with a count.
//
// [Worker.Health] sums the state up for liveness and readiness probes, and
// package health serves it over HTTP.
//
// Spans go to [TelemetryOptions.TracerProvider]: a root per drain batch,
// one per apply (a child of its batch, linked to the span its event was
// appended under, whose trace context [Registry.Append] stores with the
// event), per rewind and per lifecycle stage. The observability guide
// (docs/observability.md) lists them with their attributes.
//
// # Metrics
//
// The engine records metrics through the OpenTelemetry metric API, on the
// meter "github.com/vantage-go/vantage" of [TelemetryOptions.MeterProvider]
// (the global provider by default, which records nothing until the
// application installs an SDK): work rows applied, failed and skipped per
// perspective, apply durations (sampled, see
// [TelemetryOptions.ApplyDurationInterval]), batches, claims, completion
// flushes, failures and dead letters by reason, rewinds, lifecycle stages,
// abandoned applies, and gauges of live instances, listener health and, on
// a backend with a [ports.Stats] port, each perspective's backlog, read at
// most once per [TelemetryOptions.StatsInterval]. The observability guide
// (docs/observability.md) lists every instrument with its unit and
// attributes. The library depends on the API only; the application chooses
// the SDK and the exporter.
package core
