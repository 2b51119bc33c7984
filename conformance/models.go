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

			_, err := tb.backend.Models.ModelLoad(t.Context(), newID(t), perspective)

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

			model, err := tb.backend.Models.ModelLoad(t.Context(), stream, perspective)
			require.NoError(t, err)
			require.JSONEq(t, `{"n":2}`, string(model.Data), "a conflict stores nothing")
			require.Equal(t, int64(2), mustCursor(t, tb.backend, stream, perspective).LastVersion)

			require.NoError(t, saveModel(t, tb.backend, stream, 2, second, 3, `{"n":3}`))
			model, err = tb.backend.Models.ModelLoad(t.Context(), stream, perspective)
			require.NoError(t, err)
			require.JSONEq(t, `{"n":3}`, string(model.Data))
			require.Equal(t, second, model.LastEventID)
			require.Equal(t, int64(3), model.LastVersion)
		},
		"StoresModelWithCursor": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream, last := newID(t), newID(t)

			require.NoError(t, saveModel(t, tb.backend, stream, 0, last, 2, `{"total": 42, "lines": ["a"]}`))

			model, err := tb.backend.Models.ModelLoad(t.Context(), stream, perspective)
			require.NoError(t, err)
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
			_, err = tb.backend.Models.ModelLoad(t.Context(), stream, perspective2)
			require.ErrorIs(t, err, ports.ErrNotFound, "models are per perspective")
		},
	})
}

// saveModel saves the perspective's model of stream at(1s).
func saveModel(t *testing.T, b ports.Backend, stream uuid.UUID, expected int64, last uuid.UUID, version int64, data string) error {
	t.Helper()
	return b.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
		StreamID:        stream,
		Perspective:     perspective,
		Data:            []byte(data),
		LastEventID:     last,
		LastVersion:     version,
		ExpectedVersion: expected,
		Now:             at(time.Second),
	})
}
