package memory

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// InstanceHeartbeat implements ports.WorkClaimer. It upserts the caller's
// instance and abandons every other instance whose heartbeat is older than
// Now - StaleThreshold: their leases and pins are released and their rows
// deleted. Abandoned ids are returned in id order. It returns
// ports.ErrInvalidArgument for a nil instance id or a non-positive
// StaleThreshold.
func (s *Store) InstanceHeartbeat(ctx context.Context, params *ports.InstanceHeartbeatParams) (*ports.InstanceHeartbeatResult, error) {
	if params.InstanceID == uuid.Nil {
		return nil, fmt.Errorf("recording heartbeat: nil instance id: %w", ports.ErrInvalidArgument)
	}
	if params.StaleThreshold <= 0 {
		return nil, fmt.Errorf("recording heartbeat: stale threshold %s must be positive: %w", params.StaleThreshold, ports.ErrInvalidArgument)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	now := s.now(params.Now)
	inst := s.instances[params.InstanceID]
	if inst == nil {
		inst = &ports.Instance{ID: params.InstanceID, StartedAt: now}
		s.instances[params.InstanceID] = inst
	}
	inst.ServiceName = params.ServiceName
	inst.HostName = params.HostName
	inst.ProcessID = params.ProcessID
	inst.Metadata = copyMap(params.Metadata)
	inst.LastHeartbeatAt = now

	cutoff := now.Add(-params.StaleThreshold)
	result := &ports.InstanceHeartbeatResult{}
	for id, other := range s.instances {
		if id != params.InstanceID && other.LastHeartbeatAt.Before(cutoff) {
			result.Abandoned = append(result.Abandoned, id)
		}
	}
	slices.SortFunc(result.Abandoned, compareUUID)
	for _, id := range result.Abandoned {
		s.releaseInstance(id)
		delete(s.instances, id)
	}
	return result, nil
}

// InstanceDeregister implements ports.WorkClaimer: it releases every lease
// and pin of the instance and deletes its row. Unknown instances are a no-op.
func (s *Store) InstanceDeregister(ctx context.Context, instanceID uuid.UUID) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()

	s.releaseInstance(instanceID)
	delete(s.instances, instanceID)
	return nil
}

// InstancesList implements ports.WorkClaimer: the recorded instances, ordered
// by id.
func (s *Store) InstancesList(ctx context.Context) ([]ports.Instance, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	ids := slices.SortedFunc(maps.Keys(s.instances), compareUUID)
	out := make([]ports.Instance, 0, len(ids))
	for _, id := range ids {
		inst := *s.instances[id]
		inst.Metadata = copyMap(inst.Metadata)
		out = append(out, inst)
	}
	return out, nil
}

