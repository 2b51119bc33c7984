package memory

import (
	"cmp"
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
// change nothing, and bring no cursor DropState deleted back), and streams
// left without pending rows are released. With
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
			if cur := st.cursors[name]; cur != nil && cur.Status.Has(ports.CursorRewindRequired) {
				clearRewind(cur, now)
			}
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

// PerspectivesStatus implements ports.Admin. It walks every stream (its
// cursors and pending pairs, and the rows of those pairs for their retry
// times) and every dead letter, under the store's mutex: an operator's
// status read, rare next to the work it holds back. The backlog figures
// come from the perspectives' backlogs, as PerspectivesLag's do. Ages and
// retry times are measured at params.Now, or on the store's Clock when it
// is zero.
func (s *Store) PerspectivesStatus(ctx context.Context, params *ports.PerspectivesStatusParams) ([]ports.PerspectiveStatus, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	now := s.now(params.Now)
	byName := map[string]*ports.PerspectiveStatus{}
	of := func(name string) *ports.PerspectiveStatus {
		ps := byName[name]
		if ps == nil {
			ps = &ports.PerspectiveStatus{Perspective: name}
			byName[name] = ps
		}
		return ps
	}
	for typ, names := range s.subs {
		for _, name := range names {
			ps := of(name)
			ps.EventTypes = append(ps.EventTypes, typ)
		}
	}
	for name := range s.retired {
		of(name).Retired = true
	}
	for _, st := range s.streams {
		for name, cur := range st.cursors {
			ps := of(name)
			ps.Streams++
			if st.pair(name) == nil {
				ps.CaughtUp++
			}
			if cur.Status.Has(ports.CursorFailed) {
				ps.Failed++
			}
			if cur.Status.Has(ports.CursorRewindRequired) {
				ps.RewindRequired++
			}
		}
		for _, p := range st.pairs {
			ps := of(p.perspective)
			ps.PendingStreams++
			for _, r := range p.pending() {
				if r.scheduled.After(now) {
					ps.AwaitingRetry++
				}
			}
		}
	}
	for name, b := range s.backlogs {
		ps := of(name)
		ps.Pending = int64(b.pending)
		ps.OldestAge = max(now.Sub(b.oldest().createdAt), 0)
	}
	for _, dl := range s.deadLetters {
		if dl.Status == ports.DeadLetterDead {
			of(dl.Perspective).DeadLetters++
		}
	}
	out := make([]ports.PerspectiveStatus, 0, len(byName))
	for _, ps := range byName {
		slices.Sort(ps.EventTypes)
		out = append(out, *ps)
	}
	slices.SortFunc(out, func(a, b ports.PerspectiveStatus) int { return cmp.Compare(a.Perspective, b.Perspective) })
	return out, nil
}
