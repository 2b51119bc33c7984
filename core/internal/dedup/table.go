package dedup

import (
	"encoding/binary"
	"math"
	"math/bits"

	"github.com/google/uuid"
)

// Slot marks. Any other mark is a Retained entry's retention start, as an
// offset from the cache's base time.
const (
	markEmpty    int64 = math.MinInt64
	markInFlight int64 = math.MinInt64 + 1
	// markRetainedMin is the earliest retention start a mark can hold; an
	// earlier one (a clock far behind the cache's base) is stored as this.
	markRetainedMin int64 = math.MinInt64 + 2
)

// tableMinSlots is the smallest size of a table: the cache keeps one table
// per pair, most of which hold a few entries.
const tableMinSlots = 8

// tableShrinkMin is the size up to which a table never shrinks (1.5KiB). A
// pair's entries are evicted one after the other, and its table is dropped
// with the last; shrinking step by step on the way would copy the
// remaining entries again and again.
const tableShrinkMin = 64

// fifoMinSlots is the size of the retention order's first allocation,
// below which it never shrinks (40KiB): a cache that fills and empties by a
// few hundred entries, as a worker's at low traffic, never reallocates it.
const fifoMinSlots = 1024

// table is the set of one pair's entries: an open-addressing hash table of
// ids with linear probing that deletes by shifting the entries after the
// deleted one back (no tombstones). Every id the cache holds is added once
// and deleted once, hundreds of thousands of times over during a long
// catch-up. A Go map under that churn keeps the room of its deleted entries
// and settles at about twice the memory of a map holding the same entries,
// and never gives it back; this table's size follows its entries, up at
// three quarters full and down at an eighth (see tableShrinkMin), and the
// cache drops it with its last entry, so an idle pair returns the memory of
// its busy hours. A slot is 32 bytes: the id, its mark and its retention
// sequence number.
//
// The table is not safe for concurrent use; the cache's lock guards it.
type table struct {
	slots []slot // len is 0 or a power of two
	n     int    // slots in use
	seed  uint64
}

type slot struct {
	id   uuid.UUID
	mark int64 // markEmpty, markInFlight or a retention start
	// seq numbers a Retained entry's retention among all of the cache's
	// (see group.evicted); 0 for an InFlight entry.
	seq uint64
}

// newTable returns an empty table hashing with seed.
func newTable(seed uint64) table { return table{seed: seed} }

// reserve sizes an empty table with no slots for n entries, so that a pair
// whose first rows arrive together is not grown step by step.
func (t *table) reserve(n int) {
	if len(t.slots) > 0 {
		return
	}
	t.resize(sizeFor(n))
}

// adopt makes slots, whose length is a power of two, the slots of an empty
// table with none.
func (t *table) adopt(slots []slot) {
	for i := range slots {
		slots[i] = slot{mark: markEmpty}
	}
	t.slots, t.n = slots, 0
}

// sizeFor returns the size of a table holding n entries at most three
// quarters full.
func sizeFor(n int) int {
	size := tableMinSlots
	for 4*n > 3*size {
		size *= 2
	}
	return size
}

// hash mixes the two halves of id with the table's seed (the multiply-fold
// of wyhash): work ids are random or time-ordered, and linear probing needs
// every bit of them to reach the low bits of the hash.
func (t *table) hash(id uuid.UUID) uint64 {
	lo := binary.LittleEndian.Uint64(id[:8])
	hi := binary.LittleEndian.Uint64(id[8:])
	h, l := bits.Mul64(lo^t.seed^0xa0761d6478bd642f, hi^0xe7037ed1a0b428db)
	return h ^ l
}

// find returns the index of id's slot and true, or the index of the empty
// slot that ends its probe and false. The table must not be empty.
func (t *table) find(id uuid.UUID) (int, bool) {
	mask := uint64(len(t.slots) - 1)
	for i := t.hash(id) & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.mark == markEmpty {
			return int(i), false
		}
		if s.id == id {
			return int(i), true
		}
	}
}

// lookup is find on a table that may be empty: it returns -1 and false
// when the table has no slots.
func (t *table) lookup(id uuid.UUID) (int, bool) {
	if len(t.slots) == 0 {
		return -1, false
	}
	return t.find(id)
}

