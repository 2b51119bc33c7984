// Package memory is an in-process Vantage backend. It is a real adapter, not
// a mock: it implements every port of package ports with the documented
// contracts, passes the conformance suite, and serves as the backend for
// tests, runnable examples and single-process embedded use. The exception
// is ports.TxModelStore: it has no transaction in which a table
// projection could write the application's tables, so table projections
// need PostgreSQL (core.New refuses them on this backend with an error
// wrapping errors.ErrUnsupported).
//
// Use it where the events need not outlive the process: unit tests
// (package vantagetest runs a worker on it), examples, and programs whose
// instances all run in one process. Its state is lost when the process
// ends; adapters/postgres keeps it durable and shares it between
// processes. [New] builds a [Store], whose [Store.Backend] is what
// core.New takes:
//
//	store := memory.New(memory.Options{})
//	defer store.Close()
//	w, err := core.New(store.Backend(), reg, &core.Options{})
//
// Several workers may share one Store, as the instances of a service share
// a database. Under fx, [Module] provides the Store and its Backend.
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
// version order, and stream leases by instance, so fetches, completions and
// abandonment touch only the streams and rows they concern, never the whole
// store. A lease is held by the stream, not by its rows: claiming, fetching
// and renewing write one stream, whatever its backlog. The lease keeps, per
// perspective, the highest version a fetch handed out: an abandonment
// charges the pending rows up to it, and a row stored below it is late.
// Events are
// indexed by type, both by stream and by creation, for rebuild paging and
// lifecycle reconciliation. Claims find new work through a claim index (see
// claimindex.go): priority queues of the drainable streams whose lease is
// not live as far as time goes (unleased or expired), per rank bucket,
// oldest work first, plus a timer queue of lease expiries and retry times.
// A claim therefore costs O(streams the caller holds + streams it leases),
// amortized, plus a logarithmic factor, whatever the backlog of other
// streams; appends, fetches, completions and failures cost O(their input and
// result). Each (stream, perspective) keeps a version below which every
// pending row is late, so the stragglers a completion marks late are walked
// once, not again by every later completion. Each work row stored by a
// dead-letter requeue keeps its dead letter's id, so completing or
// dead-lettering it again finds the dead letter in O(1); listing and
// recovering dead letters walk all of them. Rows are found by work id
// through slots the ids the store draws carry (see workIndex), so the rows a
// completion removes usually lie side by side. Each perspective's pending rows
// are counted and kept in storage order as well, removed lazily, so the
// backlog figures (PerspectivesLag) cost O(perspectives) and every row
// stored or removed O(1) more, amortized (see backlog).
// CLAIMING.md at the repository root describes the claim policy both adapters implement.
package memory

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// Options configure a Store. The zero value is valid.
type Options struct {
	// Clock supplies the time whenever a params Now is zero. Defaults to
	// ports.SystemClock{}.
	Clock ports.Clock
	// PartitionCount is the number of partitions a stream id hashes into to
	// spread the streams nobody holds over the live instances, used when
	// WorkClaimParams.PartitionCount is not positive. Values below 1 select
	// ports.PartitionCountDefault.
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
	seq         uint64                             // insertion counter for work rows and dead letters
	instances   map[uuid.UUID]*ports.Instance      // by instance id
	instanceIDs []uuid.UUID                        // keys of instances in byte order (rank order)
	streams     map[uuid.UUID]*stream              // every stream with events, work, cursors or models
	eventIDs    map[uuid.UUID]eventLoc             // every stored event id, with where it is stored
	work        workIndex                          // pending work rows by work id (workindex.go)
	backlogs    map[string]*backlog                // perspective -> its pending rows in storage order (stats.go)
	processed   map[uuid.UUID]*workRow             // rows completed in debug mode, kept for forensics
	leases      map[uuid.UUID]map[*stream]struct{} // instance -> streams leased to it
	claims      claimIndex                         // streams a claim may take, see claimindex.go
	subs        map[string][]string                // event type -> perspectives, sorted
	retired     map[string]struct{}                // retired perspectives, never subscribed
	deadLetters map[uuid.UUID]*deadLetter          // by dead letter id
	listeners   map[*listener]struct{}             // open NotifierListen channels

	// Scratch lists of WorkClaim and EventsFetchPending, empty between calls.
	draining   []*stream
	drainOrder []drainKey
	versions   []int64
	spans      []versionSpan

	// State of the optional ports.
	types       map[string]*typeIndex                     // event type -> its streams and events
	lifecycle   map[uuid.UUID]*lifecycleRecord            // event id -> completed stages and open claims
	streamLocks map[uuid.UUID]map[string]ports.StreamLock // stream -> perspective -> lock holder
	snapshots   map[pairKey][]ports.Snapshot              // (stream, perspective) -> snapshots by version
	rebuilds    map[uuid.UUID]*ports.RebuildRequest       // rebuild requests by id (rebuilds.go)
}

