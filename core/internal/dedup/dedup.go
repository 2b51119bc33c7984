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
package dedup

import (
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/golang-lru/v2/simplelru"

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

	mu sync.Mutex
	// inFlight holds the entries whose completion is not acknowledged yet.
	inFlight map[uuid.UUID]struct{}
	// retained maps an id to the time its retention started. Entries are
	// only added, never promoted (lookups use Peek), so its order from
	// oldest to newest is the order of those start times, which lets
	// EvictExpired stop at the first live entry and capacity evictions drop
	// the oldest acknowledgement. An id is never in both phases.
	retained *simplelru.LRU[uuid.UUID, time.Time]
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
		inFlight:  make(map[uuid.UUID]struct{}),
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
	// No eviction callback: simplelru calls it on Remove too, and the cache
	// counts its own evictions. simplelru starts no goroutine and keeps no
	// time of its own, unlike the expirable package.
	retained, err := simplelru.NewLRU[uuid.UUID, time.Time](c.capacity, nil)
	if err != nil {
		panic(fmt.Sprintf("dedup: creating retained set: %v", err)) // capacity is positive here
	}
	c.retained = retained
	return c
}

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

func (c *Cache) add(ids []uuid.UUID) []uuid.UUID {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	var added []uuid.UUID
	for _, id := range ids {
		if !c.absentLocked(id, now) {
			continue
		}
		c.inFlight[id] = struct{}{}
		added = append(added, id)
	}
	return added
}

func (c *Cache) addRetained(ids []uuid.UUID) (added []uuid.UUID, evicted int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
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
func (c *Cache) absentLocked(id uuid.UUID, now time.Time) bool {
	if _, ok := c.inFlight[id]; ok {
		return false
	}
	ackedAt, ok := c.retained.Peek(id)
	if !ok {
		return true
	}
	if c.live(ackedAt, now) {
		return false
	}
	c.retained.Remove(id)
	return true
}

// retainLocked stores id as Retained from now, evicting the oldest Retained
// entry when the phase is full. It returns how many entries it evicted.
func (c *Cache) retainLocked(id uuid.UUID, now time.Time) int {
	evicted := 0
	if c.retained.Len() >= c.capacity {
		if _, _, ok := c.retained.RemoveOldest(); ok {
			evicted++
		}
	}
	c.retained.Add(id, now)
	return evicted
}

// Contains reports whether id was processed and should be skipped: true for
// an InFlight entry whatever the time, true for a Retained entry while
// now < retention start + Retention, false otherwise (lazy expiry: an
// expired entry reports false even before EvictExpired removes it).
func (c *Cache) Contains(id uuid.UUID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.inFlight[id]; ok {
		return true
	}
	ackedAt, ok := c.retained.Peek(id)
	return ok && c.live(ackedAt, c.clock.Now())
}

// ActivateRetention moves every InFlight entry to Retained with its
// retention starting now. Entries already Retained keep their original
// start.
func (c *Cache) ActivateRetention() {
	c.mu.Lock()
	now := c.clock.Now()
	activated, evicted := 0, 0
	for id := range c.inFlight {
		delete(c.inFlight, id)
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
	now := c.clock.Now()
	activated, evicted := 0, 0
	for _, id := range ids {
		if _, ok := c.inFlight[id]; !ok {
			continue
		}
		delete(c.inFlight, id)
		evicted += c.retainLocked(id, now)
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
	now := c.clock.Now()
	evicted := 0
	for {
		_, ackedAt, ok := c.retained.GetOldest()
		if !ok || c.live(ackedAt, now) {
			break
		}
		c.retained.RemoveOldest()
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
		if _, ok := c.inFlight[id]; ok {
			delete(c.inFlight, id)
			removed = append(removed, id)
			continue
		}
		if c.retained.Remove(id) {
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
	return len(c.inFlight) + c.retained.Len()
}

// live reports whether a Retained entry started at ackedAt still counts as
// contained at now.
func (c *Cache) live(ackedAt, now time.Time) bool {
	return now.Before(ackedAt.Add(c.retention))
}

type nopObserver struct{}

func (nopObserver) OnEventsMarkedInFlight([]uuid.UUID)             {}
func (nopObserver) OnRetentionActivated(int)                       {}
func (nopObserver) OnEvicted(int)                                  {}
func (nopObserver) OnEventsRemoved([]uuid.UUID)                    {}
func (nopObserver) OnEventsDeduped([]uuid.UUID, string, uuid.UUID) {}