// WorkClaim implements ports.WorkClaimer.
//
// The result lists the streams the caller can drain now: those where some
// perspective's first pending row is under the caller's live lease (what
// EventsFetchPending would return). A stream whose held rows all wait behind
// a failed row scheduled for later is left out until the retry time.
//
// Candidate streams are selected oldest pending work first (the insertion
// order of their oldest candidate row), so a stream never starves behind
// newer ones, and only as long as the result stays within MaxStreams: a
// caller already draining MaxStreams streams leases no new stream, only new
// rows of the streams it drains. HasMore is true when candidate streams were
// left unselected or the result was cut at MaxStreams.
//
// It returns ports.ErrInvalidArgument for a nil instance id or a
// non-positive MaxStreams, LeaseDuration or StaleThreshold, and
// ports.ErrInstanceNotAlive when the caller has no live heartbeat.
func (s *Store) WorkClaim(ctx context.Context, params *ports.WorkClaimParams) (*ports.WorkClaimResult, error) {
	switch {
	case params.InstanceID == uuid.Nil:
		return nil, fmt.Errorf("claiming work: nil instance id: %w", ports.ErrInvalidArgument)
	case params.MaxStreams <= 0:
		return nil, fmt.Errorf("claiming work: max streams %d must be positive: %w", params.MaxStreams, ports.ErrInvalidArgument)
	case params.LeaseDuration <= 0:
		return nil, fmt.Errorf("claiming work: lease duration %s must be positive: %w", params.LeaseDuration, ports.ErrInvalidArgument)
	case params.StaleThreshold <= 0:
		return nil, fmt.Errorf("claiming work: stale threshold %s must be positive: %w", params.StaleThreshold, ports.ErrInvalidArgument)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	now := s.now(params.Now)
	caller := params.InstanceID
	live := s.liveInstances(now, params.StaleThreshold)
	rank := live.rank(caller)
	if rank < 0 {
		return nil, fmt.Errorf("claiming work for instance %s: %w", caller, ports.ErrInstanceNotAlive)
	}
	partitions := uint32(s.partitionCount)
	if params.PartitionCount > 0 {
		partitions = uint32(params.PartitionCount)
	}

	type candidate struct {
		st    *stream
		rows  []*workRow
		first uint64
	}
	var candidates []candidate
	for _, st := range s.active {
		if owner := st.pinnedTo; owner != caller {
			if owner != uuid.Nil && live.live(owner) {
				continue // a live other owner's stream is never taken
			}
			if int(st.hash%partitions)%len(live.ids) != rank {
				continue
			}
		}
		if st.unleased == 0 && st.leaseFloor.After(now) {
			continue // every pending row is under a live lease
		}
		rows := s.claimCandidates(st, caller, now)
		if len(rows) == 0 {
			continue
		}
		first := rows[0].seq
		for _, r := range rows[1:] {
			first = min(first, r.seq)
		}
		candidates = append(candidates, candidate{st: st, rows: rows, first: first})
	}
	slices.SortFunc(candidates, func(a, b candidate) int { return cmp.Compare(a.first, b.first) })

	// Streams the caller can already drain take their new rows for free.
	// Other streams are selected only while the caller would still be told
	// to drain at most MaxStreams streams: leasing more would leave leases
	// ticking on streams nobody drains, and their expiry would count
	// attempts against events that never ran. A selected stream is drainable
	// once leased: its candidate rows start some perspective's pending rows.
	draining := make([]*stream, 0, len(s.held[caller]))
	for id := range s.held[caller] {
		if st := s.streams[id]; drainable(st, caller, now) {
			draining = append(draining, st)
		}
	}
	capacity := params.MaxStreams - len(draining)
	unselected := false
	expiry := now.Add(params.LeaseDuration)
	for _, c := range candidates {
		if !drainable(c.st, caller, now) {
			if capacity <= 0 {
				unselected = true
				continue
			}
			capacity--
			draining = append(draining, c.st)
		}
		for _, r := range c.rows {
			s.take(c.st, r, caller, expiry)
			r.attempts++
		}
		s.pin(c.st, caller)
	}

	slices.SortFunc(draining, func(a, b *stream) int {
		return cmp.Or(cmp.Compare(a.pending, b.pending), compareUUID(a.id, b.id))
	})
	result := &ports.WorkClaimResult{HasMore: unselected || len(draining) > params.MaxStreams}
	for _, st := range draining[:min(len(draining), params.MaxStreams)] {
		result.StreamIDs = append(result.StreamIDs, st.id)
	}
	return result, nil
}

// drainable reports whether a fetch by caller at now would return work of
// st: some perspective's first pending row is under the caller's live lease.
// Held rows waiting behind a failed row scheduled for later (or behind an
// expired lease of their own) do not make the stream drainable, so such
// streams neither fill the result nor keep HasMore set.
func drainable(st *stream, caller uuid.UUID, now time.Time) bool {
	for _, p := range st.pairs {
		if r := p.rows[0]; r.holder == caller && r.expiry.After(now) {
			return true
		}
	}
	return false
}

// claimCandidates returns the rows of st that the caller may lease in a claim
// or fetch: per perspective, in version order, every row that is unleased or
// whose lease expired, stopping at the first row scheduled in the future or
// under another holder's live lease (the ordering guard). Rows under the
// caller's own live lease are passed over. When the walk visits every row and
// finds no candidate, it sets st.leaseFloor to the earliest live expiry, so
// later claims skip the stream until a lease can have expired.
func (s *Store) claimCandidates(st *stream, caller uuid.UUID, now time.Time) []*workRow {
	var (
		out      []*workRow
		complete = true
		floor    time.Time
	)
	for _, p := range st.pairs {
	rows:
		for _, r := range p.rows {
			switch {
			case r.scheduled.After(now):
				complete = false
				break rows
			case r.holder != uuid.Nil && r.expiry.After(now):
				if floor.IsZero() || r.expiry.Before(floor) {
					floor = r.expiry
				}
				if r.holder != caller {
					complete = false
					break rows
				}
			default:
				out = append(out, r)
			}
		}
	}
	if complete && len(out) == 0 && !floor.IsZero() {
		st.leaseFloor = floor
	}
	return out
}

// WorkRenewLeases implements ports.WorkClaimer: it extends to Now +
// LeaseDuration the leases of the listed rows that are pending and held by
// the caller, and returns how many it renewed. A row whose lease expired but
// that nobody took over is still held by the caller and is renewed.
func (s *Store) WorkRenewLeases(ctx context.Context, params *ports.WorkRenewLeasesParams) (int, error) {
	if params.LeaseDuration <= 0 {
		return 0, fmt.Errorf("renewing leases: lease duration %s must be positive: %w", params.LeaseDuration, ports.ErrInvalidArgument)
	}
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()

	expiry := s.now(params.Now).Add(params.LeaseDuration)
	renewed := 0
	for _, id := range uniqueSorted(params.WorkIDs) {
		r := s.work[id]
		if r == nil || params.InstanceID == uuid.Nil || r.holder != params.InstanceID {
			continue
		}
		s.extend(s.streams[r.streamID], r, expiry)
		renewed++
	}
	return renewed, nil
}
