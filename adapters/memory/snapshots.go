package memory

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/vantage-go/vantage/ports"
)

// SnapshotSave implements ports.SnapshotStore: a snapshot of the same
// version is replaced unless it has a later epoch. A zero CreatedAt is set
// from the injected clock. It returns ports.ErrInvalidArgument, and stores
// nothing, for a nil stream or event id, an empty perspective, a version
// below 1, a negative epoch or Data that is not a JSON document.
func (s *Store) SnapshotSave(ctx context.Context, params *ports.SnapshotSaveParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("saving snapshot: %w", err)
	}
	snapshot := params.Snapshot
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()

	snapshot.Data = bytes.Clone(snapshot.Data)
	snapshot.CreatedAt = s.now(snapshot.CreatedAt)
	k := pairKey{snapshot.StreamID, snapshot.Perspective}
	snaps := s.snapshots[k]
	if i, found := searchSnapshots(snaps, snapshot.Version); found {
		if snaps[i].Epoch <= snapshot.Epoch {
			snaps[i] = snapshot
		}
	} else {
		s.snapshots[k] = slices.Insert(snaps, i, snapshot)
	}
	return nil
}

// SnapshotLatestBefore implements ports.SnapshotStore. It returns a copy, or
// an error wrapping ports.ErrNotFound.
func (s *Store) SnapshotLatestBefore(ctx context.Context, params *ports.SnapshotLatestBeforeParams) (ports.Snapshot, error) {
	streamID, perspective, version, epoch := params.StreamID, params.Perspective, params.Version, params.Epoch
	if err := s.lock(ctx); err != nil {
		return ports.Snapshot{}, err
	}
	defer s.mu.Unlock()

	snaps := s.snapshots[pairKey{streamID, perspective}]
	// i is the first snapshot at or above version; those before it lie
	// strictly below, the latest last.
	i, _ := searchSnapshots(snaps, version)
	for j := i - 1; j >= 0; j-- {
		if snaps[j].Epoch == epoch {
			out := snaps[j]
			out.Data = bytes.Clone(out.Data)
			return out, nil
		}
	}
	return ports.Snapshot{}, fmt.Errorf("loading snapshot %q of stream %s before version %d at epoch %d: %w", perspective, streamID, version, epoch, ports.ErrNotFound)
}

// SnapshotsDeleteFrom implements ports.SnapshotStore. A version below 1
// deletes every snapshot of the pair.
func (s *Store) SnapshotsDeleteFrom(ctx context.Context, params *ports.SnapshotsDeleteFromParams) (int, error) {
	streamID, perspective, version := params.StreamID, params.Perspective, params.Version
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()

	k := pairKey{streamID, perspective}
	snaps := s.snapshots[k]
	i, _ := searchSnapshots(snaps, version)
	deleted := len(snaps) - i
	if i == 0 {
		delete(s.snapshots, k)
	} else {
		// Clear the tail so the deleted snapshots' data can be collected.
		clear(snaps[i:])
		s.snapshots[k] = snaps[:i]
	}
	return deleted, nil
}

// searchSnapshots returns the index of the first snapshot at or above
// version, and whether it is exactly at version.
func searchSnapshots(snaps []ports.Snapshot, version int64) (int, bool) {
	return slices.BinarySearchFunc(snaps, version, func(sn ports.Snapshot, v int64) int {
		return cmp.Compare(sn.Version, v)
	})
}
