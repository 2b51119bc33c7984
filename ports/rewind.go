package ports

import (
	"cmp"
	"context"
	"time"

	"github.com/google/uuid"
)

// dead letters with ReasonLate instead of applying it out of order.
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

	// StreamsWithEventTypes returns ids of streams having at least one event
	// of any listed type, greater than After in byte order, ascending, at
	// most Limit when positive: pages for a rebuild.
	StreamsWithEventTypes(ctx context.Context, params *StreamsWithEventTypesParams) ([]uuid.UUID, error)

	// WorkLate returns the pending rows of a (stream, perspective) that are
	// Late (see WorkItem.Late), in version order, whoever holds the stream
	// and whatever their retry time; rows completed in DebugMode are not
	// pending. It takes no lease and changes nothing: a rebuild, which any
	// instance runs, leaves their events out of the model it replays, as
	// the rewind they wait for has not applied them yet.
	WorkLate(ctx context.Context, params *WorkLateParams) ([]WorkItem, error)
}

// WorkLateParams are the inputs of WorkLate.
type WorkLateParams struct {
	StreamID    uuid.UUID
	Perspective string
}

// Validate reports the first field every RewindStore rejects with
// ErrInvalidArgument in WorkLate: a nil StreamID or an empty Perspective.
func (p *WorkLateParams) Validate() error {
	return cmp.Or(
		checkID("WorkLateParams.StreamID", p.StreamID),
		checkName("WorkLateParams.Perspective", p.Perspective),
	)
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

// StreamsWithEventTypesParams are the inputs of StreamsWithEventTypes.
type StreamsWithEventTypesParams struct {
	EventTypes []string
	After      uuid.UUID
	Limit      int
}

// Validate reports the field every RewindStore rejects with
// ErrInvalidArgument: a negative Limit.
func (p *CursorsRewindRequiredParams) Validate() error {
	return checkNotNegative("CursorsRewindRequiredParams.Limit", p.Limit)
}

// Validate reports the first field every RewindStore rejects with
// ErrInvalidArgument in StreamLockAcquire and StreamLockRelease: a nil
// StreamID or InstanceID or an empty Perspective. StreamLockAcquire also
// rejects a Duration that is not positive (see ValidateAcquire).
func (p *StreamLockParams) Validate() error {
	return cmp.Or(
		checkID("StreamLockParams.StreamID", p.StreamID),
		checkName("StreamLockParams.Perspective", p.Perspective),
		checkID("StreamLockParams.InstanceID", p.InstanceID),
	)
}

// ValidateAcquire is Validate for StreamLockAcquire, which also rejects a
// Duration that is not positive.
func (p *StreamLockParams) ValidateAcquire() error {
	return cmp.Or(p.Validate(), checkPositive("StreamLockParams.Duration", p.Duration))
}

// Validate reports the field every RewindStore rejects with
// ErrInvalidArgument: a negative Limit.
func (p *StreamsWithEventTypesParams) Validate() error {
	return checkNotNegative("StreamsWithEventTypesParams.Limit", p.Limit)
}
