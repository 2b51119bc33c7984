// Package dedup implements the engine's ProcessedEventCache: a two-phase set
// of work ids that were applied recently, used to skip work that is still
// leased and re-delivered before its completion reached the database.
//
// # Phases
//
// An id enters the cache InFlight (AddRange), right after its event was
// applied. InFlight entries never expire: until the completion is
// acknowledged, the row may be re-delivered at any time, and applying it
// twice must be avoided however long the flush takes. Once the completion is
// acknowledged (ActivateRetention, ActivateRetentionFor) the entry becomes
// Retained and its retention countdown starts at the clock's current time.
// A Retained entry stops counting as contained when the countdown ends, even
// before EvictExpired removes it (lazy expiry); after that the work may be
// processed again, which is what a rewind or rebuild needs. Remove and
// RemoveRange drop an entry in any phase.
//
// The Retained phase is bounded by Options.Capacity: when it is full, the
// oldest Retained entry is evicted first. InFlight entries are never evicted
// for room, because dropping one could let the same work be applied twice.
//
// Every expiry decision follows the injected ports.Clock, so tests drive time
// with a fake clock and never sleep.
//
// # Layout
//
// Every call names the (stream, perspective) pair its ids belong to (Key),
// and the entries of a pair are kept in a small hash table of their own.
// The engine works pair by pair: it checks a pair's fetched rows, records
// them after their apply and acknowledges them together. A catch-up passes
// hundreds of thousands of rows through the cache; in one table shared by
// every pair, each of those steps cost each row a lookup at a random place
// of a table far larger than the CPU cache. Per pair, a batch's rows touch
// a few small tables, the rows of a pair the cache holds nothing of are
// found fresh with one map lookup, and an acknowledged pair is evicted
// without reaching its slots again (see group).
//
// # Why not an expiring LRU
//
// The Retained phase is a set of hash tables and a FIFO of retention
// starts, not golang-lru's expirable.LRU. With a TTL, that LRU starts a cleanup
// goroutine it gives no way to stop (one would leak per Worker) and judges
// expiry by wall time, out of reach of an injected clock. Without a TTL it is
// a plain bounded LRU, and one was tried: the cache's hot operations (the
// dedup check of a fetched pair, the retention step of a completion) and its
// memory grew several times over, and the engine's catch-up slowed (the
// figures are in BENCHMARKS.md). Retained entries are never
// promoted, so a FIFO already orders them by retention start, which is all
// the expiry and capacity evictions need.
package dedup

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

const (
	// RetentionDefault is how long a Retained entry keeps counting as
	// contained: the default lease duration, after which an unacknowledged
	// row would be re-delivered anyway.
	RetentionDefault = 300 * time.Second
	// CapacityDefault bounds the number of Retained entries.
	CapacityDefault = 100_000
)

// Observer receives the cache's state transitions, for metrics and tests.
// Callbacks run synchronously on the goroutine that called the cache, after
// the cache released its lock, and only when something actually changed. An
// Observer must be safe for concurrent use.
type Observer interface {
	// OnEventsMarkedInFlight reports the ids newly added by one AddRange or
	// AddRangeRetained call (ids already present are not listed).
	OnEventsMarkedInFlight(ids []uuid.UUID)
	// OnRetentionActivated reports how many entries became Retained in one
	// call.
	OnRetentionActivated(count int)
	// OnEvicted reports how many Retained entries one call removed, because
	// their retention expired or to make room within Options.Capacity.
	OnEvicted(count int)
	// OnEventsRemoved reports the ids one Remove or RemoveRange call actually
	// removed.
	OnEventsRemoved(ids []uuid.UUID)
	// OnEventsDeduped reports work skipped because the cache contained it,
	// once per (stream, perspective) group. The engine calls it; the cache
	// never does.
	OnEventsDeduped(ids []uuid.UUID, perspective string, streamID uuid.UUID)
}

// Options configure a Cache. The zero value is valid.
type Options struct {
	// Retention is how long an entry keeps counting as contained after its
	// retention was activated. Must not be negative. Defaults to
	// RetentionDefault.
	Retention time.Duration
	// Capacity bounds the number of Retained entries; the oldest is evicted
	// first. InFlight entries are not bounded. Must not be negative.
	// Defaults to CapacityDefault.
	Capacity int
	// Clock decides every expiry. Defaults to ports.SystemClock.
	Clock ports.Clock
	// Observer receives state transitions. Defaults to none.
	Observer Observer
}