// stream is everything stored for one stream id. It is reached through
// Store.streams and guarded by Store.mu.
type stream struct {
	id   uuid.UUID
	hash uint32 // FNV-1a of the 16 id bytes; partition = hash % partition count

	events []ports.Event // stored copies, sorted by version

	// The stream's lease (see ports.WorkClaimer): it covers every pending
	// row of the stream. marks holds, per perspective, the highest version
	// a fetch under the lease handed out; it is cleared when the lease
	// passes to another holder or is released.
	holder uuid.UUID // uuid.Nil when unleased
	expiry time.Time // zero when unleased
	marks  []handedOut

	pairs   []*pair // pending rows by perspective, sorted by perspective; none empty
	pending int     // pending rows over all pairs

	// Claim index membership (see claimIndex): the ready queue holding the
	// stream and its position and key there, and its position and time in
	// the timer queue.
	ready    *readyQueue // nil when in no ready queue
	readyIdx int
	readyKey uint64 // insertion sequence of the oldest first row not waiting for a retry
	timerIdx int    // -1 when not in the timer queue
	wake     time.Time

	cursors map[string]*ports.Cursor
	models  map[string]*ports.StoredModel
}

// handedOut is the mark of one perspective of a stream's lease: the
// highest version a fetch under the lease handed out.
type handedOut struct {
	perspective string
	version     int64
}

// pair holds the pending rows of one (stream, perspective) in version order.
// The rows live in buf[head:] (read them with pending and first): removing
// the first rows, the common case, only moves head, so draining a long
// backlog front to back costs O(1) a row.
type pair struct {
	perspective string
	buf         []*workRow
	head        int
	backlog     *backlog // the pending rows of the perspective, this pair's among them
	// lateBelow is a version below which every pending row is late, so
	// marking the stragglers below a reported position walks only the rows
	// not marked before, however long a backlog of late rows waits for its
	// rewind.
	lateBelow int64
}

// workRow is one (stream, perspective, event) work row.
type workRow struct {
	id          uuid.UUID
	streamID    uuid.UUID
	perspective string
	eventID     uuid.UUID
	version     int64
	scheduled   time.Time // retry-not-before, zero when not scheduled
	attempts    int
	late        bool // stored below its pair's cursor, or found straggling; never cleared
	replay      bool // stored for a failed replay of an applied event (ports.WorkItem.Replay)
	err         string
	seq         uint64
	createdAt   time.Time
	processedAt time.Time // set only in debug mode
	left        bool      // left the pending rows: its perspective's backlog skips it
	// deadLetterID is the dead letter whose requeue stored the row, uuid.Nil
	// for a row stored by an append or a failure: completing the row
	// recovers that dead letter, dead-lettering it again updates it.
	deadLetterID uuid.UUID
}

// eventLoc is where a stored event is: its stream and version.
type eventLoc struct {
	st      *stream
	version int64
}

// deadLetter is a stored dead letter with the order in which it was last
// dead-lettered, which breaks ties of DeadLetteredAt.
type deadLetter struct {
	ports.DeadLetter
	seq uint64
	// requeuedOn are the generations it was ever requeued on (RequeueGeneration
	// is the latest): DeadLettersRecover requeues it once per generation.
	requeuedOn []string
}

