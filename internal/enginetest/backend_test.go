package enginetest_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/ports"
)

// saveCounter wraps a ModelStore, as a host's instrumentation would, and
// counts the saves that reach it one by one.
type saveCounter struct {
	ports.ModelStore
	saves atomic.Int64
}

func (c *saveCounter) ModelSave(ctx context.Context, p *ports.ModelSaveParams) error {
	c.saves.Add(1)
	return c.ModelStore.ModelSave(ctx, p)
}

// batchCounter wraps a ModelBatchStore and counts the models saved through
// it.
type batchCounter struct {
	ports.ModelBatchStore
	saved atomic.Int64
}

func (c *batchCounter) ModelSaveMany(ctx context.Context, params *ports.ModelSaveManyParams) ([]error, error) {
	c.saved.Add(int64(len(params.Saves)))
	return c.ModelBatchStore.ModelSaveMany(ctx, params)
}

// TestWrappedModelsKeepBatching wraps the backend's ModelStore in a type
// that has no batch methods: the engine still groups its saves, because it
// finds the batch port in Backend.ModelBatch, not on the ModelStore value.
func TestWrappedModelsKeepBatching(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	single := &saveCounter{ModelStore: b.Models}
	batch := &batchCounter{ModelBatchStore: b.ModelBatch}
	b.Models, b.ModelBatch = single, batch
	reg := testRegistry(t)
	opts := quietOptions(t)
	processed := reportProcessed(&opts, 16)
	streams := []uuid.UUID{uuid.New(), uuid.New()}
	for _, s := range streams {
		appendAdded(t, reg, b, s, 1, 2)
	}

	startWorker(t, b, reg, opts)
	reached := map[uuid.UUID]int64{}
	for reached[streams[0]] < 2 || reached[streams[1]] < 2 {
		e := waitFor(t, processed, "both streams applied")
		reached[e.StreamID] = max(reached[e.StreamID], e.LastVersion)
	}

	require.Positive(t, batch.saved.Load(), "the saves went through Backend.ModelBatch")
	require.Zero(t, single.saves.Load(), "no save went one by one through the wrapped ModelStore")
	for _, s := range streams {
		require.Equal(t, 3, loadTotal(t, b, s).Sum)
	}
}

// TestWithoutNotifierPolls runs the engine on a backend without a Notifier:
// New accepts it, and the worker finds appended events by polling.
func TestWithoutNotifierPolls(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	b.Notifier = nil
	reg := testRegistry(t)
	opts := quietOptions(t) // polls every 10ms
	processed := reportProcessed(&opts, 16)
	startWorker(t, b, reg, opts)
	stream := uuid.New()
	appendAdded(t, reg, b, stream, 1, 2) // after Start: only a poll finds them

	for reached := int64(0); reached < 2; {
		reached = max(reached, waitFor(t, processed, "the events applied by polling").LastVersion)
	}
	require.Equal(t, 3, loadTotal(t, b, stream).Sum)
	require.NoError(t, b.Validate(), "the Notifier is optional")
}
