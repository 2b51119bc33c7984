package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// CursorsRewindRequired implements ports.RewindStore. It returns copies and
// walks every cursor of the store: the flag is set and cleared in place by
// appends, completions, failures and requeues, so no index of flagged
// cursors is kept. It returns ports.ErrInvalidArgument for a negative Limit.
func (s *Store) CursorsRewindRequired(ctx context.Context, params *ports.CursorsRewindRequiredParams) ([]ports.Cursor, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("listing cursors requiring rewind: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	var out []ports.Cursor
	for _, st := range s.streams {
		for _, cur := range st.cursors {
			if cur.Status.Has(ports.CursorRewindRequired) {
				out = append(out, *cur)
			}
		}
	}
	slices.SortFunc(out, func(a, b ports.Cursor) int {
		return cmp.Or(compareUUID(a.StreamID, b.StreamID), cmp.Compare(a.Perspective, b.Perspective))
	})
	if params.Limit > 0 && len(out) > params.Limit {
		out = out[:params.Limit]
	}
	return out, nil
}

// StreamLockAcquire implements ports.RewindStore. The lock is expired once
// Now reaches its expiry; acquiring or extending sets the expiry to
// Now+Duration and the reason to Reason. A missing cursor is created with
// status None and no position, whether or not the lock is taken; an
// existing cursor is left unchanged (the lock is not part of ports.Cursor).
// It returns ports.ErrInvalidArgument for a nil stream or instance id, an
// empty perspective or a non-positive Duration.
func (s *Store) StreamLockAcquire(ctx context.Context, params *ports.StreamLockParams) (bool, error) {
	if err := params.ValidateAcquire(); err != nil {
		return false, fmt.Errorf("acquiring stream lock: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()

	now := s.now(params.Now)
	s.cursorFor(s.streamFor(params.StreamID), params.Perspective, now)
	locks := s.streamLocks[params.StreamID]
	if held, ok := locks[params.Perspective]; ok && held.InstanceID != params.InstanceID && held.Expiry.After(now) {
		return false, nil
	}
	if locks == nil {
		locks = make(map[string]ports.StreamLock)
		s.streamLocks[params.StreamID] = locks
	}
	locks[params.Perspective] = ports.StreamLock{
		InstanceID: params.InstanceID,
		Reason:     params.Reason,
		Expiry:     now.Add(params.Duration),
	}
	return true, nil
}

// StreamLockRelease implements ports.RewindStore. The caller holds the lock
// when it is the recorded holder, even past the expiry (nobody took it
// over). Releasing never creates a cursor. Duration, Reason and Now are not
// used. It returns ports.ErrInvalidArgument for a nil stream or instance id
// or an empty perspective.
func (s *Store) StreamLockRelease(ctx context.Context, params *ports.StreamLockParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("releasing stream lock: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()

	locks := s.streamLocks[params.StreamID]
	if held, ok := locks[params.Perspective]; ok && held.InstanceID == params.InstanceID {
		delete(locks, params.Perspective)
		if len(locks) == 0 {
			delete(s.streamLocks, params.StreamID)
		}
	}
	return nil
}

// StreamLocks implements ports.LockReader. A lock is unexpired while its
// expiry is after Now. The map is never nil.
func (s *Store) StreamLocks(ctx context.Context, params *ports.StreamLocksParams) (map[string]ports.StreamLock, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	now := s.now(params.Now)
	out := make(map[string]ports.StreamLock)
	for perspective, held := range s.streamLocks[params.StreamID] {
		if held.Expiry.After(now) {
			out[perspective] = held
		}
	}
	return out, nil
}

// StreamsWithEventTypes implements ports.RewindStore. A type listed twice
// counts once. It returns ports.ErrInvalidArgument for a negative Limit.
func (s *Store) StreamsWithEventTypes(ctx context.Context, params *ports.StreamsWithEventTypesParams) ([]uuid.UUID, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("listing streams with event types: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	// The first Limit streams overall are among the first Limit streams of
	// each type, so each type contributes at most Limit and the union is
	// cut after sorting.
	var out []uuid.UUID
	for _, typ := range params.EventTypes {
		idx := s.types[typ]
		if idx == nil {
			continue
		}
		streams := idx.sortedStreams()
		i, found := slices.BinarySearchFunc(streams, params.After, compareUUID)
		if found {
			i++
		}
		page := streams[i:]
		if params.Limit > 0 && len(page) > params.Limit {
			page = page[:params.Limit]
		}
		out = append(out, page...)
	}
	if len(params.EventTypes) > 1 {
		slices.SortFunc(out, compareUUID)
		out = slices.Compact(out)
	}
	if params.Limit > 0 && len(out) > params.Limit {
		out = out[:params.Limit]
	}
	return out, nil
}

// WorkLate implements ports.RewindStore: a walk of the pair's pending rows.
// It returns ports.ErrInvalidArgument for a nil stream id or an empty
// perspective.
func (s *Store) WorkLate(ctx context.Context, params *ports.WorkLateParams) ([]ports.WorkItem, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("listing late work: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	st := s.streams[params.StreamID]
	if st == nil {
		return nil, nil
	}
	p := st.pair(params.Perspective)
	if p == nil {
		return nil, nil
	}
	var out []ports.WorkItem
	for _, r := range p.pending() {
		if r.late {
			out = append(out, ports.WorkItem{
				WorkID: r.id, StreamID: st.id, Perspective: r.perspective, EventID: r.eventID,
				EventVersion: r.version, Attempts: r.attempts, Late: true, Replay: r.replay,
			})
		}
	}
	return out, nil
}