// Compile-time checks that Store implements every port.
var (
	_ ports.WorkClaimer     = (*Store)(nil)
	_ ports.EventFetcher    = (*Store)(nil)
	_ ports.CursorStore     = (*Store)(nil)
	_ ports.Notifier        = (*Store)(nil)
	_ ports.Publisher       = (*Store)(nil)
	_ ports.LockReader      = (*Store)(nil)
	_ ports.DeadLetterStore = (*Store)(nil)
	_ ports.EventStore      = (*Store)(nil)
	_ ports.ModelStore      = (*Store)(nil)
	_ ports.ModelBatchStore = (*Store)(nil)
	_ ports.LifecycleStore  = (*Store)(nil)
	_ ports.RewindStore     = (*Store)(nil)
	_ ports.SnapshotStore   = (*Store)(nil)
	_ ports.Admin           = (*Store)(nil)
	_ ports.Stats           = (*Store)(nil)
)

// New returns an empty Store configured by opts. It starts nothing: the store
// owns no goroutine until a listener's context is done.
func New(opts Options) *Store {
	s := &Store{
		clock:          cmp.Or[ports.Clock](opts.Clock, ports.SystemClock{}),
		partitionCount: opts.PartitionCount,
		instances:      make(map[uuid.UUID]*ports.Instance),
		streams:        make(map[uuid.UUID]*stream),
		eventIDs:       make(map[uuid.UUID]eventLoc),
		work:           newWorkIndex(),
		backlogs:       make(map[string]*backlog),
		processed:      make(map[uuid.UUID]*workRow),
		leases:         make(map[uuid.UUID]map[*stream]struct{}),
		subs:           make(map[string][]string),
		retired:        make(map[string]struct{}),
		deadLetters:    make(map[uuid.UUID]*deadLetter),
		listeners:      make(map[*listener]struct{}),
		types:          make(map[string]*typeIndex),
		lifecycle:      make(map[uuid.UUID]*lifecycleRecord),
		streamLocks:    make(map[uuid.UUID]map[string]ports.StreamLock),
		snapshots:      make(map[pairKey][]ports.Snapshot),
		rebuilds:       make(map[uuid.UUID]*ports.RebuildRequest),
	}
	if s.partitionCount < 1 {
		s.partitionCount = ports.PartitionCountDefault
	}
	s.claims.init(uint32(s.partitionCount))
	return s
}

// Backend returns the store as every port of a ports.Backend, the optional
// ones included but ModelTx (see the package doc). Every engine instance sharing the store may use the same
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
		ModelBatch:  s,
		ModelQuery:  s,
		Lifecycle:   s,
		Rewind:      s,
		Snapshots:   s,
		Admin:       s,
		Stats:       s,
		Rebuilds:    s,
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
			id:       id,
			hash:     h.Sum32(),
			timerIdx: -1,
			cursors:  make(map[string]*ports.Cursor),
			models:   make(map[string]*ports.StoredModel),
		}
		s.streams[id] = st
	}
	return st
}

// pair returns the pending rows of perspective in st, nil when it has none.
func (st *stream) pair(perspective string) *pair {
	if i, ok := st.pairIndex(perspective); ok {
		return st.pairs[i]
	}
	return nil
}

// pairIndex returns the index of perspective in st.pairs and whether it is
// there.
func (st *stream) pairIndex(perspective string) (int, bool) {
	return slices.BinarySearchFunc(st.pairs, perspective, func(p *pair, name string) int {
		return cmp.Compare(p.perspective, name)
	})
}

// eventIndex returns the index of version in st.events and whether it exists.
func (st *stream) eventIndex(version int64) (int, bool) {
	return slices.BinarySearchFunc(st.events, version, func(e ports.Event, v int64) int {
		return cmp.Compare(e.Version, v)
	})
}

// storesEvent reports whether st (possibly nil) stores the event id at
// version.
func (st *stream) storesEvent(id uuid.UUID, version int64) bool {
	if st == nil {
		return false
	}
	i, ok := st.eventIndex(version)
	return ok && st.events[i].ID == id
}

