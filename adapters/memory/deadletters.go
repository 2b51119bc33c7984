package memory

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// DeadLetterMove implements ports.DeadLetterStore. The stream of the row
// must be held by params.InstanceID, whether or not its lease expired since
// (nobody took the stream), as for a completion; otherwise it returns
// ports.ErrLeaseLost and changes nothing. The holder is recorded as the
// instance that dead-lettered the row. Removing the row unblocks later rows
// of its (stream, perspective); a stream left without pending rows is
// released. A row stored by DeadLetterRequeue updates its dead letter, which
// keeps its id, its requeue count and the time and generation of its last
// requeue. A row already gone, or kept as processed by debug mode, yields
// Moved false.
func (s *Store) DeadLetterMove(ctx context.Context, params *ports.DeadLetterMoveParams) (*ports.DeadLetterMoveResult, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	r := s.work.get(params.WorkID)
	if r == nil {
		return &ports.DeadLetterMoveResult{}, nil
	}
	st := s.streams[r.streamID]
	if params.InstanceID == uuid.Nil || st.holder != params.InstanceID {
		return nil, fmt.Errorf("moving work %s to dead letters: stream %s is not leased to instance %s: %w",
			params.WorkID, r.streamID, params.InstanceID, ports.ErrLeaseLost)
	}
	dl := s.deadLetters[r.deadLetterID]
	if dl == nil {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("moving work %s to dead letters: generating id: %w", params.WorkID, err)
		}
		dl = &deadLetter{DeadLetter: ports.DeadLetter{
			ID:           id,
			WorkID:       r.id,
			StreamID:     r.streamID,
			Perspective:  r.perspective,
			EventID:      r.eventID,
			EventVersion: r.version,
		}}
		s.deadLetters[id] = dl
	}
	now := s.now(params.Now)
	s.removeRow(st, r)
	s.releaseIfDrained(st)
	s.touch(st, now)
	dl.Attempts = max(r.attempts, params.Attempts)
	dl.Reason = params.Reason
	dl.Error = cmp.Or(params.Error, r.err)
	dl.InstanceID = params.InstanceID
	dl.Generation = params.Generation
	dl.DeadLetteredAt = now
	dl.Status = ports.DeadLetterDead
	dl.ResolvedAt = time.Time{}
	dl.seq = s.nextSeq()
	return &ports.DeadLetterMoveResult{DeadLetter: dl.DeadLetter, Moved: true}, nil
}

// DeadLettersList implements ports.DeadLetterStore: by the time they were
// last dead-lettered, then by id, oldest or newest first, after
// params.After when set, at most Limit when positive. It walks every dead
// letter. It returns ports.ErrInvalidArgument for a negative Limit or an
// unknown Status.
func (s *Store) DeadLettersList(ctx context.Context, params *ports.DeadLettersListParams) ([]ports.DeadLetter, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("listing dead letters: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	// order compares dead letters, or a dead letter and the cursor, in the
	// listing's order.
	order := func(a, b ports.DeadLetterCursor) int {
		c := cmp.Or(a.DeadLetteredAt.Compare(b.DeadLetteredAt), bytes.Compare(a.ID[:], b.ID[:]))
		if params.NewestFirst {
			return -c
		}
		return c
	}
	after := !params.After.DeadLetteredAt.IsZero()
	var matches []ports.DeadLetter
	for _, dl := range s.deadLetters {
		if (params.Perspective == "" || dl.Perspective == params.Perspective) &&
			(params.StreamID == uuid.Nil || dl.StreamID == params.StreamID) &&
			(params.Status == "" || dl.Status == params.Status) &&
			(params.Since.IsZero() || !dl.DeadLetteredAt.Before(params.Since)) &&
			(!after || order(dl.Cursor(), params.After) > 0) {
			matches = append(matches, dl.DeadLetter)
		}
	}
	slices.SortFunc(matches, func(a, b ports.DeadLetter) int { return order(a.Cursor(), b.Cursor()) })
	if params.Limit > 0 && len(matches) > params.Limit {
		matches = matches[:params.Limit]
	}
	if matches == nil {
		matches = []ports.DeadLetter{}
	}
	return matches, nil
}

// sortedDeadLetters returns the dead letters for which keep is true, oldest
// first by the time they were last dead-lettered.
func (s *Store) sortedDeadLetters(keep func(dl *deadLetter) bool) []*deadLetter {
	var out []*deadLetter
	for _, dl := range s.deadLetters {
		if keep(dl) {
			out = append(out, dl)
		}
	}
	slices.SortFunc(out, byLastDeadLettered)
	return out
}

// byLastDeadLettered orders dead letters oldest first by the time they were
// last dead-lettered, ties in the order that happened.
func byLastDeadLettered(a, b *deadLetter) int {
	return cmp.Or(a.DeadLetteredAt.Compare(b.DeadLetteredAt), cmp.Compare(a.seq, b.seq))
}

// DeadLetterRequeue implements ports.Admin. The row comes back with its
// original work id, pending, unscheduled and with zero attempts, and
// listeners are woken. If the pair's cursor is at or past the event (a
// dead-lettered event is in no model), the row is
// late and the cursor is flagged RewindRequired (the trigger keeps the
// smallest version); below the pair's handed-out mark it is late without
// the flag. It returns ports.ErrNotFound for an unknown id and
// ports.ErrVersionConflict for a dead letter that is requeued or recovered.
func (s *Store) DeadLetterRequeue(ctx context.Context, params *ports.DeadLetterRequeueParams) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()

	dl := s.deadLetters[params.ID]
	switch {
	case dl == nil:
		return fmt.Errorf("requeueing dead letter %s: %w", params.ID, ports.ErrNotFound)
	case dl.Status != ports.DeadLetterDead && dl.Status != ports.DeadLetterIgnored:
		return fmt.Errorf("requeueing dead letter %s: it is %s: %w", params.ID, dl.Status, ports.ErrVersionConflict)
	}
	workID, err := s.requeueWorkID(dl)
	if err != nil {
		return fmt.Errorf("requeueing dead letter %s: %w", params.ID, err)
	}
	s.requeue(dl, workID, params.Generation, s.now(params.Now))
	s.publishLocked()
	return nil
}

