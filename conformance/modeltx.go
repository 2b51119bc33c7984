package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// runModelTx verifies the optional ports.TxModelStore. What Apply writes
// with the transaction is the adapter's own business; the suite checks
// what every adapter promises through the ports: the save and Apply
// commit together or not at all, a failed check runs no Apply, and an
// Apply whose connection was lost under it (with breakConnections) is the
// backend's failure.
func runModelTx(t *testing.T, newBackend NewBackendFunc, implemented bool, breakConnections func(t *testing.T, b ports.Backend)) {
	t.Helper()
	const port = "TxModelStore"
	store := func(t *testing.T, b ports.Backend) ports.TxModelStore {
		t.Helper()
		require.NotNil(t, b.ModelTx, "every handle of the backend sets Backend.ModelTx")
		return b.ModelTx
	}
	requireBreak := func(t *testing.T) {
		t.Helper()
		if breakConnections == nil {
			t.Skip("Features.BreakConnections is nil: the adapter has no connection to lose")
		}
	}

	optionalGroup(t, "ModelSaveTx", port, implemented, map[string]func(t *testing.T){
		"SavesAndAppliesTogether": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream, last := newID(t), newID(t)
			applied := 0
			err := store(t, tb.backend).ModelSaveTx(t.Context(), &ports.ModelSaveTxParams{
				Save: *modelParams(stream, perspective, 0, last, 3, `{"n":3}`),
				Apply: func(_ context.Context, tx ports.Tx) error {
					require.NotNil(t, tx, "Apply gets the transaction")
					applied++
					return nil
				},
			})
			require.NoError(t, err)
			require.Equal(t, 1, applied)
			m := mustModel(t, tb.backend, stream, perspective)
			require.Equal(t, int64(3), m.LastVersion)
			require.Equal(t, last, m.LastEventID)
		},
		"ApplyErrorStoresNothing": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			require.NoError(t, saveModel(t, tb.backend, stream, 0, newID(t), 1, `{"n":1}`))
			refused := errors.New("refused")
			err := store(t, tb.backend).ModelSaveTx(t.Context(), &ports.ModelSaveTxParams{
				Save:  *modelParams(stream, perspective, 1, newID(t), 2, `{"n":2}`),
				Apply: func(context.Context, ports.Tx) error { return refused },
			})
			require.ErrorIs(t, err, refused, "Apply's error comes back wrapped")
			require.NotErrorIs(t, err, ports.ErrTransient, "Apply's own failure is not the backend's")
			m := mustModel(t, tb.backend, stream, perspective)
			require.Equal(t, int64(1), m.LastVersion, "the cursor did not move")
			require.JSONEq(t, `{"n":1}`, string(m.Data), "the model did not change")
		},
		"LostConnectionInApplyIsTransient": func(t *testing.T) {
			requireBreak(t)
			tb := setup(t, newBackend)
			stream := newID(t)
			require.NoError(t, saveModel(t, tb.backend, stream, 0, newID(t), 1, `{"n":1}`))
			errWrite := errors.New("writing rows")
			err := store(t, tb.backend).ModelSaveTx(t.Context(), &ports.ModelSaveTxParams{
				Save: *modelParams(stream, perspective, 1, newID(t), 2, `{"n":2}`),
				Apply: func(context.Context, ports.Tx) error {
					breakConnections(t, tb.backend)
					return errWrite
				},
			})
			require.ErrorIs(t, err, ports.ErrTransient, "the backend failed Apply: the engine retries, never charging the event")
			require.ErrorIs(t, err, errWrite, "Apply's error stays in the chain")
			m := mustModel(t, tb.open(t), stream, perspective) // another handle: the next call on tb.backend fails too
			require.Equal(t, int64(1), m.LastVersion, "the cursor did not move")
			require.JSONEq(t, `{"n":1}`, string(m.Data), "the model did not change")
		},
		"ConflictRunsNoApply": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			require.NoError(t, saveModel(t, tb.backend, stream, 0, newID(t), 2, `{"n":2}`))
			applied := false
			err := store(t, tb.backend).ModelSaveTx(t.Context(), &ports.ModelSaveTxParams{
				Save:  *modelParams(stream, perspective, 0, newID(t), 1, `{"n":1}`),
				Apply: func(context.Context, ports.Tx) error { applied = true; return nil },
			})
			require.ErrorIs(t, err, ports.ErrVersionConflict)
			require.False(t, applied, "a save that fails its check writes nothing")
			require.Equal(t, int64(2), mustModel(t, tb.backend, stream, perspective).LastVersion)
		},
		"StaleEpochRunsNoApply": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			require.NoError(t, saveModel(t, tb.backend, stream, 0, newID(t), 2, `{"n":2}`))
			require.NoError(t, tb.backend.Models.ModelSave(t.Context(), withEpoch(modelParams(stream, perspective, 2, newID(t), 2, `{"n":20}`), 0, true)))
			applied := 0
			apply := func(context.Context, ports.Tx) error { applied++; return nil }

			err := store(t, tb.backend).ModelSaveTx(t.Context(), &ports.ModelSaveTxParams{
				Save: *modelParams(stream, perspective, 2, newID(t), 3, `{"n":3}`), Apply: apply,
			})
			require.ErrorIs(t, err, ports.ErrVersionConflict, "the version is right, the epoch is not")
			require.Zero(t, applied, "a save that fails its check writes nothing")
			m := mustModel(t, tb.backend, stream, perspective)
			require.JSONEq(t, `{"n":20}`, string(m.Data))
			require.Equal(t, int64(2), m.LastVersion)

			// A rewind of a table projection rebases it.
			require.NoError(t, store(t, tb.backend).ModelSaveTx(t.Context(), &ports.ModelSaveTxParams{
				Save: *withEpoch(modelParams(stream, perspective, 2, newID(t), 3, `{"n":30}`), 1, true), Apply: apply,
			}))
			require.Equal(t, 1, applied)
			m = mustModel(t, tb.backend, stream, perspective)
			require.Equal(t, int64(3), m.LastVersion)
			require.Equal(t, int64(2), m.Epoch)
			require.Equal(t, int64(2), mustCursor(t, tb.backend, stream, perspective).Epoch)
		},
		"FencedToTheStreamHolderRunsNoApply": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			stream, events := holdStream(t, tb, b, 1, time.Minute)
			applied := 0
			apply := func(context.Context, ports.Tx) error { applied++; return nil }

			err := store(t, tb.backend).ModelSaveTx(t.Context(), &ports.ModelSaveTxParams{
				Save: *heldBy(a, modelParams(stream, perspective, 0, events[0].ID, 1, `{"n":1}`)), Apply: apply,
			})
			require.ErrorIs(t, err, ports.ErrLeaseLost, "b holds the stream")
			require.Zero(t, applied, "a refused save writes nothing")
			_, err = tb.backend.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: stream, Perspective: perspective})
			require.ErrorIs(t, err, ports.ErrNotFound, "a refused save stores nothing")

			require.NoError(t, store(t, tb.backend).ModelSaveTx(t.Context(), &ports.ModelSaveTxParams{
				Save: *heldBy(a, withEpoch(modelParams(stream, perspective, 0, events[0].ID, 1, `{"n":1}`), 0, true)), Apply: apply,
			}), "a rebase is fenced by the epoch, not the lease")
			require.NoError(t, store(t, tb.backend).ModelSaveTx(t.Context(), &ports.ModelSaveTxParams{
				Save: *heldBy(b, withEpoch(modelParams(stream, perspective, 1, events[0].ID, 1, `{"n":1}`), 1, false)), Apply: apply,
			}), "b holds the stream")
			require.Equal(t, 2, applied)
		},
		"InvalidArgument": func(t *testing.T) {
			tb := setup(t, newBackend)
			applied := false
			bad := modelParams(newID(t), "", 0, newID(t), 1, `{}`)
			err := store(t, tb.backend).ModelSaveTx(t.Context(), &ports.ModelSaveTxParams{
				Save:  *bad,
				Apply: func(context.Context, ports.Tx) error { applied = true; return nil },
			})
			require.ErrorIs(t, err, ports.ErrInvalidArgument, "an empty perspective")
			require.False(t, applied)
			err = store(t, tb.backend).ModelSaveTx(t.Context(), &ports.ModelSaveTxParams{Save: *modelParams(newID(t), perspective, 0, newID(t), 1, `{}`)})
			require.ErrorIs(t, err, ports.ErrInvalidArgument, "a nil Apply")
		},
	})

	optionalGroup(t, "ModelSaveTxMany", port, implemented, map[string]func(t *testing.T){
		"EachEntryStandsAlone": func(t *testing.T) {
			tb := setup(t, newBackend)
			streams := newIDs(t, 4)
			require.NoError(t, saveModel(t, tb.backend, streams[2], 0, newID(t), 5, `{"n":5}`))
			refused := errors.New("refused")
			var applied []int
			entry := func(i int, expected int64, err error) *ports.ModelSaveTxParams {
				return &ports.ModelSaveTxParams{
					Save: *modelParams(streams[i], perspective, expected, newID(t), 1, `{"n":1}`),
					Apply: func(context.Context, ports.Tx) error {
						applied = append(applied, i)
						return err
					},
				}
			}
			bad := entry(3, 0, nil)
			bad.Save.Perspective = ""
			errs, err := store(t, tb.backend).ModelSaveTxMany(t.Context(), &ports.ModelSaveTxManyParams{Saves: []*ports.ModelSaveTxParams{
				entry(0, 0, nil), entry(1, 0, refused), entry(2, 0, nil), bad,
			}})
			require.NoError(t, err)
			require.Len(t, errs, 4)
			require.NoError(t, errs[0])
			require.ErrorIs(t, errs[1], refused)
			require.ErrorIs(t, errs[2], ports.ErrVersionConflict)
			require.ErrorIs(t, errs[3], ports.ErrInvalidArgument)
			require.ElementsMatch(t, []int{0, 1}, applied, "no Apply for a failed check or an invalid entry")

			require.Equal(t, int64(1), mustModel(t, tb.backend, streams[0], perspective).LastVersion)
			_, err = tb.backend.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: streams[1], Perspective: perspective})
			require.ErrorIs(t, err, ports.ErrNotFound, "the entry whose Apply failed stored nothing")
			require.Equal(t, int64(5), mustModel(t, tb.backend, streams[2], perspective).LastVersion)
		},
		"EachEntryFencedToTheStreamHolder": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			mine, mineEvents := holdStream(t, tb, a, 1, time.Minute)
			theirs, theirEvents := holdStream(t, tb, b, 1, time.Minute)
			var applied []string
			entry := func(name string, stream uuid.UUID, last uuid.UUID) *ports.ModelSaveTxParams {
				return &ports.ModelSaveTxParams{
					Save:  *heldBy(a, modelParams(stream, perspective, 0, last, 1, `{"n":1}`)),
					Apply: func(context.Context, ports.Tx) error { applied = append(applied, name); return nil },
				}
			}

			errs, err := store(t, tb.backend).ModelSaveTxMany(t.Context(), &ports.ModelSaveTxManyParams{Saves: []*ports.ModelSaveTxParams{
				entry("mine", mine, mineEvents[0].ID), entry("theirs", theirs, theirEvents[0].ID),
			}})
			require.NoError(t, err)
			require.Len(t, errs, 2)
			require.NoError(t, errs[0])
			require.ErrorIs(t, errs[1], ports.ErrLeaseLost)
			require.Equal(t, []string{"mine"}, applied, "no Apply for a refused entry")
			require.Equal(t, int64(1), mustModel(t, tb.backend, mine, perspective).LastVersion)
			_, err = tb.backend.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: theirs, Perspective: perspective})
			require.ErrorIs(t, err, ports.ErrNotFound, "a refused entry stores nothing")
		},
		"EachEntryChecksItsEpoch": func(t *testing.T) {
			tb := setup(t, newBackend)
			streams := newIDs(t, 3)
			for _, s := range streams {
				require.NoError(t, saveModel(t, tb.backend, s, 0, newID(t), 2, `{"n":2}`))
				require.NoError(t, tb.backend.Models.ModelSave(t.Context(), withEpoch(modelParams(s, perspective, 2, newID(t), 2, `{"n":20}`), 0, true)))
			}
			var applied []int
			entry := func(i int, epoch int64, rebase bool) *ports.ModelSaveTxParams {
				return &ports.ModelSaveTxParams{
					Save: *withEpoch(modelParams(streams[i], perspective, 2, newID(t), 3, `{"n":3}`), epoch, rebase),
					Apply: func(context.Context, ports.Tx) error {
						applied = append(applied, i)
						return nil
					},
				}
			}
			errs, err := store(t, tb.backend).ModelSaveTxMany(t.Context(), &ports.ModelSaveTxManyParams{Saves: []*ports.ModelSaveTxParams{
				entry(0, 0, false), entry(1, 1, false), entry(2, 1, true),
			}})
			require.NoError(t, err)
			require.Len(t, errs, 3)
			require.ErrorIs(t, errs[0], ports.ErrVersionConflict, "a stale epoch")
			require.NoError(t, errs[1])
			require.NoError(t, errs[2])
			require.ElementsMatch(t, []int{1, 2}, applied, "no Apply for a stale epoch")

			for i, want := range []struct{ version, epoch int64 }{{2, 1}, {3, 1}, {3, 2}} {
				m := mustModel(t, tb.backend, streams[i], perspective)
				require.Equal(t, want.version, m.LastVersion, "version of stream %d", i)
				require.Equal(t, want.epoch, m.Epoch, "epoch of stream %d", i)
				require.Equal(t, want.epoch, mustCursor(t, tb.backend, streams[i], perspective).Epoch, "cursor epoch of stream %d", i)
			}
		},
		"LostConnectionInApplyIsTransient": func(t *testing.T) {
			requireBreak(t)
			tb := setup(t, newBackend)
			streams := newIDs(t, 3)
			errWrite := errors.New("writing rows")
			entries := make([]*ports.ModelSaveTxParams, len(streams))
			for i, s := range streams {
				entries[i] = &ports.ModelSaveTxParams{
					Save:  *modelParams(s, perspective, 0, newID(t), 1, `{"n":1}`),
					Apply: func(context.Context, ports.Tx) error { return nil },
				}
			}
			entries[1].Apply = func(context.Context, ports.Tx) error {
				breakConnections(t, tb.backend)
				return errWrite
			}
			_, err := store(t, tb.backend).ModelSaveTxMany(t.Context(), &ports.ModelSaveTxManyParams{Saves: entries})
			require.ErrorIs(t, err, ports.ErrTransient, "the backend failed an Apply: the engine retries, never charging an event")
			require.ErrorIs(t, err, errWrite, "the error names whose Apply it was")
			other := tb.open(t) // the next call on tb.backend fails too
			for _, s := range streams {
				_, err := other.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: s, Perspective: perspective})
				require.ErrorIs(t, err, ports.ErrNotFound, "a failed call stores nothing")
			}
		},
		"Empty": func(t *testing.T) {
			tb := setup(t, newBackend)
			errs, err := store(t, tb.backend).ModelSaveTxMany(t.Context(), &ports.ModelSaveTxManyParams{})
			require.NoError(t, err)
			require.Empty(t, errs)
		},
	})
}
