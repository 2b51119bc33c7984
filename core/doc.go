// Package core is the Vantage engine: it materializes event-sourced read
// models ("perspectives") in the background, across many instances, on any
// backend that implements the ports of package ports.
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
// # Guarantees
//
// Within a (stream, perspective), events are applied in version order, each
// exactly once to the stored model: a model is saved together with its
// cursor, so a re-delivered event is skipped. An apply function receives
// the model that reflects exactly the events before its event (the
// dead-lettered ones excepted), never one that another instance moved past
// since. Nothing is skipped: an event stored below a cursor (a late import,
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
// A bad or slow event costs only its own (stream, perspective); every other
// stream, and every other stream of the same batch, flows meanwhile.
//
//   - An apply that returns an error, panics or runs past
//     [Options.ApplyTimeout] (its context is then cancelled) counts one
//     attempt; the event is retried after [Options.EventRetry] while its
//     pair waits, and the failure that uses up
//     [Options.MaxPerspectiveEventAttempts] moves it to dead letters at
//     once, keeping the error, the reason and the [Options.Generation]; the
//     pair goes on with the next event.
//   - An apply that ignores its cancelled context is abandoned after
//     [Options.ApplyAbandonGrace]: logged, counted
//     ([Worker.AbandonedApplies], [Hooks].OnApplyAbandoned), charged an
//     attempt, and its pair retried while it runs on; what it returns is
//     discarded.
//   - An error of the backend (a lost connection, a timeout, a failover) is
//     never the event's: the pair keeps its work and is drained again after
//     [Options.InfraRetry]. Adapters report such errors as ports.ErrTransient.
//   - The leases of the work being drained are renewed for as long as it
//     runs.
//
// Dead letters come back by an operator's requeue (the backend's
// DeadLetterStore) or, once per generation, when an instance of a new
// [Options.Generation] runs: the events are then applied in order.
//
// # Observing
//
// [Hooks] are called synchronously from the engine's loops; [Worker.IsIdle],
// [Worker.WaitForStream], [Worker.WaitLifecycle] and
// [Worker.AbandonedApplies] report its state. Background failures are
// logged to [Options.Logger] once, then summed up every few seconds, and
// their recovery is logged at Info.
package core