// DeadLettersRequeue implements ports.Admin. The call is atomic: the dead
// letters it selects are requeued oldest first, as DeadLetterRequeue would,
// and listeners are woken once when it requeued any. With IDs it looks them
// up; without, it walks every dead letter. It returns ports.ErrInvalidArgument for a nil id or
// when neither Perspective nor IDs is given.
func (s *Store) DeadLettersRequeue(ctx context.Context, params *ports.DeadLettersRequeueParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, fmt.Errorf("requeueing dead letters: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()

	keep := func(dl *deadLetter) bool {
		return (params.Perspective == "" || dl.Perspective == params.Perspective) &&
			(params.Since.IsZero() || !dl.DeadLetteredAt.Before(params.Since))
	}
	var due []*deadLetter
	if len(params.IDs) > 0 {
		named := make(map[uuid.UUID]bool, len(params.IDs))
		for _, id := range params.IDs {
			dl := s.deadLetters[id]
			if dl != nil && !named[id] && (dl.Status == ports.DeadLetterDead || dl.Status == ports.DeadLetterIgnored) && keep(dl) {
				named[id] = true
				due = append(due, dl)
			}
		}
		slices.SortFunc(due, byLastDeadLettered)
	} else {
		due = s.sortedDeadLetters(func(dl *deadLetter) bool { return dl.Status == ports.DeadLetterDead && keep(dl) })
	}
	workIDs := make([]uuid.UUID, len(due)) // drawn before any change: the call is atomic
	for i, dl := range due {
		id, err := s.requeueWorkID(dl)
		if err != nil {
			return 0, fmt.Errorf("requeueing dead letter %s: %w", dl.ID, err)
		}
		workIDs[i] = id
	}
	now := s.now(params.Now)
	for i, dl := range due {
		s.requeue(dl, workIDs[i], params.Generation, now)
	}
	if len(due) > 0 {
		s.publishLocked()
	}
	return len(due), nil
}

// requeueWorkID returns the id the requeued row of dl gets: its original
// work id, unless a pending row has it.
func (s *Store) requeueWorkID(dl *deadLetter) (uuid.UUID, error) {
	if s.work.get(dl.WorkID) == nil {
		return dl.WorkID, nil
	}
	// Cannot happen through the ports; never let two rows share an id.
	id, err := s.work.newID()
	if err != nil {
		return uuid.Nil, fmt.Errorf("generating work id: %w", err)
	}
	return id, nil
}

// requeue stores the work row of dl again under workID and marks dl
// requeued on generation at now. The caller wakes the listeners.
func (s *Store) requeue(dl *deadLetter, workID uuid.UUID, generation string, now time.Time) {
	st := s.streamFor(dl.StreamID)
	late, below := arrivesLate(st, dl.Perspective, dl.EventVersion) // only a rewind applies it in order
	if cur := st.cursors[dl.Perspective]; cur != nil && cur.LastVersion == dl.EventVersion {
		// The cursor stands at the event itself: a save moved it there
		// and left the dead-lettered event out. No model holds it.
		late, below = true, true
	}
	s.addRow(st, &workRow{
		id:           workID,
		streamID:     dl.StreamID,
		perspective:  dl.Perspective,
		eventID:      dl.EventID,
		version:      dl.EventVersion,
		late:         late,
		seq:          s.nextSeq(),
		createdAt:    now,
		deadLetterID: dl.ID,
	})
	s.touch(st, now)
	if below {
		flagRewind(st.cursors[dl.Perspective], dl.EventID, dl.EventVersion, now)
	}
	dl.Status = ports.DeadLetterRequeued
	dl.Requeues++
	dl.RequeuedAt = now
	dl.RequeueGeneration = generation
	if !slices.Contains(dl.requeuedOn, generation) {
		dl.requeuedOn = append(dl.requeuedOn, generation)
	}
	dl.ResolvedAt = time.Time{}
}

// recoverDeadLetter marks the dead letter id recovered at now, once the row
// its requeue stored completed.
func (s *Store) recoverDeadLetter(id uuid.UUID, now time.Time) {
	if dl := s.deadLetters[id]; dl != nil {
		dl.Status, dl.ResolvedAt = ports.DeadLetterRecovered, now
	}
}

// DeadLetterGet implements ports.Admin. It returns ports.ErrNotFound for an
// unknown id.
func (s *Store) DeadLetterGet(ctx context.Context, params *ports.DeadLetterGetParams) (ports.DeadLetter, error) {
	if err := s.lock(ctx); err != nil {
		return ports.DeadLetter{}, err
	}
	defer s.mu.Unlock()

	dl := s.deadLetters[params.ID]
	if dl == nil {
		return ports.DeadLetter{}, fmt.Errorf("reading dead letter %s: %w", params.ID, ports.ErrNotFound)
	}
	return dl.DeadLetter, nil
}

// DeadLetterIgnore implements ports.Admin. Ignoring an ignored dead
// letter changes nothing, its ResolvedAt included. It returns
// ports.ErrNotFound for an unknown id and ports.ErrVersionConflict for a dead
// letter that is requeued or recovered.
func (s *Store) DeadLetterIgnore(ctx context.Context, params *ports.DeadLetterIgnoreParams) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()

	dl := s.deadLetters[params.ID]
	switch {
	case dl == nil:
		return fmt.Errorf("ignoring dead letter %s: %w", params.ID, ports.ErrNotFound)
	case dl.Status == ports.DeadLetterIgnored:
		return nil
	case dl.Status != ports.DeadLetterDead:
		return fmt.Errorf("ignoring dead letter %s: it is %s: %w", params.ID, dl.Status, ports.ErrVersionConflict)
	}
	dl.Status, dl.ResolvedAt = ports.DeadLetterIgnored, s.now(params.Now)
	return nil
}

