package memory

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// TestClaimIndexMatchesFullScan drives two stores with the same random
// operations from several instances: one claims through the claim index
// (WorkClaim), the other through referenceClaim, a full scan of every stream
// that is the claim contract written out directly. Every claim must return
// the same result and, after every operation, both stores must hold the same
// rows, attempts, stream leases and handed-out marks. Operations include
// lease expiry, stale instances, abandonment, deregistration, failures with
// retry times, completions and failures by instances that do not hold the
// stream, dead letters, out-of-order versions, a changing partition count
// and Now moving backwards, so the index's lazy refiling is exercised on
// every path.
func TestClaimIndexMatchesFullScan(t *testing.T) {
	t.Parallel()

	for seed := range uint64(16) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			tw := newTwin(t, seed)
			for step := range 1500 {
				op := tw.step()
				tw.requireSameState(fmt.Sprintf("step %d (%s)", step, op))
				tw.fast.requireIndexConsistent(t, tw.now)
			}
		})
	}
}

// twin is a pair of stores receiving identical operations.
type twin struct {
	t         *testing.T
	rng       *rand.Rand
	fast, ref *Store
	now       time.Time
	instances []uuid.UUID // in id order
	streams   []uuid.UUID
}

func newTwin(t *testing.T, seed uint64) *twin {
	t.Helper()
	tw := &twin{
		t:    t,
		rng:  rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
		fast: New(Options{Clock: clocktest.NewFake(), PartitionCount: 16}),
		ref:  New(Options{Clock: clocktest.NewFake(), PartitionCount: 16}),
		now:  clocktest.Start,
	}
	for range 3 {
		tw.instances = append(tw.instances, tw.newID())
	}
	slices.SortFunc(tw.instances, compareUUID)
	for range 10 {
		tw.streams = append(tw.streams, tw.newID())
	}
	subs := []ports.Subscription{
		{EventType: "A", Perspective: "p1"},
		{EventType: "A", Perspective: "p2"},
		{EventType: "B", Perspective: "p2"},
	}
	for _, s := range tw.stores() {
		require.NoError(t, s.SubscriptionsRegister(t.Context(), &ports.SubscriptionsRegisterParams{Subscriptions: subs}))
	}
	return tw
}

// newID returns a random id drawn from the seeded generator, so a seed
// replays the same scenario.
func (tw *twin) newID() uuid.UUID {
	var id uuid.UUID
	binary.BigEndian.PutUint64(id[:8], tw.rng.Uint64())
	binary.BigEndian.PutUint64(id[8:], tw.rng.Uint64())
	return id
}

func (tw *twin) stores() []*Store { return []*Store{tw.fast, tw.ref} }

func (tw *twin) pick(n int) int { return tw.rng.IntN(n) }

func (tw *twin) instance() uuid.UUID { return tw.instances[tw.pick(len(tw.instances))] }

func (tw *twin) duration(maxSeconds int) time.Duration {
	return time.Duration(1+tw.pick(maxSeconds)) * time.Second
}

// step applies one random operation to both stores and names it.
func (tw *twin) step() string {
	switch n := tw.pick(100); {
	case n < 22:
		return tw.append()
	case n < 34:
		return tw.heartbeat()
	case n < 54:
		return tw.claim()
	case n < 66:
		return tw.fetch()
	case n < 76:
		return tw.complete()
	case n < 80:
		return tw.fail()
	case n < 82:
		return tw.failEvent()
	case n < 85:
		return tw.renew()
	case n < 88:
		return tw.deadLetter()
	case n < 89:
		return tw.requeue()
	case n < 90:
		return tw.recoverDeadLetters()
	case n < 91:
		return tw.deregister()
	case n < 93:
		tw.now = tw.now.Add(-tw.duration(5))
		return "back"
	default:
		tw.now = tw.now.Add(tw.duration(20))
		return "advance"
	}
}

