package enginetest_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// scaledTotal is a "total" perspective whose applies add each event's N
// times factor and count the applies of each version; the first apply of
// version hold, when set, signals entered and waits for release.
type scaledTotal struct {
	factor  atomic.Int64
	hold    atomic.Int64
	entered chan struct{}
	release chan struct{}
	applies [8]atomic.Int64 // by version
}

func newScaledTotal() *scaledTotal {
	s := &scaledTotal{entered: make(chan struct{}, 1), release: make(chan struct{})}
	s.factor.Store(1)
	return s
}

func (s *scaledTotal) registry(t *testing.T) *core.Registry {
	t.Helper()
	return registryWith(t, func(ctx context.Context, m total, e added) (total, error) {
		ev, _ := core.EventFromContext(ctx)
		if ev.Version == s.hold.Load() && s.hold.CompareAndSwap(ev.Version, 0) {
			s.entered <- struct{}{}
			select {
			case <-s.release:
			case <-ctx.Done():
				return m, ctx.Err()
			}
		}
		s.applies[ev.Version].Add(1)
		m.Sum += e.N * int(s.factor.Load())
		m.Events++
		m.Seen = append(m.Seen, ev.Version)
		return m, nil
	})
}

// passiveOptions are wakeOnlyOptions for an instance that claims nothing,
// so it never holds a stream.
func passiveOptions(t *testing.T) core.Options {
	o := wakeOnlyOptions(t)
	o.Claims.Disabled = true
	return o
}

// TestRefusedSaveDrainsThePairAgain rebuilds a stream on an instance that
// does not hold it while the holder, its model cache off, applies an event
// to the model it loaded before the rebuild. The holder's save is refused
// (the rebuild moved the pair's epoch), charging nothing, and the holder
// drains the pair again at once, although nothing else wakes it (it polls
// and claims an hour apart): it applies the event again, to the rebuilt
// model.
func TestRefusedSaveDrainsThePairAgain(t *testing.T) {
	t.Parallel()

	store := memory.New(memory.Options{})
	t.Cleanup(func() { _ = store.Close() })
	scaled := newScaledTotal()
	o := wakeOnlyOptions(t)
	o.Drain.ModelCacheSize = core.Unlimited
	var charged atomic.Int64
	o.Hooks.OnFailure = func(ports.Failure) { charged.Add(1) }
	o.Hooks.OnDeadLettered = func(ports.DeadLetter) { charged.Add(1) }
	processed := reportProcessed(&o, 16)
	reg := scaled.registry(t)
	startWorker(t, store.Backend(), reg, o)
	stream := uuid.New()
	appendAdded(t, reg, store.Backend(), stream, 1, 2, 3)
	for e := waitFor(t, processed, "the first events applied"); e.LastVersion < 3; {
		e = waitFor(t, processed, "the first events applied")
	}
	rebuilder := startWorker(t, store.Backend(), scaled.registry(t), passiveOptions(t))

	scaled.hold.Store(4)
	appendAdded(t, reg, store.Backend(), stream, 4)
	waitFor(t, scaled.entered, "the holder applying the fourth event")
	scaled.factor.Store(10)
	rebuilt, err := rebuilder.Rebuild(t.Context(), "total", stream)
	require.NoError(t, err)
	require.Equal(t, 1, rebuilt)
	require.Equal(t, 60, loadTotal(t, store.Backend(), stream).Sum, "rebuilt at factor 10")
	close(scaled.release)

	e := waitFor(t, processed, "the fourth event applied to the rebuilt model")
	require.Equal(t, int64(4), e.LastVersion)
	m := loadTotal(t, store.Backend(), stream)
	require.Equal(t, 100, m.Sum, "every event reflects the rebuilt apply function")
	require.Equal(t, []int64{1, 2, 3, 4}, m.Seen)
	require.Equal(t, int64(2), scaled.applies[4].Load(), "applied to the stale model, refused, applied again")
	require.Zero(t, charged.Load(), "a refused save is not the event's failure: nothing is charged")
}

// movingModels is a ModelStore whose first save that rebases a model lets
// move save the model first, as the holder of the stream would while a
// rebuild on another instance replays it.
type movingModels struct {
	ports.ModelStore
	move    func()
	rebases atomic.Int64
}

func (m *movingModels) ModelSave(ctx context.Context, p *ports.ModelSaveParams) error {
	if p.Rebase && m.rebases.Add(1) == 1 {
		m.move()
	}
	return m.ModelStore.ModelSave(ctx, p)
}

// TestRebuildReplaysAgainWhenTheHolderSaves rebuilds a stream whose holder
// saves its model (applying a fourth event at the old factor) while the
// rebuild replays it: the rebuild's save is refused, and the rebuild
// replays the stream again from the model saved meanwhile instead of
// failing.
func TestRebuildReplaysAgainWhenTheHolderSaves(t *testing.T) {
	t.Parallel()

	store := memory.New(memory.Options{})
	t.Cleanup(func() { _ = store.Close() })
	scaled := newScaledTotal()
	o := wakeOnlyOptions(t)
	processed := reportProcessed(&o, 16)
	reg := scaled.registry(t)
	holder := startWorker(t, store.Backend(), reg, o)
	stream := uuid.New()
	appendAdded(t, reg, store.Backend(), stream, 1, 2, 3)
	for e := waitFor(t, processed, "the first events applied"); e.LastVersion < 3; {
		e = waitFor(t, processed, "the first events applied")
	}
	require.NoError(t, holder.Stop(t.Context()))
	fourth := appendAdded(t, reg, store.Backend(), stream, 4).Events[0]

	b := store.Backend()
	b.ModelBatch = nil // every save through movingModels
	models := &movingModels{ModelStore: b.Models}
	models.move = func() {
		stored, err := b.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: stream, Perspective: "total"})
		require.NoError(t, err)
		data, err := json.Marshal(total{Sum: 10, Events: 4, Seen: []int64{1, 2, 3, 4}})
		require.NoError(t, err)
		require.NoError(t, b.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
			StreamID: stream, Perspective: "total", Data: data, LastEventID: fourth.ID, LastVersion: 4,
			ExpectedVersion: stored.LastVersion, ExpectedEpoch: stored.Epoch,
		}))
	}
	b.Models = models
	rebuilder := startWorker(t, b, scaled.registry(t), passiveOptions(t))
	scaled.factor.Store(10)

	rebuilt, err := rebuilder.Rebuild(t.Context(), "total", stream)

	require.NoError(t, err)
	require.Equal(t, 1, rebuilt)
	require.Equal(t, int64(2), models.rebases.Load(), "the first replay's save was refused, the second went through")
	m := loadTotal(t, store.Backend(), stream)
	require.Equal(t, 100, m.Sum, "the replay covers the event the holder saved")
	require.Equal(t, []int64{1, 2, 3, 4}, m.Seen)
}
