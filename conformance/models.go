package conformance

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// runModels verifies ports.ModelStore.
func runModels(t *testing.T, newBackend NewBackendFunc) {
	t.Helper()

	group(t, "ModelLoad", map[string]func(t *testing.T){
		"NotFoundWhenMissing": func(t *testing.T) {
			tb := setup(t, newBackend)

			_, err := tb.backend.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: newID(t), Perspective: perspective})

			require.ErrorIs(t, err, ports.ErrNotFound)
		},
	})

	group(t, "ModelSave", map[string]func(t *testing.T){
		"ChecksPositionSetByCompletion": func(t *testing.T) {
			f := setupDrain(t, newBackend, 2)
			f.a.complete(t, at(time.Second), f.completion(2, 1, 2))

			err := saveModel(t, f.tb.backend, f.stream, 0, f.events[1].ID, 2, `{"n":2}`)
			require.ErrorIs(t, err, ports.ErrVersionConflict)
			require.NoError(t, saveModel(t, f.tb.backend, f.stream, 2, f.events[1].ID, 2, `{"n":2}`))
		},
		"ConflictsWhenCursorMoved": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			first, second := newID(t), newID(t)
			require.NoError(t, saveModel(t, tb.backend, stream, 0, first, 2, `{"n":2}`))

			err := saveModel(t, tb.backend, stream, 0, second, 3, `{"n":3}`)
			require.ErrorIs(t, err, ports.ErrVersionConflict)
			err = saveModel(t, tb.backend, stream, 1, second, 3, `{"n":3}`)
			require.ErrorIs(t, err, ports.ErrVersionConflict)

			model := mustModel(t, tb.backend, stream, perspective)
			require.JSONEq(t, `{"n":2}`, string(model.Data), "a conflict stores nothing")
			require.Equal(t, int64(2), mustCursor(t, tb.backend, stream, perspective).LastVersion)

			require.NoError(t, saveModel(t, tb.backend, stream, 2, second, 3, `{"n":3}`))
			model = mustModel(t, tb.backend, stream, perspective)
			require.JSONEq(t, `{"n":3}`, string(model.Data))
			require.Equal(t, second, model.LastEventID)
			require.Equal(t, int64(3), model.LastVersion)
		},
		"RefusesAStaleEpochAtTheSameVersion": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			require.NoError(t, saveModel(t, tb.backend, stream, 0, newID(t), 2, `{"n":2}`))
			require.Zero(t, mustModel(t, tb.backend, stream, perspective).Epoch, "a pair never replayed is at epoch 0")

			// A replay (a rewind, a rebuild) replaces the model at the same
			// version: the pair moves to epoch 1.
			rebuilt := newID(t)
			require.NoError(t, tb.backend.Models.ModelSave(t.Context(), withEpoch(modelParams(stream, perspective, 2, rebuilt, 2, `{"n":20}`), 0, true)))
			model := mustModel(t, tb.backend, stream, perspective)
			require.JSONEq(t, `{"n":20}`, string(model.Data))
			require.Equal(t, int64(1), model.Epoch, "Rebase stores ExpectedEpoch+1")
			require.Equal(t, int64(1), mustCursor(t, tb.backend, stream, perspective).Epoch, "the cursor holds the epoch too")

			// A save based on the model loaded before the replay is at the
			// right version and the wrong epoch.
			err := tb.backend.Models.ModelSave(t.Context(), modelParams(stream, perspective, 2, newID(t), 3, `{"n":3}`))
			require.ErrorIs(t, err, ports.ErrVersionConflict)
			err = tb.backend.Models.ModelSave(t.Context(), withEpoch(modelParams(stream, perspective, 2, newID(t), 3, `{"n":3}`), 0, true))
			require.ErrorIs(t, err, ports.ErrVersionConflict, "Rebase is checked as any save")
			model = mustModel(t, tb.backend, stream, perspective)
			require.JSONEq(t, `{"n":20}`, string(model.Data), "a conflict stores nothing")
			require.Equal(t, rebuilt, model.LastEventID)
			require.Equal(t, int64(1), model.Epoch)
			cur := mustCursor(t, tb.backend, stream, perspective)
			require.Equal(t, int64(2), cur.LastVersion)
			require.Equal(t, int64(1), cur.Epoch)

			// A save based on the replayed model passes and keeps its epoch.
			require.NoError(t, tb.backend.Models.ModelSave(t.Context(), withEpoch(modelParams(stream, perspective, 2, newID(t), 3, `{"n":23}`), 1, false)))
			model = mustModel(t, tb.backend, stream, perspective)
			require.JSONEq(t, `{"n":23}`, string(model.Data))
			require.Equal(t, int64(3), model.LastVersion)
			require.Equal(t, int64(1), model.Epoch, "a save without Rebase keeps the epoch")
			require.Equal(t, int64(1), mustCursor(t, tb.backend, stream, perspective).Epoch)
		},
		"RebaseOfAMissingCursorStartsAtEpochOne": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			err := tb.backend.Models.ModelSave(t.Context(), withEpoch(modelParams(stream, perspective, 0, newID(t), 1, `{"n":1}`), 1, false))
			require.ErrorIs(t, err, ports.ErrVersionConflict, "a missing cursor is at epoch 0")
			_, err = tb.backend.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: stream, Perspective: perspective})
			require.ErrorIs(t, err, ports.ErrNotFound, "a conflict stores nothing")

			require.NoError(t, tb.backend.Models.ModelSave(t.Context(), withEpoch(modelParams(stream, perspective, 0, newID(t), 1, `{"n":1}`), 0, true)))
			require.Equal(t, int64(1), mustModel(t, tb.backend, stream, perspective).Epoch)
			cur := mustCursor(t, tb.backend, stream, perspective)
			require.Equal(t, int64(1), cur.Epoch)
			require.True(t, cur.Status.Has(ports.CursorProcessing), "status %s", cur.Status)
		},
		"CompletionKeepsTheEpoch": func(t *testing.T) {
			f := setupDrain(t, newBackend, 3)
			require.NoError(t, f.tb.backend.Models.ModelSave(t.Context(), withEpoch(modelParams(f.stream, perspective, 0, f.events[0].ID, 1, `{"n":1}`), 0, true)))
			f.a.complete(t, at(2*time.Second), f.completion(2, 1, 2))
			cur := f.cursor(t)
			require.Equal(t, int64(2), cur.LastVersion)
			require.Equal(t, int64(1), cur.Epoch, "only a model save changes the epoch")

			err := f.tb.backend.Models.ModelSave(t.Context(), modelParams(f.stream, perspective, 2, f.events[2].ID, 3, `{"n":3}`))
			require.ErrorIs(t, err, ports.ErrVersionConflict)
			require.NoError(t, f.tb.backend.Models.ModelSave(t.Context(), withEpoch(modelParams(f.stream, perspective, 2, f.events[2].ID, 3, `{"n":3}`), 1, false)))
		},
		"FencedToTheStreamHolder": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			stream, events := holdStream(t, tb, a, 2, 10*time.Second)
			require.NoError(t, tb.backend.Models.ModelSave(t.Context(), heldBy(a, modelParams(stream, perspective, 0, events[0].ID, 1, `{"n":1}`))),
				"a holds the stream")
			a.heartbeat(t, at(15*time.Second))
			b.heartbeat(t, at(15*time.Second))
			require.Len(t, b.fetch(t, at(20*time.Second), stream).Work, 2, "b took the expired lease of live a")

			err := tb.backend.Models.ModelSave(t.Context(), heldBy(a, modelParams(stream, perspective, 1, events[1].ID, 2, `{"n":2}`)))

			require.ErrorIs(t, err, ports.ErrLeaseLost, "b may have dead-lettered the event a applied")
			m := mustModel(t, tb.backend, stream, perspective)
			require.JSONEq(t, `{"n":1}`, string(m.Data), "a refused save stores nothing")
			require.Equal(t, int64(1), m.LastVersion)
			require.Equal(t, int64(1), mustCursor(t, tb.backend, stream, perspective).LastVersion)
			require.NoError(t, tb.backend.Models.ModelSave(t.Context(), heldBy(b, modelParams(stream, perspective, 1, events[1].ID, 2, `{"n":2}`))),
				"b holds the stream")
			require.NoError(t, tb.backend.Models.ModelSave(t.Context(), heldBy(a, withEpoch(modelParams(stream, perspective, 2, events[1].ID, 2, `{"n":20}`), 0, true))),
				"a rebase is fenced by the epoch, not the lease")
			m = mustModel(t, tb.backend, stream, perspective)
			require.JSONEq(t, `{"n":20}`, string(m.Data))
			require.Equal(t, int64(1), m.Epoch)
		},
		"FencedAfterRelease": func(t *testing.T) {
			f := setupDrain(t, newBackend, 1)
			require.NoError(t, f.a.b.Claimer.InstanceDeregister(t.Context(), &ports.InstanceDeregisterParams{InstanceID: f.a.id}))

			err := f.tb.backend.Models.ModelSave(t.Context(), heldBy(f.a, modelParams(f.stream, perspective, 0, f.events[0].ID, 1, `{"n":1}`)))

			require.ErrorIs(t, err, ports.ErrLeaseLost, "a released the stream")
			_, err = f.tb.backend.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: f.stream, Perspective: perspective})
			require.ErrorIs(t, err, ports.ErrNotFound, "a refused save stores nothing")
			cursors, err := f.tb.backend.Cursors.CursorsGet(t.Context(), &ports.CursorsGetParams{StreamIDs: []uuid.UUID{f.stream}})
			require.NoError(t, err)
			require.Empty(t, cursors, "nor creates the cursor")
			err = f.tb.backend.Models.ModelSave(t.Context(), heldBy(f.a, modelParams(newID(t), perspective, 0, newID(t), 1, `{"n":1}`)))
			require.ErrorIs(t, err, ports.ErrLeaseLost, "a stream nobody ever leased")
		},
		"StoresModelWithCursor": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream, last := newID(t), newID(t)

			require.NoError(t, saveModel(t, tb.backend, stream, 0, last, 2, `{"total": 42, "lines": ["a"]}`))

			model := mustModel(t, tb.backend, stream, perspective)
			require.Equal(t, stream, model.StreamID)
			require.Equal(t, perspective, model.Perspective)
			require.JSONEq(t, `{"total": 42, "lines": ["a"]}`, string(model.Data))
			require.Equal(t, last, model.LastEventID)
			require.Equal(t, int64(2), model.LastVersion)
			requireTime(t, at(time.Second), model.UpdatedAt, "UpdatedAt")
			cur := mustCursor(t, tb.backend, stream, perspective)
			require.Equal(t, last, cur.LastEventID)
			require.Equal(t, int64(2), cur.LastVersion)
			require.True(t, cur.Status.Has(ports.CursorProcessing), "status %s", cur.Status)
			_, err := tb.backend.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: stream, Perspective: perspective2})
			require.ErrorIs(t, err, ports.ErrNotFound, "models are per perspective")
		},
	})
}

