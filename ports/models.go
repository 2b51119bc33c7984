package ports

import (
	"cmp"
	"context"
	"time"

	"github.com/google/uuid"
)

// ModelStore keeps each perspective's model per stream together with its
// cursor position, so a re-delivered event can never be applied twice to a
// stored model.
type ModelStore interface {
	// ModelLoad returns the stored model, or ErrNotFound.
	ModelLoad(ctx context.Context, params *ModelLoadParams) (StoredModel, error)
	// ModelSave stores the model and moves the cursor to LastEventID and
	// LastVersion in one atomic step (creating the cursor with status
	// Processing when missing). ExpectedVersion is the cursor version the
	// caller loaded (0 for none); if the stored position differs it returns
	// ErrVersionConflict and stores nothing.
	ModelSave(ctx context.Context, params *ModelSaveParams) error
}

// ModelBatchStore is an optional port next to ModelStore, on the same
// models: it loads and saves the models of many pairs in one round trip.
// When Backend.ModelBatch is set, the engine groups the loads and the saves
// of the pairs it drains concurrently into calls of these methods (one
// commit for many saves instead of one each); without it, it calls
// ModelStore once per pair.
type ModelBatchStore interface {
	// ModelLoadMany returns the stored models of the listed pairs, in no
	// particular order; pairs without a stored model are absent from the
	// result. Duplicate pairs are returned once.
	ModelLoadMany(ctx context.Context, params *ModelLoadManyParams) ([]StoredModel, error)
	// ModelSaveMany saves each entry of Saves exactly as ModelSave would, in
	// order:
	// the result holds one error per entry (nil when saved; wrapping
	// ErrVersionConflict or ErrInvalidArgument when that entry stored
	// nothing, which does not affect the others). The successful saves are
	// committed together. A call error means nothing was stored.
	ModelSaveMany(ctx context.Context, params *ModelSaveManyParams) ([]error, error)
}

// ModelLoadParams are the inputs of ModelLoad.
type ModelLoadParams struct {
	StreamID    uuid.UUID
	Perspective string
}

// ModelLoadManyParams are the inputs of ModelLoadMany.
type ModelLoadManyParams struct {
	Pairs []Pair
}

// ModelSaveManyParams are the inputs of ModelSaveMany.
type ModelSaveManyParams struct {
	// Saves are the models to save, each as ModelSave would.
	Saves []*ModelSaveParams
}

// Pair names a perspective of a stream.
type Pair struct {
	StreamID    uuid.UUID
	Perspective string
}

// ModelSaveParams are the inputs of ModelSave.
type ModelSaveParams struct {
	StreamID        uuid.UUID
	Perspective     string
	Data            []byte
	LastEventID     uuid.UUID
	LastVersion     int64
	ExpectedVersion int64
	Now             time.Time
}

// Validate reports the first field every ModelStore rejects with
// ErrInvalidArgument: a nil StreamID, an empty Perspective, a negative
// LastVersion or ExpectedVersion, or Data that is not a JSON document.
func (p *ModelSaveParams) Validate() error {
	return cmp.Or(
		checkPair("ModelSaveParams", p.StreamID, p.Perspective, p.LastVersion),
		checkNotNegative("ModelSaveParams.ExpectedVersion", p.ExpectedVersion),
		checkJSON("ModelSaveParams.Data", p.Data),
	)
}