// head returns the highest stored version of st, 0 when it has no events.
func (st *stream) head() int64 {
	if st == nil || len(st.events) == 0 {
		return 0
	}
	return st.events[len(st.events)-1].Version
}

// pending returns the pending rows of p in version order. The slice aliases
// p's storage: it is valid until p changes.
func (p *pair) pending() []*workRow { return p.buf[p.head:] }

// first returns the pending row of p with the lowest version.
func (p *pair) first() *workRow { return p.buf[p.head] }

// rowIndex returns the index in p.pending() of the row with version v and
// whether it is there.
func (p *pair) rowIndex(v int64) (int, bool) {
	return slices.BinarySearchFunc(p.pending(), v, func(x *workRow, v int64) int {
		return cmp.Compare(x.version, v)
	})
}

// insert adds r in version order. Rows usually arrive in version order, so
// this is an append.
func (p *pair) insert(r *workRow) {
	i, _ := p.rowIndex(r.version)
	if i == 0 && p.head > 0 {
		p.head--
		p.buf[p.head] = r
		return
	}
	p.buf = slices.Insert(p.buf, p.head+i, r)
}

// delete removes the row at index i of p.pending(), shifting whichever side
// of it is shorter. Storage freed at the front is reclaimed once it is the
// larger part of the slice, so a pair drained from the front costs O(1) a row.
func (p *pair) delete(i int) {
	n := len(p.buf) - p.head
	if i < n/2 {
		copy(p.buf[p.head+1:p.head+i+1], p.buf[p.head:p.head+i])
		p.buf[p.head] = nil
		p.head++
	} else {
		p.buf = slices.Delete(p.buf, p.head+i, p.head+i+1)
	}
	if p.head == len(p.buf) {
		p.buf, p.head = p.buf[:0], 0
	} else if p.head > 16 && 2*p.head > len(p.buf) {
		k := copy(p.buf, p.buf[p.head:])
		clear(p.buf[k:])
		p.buf, p.head = p.buf[:k], 0
	}
}

// remove deletes r, a pending row of p. Callers usually remove the first
// row, which is found without a search and comes off the front in O(1).
func (p *pair) remove(r *workRow) {
	if p.first() == r {
		p.delete(0)
	} else if i, ok := p.rowIndex(r.version); ok {
		p.delete(i)
	}
}

// addRow stores a new pending row in its stream's indexes. The caller sets
// r.late before, or marks the row late later. The caller then updates the
// claim index with touch.
func (s *Store) addRow(st *stream, r *workRow) {
	i, ok := st.pairIndex(r.perspective)
	if !ok {
		st.pairs = slices.Insert(st.pairs, i, &pair{perspective: r.perspective, backlog: s.backlogOf(r.perspective)})
	}
	p := st.pairs[i]
	p.insert(r)
	p.backlog.push(r)
	if !r.late && r.version < p.lateBelow {
		p.lateBelow = r.version // keep every row below it late
	}
	st.pending++
	s.work.put(r)
}

// arrivesLate reports whether a row of perspective stored now at version is
// late, and whether that is because the pair's cursor is past it (only then
// is the cursor flagged: otherwise the completion that moves it past does).
// A row is late when the cursor is past its version, or when it is below
// the pair's handed-out mark: a row above it was handed to an apply, whose
// save may move the cursor past the new row before the pair is fetched
// again.
func arrivesLate(st *stream, perspective string, version int64) (late, belowCursor bool) {
	if cur := st.cursors[perspective]; cur != nil && cur.LastVersion > version {
		return true, true
	}
	return version < st.mark(perspective), false
}

// markLate makes every pending row of p below version late, except the
// rows in except (applied: see flagStragglers), which keep lateBelow at
// or below the lowest of them.
func (p *pair) markLate(version int64, except map[uuid.UUID]bool) {
	if version <= p.lateBelow {
		return
	}
	rows := p.pending()
	below := version
	i, _ := p.rowIndex(p.lateBelow)
	for ; i < len(rows) && rows[i].version < version; i++ {
		if except[rows[i].id] {
			below = min(below, rows[i].version)
			continue
		}
		rows[i].late = true
	}
	p.lateBelow = max(p.lateBelow, below)
}