func (tw *twin) append() string {
	id := tw.streams[tw.pick(len(tw.streams))]
	var events []ports.NewEvent
	for range 1 + tw.pick(3) {
		events = append(events, ports.NewEvent{ID: tw.newID(), Type: []string{"A", "B"}[tw.pick(2)], Data: []byte(`{}`)})
	}
	switch st := tw.fast.streams[id]; {
	case tw.pick(8) == 0:
		events[0].Version = st.head() + 2 // leaves a gap
	case st != nil && tw.pick(4) == 0:
		for v := int64(1); v < st.head(); v++ {
			if _, ok := st.eventIndex(v); !ok {
				events = events[:1]
				events[0].Version = v // fills a gap: a row below pending ones
				break
			}
		}
	}
	results := tw.both(func(s *Store) (any, error) {
		res, err := s.EventsAppend(tw.t.Context(), &ports.EventsAppendParams{StreamID: id, Events: events, Now: tw.now})
		if res == nil {
			return nil, err
		}
		return res.WorkRows, err
	})
	require.Equal(tw.t, results[0], results[1], "append")
	return "append"
}

func (tw *twin) heartbeat() string {
	id := tw.instance()
	for _, s := range tw.stores() {
		_, err := s.InstanceHeartbeat(tw.t.Context(), &ports.InstanceHeartbeatParams{InstanceID: id, StaleThreshold: 30 * time.Second, Now: tw.now})
		require.NoError(tw.t, err)
	}
	return "heartbeat"
}

func (tw *twin) deregister() string {
	id := tw.instance()
	for _, s := range tw.stores() {
		require.NoError(tw.t, s.InstanceDeregister(tw.t.Context(), &ports.InstanceDeregisterParams{InstanceID: id}))
	}
	return "deregister"
}

func (tw *twin) claim() string {
	params := ports.WorkClaimParams{
		InstanceID:     tw.instance(),
		MaxStreams:     1 + tw.pick(4),
		LeaseDuration:  tw.duration(60),
		StaleThreshold: 30 * time.Second,
		Now:            tw.now,
	}
	if tw.pick(10) == 0 {
		params.PartitionCount = 7 // re-buckets the orphans, then back
	}
	fast, fastErr := tw.fast.WorkClaim(tw.t.Context(), &params)
	ref, refErr := tw.ref.referenceClaim(&params)
	require.Equal(tw.t, refErr, fastErr, "claim error")
	if refErr == nil {
		require.Equal(tw.t, ref.StreamIDs, fast.StreamIDs, "claimed streams")
		require.Equal(tw.t, ref.HasMore, fast.HasMore, "HasMore")
	}
	return "claim"
}

func (tw *twin) fetch() string {
	params := ports.EventsFetchPendingParams{
		InstanceID:     tw.instance(),
		LeaseDuration:  tw.duration(60),
		StaleThreshold: 30 * time.Second,
		MaxRows:        tw.pick(6),
		Now:            tw.now,
	}
	for range 1 + tw.pick(4) {
		params.StreamIDs = append(params.StreamIDs, tw.streams[tw.pick(len(tw.streams))])
	}
	results := tw.both(func(s *Store) (any, error) {
		res, err := s.EventsFetchPending(tw.t.Context(), &params)
		if err != nil {
			return nil, err
		}
		var got []string
		for _, w := range res.Work {
			got = append(got, fmt.Sprintf("%s/%s/%d#%d", w.StreamID, w.Perspective, w.EventVersion, w.Attempts))
		}
		for _, e := range res.Events {
			got = append(got, e.ID.String())
		}
		return got, nil
	})
	require.Equal(tw.t, results[0], results[1], "fetch")
	return "fetch"
}

// rowKey names a work row the same way in both stores, whose work ids differ.
type rowKey struct {
	stream      uuid.UUID
	perspective string
	version     int64
}

// heldRuns returns, per (stream, perspective), the pending rows of the fast
// store's streams leased to instance, in version order.
func (tw *twin) heldRuns(instance uuid.UUID) [][]rowKey {
	var runs [][]rowKey
	for _, id := range tw.streams {
		st := tw.fast.streams[id]
		if st == nil || st.holder != instance {
			continue
		}
		for _, p := range st.pairs {
			var run []rowKey
			for _, r := range p.pending() {
				run = append(run, rowKey{id, p.perspective, r.version})
			}
			runs = append(runs, run)
		}
	}
	return runs
}

