package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/vantage-go/vantage/ports"
)

var _ ports.SnapshotStore = (*Store)(nil)

const sqlSnapshotSave = `INSERT INTO /* SCHEMA */.vantage_snapshots
    (stream_id, perspective, event_version, event_id, epoch, data, created_at)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, coalesce($7::timestamptz, now()))
ON CONFLICT (stream_id, perspective, event_version) DO UPDATE
SET event_id = excluded.event_id, epoch = excluded.epoch, data = excluded.data, created_at = excluded.created_at
WHERE vantage_snapshots.epoch <= excluded.epoch`

// SnapshotSave implements ports.SnapshotStore: a snapshot of the same
// version is replaced unless it has a later epoch. A zero CreatedAt is the
// database clock. It returns ports.ErrInvalidArgument, and stores nothing,
// for a nil stream or event id, an empty perspective, a version below 1, a
// negative epoch or Data that is not a JSON document.
func (s *Store) SnapshotSave(ctx context.Context, params *ports.SnapshotSaveParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("saving snapshot: %w", err)
	}
	snapshot := params.Snapshot
	if err := s.ready(ctx); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, s.sql(sqlSnapshotSave), snapshot.StreamID, snapshot.Perspective, snapshot.Version,
		snapshot.EventID, snapshot.Epoch, string(snapshot.Data), nowArg(snapshot.CreatedAt))
	if err != nil {
		return fmt.Errorf("saving snapshot %q of stream %s at version %d: %w", snapshot.Perspective, snapshot.StreamID, snapshot.Version, translate(err))
	}
	return nil
}

// sqlSnapshotLatestBefore walks the pair's snapshots below the version
// newest first through the primary key and skips those of other epochs. A
// pair keeps one snapshot per version, so the walk is bounded by its
// snapshots; those a replay left behind sit below the one it started from.
const sqlSnapshotLatestBefore = `SELECT event_version, event_id, epoch, data, created_at
FROM /* SCHEMA */.vantage_snapshots
WHERE stream_id = $1 AND perspective = $2 AND event_version < $3 AND epoch = $4
ORDER BY event_version DESC
LIMIT 1`

// SnapshotLatestBefore implements ports.SnapshotStore. It returns an error
// wrapping ports.ErrNotFound when no snapshot of the epoch lies below
// version.
func (s *Store) SnapshotLatestBefore(ctx context.Context, params *ports.SnapshotLatestBeforeParams) (ports.Snapshot, error) {
	streamID, perspective, version, epoch := params.StreamID, params.Perspective, params.Version, params.Epoch
	if err := s.ready(ctx); err != nil {
		return ports.Snapshot{}, err
	}
	snap := ports.Snapshot{StreamID: streamID, Perspective: perspective}
	var created pgtype.Timestamptz
	err := s.pool.QueryRow(ctx, s.sql(sqlSnapshotLatestBefore), streamID, perspective, version, epoch).
		Scan(&snap.Version, &snap.EventID, &snap.Epoch, &snap.Data, &created)
	if err != nil {
		return ports.Snapshot{}, fmt.Errorf("loading snapshot %q of stream %s before version %d at epoch %d: %w", perspective, streamID, version, epoch, translate(err))
	}
	snap.CreatedAt = fromTime(created)
	return snap, nil
}

const sqlSnapshotsDeleteFrom = `DELETE FROM /* SCHEMA */.vantage_snapshots
WHERE stream_id = $1 AND perspective = $2 AND event_version >= $3`

// SnapshotsDeleteFrom implements ports.SnapshotStore. A version below 1
// deletes every snapshot of the pair.
func (s *Store) SnapshotsDeleteFrom(ctx context.Context, params *ports.SnapshotsDeleteFromParams) (int, error) {
	streamID, perspective, version := params.StreamID, params.Perspective, params.Version
	if err := s.ready(ctx); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, s.sql(sqlSnapshotsDeleteFrom), streamID, perspective, version)
	if err != nil {
		return 0, fmt.Errorf("deleting snapshots %q of stream %s from version %d: %w", perspective, streamID, version, translate(err))
	}
	return int(tag.RowsAffected()), nil
}
