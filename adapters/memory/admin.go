package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/vantage-go/vantage/ports"
)

// PerspectiveRetire implements ports.Admin. It walks every stream, and
// with DropState every snapshot pair: an operator's action is rare, so no
// index by perspective is kept for it. Rows held by instances are deleted
// like the others (their holders' completions and failures of them then
// change nothing), and streams left without pending rows are released. With
// DropState the perspective's stream locks go with its cursors, as they would
// with a lock stored on the cursor. Its dead letters and lifecycle records
// are kept: they are history, not work. It returns ports.ErrInvalidArgument
// for an empty perspective.
func (s *Store) PerspectiveRetire(ctx context.Context, params *ports.PerspectiveRetireParams) (*ports.RetireResult, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("retiring perspective: %w", err)
	}
	name := params.Perspective
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	s.retired[name] = struct{}{}
	result := &ports.RetireResult{}
	for typ, names := range s.subs {
		if i, found := slices.BinarySearch(names, name); found {
			result.Subscriptions++
			if names = slices.Delete(names, i, i+1); len(names) == 0 {
				delete(s.subs, typ)
			} else {
				s.subs[typ] = names
			}
		}
	}
	// The port takes no Now: the claim index is refiled as of the clock, and
	// claims made with another Now check what they pop again.
	now := s.clock.Now()
	for _, st := range s.streams {
		if p := st.pair(name); p != nil {
			// Each first row comes off the front in O(1); removeRow deletes
			// the pair with its last row.
			n := len(p.pending())
			for range n {
				s.removeRow(st, p.first())
			}
			result.Work += n
			s.releaseIfDrained(st)
			s.touch(st, now)
		}
		if !params.DropState {
			continue
		}
		if _, ok := st.cursors[name]; ok {
			delete(st.cursors, name)
			result.Cursors++
		}
		if _, ok := st.models[name]; ok {
			delete(st.models, name)
			result.Models++
		}
		if locks := s.streamLocks[st.id]; locks != nil {
			delete(locks, name)
			if len(locks) == 0 {
				delete(s.streamLocks, st.id)
			}
		}
	}
	if params.DropState {
		for k, snaps := range s.snapshots {
			if k.perspective == name {
				result.Snapshots += len(snaps)
				delete(s.snapshots, k)
			}
		}
	}
	return result, nil
}

// PerspectiveRevive implements ports.Admin. Its subscriptions stay
// deleted until registered again.
func (s *Store) PerspectiveRevive(ctx context.Context, params *ports.PerspectiveReviveParams) error {
	perspective := params.Perspective
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()

	delete(s.retired, perspective)
	return nil
}

// PerspectivesRetired implements ports.Admin. The slice is never nil.
func (s *Store) PerspectivesRetired(ctx context.Context) ([]string, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	out := slices.AppendSeq(make([]string, 0, len(s.retired)), maps.Keys(s.retired))
	slices.Sort(out)
	return out, nil
}
