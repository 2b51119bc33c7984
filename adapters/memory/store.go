// Package memory is an in-process Vantage backend. It is a real adapter, not
// a mock: it implements every port of package ports with the documented
// contracts, passes the conformance suite, and serves as the backend for
// tests, runnable examples and single-process embedded use.
//
// # State and copying
//
// Everything lives in maps guarded by one mutex, so each port call is atomic,
// like a database transaction. Values are copied in and out: a caller that
// modifies a slice or map after passing it in, or after getting it back, never
// changes stored state.
//
// # Time
//
// Every operation that depends on time takes it from the Now field of its
// parameters, or from the injected Clock when Now is zero. The store never
// calls time.Now itself.
//
// # Indexes
//
// Pending work rows are indexed by stream and by (stream, perspective) in
// version order, held rows by instance, and stream pins by instance, so claims,
// fetches, completions and abandonment touch only the streams and rows they
// concern, never the whole store. Events are indexed by type, both by stream
// and by creation, for rebuild paging and lifecycle reconciliation.
package memory

import (
	"bytes"
	"cmp"
	"context"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// PartitionCountDefault is the number of stream partitions used to distribute
// orphaned streams over live instances when neither Options.PartitionCount nor
// WorkClaimParams.PartitionCount is set.
const PartitionCountDefault = 10000

// Options configure a Store. The zero value is valid.
type Options struct {
	// Clock supplies the time whenever a params Now is zero. Defaults to
	// ports.SystemClock{}.
	Clock ports.Clock
	// PartitionCount is the number of partitions a stream id hashes into for
	// orphan distribution, used when WorkClaimParams.PartitionCount is not
	// positive. Values below 1 select PartitionCountDefault.
	PartitionCount int
}

// Store is the in-memory backend. It implements every port of package ports;
// Backend returns it as a ports.Backend. Create it with New. A Store is safe
// for concurrent use; every method is atomic with respect to the others.
type Store struct {
	clock          ports.Clock
	partitionCount int

	// mu guards every field below.
	mu          sync.Mutex
	closed      bool
	seq         uint64                               // insertion counter for work rows and dead letters
	instances   map[uuid.UUID]*ports.Instance        // by instance id
	streams     map[uuid.UUID]*stream                // every stream with events, work, cursors or models
	eventIDs    map[uuid.UUID]struct{}               // every stored event id
	work        map[uuid.UUID]*workRow               // pending work rows by work id
	processed   map[uuid.UUID]*workRow               // rows completed in debug mode, kept for forensics
	active      map[uuid.UUID]*stream                // streams with pending work rows
	held        map[uuid.UUID]map[uuid.UUID]int      // instance -> stream -> pending rows it holds
	pins        map[uuid.UUID]map[uuid.UUID]struct{} // instance -> streams pinned to it
	subs        map[string][]string                  // event type -> perspectives, sorted
	deadLetters map[uuid.UUID]*deadLetter            // by dead letter id
	listeners   map[*listener]struct{}               // open NotifierListen channels

	// State of the optional ports.
	types       map[string]*typeIndex                     // event type -> its streams and events
	lifecycle   map[uuid.UUID]*lifecycleRecord            // event id -> recorded lifecycle stages
	streamLocks map[uuid.UUID]map[string]ports.StreamLock // stream -> perspective -> lock holder
	snapshots   map[pairKey][]ports.Snapshot              // (stream, perspective) -> snapshots by version
}

// stream is everything stored for one stream id. It is reached through
// Store.streams and guarded by Store.mu.
type stream struct {
	id   uuid.UUID
	hash uint32 // FNV-1a of the 16 id bytes; partition = hash % partition count

	events   []ports.Event // stored copies, sorted by version
	pinnedTo uuid.UUID     // owning instance, uuid.Nil when unpinned

	pairs    map[string]*pair // pending rows by perspective
	pending  int              // pending rows over all pairs
	unleased int              // pending rows with no holder
	// leaseFloor is a lower bound of the lease expiries of held rows: when
	// every pending row is held and leaseFloor is after now, no row can be a
	// claim candidate and the stream is skipped without a walk.
	leaseFloor time.Time

	cursors map[string]*ports.Cursor
	models  map[string]*ports.StoredModel
}

// pair holds the pending rows of one (stream, perspective), sorted by version.
type pair struct {
	rows []*workRow
}

// workRow is one (stream, perspective, event) work row.
type workRow struct {
	id          uuid.UUID
	streamID    uuid.UUID
	perspective string
	eventID     uuid.UUID
	version     int64
	holder      uuid.UUID // uuid.Nil when unleased
	expiry      time.Time // lease expiry, zero when unleased
	scheduled   time.Time // retry-not-before, zero when not scheduled
	attempts    int
	err         string
	seq         uint64
	createdAt   time.Time
	processedAt time.Time // set only in debug mode
}

// deadLetter is a stored dead letter with its insertion order.
type deadLetter struct {
	ports.DeadLetter
	seq uint64
}

// Compile-time checks that Store implements every port.
var (
	_ ports.WorkClaimer     = (*Store)(nil)
	_ ports.EventFetcher    = (*Store)(nil)
	_ ports.CursorStore     = (*Store)(nil)
	_ ports.Notifier        = (*Store)(nil)
	_ ports.DeadLetterStore = (*Store)(nil)
	_ ports.EventStore      = (*Store)(nil)
	_ ports.ModelStore      = (*Store)(nil)
	_ ports.LifecycleStore  = (*Store)(nil)
	_ ports.RewindStore     = (*Store)(nil)
	_ ports.SnapshotStore   = (*Store)(nil)
)

// New returns an empty Store configured by opts. It starts nothing: the store
// owns no goroutine until a listener's context is done.
func New(opts Options) *Store {
	s := &Store{
		clock:          cmp.Or[ports.Clock](opts.Clock, ports.SystemClock{}),
		partitionCount: opts.PartitionCount,
		instances:      make(map[uuid.UUID]*ports.Instance),
		streams:        make(map[uuid.UUID]*stream),
		eventIDs:       make(map[uuid.UUID]struct{}),
		work:           make(map[uuid.UUID]*workRow),
		processed:      make(map[uuid.UUID]*workRow),
		active:         make(map[uuid.UUID]*stream),
		held:           make(map[uuid.UUID]map[uuid.UUID]int),
		pins:           make(map[uuid.UUID]map[uuid.UUID]struct{}),
		subs:           make(map[string][]string),
		deadLetters:    make(map[uuid.UUID]*deadLetter),
		listeners:      make(map[*listener]struct{}),
		types:          make(map[string]*typeIndex),
		lifecycle:      make(map[uuid.UUID]*lifecycleRecord),
		streamLocks:    make(map[uuid.UUID]map[string]ports.StreamLock),
		snapshots:      make(map[pairKey][]ports.Snapshot),
	}
	if s.partitionCount < 1 {
		s.partitionCount = PartitionCountDefault
	}
	return s
}

// Backend returns the store as every port of a ports.Backend, the optional
// ones included. Every engine instance sharing the store may use the same
// Backend value.
func (s *Store) Backend() ports.Backend {
	return ports.Backend{
		Claimer:     s,
		Fetcher:     s,
		Cursors:     s,
		Notifier:    s,
		DeadLetters: s,
		Events:      s,
		Models:      s,
		Lifecycle:   s,
		Rewind:      s,
		Snapshots:   s,
	}
}

// Close closes the store: open listener channels are closed and every later
// port call returns ports.ErrClosed. Close is idempotent and always returns
// nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for l := range s.listeners {
		delete(s.listeners, l)
		close(l.ch)
	}
	return nil
}

