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
	// ModelLoad returns the stored model with its epoch, or ErrNotFound.
	ModelLoad(ctx context.Context, params *ModelLoadParams) (StoredModel, error)
	// ModelSave stores the model and moves the cursor to LastEventID and
	// LastVersion in one atomic step (creating the cursor with status
	// Processing when missing).
	//
	// The save is fenced by the pair's version and epoch (see
	// Cursor.Epoch): ExpectedVersion and ExpectedEpoch are those of the
	// model the caller loaded (0 and 0 for none); when the cursor's version
	// or epoch differs (a missing cursor counts as version 0, epoch 0), it
	// returns ErrVersionConflict and stores nothing. Otherwise the cursor
	// and the model take the epoch ExpectedEpoch, or ExpectedEpoch+1 when
	// Rebase is set: once a save replaced the model's history (a rewind or
	// a rebuild), every save based on a model loaded before it (another
	// instance's cached model, an apply in flight) is refused, even at the
	// same version. A cursor the save creates starts at epoch 0, or 1 with
	// Rebase.
	//
	// A save that names its instance (InstanceID) and extends the model's
	// history (no Rebase) is also fenced to the holder of the stream's
	// lease, live or expired, as completions and failures are (see
	// WorkClaimer): when another instance took the stream, or it was
	// released, it returns ErrLeaseLost and stores nothing, in the same
	// atomic step as the save. An instance that lost a stream cannot save
	// an event that the new holder may have dead-lettered meanwhile, which
	// moves neither the version nor the epoch. A Rebase save is not fenced
	// by the lease (a rewind or a rebuild runs without it); its epoch
	// fences it.
	ModelSave(ctx context.Context, params *ModelSaveParams) error
}

// ModelBatchStore is an optional port next to ModelStore, on the same
// models: it loads and saves the models of many pairs in one round trip.
// When Backend.ModelBatch is set, the engine groups the loads and the saves
// of the pairs it drains concurrently into calls of these methods (one
// commit for many saves instead of one each); without it, it calls
// ModelStore once per pair.
type ModelBatchStore interface {
	// ModelLoadMany returns the stored models of the listed pairs, with
	// their epochs, in no particular order; pairs without a stored model
	// are absent from the result. Duplicate pairs are returned once.
	ModelLoadMany(ctx context.Context, params *ModelLoadManyParams) ([]StoredModel, error)
	// ModelSaveMany saves each entry of Saves exactly as ModelSave would
	// (its version and epoch check and its lease fence included), in order:
	// the result holds one error per entry (nil when saved; wrapping
	// ErrVersionConflict, ErrLeaseLost or ErrInvalidArgument when that
	// entry stored nothing, which does not affect the others). The successful saves are
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
	StreamID    uuid.UUID
	Perspective string
	Data        []byte
	LastEventID uuid.UUID
	LastVersion int64
	// ExpectedVersion is the version of the model the caller loaded
	// (StoredModel.LastVersion; 0 for none).
	ExpectedVersion int64
	// ExpectedEpoch is the epoch of the model the caller loaded
	// (StoredModel.Epoch; 0 for none).
	ExpectedEpoch int64
	// Rebase marks a save that replaces the model's history rather than
	// extending it (a rewind or a rebuild replayed the stream): the pair
	// moves to the epoch ExpectedEpoch+1 (see ModelStore.ModelSave).
	Rebase bool
	// AppliedLate lists the versions of the pair's pending late rows whose
	// events the saved model holds (a rewind applied them, or a drain
	// applied late rows that lay above the cursor). The save takes
	// their late flag off with the model, in the same transaction, and
	// only when the save succeeds: from then on they are rows whose
	// completion is on its way (or was refused), re-deliveries that
	// complete, never events still to be applied.
	AppliedLate []int64
	// InstanceID is the saving instance: a save without Rebase must hold
	// the lease of the stream (see ModelStore.ModelSave). The engine's
	// drains always set it; a save without it (a tool seeding a model) is
	// fenced by the version and epoch only.
	InstanceID uuid.UUID
	Now        time.Time
}

// Holder returns the instance that must hold the stream's lease for the
// save to pass: InstanceID, or uuid.Nil when the save is not fenced by the
// lease (Rebase is set, or InstanceID is not).
func (p *ModelSaveParams) Holder() uuid.UUID {
	if p.Rebase {
		return uuid.Nil
	}
	return p.InstanceID
}

// Epoch returns the epoch the save stores: ExpectedEpoch, plus one when
// Rebase is set.
func (p *ModelSaveParams) Epoch() int64 {
	if p.Rebase {
		return p.ExpectedEpoch + 1
	}
	return p.ExpectedEpoch
}

// Validate reports the first field every ModelStore rejects with
// ErrInvalidArgument: a nil StreamID, an empty Perspective, a negative
// LastVersion, ExpectedVersion or ExpectedEpoch, or Data that is not a
// JSON document.
func (p *ModelSaveParams) Validate() error {
	return cmp.Or(
		checkPair("ModelSaveParams", p.StreamID, p.Perspective, p.LastVersion),
		checkNotNegative("ModelSaveParams.ExpectedVersion", p.ExpectedVersion),
		checkNotNegative("ModelSaveParams.ExpectedEpoch", p.ExpectedEpoch),
		checkJSON("ModelSaveParams.Data", p.Data),
	)
}

// StoredModel is a perspective's model for one stream with its cursor position.
type StoredModel struct {
	StreamID    uuid.UUID
	Perspective string
	// Data is the JSON encoding of the model.
	Data []byte
	// LastEventID and LastVersion are the last event reflected in Data.
	LastEventID uuid.UUID
	LastVersion int64
	// Epoch is the pair's epoch (see Cursor.Epoch) the model was saved at;
	// a save based on the model sends it as ModelSaveParams.ExpectedEpoch.
	Epoch     int64
	UpdatedAt time.Time
}
