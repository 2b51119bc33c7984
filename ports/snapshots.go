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
	Version int64
	EventID uuid.UUID
	// Epoch is the pair's epoch (see Cursor.Epoch) of the model Data
	// copies: the epoch that model was saved at, or, for a snapshot a
	// replay takes on its way, the epoch its save moves the pair to. A
	// snapshot describes the pair's history only while the pair is at that
	// epoch: after a rewind or a rebuild (possibly with other apply
	// functions) it may hold what the replay replaced.
	Epoch     int64
	Data      []byte
	CreatedAt time.Time
}

// SnapshotStore keeps periodic model snapshots so rewinds of long streams
// replay from a recent point instead of the start. Optional.
//
// Snapshots are fenced by the pair's epoch: the engine starts a replay only
// from a snapshot of the epoch of the model it loaded. A snapshot of
// another epoch (one written late by an instance whose model was replaced
// meanwhile, say just after a rebuild deleted the pair's snapshots) is
// never returned for it, so it cannot bring back a replaced history.
// Implementations must be safe for concurrent use.
type SnapshotStore interface {
	// SnapshotSave stores a snapshot, replacing one of the same version
	// and an earlier or equal epoch. When the stored one has a later epoch
	// it keeps that one, stores nothing and returns nil: a snapshot of an
	// earlier epoch can only be a late write of a replaced history.
	SnapshotSave(ctx context.Context, params *SnapshotSaveParams) error
	// SnapshotLatestBefore returns the snapshot of epoch Epoch with the
	// highest version strictly below Version, or ErrNotFound. Snapshots of
	// other epochs are passed over, also when they lie above it: one round
	// trip finds the latest snapshot a replay may start from.
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
	// Epoch is the epoch of the snapshots to consider: that of the stored
	// model the replay starts from (StoredModel.Epoch; 0 for none).
	Epoch int64
}

// SnapshotsDeleteFromParams are the inputs of SnapshotsDeleteFrom.
type SnapshotsDeleteFromParams struct {
	StreamID    uuid.UUID
	Perspective string
	Version     int64
}

// Validate reports the first field every SnapshotStore rejects with
// ErrInvalidArgument: a snapshot with a nil StreamID or EventID, an empty
// Perspective, a Version that is not positive, a negative Epoch, or Data
// that is not a JSON document.
func (p *SnapshotSaveParams) Validate() error {
	s := &p.Snapshot
	return cmp.Or(
		checkID("SnapshotSaveParams.Snapshot.StreamID", s.StreamID),
		checkName("SnapshotSaveParams.Snapshot.Perspective", s.Perspective),
		checkPositive("SnapshotSaveParams.Snapshot.Version", s.Version),
		checkID("SnapshotSaveParams.Snapshot.EventID", s.EventID),
		checkNotNegative("SnapshotSaveParams.Snapshot.Epoch", s.Epoch),
		checkJSON("SnapshotSaveParams.Snapshot.Data", s.Data),
	)
}