// reporter returns the instance that reports the completion or failure of
// rows held by instance: usually instance, sometimes another, whose report
// the lease fences.
func (tw *twin) reporter(instance uuid.UUID) uuid.UUID {
	if tw.pick(5) == 0 {
		return tw.instance()
	}
	return instance
}

// row returns the pending row of s named by k, nil when there is none.
func (s *Store) row(k rowKey) *workRow {
	if st := s.streams[k.stream]; st != nil {
		if p := st.pair(k.perspective); p != nil {
			if i, ok := p.rowIndex(k.version); ok {
				return p.pending()[i]
			}
		}
	}
	return nil
}

// workIDs translates keys to s's work ids (a fresh id for a missing row).
func (s *Store) workIDs(keys []rowKey) []uuid.UUID {
	out := make([]uuid.UUID, len(keys))
	for i, k := range keys {
		if r := s.row(k); r != nil {
			out[i] = r.id
		} else {
			out[i] = uuid.New()
		}
	}
	return out
}

func (tw *twin) complete() string {
	instance := tw.instance()
	runs := tw.heldRuns(instance)
	if len(runs) == 0 {
		return "complete (nothing held)"
	}
	run := runs[tw.pick(len(runs))]
	run = run[:1+tw.pick(len(run))]
	last := run[len(run)-1]
	debug := tw.pick(10) == 0
	reporter := tw.reporter(instance)
	results := tw.both(func(s *Store) (any, error) {
		res, err := s.WorkComplete(tw.t.Context(), &ports.WorkCompleteParams{
			InstanceID: reporter,
			Completions: []ports.Completion{{
				StreamID: last.stream, Perspective: last.perspective,
				LastEventID: s.eventID(last), LastVersion: last.version, WorkIDs: s.workIDs(run),
			}},
			DebugMode: debug,
			Now:       tw.now,
		})
		return res, err
	})
	require.Equal(tw.t, results[0], results[1], "complete")
	return "complete"
}

// eventID returns the id of the event k refers to.
func (s *Store) eventID(k rowKey) uuid.UUID {
	st := s.streams[k.stream]
	i, _ := st.eventIndex(k.version)
	return st.events[i].ID
}

func (tw *twin) fail() string {
	instance := tw.instance()
	runs := tw.heldRuns(instance)
	if len(runs) == 0 {
		return "fail (nothing held)"
	}
	run := runs[tw.pick(len(runs))]
	failed := tw.pick(len(run))
	var retryAt time.Time
	if tw.pick(2) == 0 {
		retryAt = tw.now.Add(tw.duration(40))
	}
	reporter := tw.reporter(instance)
	for _, s := range tw.stores() {
		f := ports.Failure{
			StreamID: run[0].stream, Perspective: run[0].perspective,
			AppliedWorkIDs: s.workIDs(run[:failed]), FailedWorkIDs: s.workIDs(run[failed : failed+1]),
			Error: "boom", RetryAt: retryAt,
		}
		if failed > 0 {
			f.LastEventID, f.LastVersion = s.eventID(run[failed-1]), run[failed-1].version
		}
		require.NoError(tw.t, s.WorkFail(tw.t.Context(), &ports.WorkFailParams{InstanceID: reporter, Failures: []ports.Failure{f}, Now: tw.now}))
	}
	return "fail"
}