// saveModel saves the perspective's model of stream at(1s).
func saveModel(t *testing.T, b ports.Backend, stream uuid.UUID, expected int64, last uuid.UUID, version int64, data string) error {
	t.Helper()
	return b.Models.ModelSave(t.Context(), modelParams(stream, perspective, expected, last, version, data))
}

// modelParams returns the parameters of a save of the model of (stream,
// name) at(1s).
func modelParams(stream uuid.UUID, name string, expected int64, last uuid.UUID, version int64, data string) *ports.ModelSaveParams {
	return &ports.ModelSaveParams{
		StreamID:        stream,
		Perspective:     name,
		Data:            []byte(data),
		LastEventID:     last,
		LastVersion:     version,
		ExpectedVersion: expected,
		Now:             at(time.Second),
	}
}

// heldBy names in as the instance saving p, and returns p.
func heldBy(in *instance, p *ports.ModelSaveParams) *ports.ModelSaveParams {
	p.InstanceID = in.id
	return p
}

// holdStream appends n events to a new stream, for the perspective, and has
// in fetch them at(0) under a lease of the given duration. It returns the
// stream and its events.
func holdStream(t *testing.T, tb *testBundle, in *instance, n int, lease time.Duration) (uuid.UUID, []ports.Event) {
	t.Helper()
	subscribe(t, tb.backend, eventType, perspective)
	stream := newID(t)
	events := appendN(t, tb.backend, stream, at(0), eventType, n)
	in.heartbeat(t, at(0))
	work := in.fetchWith(t, ports.EventsFetchPendingParams{StreamIDs: []uuid.UUID{stream}, LeaseDuration: lease, Now: at(0)}).Work
	require.Len(t, work, n)
	return stream, events
}