// Key names the (stream, perspective) pair whose work rows an id belongs
// to. Every work id belongs to one pair, and every call that names an id
// names its pair too: an id looked for under another pair is not found.
type Key struct {
	Stream      uuid.UUID
	Perspective string
}

// Range is ids of one pair.
type Range struct {
	Key Key
	IDs []uuid.UUID
}

// Cache is the two-phase ProcessedEventCache keyed by work id. The zero
// value is not usable; call New. Safe for concurrent use.
type Cache struct {
	retention time.Duration
	capacity  int
	clock     ports.Clock
	observer  Observer
	observed  bool // observer is not the no-op one: build the id lists it gets
	// base is the clock's time at New; retention starts are kept as offsets
	// from it, so entries hold no pointer for the garbage collector to
	// follow and comparisons keep the clock's monotonic reading.
	base time.Time
	seed uint64 // hash seed of the groups' tables

	mu sync.Mutex
	// groups holds every stored id, in either phase, with its mark
	// (markInFlight, or its retention start), in the table of its pair:
	// one lookup answers Contains, and moving an entry to Retained updates
	// it in place. A pair with no entry has no group.
	groups map[Key]*group
	n      int // entries stored, in every group
	// order lists the Retained entries, oldest retention start first. An
	// element whose entry no longer has its seq (the entry was removed, or
	// removed and retained again) is stale and skipped. Entries are never
	// promoted, so the order is that of their retention starts:
	// EvictExpired stops at the first live entry and capacity evictions
	// drop the oldest acknowledgement.
	order    fifo
	retained int    // Retained entries stored (expired ones included)
	seq      uint64 // the last retention's sequence number
	// spare holds the slot arrays of dropped groups for new groups: in a
	// catch-up, pairs come and go by the thousand with tables of the same
	// size, and allocating a new one (and collecting the old) cost more,
	// under the lock, than all of the pair's other work in the cache.
	spare [][]slot
}

// group is the entries of one pair.
//
// Its Retained entries leave in the order of their retentions, the
// cache's order: an eviction only moves the group's evicted mark up to
// the entry's seq, so evicting does not reach the entry's slot, which has
// long left the CPU cache when the entry is the oldest. An evicted entry
// stays in the table until its slot is reused, the table is purged, or
// the group is dropped with its last live entry, which is how most of a
// busy pair's entries go.
type group struct {
	key     Key
	entries table
	live    int    // entries stored, evicted ones excluded
	evicted uint64 // Retained entries with a seq up to this are evicted
}

// mark returns the mark of the entry in slot i, markEmpty when it was
// evicted.
func (g *group) mark(i int) int64 {
	s := &g.entries.slots[i]
	if s.mark != markInFlight && s.seq <= g.evicted {
		return markEmpty
	}
	return s.mark
}

// get returns id's mark, markEmpty when g does not hold it.
func (g *group) get(id uuid.UUID) int64 {
	if g.entries.n == 0 {
		return markEmpty
	}
	if i, ok := g.entries.find(id); ok {
		return g.mark(i)
	}
	return markEmpty
}

// purge drops the evicted entries from the table once they are more than
// the live ones, so that a long-lived group does not keep the room of the
// entries it lost.
func (g *group) purge() {
	if g.entries.n-g.live <= max(g.live, tableMinSlots) {
		return
	}
	old := g.entries.slots
	g.entries.slots, g.entries.n = nil, 0
	g.entries.reserve(g.live)
	for i := range old {
		if old[i].mark != markEmpty && (old[i].mark == markInFlight || old[i].seq > g.evicted) {
			j, _ := g.entries.find(old[i].id)
			g.entries.slots[j] = old[i]
			g.entries.n++
		}
	}
}

// New returns an empty Cache. It panics, naming the field, if opts holds a
// negative value: options are fixed by the engine, so this is a programming
// error.
func New(opts Options) *Cache {
	if opts.Retention < 0 {
		panic(fmt.Sprintf("dedup.Options.Retention must not be negative, got %s", opts.Retention))
	}
	if opts.Capacity < 0 {
		panic(fmt.Sprintf("dedup.Options.Capacity must not be negative, got %d", opts.Capacity))
	}
	c := &Cache{
		retention: opts.Retention,
		clock:     opts.Clock,
		observer:  opts.Observer,
		observed:  opts.Observer != nil,
		seed:      rand.Uint64(),
		groups:    map[Key]*group{},
	}
	if c.retention == 0 {
		c.retention = RetentionDefault
	}
	if c.clock == nil {
		c.clock = ports.SystemClock{}
	}
	if c.observer == nil {
		c.observer = nopObserver{}
	}
	c.capacity = opts.Capacity
	if c.capacity == 0 {
		c.capacity = CapacityDefault
	}
	c.base = c.clock.Now()
	return c
}

