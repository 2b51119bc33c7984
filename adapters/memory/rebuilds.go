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

// Rebuild requests are kept in Store.rebuilds by id. Operators store few of
// them, so claims and listings walk them all.

var _ ports.RebuildQueue = (*Store)(nil)

// RebuildRequest implements ports.Admin. The request is RebuildPending,
// requested and updated at params.Now (or the Clock's time), its stream ids
// sorted without duplicates. It returns ports.ErrInvalidArgument for an
// empty perspective or a nil stream id.
func (s *Store) RebuildRequest(ctx context.Context, params *ports.RebuildRequestParams) (ports.RebuildRequest, error) {
	if err := params.Validate(); err != nil {
		return ports.RebuildRequest{}, fmt.Errorf("requesting a rebuild: %w", err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return ports.RebuildRequest{}, fmt.Errorf("requesting a rebuild: generating id: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return ports.RebuildRequest{}, err
	}
	defer s.mu.Unlock()

	streams := slices.Clone(params.StreamIDs)
	slices.SortFunc(streams, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	now := s.now(params.Now)
	r := &ports.RebuildRequest{
		ID:          id,
		Perspective: params.Perspective,
		StreamIDs:   slices.Compact(streams),
		RequestedBy: params.RequestedBy,
		RequestedAt: now,
		Status:      ports.RebuildPending,
		UpdatedAt:   now,
	}
	s.rebuilds[id] = r
	return copyRebuild(r), nil
}

// RebuildGet implements ports.Admin. It returns ports.ErrNotFound for an
// unknown id.
func (s *Store) RebuildGet(ctx context.Context, params *ports.RebuildGetParams) (ports.RebuildRequest, error) {
	if err := s.lock(ctx); err != nil {
		return ports.RebuildRequest{}, err
	}
	defer s.mu.Unlock()

	r := s.rebuilds[params.ID]
	if r == nil {
		return ports.RebuildRequest{}, fmt.Errorf("reading rebuild request %s: %w", params.ID, ports.ErrNotFound)
	}
	return copyRebuild(r), nil
}

// RebuildsList implements ports.Admin: newest first, by RequestedAt then id
// in reverse byte order. It returns ports.ErrInvalidArgument for a negative
// Limit or an unknown Status.
func (s *Store) RebuildsList(ctx context.Context, params *ports.RebuildsListParams) ([]ports.RebuildRequest, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("listing rebuild requests: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	matches := s.sortedRebuilds(func(r *ports.RebuildRequest) bool {
		return (params.Perspective == "" || r.Perspective == params.Perspective) && (params.Status == "" || r.Status == params.Status)
	})
	slices.Reverse(matches)
	if params.Limit > 0 && len(matches) > params.Limit {
		matches = matches[:params.Limit]
	}
	out := make([]ports.RebuildRequest, 0, len(matches))
	for _, r := range matches {
		out = append(out, copyRebuild(r))
	}
	return out, nil
}

// RebuildCancel implements ports.Admin. It returns ports.ErrNotFound for an
// unknown id and ports.ErrVersionConflict for a request done or failed.
func (s *Store) RebuildCancel(ctx context.Context, params *ports.RebuildCancelParams) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()

	r := s.rebuilds[params.ID]
	switch {
	case r == nil:
		return fmt.Errorf("cancelling rebuild request %s: %w", params.ID, ports.ErrNotFound)
	case r.Status == ports.RebuildCancelled:
		return nil
	case r.Status != ports.RebuildPending && r.Status != ports.RebuildRunning:
		return fmt.Errorf("cancelling rebuild request %s: it is %s: %w", params.ID, r.Status, ports.ErrVersionConflict)
	}
	now := s.now(params.Now)
	r.Status, r.ClaimExpiry, r.FinishedAt, r.UpdatedAt = ports.RebuildCancelled, time.Time{}, now, now
	return nil
}

// RebuildClaim implements ports.RebuildQueue: the oldest request of the
// caller's perspectives that is pending, or running under a claim that
// expired at Now. It returns ports.ErrInvalidArgument for a nil InstanceID,
// an empty perspective name or a ClaimDuration that is not positive.
func (s *Store) RebuildClaim(ctx context.Context, params *ports.RebuildClaimParams) (*ports.RebuildClaimResult, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("claiming a rebuild request: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	now := s.now(params.Now)
	claimable := s.sortedRebuilds(func(r *ports.RebuildRequest) bool {
		return slices.Contains(params.Perspectives, r.Perspective) &&
			(r.Status == ports.RebuildPending || r.Status == ports.RebuildRunning && !r.ClaimExpiry.After(now))
	})
	if len(claimable) == 0 {
		return &ports.RebuildClaimResult{}, nil
	}
	r := claimable[0]
	r.Status = ports.RebuildRunning
	r.InstanceID = params.InstanceID
	r.Attempt++
	r.ClaimExpiry = now.Add(params.ClaimDuration)
	if r.StartedAt.IsZero() {
		r.StartedAt = now
	}
	r.UpdatedAt = now
	return &ports.RebuildClaimResult{Request: copyRebuild(r), Claimed: true}, nil
}

// RebuildProgress implements ports.RebuildQueue. It returns
// ports.ErrNotFound for an unknown id, ports.ErrVersionConflict when the
// caller does not hold the request's latest claim, and
// ports.ErrInvalidArgument for invalid params.
func (s *Store) RebuildProgress(ctx context.Context, params *ports.RebuildProgressParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("recording rebuild progress: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()

	r, err := s.claimedRebuild(params.ID, params.InstanceID, params.Attempt)
	if err != nil {
		return fmt.Errorf("recording the progress of rebuild request %s: %w", params.ID, err)
	}
	now := s.now(params.Now)
	r.RebuildFigures, r.UpdatedAt = params.RebuildFigures, now
	if params.Release {
		r.Status, r.ClaimExpiry = ports.RebuildPending, time.Time{}
	} else {
		r.ClaimExpiry = now.Add(params.ClaimDuration)
	}
	return nil
}

// RebuildFinish implements ports.RebuildQueue. It returns
// ports.ErrNotFound for an unknown id, ports.ErrVersionConflict when the
// caller does not hold the request's latest claim, and
// ports.ErrInvalidArgument for invalid params.
func (s *Store) RebuildFinish(ctx context.Context, params *ports.RebuildFinishParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("finishing a rebuild request: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()

	r, err := s.claimedRebuild(params.ID, params.InstanceID, params.Attempt)
	if err != nil {
		return fmt.Errorf("finishing rebuild request %s: %w", params.ID, err)
	}
	now := s.now(params.Now)
	r.Status = ports.RebuildDone
	if params.Error != "" {
		r.Status = ports.RebuildFailed
	}
	r.RebuildFigures, r.Error = params.RebuildFigures, params.Error
	r.ClaimExpiry, r.FinishedAt, r.UpdatedAt = time.Time{}, now, now
	return nil
}

// claimedRebuild returns the request id when it runs under the claim
// (instance, attempt), ports.ErrNotFound for an unknown id and
// ports.ErrVersionConflict otherwise.
func (s *Store) claimedRebuild(id, instance uuid.UUID, attempt int) (*ports.RebuildRequest, error) {
	r := s.rebuilds[id]
	switch {
	case r == nil:
		return nil, ports.ErrNotFound
	case r.Status != ports.RebuildRunning || r.InstanceID != instance || r.Attempt != attempt:
		return nil, fmt.Errorf("the claim of instance %s, attempt %d, does not stand (the request is %s, attempt %d of instance %s): %w",
			instance, attempt, r.Status, r.Attempt, r.InstanceID, ports.ErrVersionConflict)
	}
	return r, nil
}

// sortedRebuilds returns the requests for which keep is true, oldest first
// by RequestedAt, then id.
func (s *Store) sortedRebuilds(keep func(r *ports.RebuildRequest) bool) []*ports.RebuildRequest {
	var out []*ports.RebuildRequest
	for _, r := range s.rebuilds {
		if keep(r) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *ports.RebuildRequest) int {
		return cmp.Or(a.RequestedAt.Compare(b.RequestedAt), bytes.Compare(a.ID[:], b.ID[:]))
	})
	return out
}

// copyRebuild returns a copy of r that shares nothing with the store.
func copyRebuild(r *ports.RebuildRequest) ports.RebuildRequest {
	c := *r
	c.StreamIDs = slices.Clone(r.StreamIDs)
	return c
}