// DeadLettersRecover implements ports.DeadLetterStore. The call is atomic, so
// concurrent callers never requeue a dead letter twice; listeners are woken
// once when it requeued any. It walks every dead letter. It returns
// ports.ErrInvalidArgument for an empty Generation or a Limit below 1.
func (s *Store) DeadLettersRecover(ctx context.Context, params *ports.DeadLettersRecoverParams) ([]ports.DeadLetter, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("recovering dead letters: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	// A dead letter that failed on this generation, or was ever requeued on
	// it (not only by the latest requeue: with three generations running,
	// two would otherwise take turns forever), would fail again on the same
	// code.
	due := s.sortedDeadLetters(func(dl *deadLetter) bool {
		return dl.Status == ports.DeadLetterDead && dl.Generation != params.Generation && !slices.Contains(dl.requeuedOn, params.Generation)
	})
	due = due[:min(len(due), params.Limit)]
	workIDs := make([]uuid.UUID, len(due)) // drawn before any change: the call is atomic
	for i, dl := range due {
		id, err := s.requeueWorkID(dl)
		if err != nil {
			return nil, fmt.Errorf("recovering dead letter %s: %w", dl.ID, err)
		}
		workIDs[i] = id
	}
	now := s.now(params.Now)
	out := make([]ports.DeadLetter, 0, len(due))
	for i, dl := range due {
		s.requeue(dl, workIDs[i], params.Generation, now)
		out = append(out, dl.DeadLetter)
	}
	if len(out) > 0 {
		s.publishLocked()
	}
	return out, nil
}
