package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// runSnapshots verifies ports.SnapshotStore, an optional port.
func runSnapshots(t *testing.T, newBackend NewBackendFunc, implemented bool) {
	t.Helper()
	const port = "SnapshotStore"

	optionalGroup(t, "SnapshotLatestBefore", port, implemented, map[string]func(t *testing.T){
		"NotFoundWithoutSnapshots": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			requireNoSnapshot(t, tb.backend, stream, perspective, 100)
			saveSnapshot(t, tb.backend, stream, perspective, 1, at(0))

			requireNoSnapshot(t, tb.backend, stream, perspective2, 100)
			requireNoSnapshot(t, tb.backend, newID(t), perspective, 100)
		},
		"StrictlyBeforeVersion": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			for _, v := range []int64{5, 9, 2} {
				saveSnapshot(t, tb.backend, stream, perspective, v, at(0))
			}

			requireNoSnapshot(t, tb.backend, stream, perspective, 2)
			for before, want := range map[int64]int64{3: 2, 5: 2, 6: 5, 9: 5, 10: 9, 100: 9} {
				require.Equal(t, want, latestSnapshot(t, tb.backend, stream, perspective, before).Version, "before %d", before)
			}
		},
		"OnlyOfTheGivenEpoch": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			// Epoch 1 at 2 and 7; a late write of epoch 0 at 5, between
			// them; epoch 2 at 9.
			for v, epoch := range map[int64]int64{2: 1, 5: 0, 7: 1, 9: 2} {
				saveEpochSnapshot(t, tb.backend, stream, v, epoch)
			}

			for _, c := range []struct{ before, epoch, want int64 }{
				{10, 1, 7}, {7, 1, 2}, {6, 1, 2}, {10, 0, 5}, {10, 2, 9},
			} {
				got := latestOfEpoch(t, tb.backend, stream, c.before, c.epoch)
				require.Equal(t, c.want, got.Version, "before %d at epoch %d: the latest of that epoch, past those of others", c.before, c.epoch)
				require.Equal(t, c.epoch, got.Epoch, "before %d at epoch %d", c.before, c.epoch)
			}
			for _, c := range []struct{ before, epoch int64 }{{2, 1}, {5, 0}, {9, 2}, {100, 3}} {
				_, err := tb.backend.Snapshots.SnapshotLatestBefore(t.Context(), &ports.SnapshotLatestBeforeParams{StreamID: stream, Perspective: perspective, Version: c.before, Epoch: c.epoch})
				require.ErrorIs(t, err, ports.ErrNotFound, "before %d at epoch %d: a snapshot of another epoch never stands in", c.before, c.epoch)
			}
		},
	})

	optionalGroup(t, "SnapshotSave", port, implemented, map[string]func(t *testing.T){
		"RejectsInvalidArguments": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			for name, edit := range map[string]func(s *ports.Snapshot){
				"nil stream":        func(s *ports.Snapshot) { s.StreamID = uuid.Nil },
				"empty perspective": func(s *ports.Snapshot) { s.Perspective = "" },
				"zero version":      func(s *ports.Snapshot) { s.Version = 0 },
				"negative version":  func(s *ports.Snapshot) { s.Version = -1 },
				"nil event id":      func(s *ports.Snapshot) { s.EventID = uuid.Nil },
				"negative epoch":    func(s *ports.Snapshot) { s.Epoch = -1 },
				"empty data":        func(s *ports.Snapshot) { s.Data = nil },
				"data not JSON":     func(s *ports.Snapshot) { s.Data = []byte("not json") },
			} {
				s := ports.Snapshot{StreamID: stream, Perspective: perspective, Version: 1, EventID: newID(t), Data: []byte(`{}`), CreatedAt: at(0)}
				edit(&s)
				require.ErrorIs(t, tb.backend.Snapshots.SnapshotSave(t.Context(), &ports.SnapshotSaveParams{Snapshot: s}), ports.ErrInvalidArgument, name)
			}
			requireNoSnapshot(t, tb.backend, stream, perspective, 100)
		},
		"ReplacesSameVersion": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			saveSnapshot(t, tb.backend, stream, perspective, 3, at(time.Second))

			second := saveSnapshot(t, tb.backend, stream, perspective, 3, at(2*time.Second))

			requireSnapshot(t, second, latestSnapshot(t, tb.backend, stream, perspective, 4))
			deleted, err := tb.backend.Snapshots.SnapshotsDeleteFrom(t.Context(), &ports.SnapshotsDeleteFromParams{StreamID: stream, Perspective: perspective, Version: 0})
			require.NoError(t, err)
			require.Equal(t, 1, deleted, "one snapshot per version")
		},
		"StoresEveryField": func(t *testing.T) {
			tb := setup(t, newBackend)
			want := ports.Snapshot{
				StreamID:    newID(t),
				Perspective: perspective,
				Version:     3,
				EventID:     newID(t),
				Epoch:       4,
				Data:        []byte(`{"total": 42, "lines": ["a", "b"]}`),
				CreatedAt:   at(5 * time.Second),
			}
			require.NoError(t, tb.backend.Snapshots.SnapshotSave(t.Context(), &ports.SnapshotSaveParams{Snapshot: want}))

			requireSnapshot(t, want, latestOfEpoch(t, tb.backend, want.StreamID, 4, 4))
		},
		"KeepsALaterEpochAtTheSameVersion": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			current := saveEpochSnapshot(t, tb.backend, stream, 3, 2)

			// A late write of the history a replay replaced.
			saveEpochSnapshot(t, tb.backend, stream, 3, 1)

			got := latestOfEpoch(t, tb.backend, stream, 4, 2)
			require.Equal(t, current.EventID, got.EventID, "a snapshot of an earlier epoch replaces none of a later one")
			requireSnapshot(t, current, got)
			_, err := tb.backend.Snapshots.SnapshotLatestBefore(t.Context(), &ports.SnapshotLatestBeforeParams{StreamID: stream, Perspective: perspective, Version: 4, Epoch: 1})
			require.ErrorIs(t, err, ports.ErrNotFound, "the late write stored nothing")

			// The same epoch, or a later one, replaces it.
			same := saveEpochSnapshot(t, tb.backend, stream, 3, 2)
			requireSnapshot(t, same, latestOfEpoch(t, tb.backend, stream, 4, 2))
			later := saveEpochSnapshot(t, tb.backend, stream, 3, 3)
			requireSnapshot(t, later, latestOfEpoch(t, tb.backend, stream, 4, 3))
			_, err = tb.backend.Snapshots.SnapshotLatestBefore(t.Context(), &ports.SnapshotLatestBeforeParams{StreamID: stream, Perspective: perspective, Version: 4, Epoch: 2})
			require.ErrorIs(t, err, ports.ErrNotFound, "replaced by the later epoch")
			require.Equal(t, 1, deleteSnapshots(t, tb.backend, stream, perspective, 0), "one snapshot per version")
		},
	})

	optionalGroup(t, "SnapshotsDeleteFrom", port, implemented, map[string]func(t *testing.T){
		"DeletesAtAndAbove": func(t *testing.T) {
			tb := setup(t, newBackend)
			streams := newIDs(t, 2)
			for _, v := range []int64{2, 5, 9} {
				saveSnapshot(t, tb.backend, streams[0], perspective, v, at(0))
			}
			otherPerspective := saveSnapshot(t, tb.backend, streams[0], perspective2, 9, at(0))
			otherStream := saveSnapshot(t, tb.backend, streams[1], perspective, 9, at(0))

			require.Equal(t, 2, deleteSnapshots(t, tb.backend, streams[0], perspective, 5))

			require.Equal(t, int64(2), latestSnapshot(t, tb.backend, streams[0], perspective, 100).Version)
			require.Zero(t, deleteSnapshots(t, tb.backend, streams[0], perspective, 5), "idempotent")
			requireSnapshot(t, otherPerspective, latestSnapshot(t, tb.backend, streams[0], perspective2, 100))
			requireSnapshot(t, otherStream, latestSnapshot(t, tb.backend, streams[1], perspective, 100))
		},
		"FromZeroDeletesAll": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			saveSnapshot(t, tb.backend, stream, perspective, 1, at(0))
			saveSnapshot(t, tb.backend, stream, perspective, 2, at(0))

			require.Equal(t, 2, deleteSnapshots(t, tb.backend, stream, perspective, 0))

			requireNoSnapshot(t, tb.backend, stream, perspective, 100)
		},
		"NoneToDelete": func(t *testing.T) {
			tb := setup(t, newBackend)

			require.Zero(t, deleteSnapshots(t, tb.backend, newID(t), perspective, 0))
		},
	})
}

