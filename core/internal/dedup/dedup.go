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
// # Why not an expiring LRU
//
// The Retained phase is a hash table and a FIFO of retention starts, not
// golang-lru's expirable.LRU. With a TTL, that LRU starts a cleanup
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

	mu sync.Mutex
	// entries holds every stored id, in either phase, with its mark
	// (markInFlight, or its retention start): one lookup answers Contains,
	// and moving an entry to Retained updates it in place.
	entries table
	// order lists the Retained entries, oldest retention start first. An
	// element whose mark differs from its entry's (the entry was removed,
	// or removed and retained again) is stale and skipped. Entries are
	// never promoted, so the order is that of their retention starts:
	// EvictExpired stops at the first live entry and capacity evictions
	// drop the oldest acknowledgement.
	order    fifo
	retained int // Retained entries stored (expired ones included)
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
		entries:   newTable(),
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

// AddRange records ids as InFlight. Ids already present are left untouched:
// an InFlight entry stays InFlight and a Retained entry keeps its original
// retention start (re-adding never resets a timer). A Retained entry whose
// retention already ended is logically absent (Contains reports false), so
// it is replaced by a fresh InFlight entry.
func (c *Cache) AddRange(ids []uuid.UUID) {
	added := c.add(ids)
	if len(added) > 0 {
		c.observer.OnEventsMarkedInFlight(added)
	}
}

// AddRangeRetained records ids as Retained with their retention starting
// now, for work whose completion is already acknowledged. Present ids are
// left untouched, as in AddRange. The observer sees the added ids marked
// InFlight and then their retention activated, so counters derived from the
// callbacks stay balanced.
func (c *Cache) AddRangeRetained(ids []uuid.UUID) {
	added, evicted := c.addRetained(ids)
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
func (c *Cache) add(ids []uuid.UUID) []uuid.UUID {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.since(c.clock.Now())
	var added []uuid.UUID
	for _, id := range ids {
		i, ok := c.entries.lookup(id)
		switch {
		case !ok:
			c.entries.insert(i, id, markInFlight)
		case c.entries.slots[i].mark == markInFlight || c.live(c.entries.slots[i].mark, now):
			continue
		default:
			// Retained and expired: logically absent, so it becomes a
			// fresh InFlight entry in place and its element in order goes
			// stale.
			c.entries.slots[i].mark = markInFlight
			c.retained--
		}
		if c.observed {
			added = append(added, id)
		}
	}
	return added
}

func (c *Cache) addRetained(ids []uuid.UUID) (added []uuid.UUID, evicted int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.since(c.clock.Now())
	for _, id := range ids {
		if !c.absentLocked(id, now) {
			continue
		}
		evicted += c.retainLocked(id, now)
		added = append(added, id)
	}
	return added, evicted
}

// absentLocked reports whether id may be added: it is neither InFlight nor
// Retained with its retention still running. An expired Retained entry is
// dropped on the way.
func (c *Cache) absentLocked(id uuid.UUID, now int64) bool {
	switch m := c.entries.get(id); {
	case m == markEmpty:
		return true
	case m == markInFlight || c.live(m, now):
		return false
	default:
		c.deleteLocked(id, m)
		return true
	}
}

// deleteLocked drops the stored entry of id, whose mark is m. Its element
// in order, if any, becomes stale.
func (c *Cache) deleteLocked(id uuid.UUID, m int64) {
	c.entries.delete(id)
	if m != markInFlight {
		c.retained--
	}
}

// retainLocked makes id Retained from now (it is absent or InFlight),
// evicting the oldest Retained entry when the phase is full. It returns how
// many entries it evicted.
func (c *Cache) retainLocked(id uuid.UUID, now int64) int {
	c.entries.set(id, now)
	return c.retainedLocked(id, now)
}

// retainedLocked records that id's entry just became Retained from now: it
// joins the order, and the oldest Retained entry is evicted when the phase
// is over capacity. The entry is stored first so that the caller can update
// it in the slot it found: an eviction moves entries of the table. The new
// entry is the newest, so it is never the one evicted. It returns how many
// entries it evicted.
func (c *Cache) retainedLocked(id uuid.UUID, now int64) int {
	c.order.push(retainedRef{id: id, mark: now})
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
		if c.order.n == c.retained || c.entries.get(ref.id) == ref.mark {
			return ref.mark, true
		}
		c.order.pop()
	}
	return 0, false
}

// evictOldestLocked removes the entry oldestLocked just returned.
func (c *Cache) evictOldestLocked() {
	ref := c.order.front()
	c.order.pop()
	c.entries.delete(ref.id)
	c.retained--
}

// Contains reports whether id was processed and should be skipped: true for
// an InFlight entry whatever the time, true for a Retained entry while
// now < retention start + Retention, false otherwise (lazy expiry: an
// expired entry reports false even before EvictExpired removes it).
func (c *Cache) Contains(id uuid.UUID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.entries.get(id)
	return m == markInFlight || m != markEmpty && c.live(m, c.since(c.clock.Now()))
}

// Partition splits items, whose ids id returns, into those the cache does
// not contain (fresh, in order) and the ids of those it does (skipped), as
// Contains would per item, under one lock. fresh aliases items when nothing
// is skipped.
func Partition[T any](c *Cache, items []T, id func(*T) uuid.UUID) (fresh []T, skipped []uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries.n == 0 {
		return items, nil
	}
	var now int64
	haveNow := false
	for i := range items {
		k := id(&items[i])
		m := c.entries.get(k)
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
		skipped = append(skipped, k)
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
	// Collected first: an eviction for room moves entries of the table.
	for _, id := range c.entries.inFlight() {
		evicted += c.retainLocked(id, now)
		activated++
	}
	c.mu.Unlock()
	c.notifyActivated(activated, evicted)
}

// ActivateRetentionFor moves the listed ids that are InFlight to Retained
// with their retention starting now. Other InFlight entries stay InFlight;
// listed ids that are Retained or absent are ignored. The engine calls it
// once a completion is really acknowledged.
func (c *Cache) ActivateRetentionFor(ids []uuid.UUID) {
	c.mu.Lock()
	now := c.since(c.clock.Now())
	activated, evicted := 0, 0
	for _, id := range ids {
		i, ok := c.entries.lookup(id)
		if !ok || c.entries.slots[i].mark != markInFlight {
			continue
		}
		c.entries.slots[i].mark = now
		evicted += c.retainedLocked(id, now)
		activated++
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

// Remove drops id in any phase, so a rewind or rebuild can apply it again.
func (c *Cache) Remove(id uuid.UUID) {
	c.RemoveRange([]uuid.UUID{id})
}

// RemoveRange drops the listed ids in any phase. The observer hears only
// about the ids that were actually stored.
func (c *Cache) RemoveRange(ids []uuid.UUID) {
	c.mu.Lock()
	var removed []uuid.UUID
	for _, id := range ids {
		if m := c.entries.get(id); m != markEmpty {
			c.deleteLocked(id, m)
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
	return c.entries.n
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
