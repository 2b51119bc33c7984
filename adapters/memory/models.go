package memory

import (
	"bytes"
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// ModelLoad implements ports.ModelStore. It returns a copy of the stored
// model, or an error wrapping ports.ErrNotFound.
func (s *Store) ModelLoad(ctx context.Context, params *ports.ModelLoadParams) (ports.StoredModel, error) {
	streamID, perspective := params.StreamID, params.Perspective
	if err := s.lock(ctx); err != nil {
		return ports.StoredModel{}, err
	}
	defer s.mu.Unlock()

	if st := s.streams[streamID]; st != nil {
		if m := st.models[perspective]; m != nil {
			return copyModel(m), nil
		}
	}
	return ports.StoredModel{}, fmt.Errorf("loading model %q of stream %s: %w", perspective, streamID, ports.ErrNotFound)
}

// ModelSave implements ports.ModelStore. The stored position is the cursor's
// LastVersion and Epoch (0 and 0 without a cursor); the cursor's status and
// rewind columns are kept, except that a missing cursor is created with
// status Processing. It returns ports.ErrInvalidArgument for a nil stream
// id, an empty perspective, a negative version or epoch or Data that is not
// a JSON document, ports.ErrLeaseLost when the save names an instance
// (and no Rebase) that does not hold the stream's lease, live or expired,
// and ports.ErrVersionConflict when ExpectedVersion or ExpectedEpoch
// differs from the stored position; in each case nothing is stored.
func (s *Store) ModelSave(ctx context.Context, params *ports.ModelSaveParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("saving model: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	return s.saveModelLocked(params)
}

// ModelLoadMany implements ports.ModelBatchStore under one lock. It returns
// copies of the stored models of pairs, each pair once.
func (s *Store) ModelLoadMany(ctx context.Context, params *ports.ModelLoadManyParams) ([]ports.StoredModel, error) {
	pairs := params.Pairs
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	out := make([]ports.StoredModel, 0, len(pairs))
	seen := make(map[ports.Pair]bool, len(pairs))
	for _, p := range pairs {
		if seen[p] {
			continue
		}
		seen[p] = true
		if st := s.streams[p.StreamID]; st != nil {
			if m := st.models[p.Perspective]; m != nil {
				out = append(out, copyModel(m))
			}
		}
	}
	return out, nil
}

// ModelSaveMany implements ports.ModelBatchStore: every entry is saved as by
// ModelSave, in order, under one lock.
func (s *Store) ModelSaveMany(ctx context.Context, p *ports.ModelSaveManyParams) ([]error, error) {
	params := p.Saves
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	errs := make([]error, len(params))
	for i, p := range params {
		if errs[i] = p.Validate(); errs[i] == nil {
			errs[i] = s.saveModelLocked(p)
		}
	}
	return errs, nil
}

// copyModel returns a deep copy of m.
func copyModel(m *ports.StoredModel) ports.StoredModel {
	out := *m
	out.Data = bytes.Clone(m.Data)
	return out
}

// saveModelLocked is ModelSave for valid params, with s.mu held.
func (s *Store) saveModelLocked(params *ports.ModelSaveParams) error {
	if holder := params.Holder(); holder != uuid.Nil {
		if st := s.streams[params.StreamID]; st == nil || st.holder != holder {
			return fmt.Errorf("saving model %q of stream %s: the stream is not leased to instance %s: %w",
				params.Perspective, params.StreamID, holder, ports.ErrLeaseLost)
		}
	}
	var stored, epoch int64
	if st := s.streams[params.StreamID]; st != nil {
		if cur := st.cursors[params.Perspective]; cur != nil {
			stored, epoch = cur.LastVersion, cur.Epoch
		}
	}
	if stored != params.ExpectedVersion || epoch != params.ExpectedEpoch {
		return fmt.Errorf("saving model %q of stream %s: expected version %d at epoch %d, cursor is at %d at epoch %d: %w",
			params.Perspective, params.StreamID, params.ExpectedVersion, params.ExpectedEpoch, stored, epoch, ports.ErrVersionConflict)
	}

	now := s.now(params.Now)
	st := s.streamFor(params.StreamID)
	st.models[params.Perspective] = &ports.StoredModel{
		StreamID:    params.StreamID,
		Perspective: params.Perspective,
		Data:        bytes.Clone(params.Data),
		LastEventID: params.LastEventID,
		LastVersion: params.LastVersion,
		Epoch:       params.Epoch(),
		UpdatedAt:   now,
	}
	cur := st.cursors[params.Perspective]
	if cur == nil {
		cur = s.cursorFor(st, params.Perspective, now)
		cur.Status = ports.CursorProcessing
	}
	cur.LastEventID, cur.LastVersion, cur.Epoch = params.LastEventID, params.LastVersion, params.Epoch()
	cur.UpdatedAt = now
	if len(params.AppliedLate) > 0 {
		if i, ok := st.pairIndex(params.Perspective); ok {
			st.pairs[i].unmarkLate(params.AppliedLate)
		}
	}
	return nil
}