// since returns t as an offset from the cache's base time, the mark of an
// entry retained at t.
func (c *Cache) since(t time.Time) int64 { return max(int64(t.Sub(c.base)), markRetainedMin) }

// groupFor returns the group of k, creating it, with room for n entries,
// when missing.
func (c *Cache) groupFor(k Key, n int) *group {
	g := c.groups[k]
	if g == nil {
		g = &group{key: k, entries: newTable(c.seed)}
		if s := c.spareFor(sizeFor(n)); s != nil {
			g.entries.adopt(s)
		} else {
			g.entries.reserve(n)
		}
		c.groups[k] = g
	} else {
		g.purge()
	}
	return g
}

// spareFor takes a spare slot array of at least size slots, or returns nil.
func (c *Cache) spareFor(size int) []slot {
	for i := len(c.spare) - 1; i >= 0; i-- {
		if s := c.spare[i]; len(s) >= size && len(s) <= 4*size {
			c.spare[i] = c.spare[len(c.spare)-1]
			c.spare[len(c.spare)-1] = nil
			c.spare = c.spare[:len(c.spare)-1]
			return s
		}
	}
	return nil
}

// Spare slot arrays: at most spareMax, of at most spareMaxSlots slots
// (512KiB in all).
const (
	spareMax      = 32
	spareMaxSlots = 512
)

// AddRange records ids, all of pair k, as InFlight. Ids already present
// are left untouched: an InFlight entry stays InFlight and a Retained entry
// keeps its original retention start (re-adding never resets a timer). A
// Retained entry whose retention already ended is logically absent
// (Contains reports false), so it is replaced by a fresh InFlight entry.
func (c *Cache) AddRange(k Key, ids []uuid.UUID) {
	added := c.add(k, ids)
	if len(added) > 0 {
		c.observer.OnEventsMarkedInFlight(added)
	}
}

// AddRangeRetained records ids, all of pair k, as Retained with their
// retention starting now, for work whose completion is already
// acknowledged. Present ids are left untouched, as in AddRange. The
// observer sees the added ids marked InFlight and then their retention
// activated, so counters derived from the callbacks stay balanced.
func (c *Cache) AddRangeRetained(k Key, ids []uuid.UUID) {
	added, evicted := c.addRetained(k, ids)
	if len(added) > 0 {
		c.observer.OnEventsMarkedInFlight(added)
		c.observer.OnRetentionActivated(len(added))
	}
	if evicted > 0 {
		c.observer.OnEvicted(evicted)
	}
}

// add stores the absent ids as InFlight and returns them when an observer
// wants them.
func (c *Cache) add(k Key, ids []uuid.UUID) []uuid.UUID {
	if len(ids) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.since(c.clock.Now())
	g := c.groupFor(k, len(ids))
	var added []uuid.UUID
	for _, id := range ids {
		if !c.makeLocked(g, id, now) {
			continue
		}
		if c.observed {
			added = append(added, id)
		}
	}
	return added
}