// get returns id's mark, or markEmpty when the table does not hold id.
func (t *table) get(id uuid.UUID) int64 {
	if t.n == 0 {
		return markEmpty
	}
	if i, ok := t.find(id); ok {
		return t.slots[i].mark
	}
	return markEmpty
}

// set stores id with mark, adding it when absent.
func (t *table) set(id uuid.UUID, mark int64) {
	i, ok := t.lookup(id)
	if ok {
		t.slots[i].mark = mark
		return
	}
	t.insert(i, id, mark, 0)
}

// insert adds id, which the table does not hold, with mark and seq, and
// returns its slot. i is the empty slot lookup returned for id, so that the
// common insert probes once; a growth finds the slot again.
func (t *table) insert(i int, id uuid.UUID, mark int64, seq uint64) int {
	if 4*(t.n+1) > 3*len(t.slots) {
		t.resize(max(tableMinSlots, 2*len(t.slots)))
		i, _ = t.find(id)
	}
	t.slots[i] = slot{id: id, mark: mark, seq: seq}
	t.n++
	return i
}

// delete removes id, if held, and returns whether it was.
func (t *table) delete(id uuid.UUID) bool {
	if t.n == 0 {
		return false
	}
	i, ok := t.find(id)
	if !ok {
		return false
	}
	mask := len(t.slots) - 1
	// Shift back every entry of the run after i whose probe passed over i,
	// so that no probe finds a hole before its entry.
	for j := (i + 1) & mask; t.slots[j].mark != markEmpty; j = (j + 1) & mask {
		home := int(t.hash(t.slots[j].id)) & mask
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot{mark: markEmpty}
	t.n--
	if 8*t.n < len(t.slots) && len(t.slots) > tableShrinkMin {
		t.resize(sizeFor(2 * t.n))
	}
	return true
}

// resize moves the entries into a table of size slots.
func (t *table) resize(size int) {
	old := t.slots
	t.slots = make([]slot, size)
	for i := range t.slots {
		t.slots[i].mark = markEmpty
	}
	mask := uint64(size - 1)
	for k := range old {
		if old[k].mark == markEmpty {
			continue
		}
		i := t.hash(old[k].id) & mask
		for t.slots[i].mark != markEmpty {
			i = (i + 1) & mask
		}
		t.slots[i] = old[k]
	}
}

// inFlight returns the ids of the InFlight entries.
func (t *table) inFlight() []uuid.UUID {
	var ids []uuid.UUID
	for i := range t.slots {
		if t.slots[i].mark == markInFlight {
			ids = append(ids, t.slots[i].id)
		}
	}
	return ids
}

// retainedRef is an element of the retention order: the id of an entry of
// group made Retained at the retention start mark, with the retention's
// sequence number. It is stale when the entry was removed since, or removed
// and retained again later (its seq differs).
type retainedRef struct {
	group *group
	id    uuid.UUID
	mark  int64
	seq   uint64
}

// live reports whether r is not stale.
func (r *retainedRef) live() bool {
	g := r.group
	if g.live == 0 || g.entries.n == 0 { // dropped
		return false
	}
	i, ok := g.entries.find(r.id)
	return ok && g.mark(i) != markInFlight && g.entries.slots[i].seq == r.seq && r.seq > g.evicted
}

// fifo is a growable ring of retainedRefs. Like table, it shrinks when it
// is an eighth full.
type fifo struct {
	buf  []retainedRef // len is 0 or a power of two
	head int
	n    int
}

func (q *fifo) push(r retainedRef) {
	if q.n == len(q.buf) {
		q.resize(max(fifoMinSlots, 2*len(q.buf)))
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = r
	q.n++
}

// front returns the oldest element; the ring must not be empty.
func (q *fifo) front() retainedRef { return q.buf[q.head] }

// pop drops the oldest element; the ring must not be empty.
func (q *fifo) pop() {
	q.buf[q.head] = retainedRef{}
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	if 8*q.n < len(q.buf) && len(q.buf) > fifoMinSlots {
		q.resize(len(q.buf) / 2)
	}
}

func (q *fifo) resize(size int) {
	buf := make([]retainedRef, size)
	for i := range q.n {
		buf[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
	}
	q.buf, q.head = buf, 0
}
