package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// DeadLetterMove implements ports.DeadLetterStore. The row need not be held
// by params.InstanceID, which is recorded as the instance that dead-lettered
// it. Removing the row unblocks later rows of its (stream, perspective); a
// stream left without pending rows is unpinned. A row already gone, or kept
// as processed by debug mode, yields (DeadLetter{}, false, nil).
func (s *Store) DeadLetterMove(ctx context.Context, params *ports.DeadLetterMoveParams) (ports.DeadLetter, bool, error) {
	if err := s.lock(ctx); err != nil {
		return ports.DeadLetter{}, false, err
	}
	defer s.mu.Unlock()

	r := s.work[params.WorkID]
	if r == nil {
		return ports.DeadLetter{}, false, nil
	}
	id, err := uuid.NewV7()
	if err != nil {
		return ports.DeadLetter{}, false, fmt.Errorf("moving work %s to dead letters: generating id: %w", params.WorkID, err)
	}
	now := s.now(params.Now)
	st := s.streams[r.streamID]
	s.removeRow(st, r)
	s.unpinIfDrained(st)
	s.touch(st, now)
	dl := &deadLetter{
		DeadLetter: ports.DeadLetter{
			ID:             id,
			WorkID:         r.id,
			StreamID:       r.streamID,
			Perspective:    r.perspective,
			EventID:        r.eventID,
			EventVersion:   r.version,
			Attempts:       r.attempts,
			Reason:         params.Reason,
			Error:          params.Error,
			InstanceID:     params.InstanceID,
			DeadLetteredAt: now,
		},
		seq: s.nextSeq(),
	}
	s.deadLetters[id] = dl
	return dl.DeadLetter, true, nil
}

// DeadLettersList implements ports.DeadLetterStore: oldest first (ties in
// the order they were recorded), at most Limit when positive. It returns
// ports.ErrInvalidArgument for a negative Limit.
func (s *Store) DeadLettersList(ctx context.Context, params *ports.DeadLettersListParams) ([]ports.DeadLetter, error) {
	if params.Limit < 0 {
		return nil, fmt.Errorf("listing dead letters: limit %d is negative: %w", params.Limit, ports.ErrInvalidArgument)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	var matches []*deadLetter
	for _, dl := range s.deadLetters {
		if (params.Perspective == "" || dl.Perspective == params.Perspective) &&
			(params.StreamID == uuid.Nil || dl.StreamID == params.StreamID) {
			matches = append(matches, dl)
		}
	}
	slices.SortFunc(matches, func(a, b *deadLetter) int {
		return cmp.Or(a.DeadLetteredAt.Compare(b.DeadLetteredAt), cmp.Compare(a.seq, b.seq))
	})
	if params.Limit > 0 && len(matches) > params.Limit {
		matches = matches[:params.Limit]
	}
	out := make([]ports.DeadLetter, 0, len(matches))
	for _, dl := range matches {
		out = append(out, dl.DeadLetter)
	}
	return out, nil
}

// DeadLetterRequeue implements ports.DeadLetterStore. The row comes back
// with its original work id, pending, unleased, unscheduled and with zero
// attempts, and listeners are woken. If the pair's cursor is past the event,
// the cursor is flagged RewindRequired (the trigger keeps the smallest
// version). It returns ports.ErrNotFound for an unknown id.
func (s *Store) DeadLetterRequeue(ctx context.Context, params *ports.DeadLetterRequeueParams) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()

	dl := s.deadLetters[params.ID]
	if dl == nil {
		return fmt.Errorf("requeueing dead letter %s: %w", params.ID, ports.ErrNotFound)
	}
	now := s.now(params.Now)
	workID := dl.WorkID
	if _, taken := s.work[workID]; taken {
		// Cannot happen through the ports; never let two rows share an id.
		var err error
		if workID, err = uuid.NewV7(); err != nil {
			return fmt.Errorf("requeueing dead letter %s: generating work id: %w", params.ID, err)
		}
	}
	delete(s.deadLetters, params.ID)
	st := s.streamFor(dl.StreamID)
	s.addRow(st, &workRow{
		id:          workID,
		streamID:    dl.StreamID,
		perspective: dl.Perspective,
		eventID:     dl.EventID,
		version:     dl.EventVersion,
		seq:         s.nextSeq(),
		createdAt:   now,
	})
	s.touch(st, now)
	if cur := st.cursors[dl.Perspective]; cur != nil && cur.LastVersion > dl.EventVersion {
		flagRewind(cur, dl.EventID, dl.EventVersion, now)
	}
	s.publishLocked()
	return nil
}

// DeadLetterIgnore implements ports.DeadLetterStore.
func (s *Store) DeadLetterIgnore(context.Context, *ports.DeadLetterIgnoreParams) error {
	return fmt.Errorf("ignoring dead letter: %w", errors.ErrUnsupported)
}

// DeadLettersRecover implements ports.DeadLetterStore.
func (s *Store) DeadLettersRecover(context.Context, *ports.DeadLettersRecoverParams) ([]ports.DeadLetter, error) {
	return nil, fmt.Errorf("recovering dead letters: %w", errors.ErrUnsupported)
}
