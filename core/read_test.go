package core

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// storedModels is a ModelStore holding fixed models, or failing with err.
type storedModels struct {
	ports.ModelStore
	models map[ports.Pair]ports.StoredModel
	err    error
}

func (s storedModels) ModelLoad(_ context.Context, params *ports.ModelLoadParams) (ports.StoredModel, error) {
	streamID, perspective := params.StreamID, params.Perspective
	if s.err != nil {
		return ports.StoredModel{}, s.err
	}
	m, ok := s.models[ports.Pair{StreamID: streamID, Perspective: perspective}]
	if !ok {
		return ports.StoredModel{}, ports.ErrNotFound
	}
	return m, nil
}

func TestPerspectiveLoad(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		p      *Perspective[counter]
		stream uuid.UUID
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		p := NewPerspective[counter]("counts")
		MustHandle(p, func(_ context.Context, m counter, _ placed) (counter, error) { return m, nil })
		return &testBundle{p: p, stream: uuid.New()}
	}
	store := func(b *testBundle, data []byte) storedModels {
		return storedModels{models: map[ports.Pair]ports.StoredModel{
			{StreamID: b.stream, Perspective: "counts"}: {
				StreamID: b.stream, Perspective: "counts", Data: data,
				LastEventID: uuid.Nil, LastVersion: 7, UpdatedAt: time.Unix(100, 0).UTC(),
			},
		}}
	}

	t.Run("DecodesWhatTheEngineEncoded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		want := counter{N: 3, Seen: []string{"a", "b"}}
		data, err := b.p.encodeModel(want)
		require.NoError(t, err)

		got, err := b.p.Load(t.Context(), store(b, data), b.stream)
		require.NoError(t, err)
		require.Equal(t, want, got.Value)
		require.Equal(t, b.stream, got.StreamID)
		require.Equal(t, int64(7), got.LastVersion)
		require.Equal(t, time.Unix(100, 0).UTC(), got.UpdatedAt)
	})

	t.Run("NoModelIsErrNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		got, err := b.p.Load(t.Context(), storedModels{}, b.stream)
		require.ErrorIs(t, err, ports.ErrNotFound)
		require.ErrorContains(t, err, `perspective "counts"`)
		require.Zero(t, got)
	})

	t.Run("StoreErrorIsWrapped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.p.Load(t.Context(), storedModels{err: ports.ErrTransient}, b.stream)
		require.ErrorIs(t, err, ports.ErrTransient)
	})

	t.Run("UndecodableModel", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.p.Load(t.Context(), store(b, []byte(`{"n":"three"}`)), b.stream)
		require.ErrorContains(t, err, `decoding model of perspective "counts"`)
		require.False(t, errors.Is(err, ports.ErrNotFound))
	})

	t.Run("EmptyDataIsTheZeroModel", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		got, err := b.p.Load(t.Context(), store(b, nil), b.stream)
		require.NoError(t, err)
		require.Zero(t, got.Value)
		require.Equal(t, int64(7), got.LastVersion)
	})

	t.Run("InterfaceModelWithEmptyData", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := NewPerspective[any]("counts")
		got, err := p.Load(t.Context(), store(b, nil), b.stream)
		require.NoError(t, err)
		require.Nil(t, got.Value)
	})
}
