package ports

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// LifecycleStage is a durable lifecycle stage of an event. The values are
// stored and must not change.
type LifecycleStage uint8

// Durable lifecycle stages. PostPerspective needs no durable record: it fires
// only from the run that saved the model, which happens once per event and
// perspective.
const (
	StagePrePerspective      LifecycleStage = 1
	StagePostAllPerspectives LifecycleStage = 2
	StagePostLifecycle       LifecycleStage = 4
)

// LifecycleStore records which lifecycle stages fired for which events, so
// each fires at most once per event across instances, and finds events whose
// lifecycle was interrupted by a crash. Optional: without it the engine
// guards stages in memory only and cannot heal crashes.
type LifecycleStore interface {
	// LifecycleClaim atomically records Stage for each listed event that has
	// not recorded it yet, and returns exactly those events (in input
	// order). Claiming an already-claimed stage returns nothing for that
	// event, whoever claimed it: the caller that gets an id back is the only
	// one to fire the stage. A claim of StagePostLifecycle is the durable
	// completion marker of the event.
	LifecycleClaim(ctx context.Context, params *LifecycleClaimParams) ([]uuid.UUID, error)

	// LifecycleStages returns the stages recorded for each listed event that
	// has any; events with none are absent.
	LifecycleStages(ctx context.Context, eventIDs []uuid.UUID) (map[uuid.UUID]LifecycleStage, error)

	// LifecycleOrphans returns events created at or after Since (a zero
	// Since: no bound) whose StagePostLifecycle is not recorded although
	// every perspective that Expected lists for the event's type has a
	// cursor at or past the event's version in its stream and no pending
	// work row for the event (all perspectives applied it; a pending row
	// below a cursor is a late event awaiting its rewind). Events of types
	// absent from Expected, or mapped to no perspective, are never returned.
	// A perspective listed twice counts once. Oldest first (by creation,
	// then stream id bytes, then version), at most Limit when positive.
	LifecycleOrphans(ctx context.Context, params *LifecycleOrphansParams) ([]Event, error)
}

// LifecycleClaimParams are the inputs of LifecycleClaim.
type LifecycleClaimParams struct {
	EventIDs   []uuid.UUID
	Stage      LifecycleStage
	InstanceID uuid.UUID
	Now        time.Time
}

// LifecycleOrphansParams are the inputs of LifecycleOrphans.
type LifecycleOrphansParams struct {
	// Expected maps an event type to the perspectives that must all have
	// applied an event of that type.
	Expected map[string][]string
	Since    time.Time
	Limit    int
}

// RewindStore supports rewinds and rebuilds: listing cursors that need a
// rewind, the cooperative per-(stream, perspective) lock, and listing the
// streams a perspective must replay. Optional: without it the engine never
// rewinds (late events stay flagged).
type RewindStore interface {
	// CursorsRewindRequired returns cursors with the RewindRequired flag,
	// ordered by stream then perspective, at most Limit when positive.
	CursorsRewindRequired(ctx context.Context, params *CursorsRewindRequiredParams) ([]Cursor, error)

	// StreamLockAcquire takes the cooperative lock of a (stream,
	// perspective) for Duration when it is free, expired, or already held by
	// the caller (which extends it). It reports whether the caller holds the
	// lock afterwards. The cursor row is created if missing.
	StreamLockAcquire(ctx context.Context, params *StreamLockParams) (bool, error)

	// StreamLockRelease releases the lock if the caller holds it; otherwise
	// it is a no-op.
	StreamLockRelease(ctx context.Context, params *StreamLockParams) error

	// StreamLocks returns the unexpired lock holder of each listed pair of a
	// stream, keyed by perspective.
	StreamLocks(ctx context.Context, params *StreamLocksParams) (map[string]StreamLock, error)

	// StreamsWithEventTypes returns ids of streams having at least one event
	// of any listed type, greater than After in byte order, ascending, at
	// most Limit when positive: pages for a rebuild.
	StreamsWithEventTypes(ctx context.Context, params *StreamsWithEventTypesParams) ([]uuid.UUID, error)
}

// CursorsRewindRequiredParams are the inputs of CursorsRewindRequired.
type CursorsRewindRequiredParams struct {
	Limit int
}

// StreamLockParams are the inputs of StreamLockAcquire and StreamLockRelease.
type StreamLockParams struct {
	StreamID    uuid.UUID
	Perspective string
	InstanceID  uuid.UUID
	// Reason says why the lock is held ("rewind", "rebuild").
	Reason   string
	Duration time.Duration
	Now      time.Time
}

// StreamLocksParams are the inputs of StreamLocks.
type StreamLocksParams struct {
	StreamID uuid.UUID
	Now      time.Time
}

// StreamLock is the holder of a (stream, perspective) lock.
type StreamLock struct {
	InstanceID uuid.UUID
	Reason     string
	Expiry     time.Time
}

// StreamsWithEventTypesParams are the inputs of StreamsWithEventTypes.
type StreamsWithEventTypesParams struct {
	EventTypes []string
	After      uuid.UUID
	Limit      int
}

// Snapshot is a perspective's model of a stream as of one version.
type Snapshot struct {
	StreamID    uuid.UUID
	Perspective string
	// Version and EventID are the last event reflected in Data.
	Version   int64
	EventID   uuid.UUID
	Data      []byte
	CreatedAt time.Time
}

// SnapshotStore keeps periodic model snapshots so rewinds of long streams
// replay from a recent point instead of the start. Optional.
type SnapshotStore interface {
	// SnapshotSave stores a snapshot, replacing one of the same version.
	SnapshotSave(ctx context.Context, snapshot Snapshot) error
	// SnapshotLatestBefore returns the snapshot with the highest version
	// strictly below Version, or ErrNotFound.
	SnapshotLatestBefore(ctx context.Context, streamID uuid.UUID, perspective string, version int64) (Snapshot, error)
	// SnapshotsDeleteFrom deletes the snapshots at or above version (they
	// no longer describe history once a late event arrived below them) and
	// returns how many it deleted.
	SnapshotsDeleteFrom(ctx context.Context, streamID uuid.UUID, perspective string, version int64) (int, error)
}