func (c *Cache) addRetained(k Key, ids []uuid.UUID) (added []uuid.UUID, evicted int) {
	if len(ids) == 0 {
		return nil, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.since(c.clock.Now())
	g := c.groupFor(k, len(ids))
	for _, id := range ids {
		i, ok := c.slotForLocked(g, id, now)
		if !ok {
			continue
		}
		evicted += c.retainLocked(g, i, now)
		added = append(added, id)
	}
	return added, evicted
}

// makeLocked stores id in g as InFlight unless it is contained, and reports
// whether it did.
func (c *Cache) makeLocked(g *group, id uuid.UUID, now int64) bool {
	i, ok := c.slotForLocked(g, id, now)
	if ok {
		g.entries.slots[i].mark, g.entries.slots[i].seq = markInFlight, 0
	}
	return ok
}

// slotForLocked returns the slot of id in g for a new entry, InFlight
// until the caller says otherwise, and true; or false when id is contained
// (InFlight, or Retained with its retention running). An evicted entry's
// slot is reused, and an expired Retained entry is replaced in place: it is
// logically absent, and its element in order goes stale.
func (c *Cache) slotForLocked(g *group, id uuid.UUID, now int64) (int, bool) {
	i, ok := g.entries.lookup(id)
	if !ok {
		i = g.entries.insert(i, id, markInFlight, 0)
		g.live++
		c.n++
		return i, true
	}
	switch m := g.mark(i); {
	case m == markEmpty:
		g.entries.slots[i].mark, g.entries.slots[i].seq = markInFlight, 0
		g.live++
		c.n++
	case m == markInFlight || c.live(m, now):
		return i, false
	default:
		g.entries.slots[i].mark, g.entries.slots[i].seq = markInFlight, 0
		c.retained--
	}
	return i, true
}

// deleteLocked drops the stored entry of id in g, whose mark is m, and g
// with its last entry. The entry's element in order, if any, becomes
// stale.
func (c *Cache) deleteLocked(g *group, id uuid.UUID, m int64) {
	g.entries.delete(id)
	if m != markInFlight {
		c.retained--
	}
	c.leftLocked(g)
}

// leftLocked counts an entry of g that left, dropping g with its last one.
func (c *Cache) leftLocked(g *group) {
	g.live--
	c.n--
	if g.live == 0 {
		delete(c.groups, g.key)
		// Its elements in order, now stale, keep g until they are dropped:
		// not its table, which the next new group may reuse.
		if s := g.entries.slots; len(s) > 0 && len(s) <= spareMaxSlots && len(c.spare) < spareMax {
			c.spare = append(c.spare, s)
		}
		g.entries = table{}
	}
}

// retainLocked makes the entry in slot i of g, InFlight, Retained from
// now: it joins the order, and the oldest Retained entry is evicted when
// the phase is over capacity. The new entry is the newest, so it is never
// the one evicted, and g keeps it. It returns how many entries it evicted.
func (c *Cache) retainLocked(g *group, i int, now int64) int {
	c.seq++
	s := &g.entries.slots[i]
	s.mark, s.seq = now, c.seq
	c.order.push(retainedRef{group: g, id: s.id, mark: now, seq: c.seq})
	c.retained++
	if c.retained <= c.capacity {
		return 0
	}
	if _, ok := c.oldestLocked(); !ok {
		return 0
	}
	c.evictOldestLocked()
	return 1
}

// oldestLocked returns the retention start of the Retained entry retained
// first, dropping the stale elements in front of it.
func (c *Cache) oldestLocked() (int64, bool) {
	for c.order.n > 0 {
		ref := c.order.front()
		// Each Retained entry has one element, so the order holds stale
		// elements only when it is longer than retained: until then its
		// front is live without a lookup, which in a full cache is most of
		// the cost of an eviction.
		if c.order.n == c.retained || ref.live() {
			return ref.mark, true
		}
		c.order.pop()
	}
	return 0, false
}

// evictOldestLocked removes the entry oldestLocked just returned. Every
// Retained entry of its group retained before it left already, so the
// group's evicted mark moves up to it.
func (c *Cache) evictOldestLocked() {
	ref := c.order.front()
	c.order.pop()
	ref.group.evicted = ref.seq
	c.retained--
	c.leftLocked(ref.group)
}

// Contains reports whether id, of pair k, was processed and should be
// skipped: true for an InFlight entry whatever the time, true for a
// Retained entry while now < retention start + Retention, false otherwise
// (lazy expiry: an expired entry reports false even before EvictExpired
// removes it).
func (c *Cache) Contains(k Key, id uuid.UUID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[k]
	if g == nil {
		return false
	}
	m := g.get(id)
	return m == markInFlight || m != markEmpty && c.live(m, c.since(c.clock.Now()))
}

// Partition splits items of pair k, whose ids id returns, into those the
// cache does not contain (fresh, in order) and the ids of those it does
// (skipped), as Contains would per item, under one lock. fresh aliases
// items when nothing is skipped.
func Partition[T any](c *Cache, k Key, items []T, id func(*T) uuid.UUID) (fresh []T, skipped []uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[k]
	if g == nil {
		return items, nil
	}
	var now int64
	haveNow := false
	for i := range items {
		key := id(&items[i])
		m := g.get(key)
		ok := m != markEmpty
		if ok && m != markInFlight {
			if !haveNow {
				now, haveNow = c.since(c.clock.Now()), true
			}
			ok = c.live(m, now)
		}
		if !ok {
			if skipped != nil {
				fresh = append(fresh, items[i])
			}
			continue
		}
		if skipped == nil {
			fresh = append(make([]T, 0, len(items)-1), items[:i]...)
		}
		skipped = append(skipped, key)
	}
	if skipped == nil {
		return items, nil
	}
	return fresh, skipped
}

// ActivateRetention moves every InFlight entry to Retained with its
// retention starting now. Entries already Retained keep their original
// start.
func (c *Cache) ActivateRetention() {
	c.mu.Lock()
	now := c.since(c.clock.Now())
	activated, evicted := 0, 0
	// Collected first: an eviction for room drops emptied groups.
	type ref struct {
		g  *group
		id uuid.UUID
	}
	var refs []ref
	for _, g := range c.groups {
		for _, id := range g.entries.inFlight() {
			refs = append(refs, ref{g, id})
		}
	}
	for _, r := range refs {
		// r.g still holds r.id InFlight: evictions remove Retained entries
		// only, and leave the slots of the others in place.
		i, _ := r.g.entries.find(r.id)
		evicted += c.retainLocked(r.g, i, now)
		activated++
	}
	c.mu.Unlock()
	c.notifyActivated(activated, evicted)
}

// ActivateRetentionFor moves the listed ids that are InFlight to Retained
// with their retention starting now. Other InFlight entries stay InFlight;
// listed ids that are Retained or absent are ignored. The engine calls it
// once completions are really acknowledged, with the rows of each, under
// one hold of the lock.
func (c *Cache) ActivateRetentionFor(ranges []Range) {
	c.mu.Lock()
	now := c.since(c.clock.Now())
	activated, evicted := 0, 0
	for _, r := range ranges {
		g := c.groups[r.Key]
		if g == nil {
			continue
		}
		for _, id := range r.IDs {
			i, ok := g.entries.lookup(id)
			if !ok || g.entries.slots[i].mark != markInFlight {
				continue
			}
			// g keeps this entry through the eviction, so it stays the
			// group of r.Key.
			evicted += c.retainLocked(g, i, now)
			activated++
		}
	}
	c.mu.Unlock()
	c.notifyActivated(activated, evicted)
}

func (c *Cache) notifyActivated(activated, evicted int) {
	if activated > 0 {
		c.observer.OnRetentionActivated(activated)
	}
	if evicted > 0 {
		c.observer.OnEvicted(evicted)
	}
}

// EvictExpired removes every Retained entry whose retention ended
// (now ≥ retention start + Retention). InFlight entries are never evicted.
func (c *Cache) EvictExpired() {
	c.mu.Lock()
	now := c.since(c.clock.Now())
	evicted := 0
	for {
		at, ok := c.oldestLocked()
		if !ok || c.live(at, now) {
			break
		}
		c.evictOldestLocked()
		evicted++
	}
	c.mu.Unlock()
	if evicted > 0 {
		c.observer.OnEvicted(evicted)
	}
}

// Remove drops id, of pair k, in any phase, so a rewind or rebuild can
// apply it again.
func (c *Cache) Remove(k Key, id uuid.UUID) {
	c.RemoveRange(k, []uuid.UUID{id})
}

// RemoveRange drops the listed ids, all of pair k, in any phase. The
// observer hears only about the ids that were actually stored.
func (c *Cache) RemoveRange(k Key, ids []uuid.UUID) {
	c.mu.Lock()
	var removed []uuid.UUID
	for _, id := range ids {
		g := c.groups[k] // dropped with its last entry
		if g == nil {
			break
		}
		if m := g.get(id); m != markEmpty {
			c.deleteLocked(g, id, m)
			removed = append(removed, id)
		}
	}
	c.mu.Unlock()
	if len(removed) > 0 {
		c.observer.OnEventsRemoved(removed)
	}
}

// Count returns the number of stored entries: InFlight ones plus Retained
// ones not yet evicted (including expired ones EvictExpired has not removed).
func (c *Cache) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// live reports whether a Retained entry started at offset at still counts
// as contained at offset now.
func (c *Cache) live(at, now int64) bool {
	return now < at+int64(c.retention)
}

type nopObserver struct{}

func (nopObserver) OnEventsMarkedInFlight([]uuid.UUID)             {}
func (nopObserver) OnRetentionActivated(int)                       {}
func (nopObserver) OnEvicted(int)                                  {}
func (nopObserver) OnEventsRemoved([]uuid.UUID)                    {}
func (nopObserver) OnEventsDeduped([]uuid.UUID, string, uuid.UUID) {}