// failEvent charges a replay failure to a random stored event: it stores a
// scheduled row, possibly below pending ones, or schedules the pending row of
// the event, whoever holds the stream.
func (tw *twin) failEvent() string {
	id := tw.streams[tw.pick(len(tw.streams))]
	st := tw.fast.streams[id]
	if st == nil || len(st.events) == 0 {
		return "fail event (no event)"
	}
	e := st.events[tw.pick(len(st.events))]
	f := ports.Failure{
		StreamID: id, Perspective: []string{"p1", "p2"}[tw.pick(2)],
		FailedEventID: e.ID, FailedEventVersion: e.Version,
		Error: "replay failed", RetryAt: tw.now.Add(tw.duration(40)),
	}
	instance := tw.instance()
	for _, s := range tw.stores() {
		require.NoError(tw.t, s.WorkFail(tw.t.Context(), &ports.WorkFailParams{InstanceID: instance, Failures: []ports.Failure{f}, Now: tw.now}))
	}
	return "fail event"
}

func (tw *twin) renew() string {
	instance := tw.instance()
	var streams []uuid.UUID
	for _, id := range tw.streams {
		if st := tw.fast.streams[id]; st != nil && (st.holder == instance || tw.pick(8) == 0) && tw.pick(2) == 0 {
			streams = append(streams, id)
		}
	}
	lease := tw.duration(60)
	results := tw.both(func(s *Store) (any, error) {
		return s.WorkRenewLeases(tw.t.Context(), &ports.WorkRenewLeasesParams{InstanceID: instance, StreamIDs: streams, LeaseDuration: lease, Now: tw.now})
	})
	require.Equal(tw.t, results[0], results[1], "renew")
	return "renew"
}

func (tw *twin) deadLetter() string {
	var keys []rowKey
	for _, id := range tw.streams {
		if st := tw.fast.streams[id]; st != nil {
			for _, p := range st.pairs {
				for _, r := range p.pending() {
					keys = append(keys, rowKey{id, p.perspective, r.version})
				}
			}
		}
	}
	if len(keys) == 0 {
		return "dead letter (nothing pending)"
	}
	k := keys[tw.pick(len(keys))]
	// Mostly the holder's move; now and then another instance's, which
	// the fence refuses unless that instance holds the stream.
	instance := tw.instance()
	if holder := tw.fast.streams[k.stream].holder; holder != uuid.Nil && tw.pick(4) != 0 {
		instance = holder
	}
	results := tw.both(func(s *Store) (any, error) {
		res, err := s.DeadLetterMove(tw.t.Context(), &ports.DeadLetterMoveParams{WorkID: s.workIDs([]rowKey{k})[0], InstanceID: instance, Now: tw.now})
		if errors.Is(err, ports.ErrLeaseLost) {
			return false, nil
		}
		if err != nil {
			return nil, err
		}
		return res.Moved, nil
	})
	require.Equal(tw.t, results[0], results[1], "dead letter")
	if moved, _ := results[0].(bool); !moved {
		return "dead letter (refused: not the holder)"
	}
	return "dead letter"
}

func (tw *twin) requeue() string {
	requeueable := func(dl *deadLetter) bool {
		return dl.Status == ports.DeadLetterDead || dl.Status == ports.DeadLetterIgnored
	}
	var keys []rowKey
	for _, dl := range tw.fast.deadLetters {
		if requeueable(dl) {
			keys = append(keys, rowKey{dl.StreamID, dl.Perspective, dl.EventVersion})
		}
	}
	if len(keys) == 0 {
		return "requeue (no dead letter)"
	}
	slices.SortFunc(keys, func(a, b rowKey) int {
		return cmp.Or(compareUUID(a.stream, b.stream), cmp.Compare(a.perspective, b.perspective), cmp.Compare(a.version, b.version))
	})
	k := keys[tw.pick(len(keys))]
	for _, s := range tw.stores() {
		var id uuid.UUID
		for _, dl := range s.deadLetters {
			if requeueable(dl) && (rowKey{dl.StreamID, dl.Perspective, dl.EventVersion}) == k {
				id = dl.ID
			}
		}
		require.NoError(tw.t, s.DeadLetterRequeue(tw.t.Context(), &ports.DeadLetterRequeueParams{ID: id, Now: tw.now}))
	}
	return "requeue"
}

