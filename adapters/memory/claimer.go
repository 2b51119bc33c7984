package memory

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// InstanceHeartbeat implements ports.WorkClaimer. It upserts the caller's
// instance and, when the caller was live before the call, abandons every
// other instance whose heartbeat is older than Now - StaleThreshold: their
// leases and pins are released, each released row gains an attempt, and
// their rows are deleted. A caller that was not live (new, or back from an
// outage) only re-registers and reports Rejoined. Abandoned ids are returned
// in id order. NextStaleAt is the earliest deadline among the other
// instances that are not stale yet: a stale instance left recorded by a
// rejoin is not "the next to go stale", and reporting its deadline, already
// past, would make the caller heartbeat again at once and abandon the peers
// the rejoin meant to wait for. Calls are serialized by the store's mutex,
// so concurrent callers abandon a stale instance once between them. It
// returns ports.ErrInvalidArgument for a nil instance id or a non-positive
// StaleThreshold.
func (s *Store) InstanceHeartbeat(ctx context.Context, params *ports.InstanceHeartbeatParams) (*ports.InstanceHeartbeatResult, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("recording heartbeat: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	now := s.now(params.Now)
	cutoff := now.Add(-params.StaleThreshold)
	inst := s.instances[params.InstanceID]
	wasLive := inst != nil && inst.LastHeartbeatAt.After(cutoff)
	if inst == nil {
		inst = &ports.Instance{ID: params.InstanceID, StartedAt: now}
		s.instances[params.InstanceID] = inst
		i, _ := slices.BinarySearchFunc(s.instanceIDs, params.InstanceID, compareUUID)
		s.instanceIDs = slices.Insert(s.instanceIDs, i, params.InstanceID)
	}
	inst.ServiceName = params.ServiceName
	inst.HostName = params.HostName
	inst.ProcessID = params.ProcessID
	inst.Metadata = maps.Clone(params.Metadata)
	inst.LastHeartbeatAt = now
	inst.Passive = params.Passive

	result := &ports.InstanceHeartbeatResult{Rejoined: !wasLive}
	for _, id := range s.instanceIDs { // in id order, so Abandoned needs no sort
		other := s.instances[id]
		switch {
		case id == params.InstanceID:
		case other.LastHeartbeatAt.Before(cutoff):
			if wasLive {
				result.Abandoned = append(result.Abandoned, id)
			}
		default:
			if staleAt := other.LastHeartbeatAt.Add(params.StaleThreshold); result.NextStaleAt.IsZero() || staleAt.Before(result.NextStaleAt) {
				result.NextStaleAt = staleAt
			}
		}
	}
	for _, id := range result.Abandoned {
		s.releaseInstance(id, now, true)
		s.deleteInstance(id)
	}
	return result, nil
}

// InstanceDeregister implements ports.WorkClaimer: it releases every lease
// and pin of the instance and deletes its row. The released rows gain no
// attempt: a graceful shutdown is no takeover from a dead instance. Unknown
// instances are a no-op.
func (s *Store) InstanceDeregister(ctx context.Context, params *ports.InstanceDeregisterParams) error {
	instanceID := params.InstanceID
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()

	s.releaseInstance(instanceID, s.now(time.Time{}), false)
	s.deleteInstance(instanceID)
	return nil
}

// deleteInstance deletes the row of an instance whose leases and pins are
// released.
func (s *Store) deleteInstance(id uuid.UUID) {
	if i, ok := slices.BinarySearchFunc(s.instanceIDs, id, compareUUID); ok {
		s.instanceIDs = slices.Delete(s.instanceIDs, i, i+1)
	}
	delete(s.instances, id)
}

// InstancesList implements ports.Admin: the recorded instances, ordered
// by id.
func (s *Store) InstancesList(ctx context.Context) ([]ports.Instance, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	out := make([]ports.Instance, 0, len(s.instanceIDs))
	for _, id := range s.instanceIDs {
		inst := *s.instances[id]
		inst.Metadata = maps.Clone(inst.Metadata)
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
// order of the oldest first pending row, per perspective, that the claim can
// lease), so a stream never starves behind newer ones, and only as long as
// the result stays within MaxStreams: a caller already draining MaxStreams
// streams leases no new stream, only new rows of the streams it drains.
// HasMore is true when candidate streams were left unselected or the result
// was cut at MaxStreams.
//
// The cost is that of the streams the caller holds and the rows it leases,
// plus O(log n) per stream for the claim index: it does not depend on the
// backlog of other streams. Streams pinned to a dead instance that was not
// yet abandoned are the exception: the claim looks at every claimable one of
// them until a heartbeat abandons the instance. Instances sharing a store
// should pass the same PartitionCount; a change re-buckets the unpinned
// claimable streams, as does a change in the number of live instances that
// are not passive.
//
// It returns ports.ErrInvalidArgument for a nil instance id or a
// non-positive MaxStreams, LeaseDuration or StaleThreshold, and
// ports.ErrInstanceNotAlive when the caller has no live heartbeat.
func (s *Store) WorkClaim(ctx context.Context, params *ports.WorkClaimParams) (*ports.WorkClaimResult, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("claiming work: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	now := s.now(params.Now)
	caller := params.InstanceID
	live, rank := s.liveAt(now, params.StaleThreshold, caller)
	if rank == -1 {
		return nil, fmt.Errorf("claiming work for instance %s: %w", caller, ports.ErrInstanceNotAlive)
	}
	partitions := uint32(s.partitionCount)
	if params.PartitionCount > 0 {
		partitions = uint32(params.PartitionCount)
	}
	// With only passive instances live, the orphans keep the buckets of one
	// instance until an instance that claims them is live again.
	s.claims.arrange(partitions, max(live.count, 1))
	s.wakeDue(now)
	expiry := now.Add(params.LeaseDuration)

	// Streams the caller can already drain take their new rows for free.
	// Other streams are selected only while the caller would still be told
	// to drain at most MaxStreams streams: leasing more would leave leases
	// ticking on streams nobody drains, and a takeover of them after a crash
	// would count attempts against events that never ran. A selected stream
	// is drainable once leased: its leased rows start some perspective's
	// pending rows.
	draining := s.draining[:0]
	for st := range s.held[caller] {
		if !drainable(st, caller, now) {
			continue
		}
		draining = append(draining, st)
		if s.claimable(st, caller, live, rank) {
			s.claimStream(st, caller, now, expiry)
		}
	}

	// Then the claimable streams the caller may take, oldest work first: its
	// own, the orphans of its rank and those of its rank pinned to dead
	// instances (a passive caller has no rank: only its own). The loop above
	// served every one the caller drains, so each stream selected here takes
	// capacity; the drainable check only guards that invariant.
	capacity := params.MaxStreams - len(draining)
	unselected := false
	var orphaned []orphanCandidate
	if rank >= 0 {
		orphaned = s.orphanedOfDead(caller, live, rank, now)
	}
	for {
		st := s.nextClaimable(caller, rank, orphaned)
		if st == nil {
			break
		}
		if len(orphaned) > 0 && st == orphaned[0].st {
			orphaned = orphaned[1:] // checked as of now by orphanedOfDead
		} else if key, ok, _ := st.claimState(now); !ok || key != st.readyKey {
			s.touch(st, now) // filed as of another Now: refile and look again
			continue
		}
		if !drainable(st, caller, now) {
			if capacity <= 0 {
				unselected = true
				break
			}
			capacity--
			draining = append(draining, st)
		}
		s.claimStream(st, caller, now, expiry)
	}

	// Smallest backlog first. Sorting copies of the keys, not the scattered
	// streams, keeps the comparisons in cache.
	order := s.drainOrder[:0]
	for _, st := range draining {
		order = append(order, drainKey{
			pending: st.pending,
			hi:      binary.BigEndian.Uint64(st.id[:8]),
			lo:      binary.BigEndian.Uint64(st.id[8:]),
			st:      st,
		})
	}
	slices.SortFunc(order, compareDrainKeys)
	n := min(len(order), params.MaxStreams)
	result := &ports.WorkClaimResult{StreamIDs: make([]uuid.UUID, n), HasMore: unselected || len(order) > n}
	for i, k := range order[:n] {
		result.StreamIDs[i] = k.st.id
	}
	clear(draining)
	s.draining, s.drainOrder = draining[:0], order[:0]
	return result, nil
}

// drainKey is the sort key of a stream in WorkClaim's result: its backlog,
// then its id as two big-endian words (byte order).
type drainKey struct {
	pending int
	hi, lo  uint64
	st      *stream
}

// compareDrainKeys orders smallest backlog first, then by stream id.
func compareDrainKeys(a, b drainKey) int {
	switch {
	case a.pending != b.pending:
		return cmp.Compare(a.pending, b.pending)
	case a.hi != b.hi:
		return cmp.Compare(a.hi, b.hi)
	default:
		return cmp.Compare(a.lo, b.lo)
	}
}

// drainable reports whether a fetch by caller at now would return work of
// st: some perspective's first pending row is under the caller's live lease.
// Held rows waiting behind a failed row scheduled for later (or behind an
// expired lease of their own) do not make the stream drainable, so such
// streams neither fill the result nor keep HasMore set.
func drainable(st *stream, caller uuid.UUID, now time.Time) bool {
	for _, p := range st.pairs {
		if r := p.first(); r.holder == caller && r.expiry.After(now) {
			return true
		}
	}
	return false
}

// claimable reports whether caller, of the given rank among the live
// instances that are not passive, may lease rows of st: st is pinned to the
// caller, or it is unpinned or pinned to a dead instance and its partition
// falls to the caller's rank (never to a passive caller's negative rank).
func (s *Store) claimable(st *stream, caller uuid.UUID, live liveness, rank int) bool {
	switch owner := st.pinnedTo; {
	case owner == caller:
		return true
	case owner != uuid.Nil && live.live(owner):
		return false // a live other owner's stream is never taken
	default:
		return s.claims.bucket(st) == rank
	}
}

// orphanCandidate is a claimable stream pinned to a dead instance, with its
// claim key as of the current claim.
type orphanCandidate struct {
	st  *stream
	key uint64
}

// orphanedOfDead returns the claimable streams of the caller's rank that are
// pinned to dead instances other than the caller, oldest work first. Dead
// instances lose their pins when a heartbeat abandons them, so this is
// usually empty.
func (s *Store) orphanedOfDead(caller uuid.UUID, live liveness, rank int, now time.Time) []orphanCandidate {
	var out []orphanCandidate
	for owner, q := range s.claims.owned {
		if owner == caller || live.live(owner) {
			continue
		}
		for _, st := range q.streams {
			if s.claims.bucket(st) != rank {
				continue
			}
			if key, ok, _ := st.claimState(now); ok {
				out = append(out, orphanCandidate{st: st, key: key})
			}
		}
	}
	slices.SortFunc(out, func(a, b orphanCandidate) int { return cmp.Compare(a.key, b.key) })
	return out
}

// nextClaimable returns the claimable stream with the oldest work among the
// caller's own ready queue, its rank's orphan queue (none for a passive
// caller, whose rank is negative) and orphaned, nil when all are empty. It
// does not remove it: claiming it or refiling it does.
func (s *Store) nextClaimable(caller uuid.UUID, rank int, orphaned []orphanCandidate) *stream {
	best := s.claims.owned[caller].peek()
	if rank >= 0 {
		if st := s.claims.orphans[rank].peek(); st != nil && (best == nil || st.readyKey < best.readyKey) {
			best = st
		}
	}
	if len(orphaned) > 0 && (best == nil || orphaned[0].key < best.readyKey) {
		best = orphaned[0].st
	}
	return best
}

// claimStream leases to caller, until expiry, the rows of st a claim may
// take: per perspective, in version order, every row that is unleased or
// whose lease expired, stopping at the first row scheduled in the future or
// under another holder's live lease (the ordering guard). Rows under the
// caller's own live lease are passed over. A row taken from another
// instance's expired lease gains an attempt (a takeover from a dead
// instance); an unleased row, or the caller's own expired one, does not.
// When it leases a row it pins st to the caller and refiles it in the claim
// index.
//
// A perspective whose rows are all under live leases is skipped without a
// walk (see pair.leaseFloor); a walk that finds every row under the caller's
// live lease resets the floor to the earliest expiry.
func (s *Store) claimStream(st *stream, caller uuid.UUID, now, expiry time.Time) {
	leased := false
	for _, p := range st.pairs {
		if p.unleased == 0 && p.leaseFloor.After(now) {
			continue
		}
		complete := true
		var floor time.Time
	rows:
		for _, r := range p.pending() {
			switch {
			case r.scheduled.After(now):
				complete = false
				break rows
			case r.holder != uuid.Nil && r.expiry.After(now):
				if r.holder != caller {
					complete = false
					break rows
				}
			default:
				if r.holder != uuid.Nil && r.holder != caller {
					r.attempts++
				}
				s.take(st, p, r, caller, expiry)
				leased = true
			}
			if floor.IsZero() || r.expiry.Before(floor) {
				floor = r.expiry
			}
		}
		if complete && !floor.IsZero() {
			p.leaseFloor = floor // every row of p is the caller's, leased until floor or later
		}
	}
	if leased {
		s.pin(st, caller)
		s.touch(st, now)
	}
}

// WorkRenewLeases implements ports.WorkClaimer: it extends to Now +
// LeaseDuration the leases of the listed rows that are pending and held by
// the caller, and returns how many it renewed. A row whose lease expired but
// that nobody took over is still held by the caller and is renewed. Now +
// LeaseDuration may come before the current expiry: the lease is then
// shortened, and the stream is refiled in the claim index.
func (s *Store) WorkRenewLeases(ctx context.Context, params *ports.WorkRenewLeasesParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, fmt.Errorf("renewing leases: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()

	if params.InstanceID == uuid.Nil {
		return 0, nil // holds nothing
	}
	now := s.now(params.Now)
	expiry := now.Add(params.LeaseDuration)
	renewed := 0
	for _, id := range uniqueSorted(params.WorkIDs) {
		r := s.work[id]
		if r == nil || r.holder != params.InstanceID {
			continue
		}
		st := s.streams[r.streamID]
		p := st.pair(r.perspective)
		shortened := expiry.Before(r.expiry)
		extend(p, r, expiry)
		renewed++
		if shortened && r == p.first() {
			s.touch(st, now) // the first row may unblock sooner than its timer says
		}
	}
	return renewed, nil
}
