package memory

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/google/uuid"
)

// workIndex finds a pending work row by its id: completions, failures and
// dead letters name rows by id alone.
//
// A map from id to row would do, but during a catch-up it holds millions of
// rows, and every completed row is a probe at a random place of it: cache and
// TLB misses, the largest cost of a completion. The ids the store draws
// itself (newID) therefore carry a slot number in their random bits, and the
// index keeps rows in chunks of consecutive slots. Rows stored together get
// neighbouring slots and usually complete together too, so a completion
// touches a few chunks, reached through a map of one entry per chunk, and a
// chunk goes when its last row does.
//
// A row whose id locates no free slot (a dead-letter requeue keeps the id of
// the row it replaces, a caller may name any id) goes to a plain map, other,
// which is empty in the common case. Lookups check the id of the row a slot
// holds, so an id that happens to decode to another row's slot finds the row
// in other, or nothing.
//
// It is guarded by Store.mu.
type workIndex struct {
	// key is mixed into the slot numbers written to ids, so that two stores
	// draw different ids even when they draw them in the same millisecond.
	key    uint64
	issued uint64 // slots handed out by newID: slot numbers below it
	chunks map[uint64]*workChunk
	other  map[uuid.UUID]*workRow
	rows   int // rows held
}

// workChunkSize is the number of slots of a chunk: large enough that a
// catch-up's rows take few chunks, small enough that a long-pending row
// keeps little memory alive around it.
const workChunkSize = 256

// workChunk holds the rows of workChunkSize consecutive slots.
type workChunk struct {
	rows [workChunkSize]*workRow
	held int
}

// slotBits masks the bits of an id's last 8 bytes that carry a slot: all
// but the two of the RFC 9562 variant.
const slotBits = 1<<62 - 1

func newWorkIndex() workIndex {
	return workIndex{
		key:    rand.Uint64() & slotBits,
		chunks: make(map[uint64]*workChunk),
		other:  make(map[uuid.UUID]*workRow),
	}
}

// newID returns a new work id: a version 7 UUID (time-ordered, as the
// other ids of the store) whose random bits after the variant locate a slot
// of its own.
func (w *workIndex) newID() (uuid.UUID, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.Nil, err
	}
	slot := w.issued
	w.issued++
	binary.BigEndian.PutUint64(id[8:], 1<<63|(slot^w.key)&slotBits)
	return id, nil
}

// slotOf returns the slot id would have been drawn for.
func (w *workIndex) slotOf(id uuid.UUID) uint64 {
	return binary.BigEndian.Uint64(id[8:])&slotBits ^ w.key
}

// get returns the pending row with the given id, nil when there is none.
func (w *workIndex) get(id uuid.UUID) *workRow {
	slot := w.slotOf(id)
	if c := w.chunks[slot/workChunkSize]; c != nil {
		if r := c.rows[slot%workChunkSize]; r != nil && r.id == id {
			return r
		}
	}
	if len(w.other) == 0 {
		return nil
	}
	return w.other[id]
}

// put adds r, a row whose id no pending row has: in the slot its id
// locates, when that slot was handed out and is free, else in other.
func (w *workIndex) put(r *workRow) {
	w.rows++
	if slot := w.slotOf(r.id); slot < w.issued {
		c := w.chunks[slot/workChunkSize]
		if c == nil {
			c = &workChunk{}
			w.chunks[slot/workChunkSize] = c
		}
		if c.rows[slot%workChunkSize] == nil {
			c.rows[slot%workChunkSize] = r
			c.held++
			return
		}
	}
	w.other[r.id] = r
}

// remove takes r, a row of the index, out.
func (w *workIndex) remove(r *workRow) {
	w.rows--
	slot := w.slotOf(r.id)
	if c := w.chunks[slot/workChunkSize]; c != nil && c.rows[slot%workChunkSize] == r {
		c.rows[slot%workChunkSize] = nil
		if c.held--; c.held == 0 {
			delete(w.chunks, slot/workChunkSize)
		}
		return
	}
	delete(w.other, r.id)
}