// withEpoch sets the epoch p expects and whether p rebases, and returns p.
func withEpoch(p *ports.ModelSaveParams, expected int64, rebase bool) *ports.ModelSaveParams {
	p.ExpectedEpoch, p.Rebase = expected, rebase
	return p
}

// mustModel returns the stored model of (stream, name), failing t when it
// cannot be loaded.
func mustModel(t *testing.T, b ports.Backend, stream uuid.UUID, name string) ports.StoredModel {
	t.Helper()
	m, err := b.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: stream, Perspective: name})
	require.NoError(t, err)
	return m
}

// runModelBatch verifies the optional ports.ModelBatchStore.
func runModelBatch(t *testing.T, newBackend NewBackendFunc, implemented bool) {
	t.Helper()
	const port = "ModelBatchStore"
	batch := func(t *testing.T, b ports.Backend) ports.ModelBatchStore {
		t.Helper()
		require.NotNil(t, b.ModelBatch, "every handle of the backend sets Backend.ModelBatch")
		return b.ModelBatch
	}

	optionalGroup(t, "ModelLoadMany", port, implemented, map[string]func(t *testing.T){
		"ReturnsStoredModelsOnly": func(t *testing.T) {
			tb := setup(t, newBackend)
			streams := newIDs(t, 3)
			last := newID(t)
			require.NoError(t, saveModel(t, tb.backend, streams[0], 0, last, 2, `{"n":2}`))
			require.NoError(t, saveModel(t, tb.backend, streams[1], 0, last, 5, `{"n":5}`))

			got, err := batch(t, tb.backend).ModelLoadMany(t.Context(), &ports.ModelLoadManyParams{Pairs: []ports.Pair{
				{StreamID: streams[0], Perspective: perspective},
				{StreamID: streams[1], Perspective: perspective},
				{StreamID: streams[1], Perspective: perspective}, // duplicate
				{StreamID: streams[1], Perspective: perspective2},
				{StreamID: streams[2], Perspective: perspective},
			}})
			require.NoError(t, err)
			require.Len(t, got, 2)
			byStream := map[uuid.UUID]ports.StoredModel{}
			for _, m := range got {
				byStream[m.StreamID] = m
			}
			for i, want := range []struct {
				data    string
				version int64
			}{{`{"n":2}`, 2}, {`{"n":5}`, 5}} {
				m, ok := byStream[streams[i]]
				require.True(t, ok, "model of stream %d", i)
				require.Equal(t, perspective, m.Perspective)
				require.JSONEq(t, want.data, string(m.Data))
				require.Equal(t, last, m.LastEventID)
				require.Equal(t, want.version, m.LastVersion)
				requireTime(t, at(time.Second), m.UpdatedAt, "UpdatedAt")
			}
		},
		"ReturnsEpochs": func(t *testing.T) {
			tb := setup(t, newBackend)
			streams := newIDs(t, 2)
			require.NoError(t, saveModel(t, tb.backend, streams[0], 0, newID(t), 2, `{"n":2}`))
			require.NoError(t, tb.backend.Models.ModelSave(t.Context(), withEpoch(modelParams(streams[1], perspective, 0, newID(t), 2, `{"n":2}`), 0, true)))
			require.NoError(t, tb.backend.Models.ModelSave(t.Context(), withEpoch(modelParams(streams[1], perspective, 2, newID(t), 2, `{"n":2}`), 1, true)))

			got, err := batch(t, tb.backend).ModelLoadMany(t.Context(), &ports.ModelLoadManyParams{Pairs: []ports.Pair{
				{StreamID: streams[0], Perspective: perspective},
				{StreamID: streams[1], Perspective: perspective},
			}})
			require.NoError(t, err)
			epochs := map[uuid.UUID]int64{}
			for _, m := range got {
				epochs[m.StreamID] = m.Epoch
			}
			require.Equal(t, map[uuid.UUID]int64{streams[0]: 0, streams[1]: 2}, epochs)
		},
		"EmptyForNoPairs": func(t *testing.T) {
			tb := setup(t, newBackend)
			got, err := batch(t, tb.backend).ModelLoadMany(t.Context(), &ports.ModelLoadManyParams{Pairs: nil})
			require.NoError(t, err)
			require.Empty(t, got)
		},
	})

	optionalGroup(t, "ModelSaveMany", port, implemented, map[string]func(t *testing.T){
		"EachEntryAsModelSave": func(t *testing.T) {
			tb := setup(t, newBackend)
			streams := newIDs(t, 4)
			last := newID(t)
			require.NoError(t, saveModel(t, tb.backend, streams[1], 0, last, 2, `{"n":2}`))
			require.NoError(t, saveModel(t, tb.backend, streams[2], 0, last, 2, `{"n":2}`))

			errs, err := batch(t, tb.backend).ModelSaveMany(t.Context(), &ports.ModelSaveManyParams{Saves: []*ports.ModelSaveParams{
				modelParams(streams[0], perspective, 0, last, 1, `{"n":1}`),  // new
				modelParams(streams[1], perspective, 2, last, 4, `{"n":4}`),  // moves
				modelParams(streams[2], perspective, 1, last, 3, `{"n":3}`),  // stale expectation
				modelParams(streams[3], perspective, 0, last, 1, `not json`), // invalid
				modelParams(streams[0], perspective2, 0, last, 1, `{"p":2}`), // another perspective
			}})
			require.NoError(t, err)
			require.Len(t, errs, 5)
			require.NoError(t, errs[0])
			require.NoError(t, errs[1])
			require.ErrorIs(t, errs[2], ports.ErrVersionConflict)
			require.ErrorIs(t, errs[3], ports.ErrInvalidArgument)
			require.NoError(t, errs[4])

			require.JSONEq(t, `{"n":1}`, string(mustModel(t, tb.backend, streams[0], perspective).Data))
			require.JSONEq(t, `{"n":4}`, string(mustModel(t, tb.backend, streams[1], perspective).Data))
			require.JSONEq(t, `{"n":2}`, string(mustModel(t, tb.backend, streams[2], perspective).Data), "a conflict stores nothing")
			require.JSONEq(t, `{"p":2}`, string(mustModel(t, tb.backend, streams[0], perspective2).Data))
			_, err = tb.backend.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: streams[3], Perspective: perspective})
			require.ErrorIs(t, err, ports.ErrNotFound, "an invalid entry stores nothing")

			cur := mustCursor(t, tb.backend, streams[0], perspective)
			require.Equal(t, int64(1), cur.LastVersion)
			require.True(t, cur.Status.Has(ports.CursorProcessing), "status %s", cur.Status)
			require.Equal(t, int64(4), mustCursor(t, tb.backend, streams[1], perspective).LastVersion)
			require.Equal(t, int64(2), mustCursor(t, tb.backend, streams[2], perspective).LastVersion)
		},
		"LaterEntriesSeeEarlierOnes": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream, last := newID(t), newID(t)

			errs, err := batch(t, tb.backend).ModelSaveMany(t.Context(), &ports.ModelSaveManyParams{Saves: []*ports.ModelSaveParams{
				modelParams(stream, perspective, 0, last, 2, `{"n":2}`),
				modelParams(stream, perspective, 2, last, 3, `{"n":3}`),
				modelParams(stream, perspective, 2, last, 4, `{"n":4}`),
			}})
			require.NoError(t, err)
			require.NoError(t, errs[0])
			require.NoError(t, errs[1])
			require.ErrorIs(t, errs[2], ports.ErrVersionConflict)
			m := mustModel(t, tb.backend, stream, perspective)
			require.JSONEq(t, `{"n":3}`, string(m.Data))
			require.Equal(t, int64(3), m.LastVersion)
		},
		"EachEntryChecksItsEpoch": func(t *testing.T) {
			tb := setup(t, newBackend)
			streams := newIDs(t, 2)
			last := newID(t)
			require.NoError(t, saveModel(t, tb.backend, streams[0], 0, last, 2, `{"n":2}`))
			require.NoError(t, tb.backend.Models.ModelSave(t.Context(), withEpoch(modelParams(streams[0], perspective, 2, last, 2, `{"n":20}`), 0, true)))

			errs, err := batch(t, tb.backend).ModelSaveMany(t.Context(), &ports.ModelSaveManyParams{Saves: []*ports.ModelSaveParams{
				modelParams(streams[0], perspective, 2, last, 3, `{"n":3}`),                       // stale epoch
				withEpoch(modelParams(streams[0], perspective, 2, last, 3, `{"n":30}`), 1, false), // current epoch
				withEpoch(modelParams(streams[1], perspective, 0, last, 1, `{"m":1}`), 0, true),   // a new pair rebased
				withEpoch(modelParams(streams[1], perspective, 1, last, 1, `{"m":10}`), 0, false), // before that rebase
			}})
			require.NoError(t, err)
			require.Len(t, errs, 4)
			require.ErrorIs(t, errs[0], ports.ErrVersionConflict)
			require.NoError(t, errs[1])
			require.NoError(t, errs[2])
			require.ErrorIs(t, errs[3], ports.ErrVersionConflict)

			m := mustModel(t, tb.backend, streams[0], perspective)
			require.JSONEq(t, `{"n":30}`, string(m.Data))
			require.Equal(t, int64(1), m.Epoch)
			m = mustModel(t, tb.backend, streams[1], perspective)
			require.JSONEq(t, `{"m":1}`, string(m.Data), "a conflict stores nothing")
			require.Equal(t, int64(1), m.Epoch)
			require.Equal(t, int64(1), mustCursor(t, tb.backend, streams[1], perspective).Epoch)
		},
		"EachPairChecksItsPositionAlone": func(t *testing.T) {
			tb := setup(t, newBackend)
			streams := newIDs(t, 4)
			last := newID(t)
			for _, s := range streams[:2] {
				require.NoError(t, saveModel(t, tb.backend, s, 0, last, 2, `{"n":2}`))
				require.NoError(t, tb.backend.Models.ModelSave(t.Context(), withEpoch(modelParams(s, perspective, 2, last, 2, `{"n":20}`), 0, true)))
			}

			errs, err := batch(t, tb.backend).ModelSaveMany(t.Context(), &ports.ModelSaveManyParams{Saves: []*ports.ModelSaveParams{
				modelParams(streams[0], perspective, 2, last, 3, `{"n":3}`),                       // stale epoch
				withEpoch(modelParams(streams[1], perspective, 2, last, 3, `{"n":30}`), 1, false), // current epoch
				withEpoch(modelParams(streams[2], perspective, 0, last, 1, `{"m":1}`), 0, true),   // a new pair rebased
				modelParams(streams[3], perspective, 1, last, 2, `{"k":2}`),                       // no cursor at 1
				modelParams(streams[0], perspective2, 0, last, 1, `{"p":1}`),                      // the stale entry's stream
			}})
			require.NoError(t, err)
			require.Len(t, errs, 5)
			require.ErrorIs(t, errs[0], ports.ErrVersionConflict)
			require.NoError(t, errs[1])
			require.NoError(t, errs[2])
			require.ErrorIs(t, errs[3], ports.ErrVersionConflict)
			require.NoError(t, errs[4], "a conflict of one pair does not hold back another of its stream")

			require.JSONEq(t, `{"n":20}`, string(mustModel(t, tb.backend, streams[0], perspective).Data), "a conflict stores nothing")
			require.Equal(t, int64(2), mustCursor(t, tb.backend, streams[0], perspective).LastVersion)
			m := mustModel(t, tb.backend, streams[1], perspective)
			require.JSONEq(t, `{"n":30}`, string(m.Data))
			require.Equal(t, int64(3), m.LastVersion)
			require.Equal(t, int64(1), m.Epoch)
			m = mustModel(t, tb.backend, streams[2], perspective)
			require.Equal(t, int64(1), m.Epoch)
			require.Equal(t, int64(1), mustCursor(t, tb.backend, streams[2], perspective).Epoch)
			_, err = tb.backend.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: streams[3], Perspective: perspective})
			require.ErrorIs(t, err, ports.ErrNotFound, "a conflict stores nothing")
			require.JSONEq(t, `{"p":1}`, string(mustModel(t, tb.backend, streams[0], perspective2).Data))
		},
		"EachEntryFencedToTheStreamHolder": func(t *testing.T) {
			tb := setup(t, newBackend)
			a, b := tb.pair(t)
			mine, mineEvents := holdStream(t, tb, a, 1, time.Minute)
			theirs, theirEvents := holdStream(t, tb, b, 1, time.Minute)

			errs, err := batch(t, tb.backend).ModelSaveMany(t.Context(), &ports.ModelSaveManyParams{Saves: []*ports.ModelSaveParams{
				heldBy(a, modelParams(mine, perspective, 0, mineEvents[0].ID, 1, `{"n":1}`)),
				heldBy(a, modelParams(theirs, perspective, 0, theirEvents[0].ID, 1, `{"m":1}`)),
				heldBy(a, withEpoch(modelParams(theirs, perspective2, 0, theirEvents[0].ID, 1, `{"r":1}`), 0, true)),
				heldBy(a, modelParams(mine, perspective2, 0, mineEvents[0].ID, 1, `{"n2":1}`)),
			}})
			require.NoError(t, err)
			require.Len(t, errs, 4)
			require.NoError(t, errs[0])
			require.ErrorIs(t, errs[1], ports.ErrLeaseLost)
			require.NoError(t, errs[2], "a rebase is fenced by the epoch, not the lease")
			require.NoError(t, errs[3])

			require.JSONEq(t, `{"n":1}`, string(mustModel(t, tb.backend, mine, perspective).Data))
			require.JSONEq(t, `{"n2":1}`, string(mustModel(t, tb.backend, mine, perspective2).Data))
			_, err = tb.backend.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: theirs, Perspective: perspective})
			require.ErrorIs(t, err, ports.ErrNotFound, "a refused entry stores nothing")
			require.JSONEq(t, `{"r":1}`, string(mustModel(t, tb.backend, theirs, perspective2).Data))
		},
		"EmptyForNoEntries": func(t *testing.T) {
			tb := setup(t, newBackend)
			errs, err := batch(t, tb.backend).ModelSaveMany(t.Context(), &ports.ModelSaveManyParams{Saves: nil})
			require.NoError(t, err)
			require.Empty(t, errs)
		},
	})
}