func (tw *twin) recoverDeadLetters() string {
	params := ports.DeadLettersRecoverParams{Generation: []string{"g1", "g2"}[tw.pick(2)], Limit: 1 + tw.pick(3), Now: tw.now}
	results := tw.both(func(s *Store) (any, error) {
		dls, err := s.DeadLettersRecover(tw.t.Context(), &params)
		var keys []rowKey
		for _, dl := range dls {
			keys = append(keys, rowKey{dl.StreamID, dl.Perspective, dl.EventVersion})
		}
		return keys, err
	})
	require.Equal(tw.t, results[0], results[1], "recover")
	return "recover"
}

// both runs call on each store and returns the results, failing on an error
// that only one of them returned.
func (tw *twin) both(call func(s *Store) (any, error)) [2]any {
	var out [2]any
	var errs [2]error
	for i, s := range tw.stores() {
		out[i], errs[i] = call(s)
	}
	require.Equal(tw.t, errs[0] == nil, errs[1] == nil, "errors %v and %v", errs[0], errs[1])
	return out
}

// requireSameState fails unless both stores hold the same rows, attempts,
// schedules, late and replay flags, stream leases and marks.
func (tw *twin) requireSameState(when string) {
	tw.t.Helper()
	want, got := tw.ref.snapshot(tw.streams, tw.instances), tw.fast.snapshot(tw.streams, tw.instances)
	if !slices.Equal(want, got) {
		require.Equal(tw.t, want, got, when)
	}
}

// rowState is one line of a snapshot: a stream's lease and backlog (version
// 0), one of its marks (version 0, perspective set), one of its pending
// rows, or an instance's count of leased streams (stream id nil).
type rowState struct {
	stream, holder   uuid.UUID
	perspective, err string
	version, mark    int64
	expiry, sched    int64 // Unix nanoseconds
	attempts         int
	pending, leases  int
	late, replay     bool
}

// snapshot returns the rows, leases and marks of the given streams and the
// lease counts of the given instances.
func (s *Store) snapshot(streams, instances []uuid.UUID) []rowState {
	var out []rowState
	for _, id := range streams {
		st := s.streams[id]
		if st == nil {
			continue
		}
		out = append(out, rowState{stream: id, holder: st.holder, expiry: st.expiry.UnixNano(), pending: st.pending})
		marks := slices.Clone(st.marks)
		slices.SortFunc(marks, func(a, b handedOut) int { return cmp.Compare(a.perspective, b.perspective) })
		for _, m := range marks {
			out = append(out, rowState{stream: id, perspective: m.perspective, mark: m.version})
		}
		for _, p := range st.pairs {
			for _, r := range p.pending() {
				out = append(out, rowState{
					stream: id, perspective: p.perspective, err: r.err, version: r.version,
					sched: r.scheduled.UnixNano(), attempts: r.attempts, late: r.late, replay: r.replay,
				})
			}
		}
	}
	for _, id := range instances {
		out = append(out, rowState{holder: id, leases: len(s.leases[id])})
	}
	return out
}

