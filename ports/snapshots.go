package ports

import (
	"cmp"
	"context"
	"time"

	"github.com/google/uuid"
)

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
	SnapshotSave(ctx context.Context, params *SnapshotSaveParams) error
	// SnapshotLatestBefore returns the snapshot with the highest version
	// strictly below Version, or ErrNotFound.
	SnapshotLatestBefore(ctx context.Context, params *SnapshotLatestBeforeParams) (Snapshot, error)
	// SnapshotsDeleteFrom deletes the snapshots at or above Version (they
	// no longer describe history once a late event arrived below them) and
	// returns how many it deleted.
	SnapshotsDeleteFrom(ctx context.Context, params *SnapshotsDeleteFromParams) (int, error)
}

// SnapshotSaveParams are the inputs of SnapshotSave.
type SnapshotSaveParams struct {
	Snapshot Snapshot
}

// SnapshotLatestBeforeParams are the inputs of SnapshotLatestBefore.
type SnapshotLatestBeforeParams struct {
	StreamID    uuid.UUID
	Perspective string
	Version     int64
}

// SnapshotsDeleteFromParams are the inputs of SnapshotsDeleteFrom.
type SnapshotsDeleteFromParams struct {
	StreamID    uuid.UUID
	Perspective string
	Version     int64
}

// Validate reports the first field every SnapshotStore rejects with
// ErrInvalidArgument: a snapshot with a nil StreamID or EventID, an empty
// Perspective, a Version that is not positive, or Data that is not a JSON
// document.
func (p *SnapshotSaveParams) Validate() error {
	s := &p.Snapshot
	return cmp.Or(
		checkID("SnapshotSaveParams.Snapshot.StreamID", s.StreamID),
		checkName("SnapshotSaveParams.Snapshot.Perspective", s.Perspective),
		checkPositive("SnapshotSaveParams.Snapshot.Version", s.Version),
		checkID("SnapshotSaveParams.Snapshot.EventID", s.EventID),
		checkJSON("SnapshotSaveParams.Snapshot.Data", s.Data),
	)
}