// unmarkLate takes the late flag off the pending rows of p at versions
// (applied by a rewind whose save holds them), keeping lateBelow at or
// below the lowest of them.
func (p *pair) unmarkLate(versions []int64) {
	for _, v := range versions {
		if i, ok := p.rowIndex(v); ok {
			if r := p.pending()[i]; r.late {
				r.late = false
				p.lateBelow = min(p.lateBelow, v)
			}
		}
	}
}

// removeRow takes a pending row out of every index. The row is not kept. The
// caller then updates the claim index with touch.
func (s *Store) removeRow(st *stream, r *workRow) {
	pi, _ := st.pairIndex(r.perspective)
	p := st.pairs[pi]
	p.remove(r)
	s.leaveBacklog(p, r)
	if len(p.pending()) == 0 {
		st.pairs = slices.Delete(st.pairs, pi, pi+1)
	}
	st.pending--
	s.work.remove(r)
}

// mark returns the handed-out mark of perspective under st's lease, 0 when
// none.
func (st *stream) mark(perspective string) int64 {
	for _, m := range st.marks {
		if m.perspective == perspective {
			return m.version
		}
	}
	return 0
}

// raiseMark records that a fetch under st's lease handed out the rows of
// perspective up to version.
func (st *stream) raiseMark(perspective string, version int64) {
	for i := range st.marks {
		if m := &st.marks[i]; m.perspective == perspective {
			m.version = max(m.version, version)
			return
		}
	}
	st.marks = append(st.marks, handedOut{perspective: perspective, version: version})
}

// lowerMark takes the rows of perspective from version on off the lease's
// hands: their holder stopped at a failure of the row at version.
func (st *stream) lowerMark(perspective string, version int64) {
	for i := range st.marks {
		if m := &st.marks[i]; m.perspective == perspective {
			m.version = min(m.version, version-1)
			return
		}
	}
}

// chargeHandedOut adds an attempt to every pending row handed out under
// st's lease: its holder died holding them. The rows of a pair at or below
// its mark are a prefix of its pending rows, so the cost is that of the
// rows charged.
func (st *stream) chargeHandedOut() {
	for _, m := range st.marks {
		p := st.pair(m.perspective)
		if p == nil {
			continue
		}
		for _, r := range p.pending() {
			if r.version > m.version {
				break
			}
			r.attempts++
		}
	}
}

// leaseTo leases st to caller until expiry. A stream taken from another
// holder loses that lease and its marks; taken from a holder that is not
// live at the time of live, it first charges the rows handed out under the
// lease an attempt (a takeover from a dead instance). The caller then
// updates the claim index with touch.
func (s *Store) leaseTo(st *stream, caller uuid.UUID, expiry time.Time, live liveness) {
	if st.holder != caller {
		if st.holder != uuid.Nil {
			s.unlease(st, !live.live(st.holder))
		}
		st.holder = caller
		set := s.leases[caller]
		if set == nil {
			set = make(map[*stream]struct{})
			s.leases[caller] = set
		}
		set[st] = struct{}{}
	}
	st.expiry = expiry
}

// unlease releases the lease of st, if any. With charge (its holder is
// dead) every pending row handed out under it gains an attempt. The caller
// then updates the claim index with touch.
func (s *Store) unlease(st *stream, charge bool) {
	if st.holder == uuid.Nil {
		return
	}
	if charge {
		st.chargeHandedOut()
	}
	if set := s.leases[st.holder]; set != nil {
		delete(set, st)
		if len(set) == 0 {
			delete(s.leases, st.holder)
		}
	}
	st.holder, st.expiry = uuid.Nil, time.Time{}
	st.marks = st.marks[:0]
}

// releaseIfDrained releases the lease of st when it has no pending rows
// left. The caller then updates the claim index with touch.
func (s *Store) releaseIfDrained(st *stream) {
	if st.pending == 0 {
		s.unlease(st, false)
	}
}