// requireIndexConsistent checks the claim index's bookkeeping as of now:
// every queued stream knows its queue and position, sits in the queue of its
// bucket, no queue breaks the heap order, every stream claimable at now is
// queued or has a due timer, and the leases index matches the streams'
// holders.
func (s *Store) requireIndexConsistent(t *testing.T, now time.Time) {
	t.Helper()
	c := &s.claims
	for _, q := range c.buckets {
		for i, st := range q.streams {
			switch {
			case st.ready != q || st.readyIdx != i:
				t.Fatalf("stream %s at %d of a queue records %p at %d", st.id, i, st.ready, st.readyIdx)
			case c.buckets[c.bucket(st)] != q:
				t.Fatalf("stream %s is filed under the wrong bucket", st.id)
			case st.pending == 0:
				t.Fatalf("stream %s without pending rows is queued", st.id)
			case i > 0 && q.streams[(i-1)/2].readyKey > st.readyKey:
				t.Fatalf("ready queue out of heap order at %d", i)
			}
		}
	}
	for i, st := range c.timers {
		if st.timerIdx != i || i > 0 && st.wake.Before(c.timers[(i-1)/2].wake) {
			t.Fatalf("timer queue broken at %d", i)
		}
	}
	for _, st := range s.streams {
		if st.ready != nil && st.ready.streams[st.readyIdx] != st || st.timerIdx >= 0 && c.timers[st.timerIdx] != st {
			t.Fatalf("stream %s records a position it does not hold", st.id)
		}
		if _, ok, _ := st.claimState(now); ok && st.ready == nil && (st.timerIdx < 0 || st.wake.After(now)) {
			t.Fatalf("claimable stream %s is neither queued nor due", st.id)
		}
		if _, ok := s.leases[st.holder][st]; st.holder != uuid.Nil && !ok || st.holder == uuid.Nil && (!st.expiry.IsZero() || len(st.marks) > 0) {
			t.Fatalf("stream %s: holder %s, expiry %s, %d marks, indexed %t", st.id, st.holder, st.expiry, len(st.marks), ok)
		}
	}
	for holder, leased := range s.leases {
		for st := range leased {
			if st.holder != holder {
				t.Fatalf("stream %s is indexed under %s but leased to %s", st.id, holder, st.holder)
			}
		}
	}
}

// referenceClaim is WorkClaim as a full scan: it looks at every stream with
// pending rows, collects the candidates the contract describes, orders them
// by the oldest drainable first row and selects them as WorkClaim documents.
// It shares no claim index code, only the row and lease helpers.
func (s *Store) referenceClaim(params *ports.WorkClaimParams) (*ports.WorkClaimResult, error) {
	s.mu.Lock()
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

	// A stream is drainable when some perspective's first pending row is
	// not scheduled after now; its key is the oldest such row.
	drainable := func(st *stream) (uint64, bool) {
		key, ok := uint64(0), false
		for _, p := range st.pairs {
			if r := p.first(); !r.scheduled.After(now) && (!ok || r.seq < key) {
				key, ok = r.seq, true
			}
		}
		return key, ok
	}
	type candidate struct {
		st  *stream
		key uint64
	}
	var draining []*stream
	var candidates []candidate
	for _, st := range s.streams {
		key, ok := drainable(st)
		switch {
		case !ok:
		case st.holder == caller && st.expiry.After(now):
			draining = append(draining, st) // under the caller's live lease
		case st.holder == caller:
			candidates = append(candidates, candidate{st, key}) // nobody took it
		case st.holder != uuid.Nil && st.expiry.After(now) && live.live(st.holder):
			// under another instance's live lease
		case rank >= 0 && int(st.hash%partitions)%live.count == rank:
			candidates = append(candidates, candidate{st, key})
		}
	}
	slices.SortFunc(candidates, func(a, b candidate) int { return cmp.Compare(a.key, b.key) })

	capacity := params.MaxStreams - len(draining)
	unselected := false
	expiry := now.Add(params.LeaseDuration)
	for _, c := range candidates {
		if capacity <= 0 {
			unselected = true
			break
		}
		capacity--
		draining = append(draining, c.st)
		if c.st.holder != caller {
			if c.st.holder != uuid.Nil && !live.live(c.st.holder) {
				c.st.chargeHandedOut() // taken from a dead holder
			}
			s.unlease(c.st, false)
			if s.leases[caller] == nil {
				s.leases[caller] = map[*stream]struct{}{}
			}
			s.leases[caller][c.st] = struct{}{}
			c.st.holder = caller
		}
		c.st.expiry = expiry
	}
	slices.SortFunc(draining, func(a, b *stream) int {
		return cmp.Or(cmp.Compare(a.pending, b.pending), compareUUID(a.id, b.id))
	})
	result := &ports.WorkClaimResult{HasMore: unselected || len(draining) > params.MaxStreams}
	result.StreamIDs = []uuid.UUID{}
	for _, st := range draining[:min(len(draining), params.MaxStreams)] {
		result.StreamIDs = append(result.StreamIDs, st.id)
	}
	return result, nil
}
