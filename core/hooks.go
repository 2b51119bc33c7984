package core

import (
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// Hooks are callbacks the Worker invokes synchronously from its loops. Keep
// them fast and non-blocking; they must be safe for concurrent calls. Nil
// hooks are skipped.
type Hooks struct {
	// OnWorkProcessingStarted fires on the idle → active transition.
	OnWorkProcessingStarted func()
	// OnWorkProcessingIdle fires on the active → idle transition, after
	// Options.Drain.IdleThresholdPolls consecutive empty polls.
	OnWorkProcessingIdle func()
	// OnBatchCycleComplete fires after every consumer cycle, including idle
	// ticks that found no work.
	OnBatchCycleComplete func(BatchCycle)
	// OnPerspectiveEventProcessed fires after a perspective applied at least
	// one event of a stream and its completion was buffered.
	OnPerspectiveEventProcessed func(PerspectiveEventProcessed)
	// OnFailure fires when a perspective failed on an event; the event is
	// retried at Failure.RetryAt.
	OnFailure func(ports.Failure)
	// OnDeadLettered fires when a work row moved to dead letters.
	OnDeadLettered func(ports.DeadLetter)
	// OnCompletionsFlushed fires after the backend acknowledged a batch of
	// completions (or failures, with Failures set).
	OnCompletionsFlushed func(CompletionsFlushed)
	// OnLifecycleCompleted fires with the events whose PostLifecycle stage
	// this instance just ran (their durable completion marker is written).
	OnLifecycleCompleted func(events []ports.Event)
	// OnDeadLettersRequeued fires after this instance requeued dead letters
	// of other generations for a retry on its own (see Options.Generation).
	OnDeadLettersRequeued func([]ports.DeadLetter)
	// OnRewind fires after a (stream, perspective) was rewound.
	OnRewind func(RewindInfo)
	// OnRebuildRequest fires when this instance claimed a rebuild request
	// (Status RebuildRunning), recorded its progress (RebuildRunning, with
	// the figures recorded), finished it (RebuildDone or RebuildFailed)
	// or released it (RebuildPending), with the request as this instance
	// recorded it. It does not fire when the instance lost the claim.
	OnRebuildRequest func(ports.RebuildRequest)
	// OnStartupScanComplete fires once the startup reconciliation and rewind
	// scan finished (see Worker.StartupScanComplete).
	OnStartupScanComplete func()
	// OnLeasesRenewed fires after the leases of the work being drained
	// were renewed, with how many stream leases the backend renewed.
	OnLeasesRenewed func(renewed int)
	// OnApplyAbandoned fires when an apply that ignored its cancelled
	// context was abandoned (see Options.Drain.ApplyAbandonGrace).
	OnApplyAbandoned func(AbandonedApply)
	// DedupObserver observes the processed-event cache.
	DedupObserver DedupObserver
}

// AbandonedApply describes an apply the engine abandoned: it ran past
// Options.Drain.ApplyTimeout and then Options.Drain.ApplyAbandonGrace
// without returning.
type AbandonedApply struct {
	StreamID    uuid.UUID
	Perspective string
	EventID     uuid.UUID
	Version     int64
	// Started is when the apply began, on the engine's clock.
	Started time.Time
	// Elapsed is how long it had run when it was abandoned.
	Elapsed time.Duration
}

// BatchCycle describes one consumer cycle.
type BatchCycle struct {
	// Streams is how many stream ids the cycle drained; 0 for an idle tick.
	Streams int
	// Applied is how many events were applied across perspectives.
	Applied int
}

// PerspectiveEventProcessed describes events applied by one perspective to
// one stream.
type PerspectiveEventProcessed struct {
	Perspective string
	StreamID    uuid.UUID
	EventCount  int
	// LastVersion is the stream version the perspective reached.
	LastVersion int64
}

// RewindInfo describes a finished rewind.
type RewindInfo struct {
	StreamID    uuid.UUID
	Perspective string
	// FromVersion is the version replay started after (a snapshot's, or 0).
	FromVersion int64
	// TriggerVersion is the earliest late event's version.
	TriggerVersion int64
	// Replayed counts the events applied by the replay.
	Replayed int
	// New counts the replayed events that had never been applied.
	New      int
	Duration time.Duration
	// Rebuild is true for a rebuild rather than a rewind.
	Rebuild bool
}

// CompletionsFlushed describes an acknowledged flush.
type CompletionsFlushed struct {
	Completions []ports.Completion
	Failures    []ports.Failure
}

// DedupObserver observes the processed-event cache (for metrics, debugging
// and tests). Methods are called synchronously; keep them fast.
type DedupObserver interface {
	// OnEventsMarkedInFlight reports work ids added as InFlight.
	OnEventsMarkedInFlight(workIDs []uuid.UUID)
	// OnRetentionActivated reports how many entries started their TTL.
	OnRetentionActivated(count int)
	// OnEvicted reports how many expired entries were removed.
	OnEvicted(count int)
	// OnEventsRemoved reports work ids force-removed (rewind, rebuild).
	OnEventsRemoved(workIDs []uuid.UUID)
	// OnEventsDeduped reports work ids skipped as already processed.
	OnEventsDeduped(workIDs []uuid.UUID, perspective string, streamID uuid.UUID)
}

// dedupedHook returns the report of rows the processed-event cache passed
// over to o, nil for none.
func dedupedHook(o DedupObserver) func([]uuid.UUID, string, uuid.UUID) {
	if o == nil {
		return nil
	}
	return o.OnEventsDeduped
}