// releaseInstance releases every lease of instance. Its streams become
// claimable by the partition rule as of now. With takeover (the instance
// was abandoned as dead) every row handed out under its leases gains an
// attempt.
func (s *Store) releaseInstance(instance uuid.UUID, now time.Time, takeover bool) {
	leased := s.leases[instance]
	delete(s.leases, instance)
	for st := range leased {
		if takeover {
			st.chargeHandedOut()
		}
		st.holder, st.expiry = uuid.Nil, time.Time{}
		st.marks = st.marks[:0]
		s.touch(st, now)
	}
}

// leaseLive reports whether st is under a live lease at now: its holder is
// live and its expiry is after now.
func (st *stream) leaseLive(live liveness, now time.Time) bool {
	return st.holder != uuid.Nil && st.expiry.After(now) && live.live(st.holder)
}

// liveness is the set of live instances at one instant.
type liveness struct {
	instances map[uuid.UUID]*ports.Instance
	cutoff    time.Time // instances with a heartbeat after cutoff are live
	count     int       // live instances that are not passive, counted only by liveAt
}

// livenessAt returns the live instances at now: those whose last heartbeat
// is newer than now - threshold. It does not count them (count is 0), so it
// costs O(1).
func (s *Store) livenessAt(now time.Time, threshold time.Duration) liveness {
	return liveness{instances: s.instances, cutoff: now.Add(-threshold)}
}

// noRank is the rank liveAt reports for a live passive instance: it takes
// no share of the streams nobody holds.
const noRank = -2

// liveAt is livenessAt with the live instances that are not passive
// counted: the ones the partition rule ranks. It also returns the position
// of rankOf among them in id order, noRank when rankOf is live but passive,
// -1 when it is not live.
func (s *Store) liveAt(now time.Time, threshold time.Duration, rankOf uuid.UUID) (liveness, int) {
	l := s.livenessAt(now, threshold)
	rank := -1
	for _, id := range s.instanceIDs {
		inst := s.instances[id]
		if !inst.LastHeartbeatAt.After(l.cutoff) {
			continue
		}
		switch {
		case inst.Passive:
			if id == rankOf {
				rank = noRank
			}
			continue
		case id == rankOf:
			rank = l.count
		}
		l.count++
	}
	return l, rank
}

// live reports whether instance id is live.
func (l liveness) live(id uuid.UUID) bool {
	inst := l.instances[id]
	return inst != nil && inst.LastHeartbeatAt.After(l.cutoff)
}

// compareUUID orders uuids by their bytes, as PostgreSQL orders uuid values.
// Comparing two big-endian words is several times faster than bytes.Compare,
// which matters when WorkClaim sorts the streams it returns.
func compareUUID(a, b uuid.UUID) int {
	return cmp.Or(
		cmp.Compare(binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(b[:8])),
		cmp.Compare(binary.BigEndian.Uint64(a[8:]), binary.BigEndian.Uint64(b[8:])),
	)
}

// uniqueSorted returns the distinct ids in byte order, as a new slice.
func uniqueSorted(ids []uuid.UUID) []uuid.UUID {
	out := slices.Clone(ids)
	slices.SortFunc(out, compareUUID)
	return slices.Compact(out)
}

// flagRewind sets RewindRequired on cur for a late event: the trigger keeps
// the smallest version, RewindFlaggedAt moves on every detection and
// RewindFirstFlaggedAt is set only once.
// clearRewind takes cur's rewind flag off, with its trigger: the rows the
// rewind awaited are gone.
func clearRewind(cur *ports.Cursor, now time.Time) {
	cur.Status &^= ports.CursorRewindRequired
	cur.RewindTriggerEventID, cur.RewindTriggerVersion = uuid.Nil, 0
	cur.RewindFlaggedAt, cur.RewindFirstFlaggedAt = time.Time{}, time.Time{}
	cur.UpdatedAt = now
}

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
	e.Metadata = e.Metadata.Clone()
	return e
}