// saveSnapshot saves a snapshot of (stream, perspective) at version, with a
// fresh event id and a payload naming the version, created at now, and
// returns it.
func saveSnapshot(t *testing.T, b ports.Backend, stream uuid.UUID, perspective string, version int64, now time.Time) ports.Snapshot {
	t.Helper()
	s := ports.Snapshot{
		StreamID:    stream,
		Perspective: perspective,
		Version:     version,
		EventID:     newID(t),
		Data:        fmt.Appendf(nil, `{"version":%d,"saved":%q}`, version, now.Format(time.RFC3339)),
		CreatedAt:   now,
	}
	require.NoError(t, b.Snapshots.SnapshotSave(t.Context(), &ports.SnapshotSaveParams{Snapshot: s}))
	return s
}

// saveEpochSnapshot saves a snapshot of (stream, perspective) at version and
// epoch, with a fresh event id and a payload naming both, and returns it.
func saveEpochSnapshot(t *testing.T, b ports.Backend, stream uuid.UUID, version, epoch int64) ports.Snapshot {
	t.Helper()
	s := ports.Snapshot{
		StreamID:    stream,
		Perspective: perspective,
		Version:     version,
		EventID:     newID(t),
		Epoch:       epoch,
		Data:        fmt.Appendf(nil, `{"version":%d,"epoch":%d}`, version, epoch),
		CreatedAt:   at(time.Second),
	}
	require.NoError(t, b.Snapshots.SnapshotSave(t.Context(), &ports.SnapshotSaveParams{Snapshot: s}))
	return s
}

