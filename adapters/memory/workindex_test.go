package memory

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestWorkIndexMatchesMap drives a workIndex with random operations (rows
// under ids it drew, under ids of removed rows as a requeue stores them,
// under foreign ids, some of them decoding to a held slot, and removals)
// and checks after every one that it finds exactly the rows a plain map
// finds, and keeps no chunk without rows.
func TestWorkIndexMatchesMap(t *testing.T) {
	t.Parallel()

	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 0))
			w := newWorkIndex()
			ref := map[uuid.UUID]*workRow{}
			var known []uuid.UUID // every id used so far, held or not
			held := func() []*workRow {
				out := make([]*workRow, 0, len(ref))
				for _, id := range known {
					if r := ref[id]; r != nil {
						out = append(out, r)
					}
				}
				return out
			}
			put := func(id uuid.UUID) {
				if ref[id] != nil {
					return // ids of pending rows are unique
				}
				r := &workRow{id: id}
				w.put(r)
				ref[id] = r
				known = append(known, id)
			}
			for step := range 3000 {
				switch op := rng.IntN(10); {
				case op < 5:
					id, err := w.newID()
					require.NoError(t, err)
					require.Equal(t, uuid.Version(7), id.Version(), "work ids stay version 7 UUIDs")
					require.Equal(t, uuid.RFC4122, id.Variant(), "work ids keep the RFC 9562 variant")
					put(id)
				case op < 6 && len(known) > 0:
					put(known[rng.IntN(len(known))]) // requeued under the id of a removed row
				case op < 7:
					put(uuid.New())
				case op < 8 && len(ref) > 0:
					// A foreign id whose bits decode to the slot of a held row.
					rows := held()
					id := uuid.New()
					binary.BigEndian.PutUint64(id[8:], binary.BigEndian.Uint64(rows[rng.IntN(len(rows))].id[8:]))
					put(id)
				case len(ref) > 0:
					rows := held()
					r := rows[rng.IntN(len(rows))]
					w.remove(r)
					delete(ref, r.id)
				}
				require.Equal(t, len(ref), w.rows, "step %d: rows held", step)
				for _, id := range known {
					require.Same(t, ref[id], w.get(id), "step %d: row of %s", step, id)
				}
				require.Nil(t, w.get(uuid.New()), "step %d: an unknown id finds nothing", step)
				inChunks := 0
				for k, c := range w.chunks {
					n := 0
					for _, r := range c.rows {
						if r != nil {
							n++
						}
					}
					require.Positive(t, n, "step %d: chunk %d is kept without rows", step, k)
					require.Equal(t, n, c.held, "step %d: chunk %d counts its rows", step, k)
					inChunks += n
				}
				require.Equal(t, w.rows, inChunks+len(w.other), "step %d: every row is in a chunk or in other", step)
			}
		})
	}
}

// TestWorkIndexIDsDifferBetweenStores checks that two stores draw
// different ids for the same slots, so work ids stay unique beyond one
// store.
func TestWorkIndexIDsDifferBetweenStores(t *testing.T) {
	t.Parallel()

	a, b := newWorkIndex(), newWorkIndex()
	for range 100 {
		ida, err := a.newID()
		require.NoError(t, err)
		idb, err := b.newID()
		require.NoError(t, err)
		require.NotEqual(t, ida[8:], idb[8:], "the same slot of two stores is written differently")
		require.Equal(t, a.slotOf(ida), b.slotOf(idb), "each store decodes its own slot")
	}
}
