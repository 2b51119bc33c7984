package enginetest_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// scaledValues is the model of the "scaled" perspective: each event's N
// times the factor its apply ran at, in the order applied, so a model tells
// which apply function produced each of its values.
type scaledValues struct {
	Values []int64 `json:"values"`
}

// scaledRegistry registers added and the "scaled" perspective, whose
// applies read factor.
func scaledRegistry(t *testing.T, factor *atomic.Int64) *core.Registry {
	t.Helper()
	reg := core.NewRegistry()
	require.NoError(t, core.RegisterEvent[added](reg, "added"))
	p := core.NewPerspective[scaledValues]("scaled")
	core.MustHandle(p, func(_ context.Context, m scaledValues, e added) (scaledValues, error) {
		m.Values = append(m.Values, int64(e.N)*factor.Load())
		return m, nil
	})
	require.NoError(t, reg.AddPerspective(p))
	return reg
}

// loadScaled returns the values of stream's stored "scaled" model.
func loadScaled(t *testing.T, b ports.Backend, stream uuid.UUID) []int64 {
	t.Helper()
	m, err := b.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: stream, Perspective: "scaled"})
	require.NoError(t, err)
	var v scaledValues
	require.NoError(t, json.Unmarshal(m.Data, &v))
	return v.Values
}

// heldSnapshots is a SnapshotStore whose first save once hold is set
// reports its snapshot on entered and stores it only when release is
// closed, then reports the result on stored: the write of a drain that
// saved its model, delayed past whatever the test does meanwhile.
type heldSnapshots struct {
	ports.SnapshotStore
	hold    atomic.Bool
	entered chan ports.Snapshot
	release chan struct{}
	stored  chan error
}

func newHeldSnapshots(s ports.SnapshotStore) *heldSnapshots {
	return &heldSnapshots{SnapshotStore: s, entered: make(chan ports.Snapshot, 1), release: make(chan struct{}), stored: make(chan error, 1)}
}

func (h *heldSnapshots) SnapshotSave(ctx context.Context, p *ports.SnapshotSaveParams) error {
	if !h.hold.CompareAndSwap(true, false) {
		return h.SnapshotStore.SnapshotSave(ctx, p)
	}
	h.entered <- p.Snapshot
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	err := h.SnapshotStore.SnapshotSave(ctx, p)
	h.stored <- err
	return err
}

// snapshotOptions are wakeOnlyOptions with a snapshot whenever a model
// crosses an even version and rewinds that run as soon as they are due.
func snapshotOptions(t *testing.T) core.Options {
	o := wakeOnlyOptions(t)
	o.Rewind.SnapshotEvery = 2
	o.Rewind.Debounce = time.Millisecond
	o.Rewind.MaxDebounce = time.Millisecond
	return o
}

// TestRewindIgnoresASnapshotOfAReplacedModel rebuilds a stream on an
// instance that does not hold it while the holder's snapshot of the model
// it saved before the rebuild is on its way: the holder stores it after the
// rebuild deleted the pair's snapshots and saved. That snapshot copies the
// model of the old apply function. A late event above it then makes the
// holder rewind the pair, which must not start from it: every value of the
// final model is the rebuilt apply function's.
func TestRewindIgnoresASnapshotOfAReplacedModel(t *testing.T) {
	t.Parallel()

	store := memory.New(memory.Options{})
	t.Cleanup(func() { _ = store.Close() })
	var factor atomic.Int64
	factor.Store(1)
	held := newHeldSnapshots(store.Backend().Snapshots)
	hb := store.Backend()
	hb.Snapshots = held
	o := snapshotOptions(t)
	processed := reportProcessed(&o, 16)
	rewinds := make(chan core.RewindInfo, 4)
	o.Hooks.OnRewind = func(i core.RewindInfo) { rewinds <- i }
	reg := scaledRegistry(t, &factor)
	startWorker(t, hb, reg, o)
	rebuilder := startWorker(t, store.Backend(), scaledRegistry(t, &factor), func() core.Options {
		p := snapshotOptions(t)
		p.Claims.Disabled = true
		return p
	}())
	stream := uuid.New()

	// The holder saves versions 1 to 3 at factor 1; its snapshot waits.
	held.hold.Store(true)
	appendAt(t, reg, store.Backend(), stream, 1, 2, 3)
	stale := waitFor(t, held.entered, "the holder's snapshot after its save")
	require.Equal(t, int64(3), stale.Version, "the holder saved the three events at once")

	factor.Store(10)
	rebuilt, err := rebuilder.Rebuild(t.Context(), "scaled", stream)
	require.NoError(t, err)
	require.Equal(t, 1, rebuilt)
	require.Equal(t, []int64{10, 20, 30}, loadScaled(t, store.Backend(), stream), "rebuilt at factor 10")

	// The holder's snapshot of the replaced model lands after the rebuild.
	close(held.release)
	require.NoError(t, waitFor(t, held.stored, "the holder's snapshot stored"))
	waitForVersion(t, processed, 3)

	appendAt(t, reg, store.Backend(), stream, 4, 6)
	waitForVersion(t, processed, 6)
	require.Equal(t, []int64{10, 20, 30, 40, 60}, loadScaled(t, store.Backend(), stream), "the holder applies to the rebuilt model")

	// Version 5 is late: the holder rewinds from a snapshot below it.
	appendAt(t, reg, store.Backend(), stream, 5)
	info := waitFor(t, rewinds, "the rewind of the late event")
	require.Equal(t, int64(5), info.TriggerVersion)
	require.Equal(t, []int64{10, 20, 30, 40, 50, 60}, loadScaled(t, store.Backend(), stream),
		"every event reflects the rebuilt apply function, none the snapshot of the replaced model")
	require.Equal(t, int64(2), info.FromVersion, "the replay starts from the rebuild's snapshot")
}

// TestRewindKeepsTheSnapshotItStartedFrom rewinds a stream twice, each time
// for a late event just above the latest snapshot of the drain. The first
// rewind starts from that snapshot and moves the pair to the next epoch; the
// second, whose trigger lies below every snapshot the first one's replay
// stored, still starts from it rather than from the start of the stream.
func TestRewindKeepsTheSnapshotItStartedFrom(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	reg := testRegistry(t)
	o := snapshotOptions(t)
	o.Rewind.SnapshotEvery = 4
	processed := reportProcessed(&o, 16)
	rewinds := make(chan core.RewindInfo, 4)
	o.Hooks.OnRewind = func(i core.RewindInfo) { rewinds <- i }
	startWorker(t, b, reg, o)
	stream := uuid.New()
	appendAt(t, reg, b, stream, 1, 2, 3, 4, 5) // one save, a snapshot at 5
	waitForVersion(t, processed, 5)
	appendAt(t, reg, b, stream, 6, 9, 10) // a snapshot at 10
	waitForVersion(t, processed, 10)

	appendAt(t, reg, b, stream, 8)
	first := waitFor(t, rewinds, "the rewind of version 8")
	require.Equal(t, int64(8), first.TriggerVersion)
	require.Equal(t, int64(5), first.FromVersion, "the drain's snapshot")

	appendAt(t, reg, b, stream, 7)
	second := waitFor(t, rewinds, "the rewind of version 7")
	require.Equal(t, int64(7), second.TriggerVersion)
	require.Equal(t, int64(5), second.FromVersion, "the snapshot the first rewind started from, kept for the epoch it moved to")
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, loadTotal(t, b, stream).Seen)
}