// latestOfEpoch returns the latest snapshot of (stream, perspective) of
// epoch below version, failing t when there is none.
func latestOfEpoch(t *testing.T, b ports.Backend, stream uuid.UUID, version, epoch int64) ports.Snapshot {
	t.Helper()
	s, err := b.Snapshots.SnapshotLatestBefore(t.Context(), &ports.SnapshotLatestBeforeParams{StreamID: stream, Perspective: perspective, Version: version, Epoch: epoch})
	require.NoError(t, err)
	return s
}

// latestSnapshot returns the latest snapshot of epoch 0 below version,
// failing t when there is none.
func latestSnapshot(t *testing.T, b ports.Backend, stream uuid.UUID, perspective string, version int64) ports.Snapshot {
	t.Helper()
	s, err := b.Snapshots.SnapshotLatestBefore(t.Context(), &ports.SnapshotLatestBeforeParams{StreamID: stream, Perspective: perspective, Version: version})
	require.NoError(t, err)
	return s
}

// requireNoSnapshot fails t unless (stream, perspective) has no snapshot of
// epoch 0 below version.
func requireNoSnapshot(t *testing.T, b ports.Backend, stream uuid.UUID, perspective string, version int64) {
	t.Helper()
	_, err := b.Snapshots.SnapshotLatestBefore(t.Context(), &ports.SnapshotLatestBeforeParams{StreamID: stream, Perspective: perspective, Version: version})
	require.ErrorIs(t, err, ports.ErrNotFound)
}

// deleteSnapshots deletes the snapshots at or above version and returns how
// many it deleted.
func deleteSnapshots(t *testing.T, b ports.Backend, stream uuid.UUID, perspective string, version int64) int {
	t.Helper()
	n, err := b.Snapshots.SnapshotsDeleteFrom(t.Context(), &ports.SnapshotsDeleteFromParams{StreamID: stream, Perspective: perspective, Version: version})
	require.NoError(t, err)
	return n
}

// requireSnapshot fails t unless got is want as stored: the JSON payload
// compares semantically and the time as an instant.
func requireSnapshot(t *testing.T, want, got ports.Snapshot) {
	t.Helper()
	require.Equal(t, want.StreamID, got.StreamID)
	require.Equal(t, want.Perspective, got.Perspective)
	require.Equal(t, want.Version, got.Version)
	require.Equal(t, want.EventID, got.EventID)
	require.Equal(t, want.Epoch, got.Epoch)
	require.JSONEq(t, string(want.Data), string(got.Data))
	requireTime(t, want.CreatedAt, got.CreatedAt, "CreatedAt")
}