// lock checks ctx, takes the mutex and fails with ports.ErrClosed once the
// store is closed. On success the caller must unlock s.mu.
func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ports.ErrClosed
	}
	return nil
}

// now returns t, or the injected clock's time when t is zero.
func (s *Store) now(t time.Time) time.Time {
	if t.IsZero() {
		return s.clock.Now()
	}
	return t
}

// nextSeq returns the next insertion sequence number.
func (s *Store) nextSeq() uint64 {
	s.seq++
	return s.seq
}

// streamFor returns the stream with the given id, creating it when missing.
func (s *Store) streamFor(id uuid.UUID) *stream {
	st := s.streams[id]
	if st == nil {
		h := fnv.New32a()
		_, _ = h.Write(id[:])
		st = &stream{
			id:      id,
			hash:    h.Sum32(),
			pairs:   make(map[string]*pair),
			cursors: make(map[string]*ports.Cursor),
			models:  make(map[string]*ports.StoredModel),
		}
		s.streams[id] = st
	}
	return st
}

// sortedPerspectives returns the perspectives with pending rows in st, sorted.
func (st *stream) sortedPerspectives() []string {
	names := make([]string, 0, len(st.pairs))
	for name := range st.pairs {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// eventIndex returns the index of version in st.events and whether it exists.
func (st *stream) eventIndex(version int64) (int, bool) {
	return slices.BinarySearchFunc(st.events, version, func(e ports.Event, v int64) int {
		return cmp.Compare(e.Version, v)
	})
}

// head returns the highest stored version of st, 0 when it has no events.
func (st *stream) head() int64 {
	if st == nil || len(st.events) == 0 {
		return 0
	}
	return st.events[len(st.events)-1].Version
}

// addRow stores a new pending, unleased row in its stream's indexes.
func (s *Store) addRow(st *stream, r *workRow) {
	p := st.pairs[r.perspective]
	if p == nil {
		p = &pair{}
		st.pairs[r.perspective] = p
	}
	i, _ := slices.BinarySearchFunc(p.rows, r.version, func(x *workRow, v int64) int {
		return cmp.Compare(x.version, v)
	})
	p.rows = slices.Insert(p.rows, i, r)
	st.pending++
	st.unleased++
	s.work[r.id] = r
	s.active[st.id] = st
}

// removeRow takes a pending row out of every index. The row is not kept.
func (s *Store) removeRow(st *stream, r *workRow) {
	s.release(st, r)
	p := st.pairs[r.perspective]
	if i, ok := slices.BinarySearchFunc(p.rows, r.version, func(x *workRow, v int64) int {
		return cmp.Compare(x.version, v)
	}); ok {
		p.rows = slices.Delete(p.rows, i, i+1)
	}
	if len(p.rows) == 0 {
		delete(st.pairs, r.perspective)
	}
	st.pending--
	st.unleased--
	delete(s.work, r.id)
	if st.pending == 0 {
		delete(s.active, st.id)
	}
}

// finishRow completes a pending row: it is deleted, or in debug mode kept
// unleased with processedAt set, invisible to every pending-row query.
func (s *Store) finishRow(st *stream, r *workRow, debug bool, now time.Time) {
	s.removeRow(st, r)
	if debug {
		r.processedAt = now
		s.processed[r.id] = r
	}
}

// take leases r to holder until expiry. The caller adjusts attempts.
func (s *Store) take(st *stream, r *workRow, holder uuid.UUID, expiry time.Time) {
	if r.holder != holder {
		s.release(st, r)
		r.holder = holder
		st.unleased--
		byStream := s.held[holder]
		if byStream == nil {
			byStream = make(map[uuid.UUID]int)
			s.held[holder] = byStream
		}
		byStream[st.id]++
	}
	s.extend(st, r, expiry)
}

// extend sets the lease expiry of a held row, keeping st.leaseFloor a lower
// bound of the held rows' expiries.
func (s *Store) extend(st *stream, r *workRow, expiry time.Time) {
	r.expiry = expiry
	if st.pending-st.unleased == 1 || expiry.Before(st.leaseFloor) {
		// This row is the only held row, or it lowers the floor.
		st.leaseFloor = expiry
	}
}

// release clears the lease of r, if any.
func (s *Store) release(st *stream, r *workRow) {
	if r.holder == uuid.Nil {
		return
	}
	if byStream := s.held[r.holder]; byStream != nil {
		if byStream[st.id]--; byStream[st.id] <= 0 {
			delete(byStream, st.id)
		}
		if len(byStream) == 0 {
			delete(s.held, r.holder)
		}
	}
	r.holder = uuid.Nil
	r.expiry = time.Time{}
	st.unleased++
}

// pin pins st to instance.
func (s *Store) pin(st *stream, instance uuid.UUID) {
	if st.pinnedTo == instance {
		return
	}
	s.unpin(st)
	st.pinnedTo = instance
	set := s.pins[instance]
	if set == nil {
		set = make(map[uuid.UUID]struct{})
		s.pins[instance] = set
	}
	set[st.id] = struct{}{}
}

// unpin clears the pin of st, if any.
func (s *Store) unpin(st *stream) {
	if st.pinnedTo == uuid.Nil {
		return
	}
	if set := s.pins[st.pinnedTo]; set != nil {
		delete(set, st.id)
		if len(set) == 0 {
			delete(s.pins, st.pinnedTo)
		}
	}
	st.pinnedTo = uuid.Nil
}

// unpinIfDrained unpins st when it has no pending rows left.
func (s *Store) unpinIfDrained(st *stream) {
	if st.pending == 0 {
		s.unpin(st)
	}
}

// releaseInstance releases every lease and pin of instance.
func (s *Store) releaseInstance(instance uuid.UUID) {
	for streamID := range s.held[instance] {
		st := s.streams[streamID]
		for _, p := range st.pairs {
			for _, r := range p.rows {
				if r.holder == instance {
					s.release(st, r)
				}
			}
		}
	}
	delete(s.held, instance)
	for streamID := range s.pins[instance] {
		s.streams[streamID].pinnedTo = uuid.Nil
	}
	delete(s.pins, instance)
}

// liveness is the set of live instances at one instant, ordered by id.
type liveness struct {
	ids []uuid.UUID
	set map[uuid.UUID]struct{}
}

// liveInstances returns the instances whose last heartbeat is newer than
// now - threshold.
func (s *Store) liveInstances(now time.Time, threshold time.Duration) liveness {
	cutoff := now.Add(-threshold)
	l := liveness{set: make(map[uuid.UUID]struct{}, len(s.instances))}
	for id, inst := range s.instances {
		if inst.LastHeartbeatAt.After(cutoff) {
			l.ids = append(l.ids, id)
			l.set[id] = struct{}{}
		}
	}
	slices.SortFunc(l.ids, compareUUID)
	return l
}

// live reports whether id is live.
func (l liveness) live(id uuid.UUID) bool {
	_, ok := l.set[id]
	return ok
}

// rank returns the zero-based position of id among the live instances, -1
// when it is not live.
func (l liveness) rank(id uuid.UUID) int {
	i, ok := slices.BinarySearchFunc(l.ids, id, compareUUID)
	if !ok {
		return -1
	}
	return i
}

// compareUUID orders uuids by their bytes, as PostgreSQL orders uuid values.
func compareUUID(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) }

// uniqueSorted returns the distinct ids in byte order, as a new slice.
func uniqueSorted(ids []uuid.UUID) []uuid.UUID {
	out := slices.Clone(ids)
	slices.SortFunc(out, compareUUID)
	return slices.Compact(out)
}

// flagRewind sets RewindRequired on cur for a late event: the trigger keeps
// the smallest version, RewindFlaggedAt moves on every detection and
// RewindFirstFlaggedAt is set only once.
func flagRewind(cur *ports.Cursor, eventID uuid.UUID, version int64, now time.Time) {
	cur.Status |= ports.CursorRewindRequired
	if cur.RewindTriggerVersion == 0 || version < cur.RewindTriggerVersion {
		cur.RewindTriggerEventID = eventID
		cur.RewindTriggerVersion = version
	}
	cur.RewindFlaggedAt = now
	if cur.RewindFirstFlaggedAt.IsZero() {
		cur.RewindFirstFlaggedAt = now
	}
	cur.UpdatedAt = now
}

// copyEvent returns a deep copy of e.
func copyEvent(e ports.Event) ports.Event {
	e.Data = bytes.Clone(e.Data)
	e.Metadata = copyMetadata(e.Metadata)
	return e
}

// copyMetadata returns a deep copy of m.
func copyMetadata(m ports.Metadata) ports.Metadata {
	if m.Scope != nil {
		scope := *m.Scope
		scope.Extras = copyMap(scope.Extras)
		m.Scope = &scope
	}
	m.Headers = copyMap(m.Headers)
	return m
}

// copyMap returns a copy of m, nil when m is nil.
func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
