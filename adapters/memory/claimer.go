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
// stream leases are released, each row handed out under them gains an
// attempt, and their rows are deleted. A caller that was not live (new, or
// back from an outage) only re-registers and reports Rejoined. Abandoned ids
// are returned in id order. NextStaleAt is the earliest deadline among the
// other instances that are not stale yet: a stale instance left recorded by
// a rejoin is not "the next to go stale", and reporting its deadline,
// already past, would make the caller heartbeat again at once and abandon
// the peers the rejoin meant to wait for. Live counts the caller and the
// others whose heartbeat is after the cutoff. Calls are serialized by the
// store's mutex, so concurrent callers abandon a stale instance once
// between them. It returns ports.ErrInvalidArgument for a nil instance id
// or a non-positive StaleThreshold.
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

	result := &ports.InstanceHeartbeatResult{Rejoined: !wasLive, Live: 1}
	for _, id := range s.instanceIDs { // in id order, so Abandoned needs no sort
		other := s.instances[id]
		switch {
		case id == params.InstanceID:
		case other.LastHeartbeatAt.Before(cutoff):
			if wasLive {
				result.Abandoned = append(result.Abandoned, id)
			}
		default:
			if other.LastHeartbeatAt.After(cutoff) {
				result.Live++
			}
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

// InstanceDeregister implements ports.WorkClaimer: it releases every stream
// lease of the instance and deletes its row. The rows handed out under them
// gain no attempt: a graceful shutdown is no takeover from a dead instance.
// Unknown instances are a no-op.
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

// deleteInstance deletes the row of an instance whose leases are released.
func (s *Store) deleteInstance(id uuid.UUID) {
	if i, ok := slices.BinarySearchFunc(s.instanceIDs, id, compareUUID); ok {
		s.instanceIDs = slices.Delete(s.instanceIDs, i, i+1)
	}
	delete(s.instances, id)
}

// InstancesList implements ports.Admin: the recorded instances, ordered
// by id, each with the count of streams its leases name, read from the
// index of leases by instance.
func (s *Store) InstancesList(ctx context.Context) ([]ports.Instance, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	out := make([]ports.Instance, 0, len(s.instanceIDs))
	for _, id := range s.instanceIDs {
		inst := *s.instances[id]
		inst.Metadata = maps.Clone(inst.Metadata)
		inst.LeasedStreams = len(s.leases[id])
		out = append(out, inst)
	}
	return out, nil
}

// WorkClaim implements ports.WorkClaimer.
//
// The result lists the streams the caller can drain now: those under its
// live lease of which some perspective's first pending row is not waiting
// for a retry time (what EventsFetchPending would return rows of). A stream
// whose pairs all wait for a retry time is left out until the earliest one.
//
// Candidate streams are taken oldest pending work first (the insertion
// order of the oldest first pending row, per perspective, that is not
// waiting for a retry), so a stream never starves behind newer ones, and
// only as long as the result stays within MaxStreams: a caller already
// draining MaxStreams streams leases no new stream. HasMore is true when
// candidate streams were left out or the result was cut at MaxStreams. A
// stream under the caller's live lease is not written.
//
// The cost is that of the streams the caller holds and the streams it
// leases, plus O(log n) per stream for the claim index: it does not depend
// on the backlog of other streams. Streams leased to an instance that is no
// longer live, and not yet abandoned, are the exception: while their leases
// have not expired the claim looks at every one of them until a heartbeat
// abandons the instance. Instances sharing a store should pass the same
// PartitionCount; a change re-buckets the claimable streams, as does a
// change in the number of live instances that are not passive.
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
	// With only passive instances live, the streams nobody holds keep the
	// buckets of one instance until an instance that claims them is live
	// again.
	s.claims.arrange(partitions, max(live.count, 1))
	s.wakeDue(now)
	expiry := now.Add(params.LeaseDuration)

	// The streams the caller drains already, under its live lease, take no
	// capacity and are not written. Its drainable streams whose lease
	// expired are its own candidates, whatever their bucket: nobody took
	// them.
	draining := s.draining[:0]
	var own []candidate
	for st := range s.leases[caller] {
		key, ok, _ := st.drainState(now)
		switch {
		case !ok:
		case st.expiry.After(now):
			draining = append(draining, st)
		default:
			own = append(own, candidate{st: st, key: key})
		}
	}
	slices.SortFunc(own, compareCandidates)

	// Then the candidates, oldest work first: its own, the claimable
	// streams of its rank's bucket, and those of its rank leased to
	// instances that are no longer live (a passive caller has no rank: only
	// its own). Each takes capacity: none is under the caller's live lease.
	// New streams are leased only while the caller would still be told to
	// drain at most MaxStreams streams: leasing more would leave leases
	// ticking on streams nobody drains.
	capacity := params.MaxStreams - len(draining)
	unselected := false
	var bucket *readyQueue
	var ofDead []candidate
	if rank >= 0 {
		bucket = s.claims.buckets[rank]
		ofDead = s.leasedToDead(caller, live, rank, now)
	}
	for {
		st, from := nextCandidate(own, bucket, ofDead)
		switch from {
		case fromNone:
		case fromOwn:
			own = own[1:]
			if st.holder != caller || st.expiry.After(now) {
				continue // taken from the bucket by this claim already
			}
		case fromDead:
			ofDead = ofDead[1:] // checked as of now by leasedToDead
		case fromBucket:
			if key, ok, _ := st.claimState(now); !ok || key != st.readyKey {
				s.touch(st, now) // filed as of another Now: refile and look again
				continue
			}
		}
		if st == nil {
			break
		}
		if capacity <= 0 {
			unselected = true
			break
		}
		capacity--
		draining = append(draining, st)
		s.leaseTo(st, caller, expiry, live)
		s.touch(st, now)
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

// candidate is a stream a claim may take that is not in a ready queue, with
// its claim key as of the claim.
type candidate struct {
	st  *stream
	key uint64
}

func compareCandidates(a, b candidate) int { return cmp.Compare(a.key, b.key) }

// leasedToDead returns the drainable streams of the caller's rank whose
// lease has not expired but whose holder, another instance, is no longer
// live, oldest work first. Their leases are not live, so the partition rule
// applies; the ones that expired are in the ready queues already. A
// heartbeat releases them when it abandons their holder, so this is usually
// empty.
func (s *Store) leasedToDead(caller uuid.UUID, live liveness, rank int, now time.Time) []candidate {
	var out []candidate
	for holder, leased := range s.leases {
		if holder == caller || live.live(holder) {
			continue
		}
		for st := range leased {
			if !st.expiry.After(now) || s.claims.bucket(st) != rank {
				continue
			}
			if key, ok, _ := st.drainState(now); ok {
				out = append(out, candidate{st: st, key: key})
			}
		}
	}
	slices.SortFunc(out, compareCandidates)
	return out
}

// Sources of nextCandidate.
const (
	fromNone = iota
	fromOwn
	fromBucket
	fromDead
)

// nextCandidate returns the stream with the oldest work among the caller's
// own expired streams, its bucket (nil for a passive caller) and the
// streams leased to dead instances, and which of them it came from. It
// removes nothing: the caller does.
func nextCandidate(own []candidate, bucket *readyQueue, ofDead []candidate) (*stream, int) {
	var (
		best *stream
		key  uint64
		from = fromNone
	)
	if len(own) > 0 {
		best, key, from = own[0].st, own[0].key, fromOwn
	}
	if st := bucket.peek(); st != nil && (best == nil || st.readyKey < key) {
		best, key, from = st, st.readyKey, fromBucket
	}
	if len(ofDead) > 0 && (best == nil || ofDead[0].key < key) {
		best, from = ofDead[0].st, fromDead
	}
	return best, from
}

// WorkRenewLeases implements ports.WorkClaimer: it extends to Now +
// LeaseDuration the leases of the listed streams that the caller holds, and
// returns how many it renewed. A lease that expired but that nobody took is
// still the caller's and is renewed. Now + LeaseDuration may come before
// the current expiry: the lease is then shortened, and the stream is
// refiled in the claim index either way.
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
	for _, id := range uniqueSorted(params.StreamIDs) {
		if st := s.streams[id]; st != nil && st.holder == params.InstanceID {
			st.expiry = expiry
			s.touch(st, now)
			renewed++
		}
	}
	return renewed, nil
}
