package enginetest_test

import (
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
)

// TestClaimsDisabledTakesNoShare runs two workers on one backend, one with
// Claims.Disabled: the active one applies a backlog spread over every
// partition, the passive one none of it (had it taken a rank, the streams
// of its partitions would never be claimed), and the passive one still
// rebuilds.
func TestClaimsDisabledTakesNoShare(t *testing.T) {
	t.Parallel()

	const (
		streams   = 32
		perStream = 3
	)
	store := memory.New(memory.Options{})
	t.Cleanup(func() { _ = store.Close() })
	reg := testRegistry(t)

	passiveOpts := quietOptions(t)
	passiveOpts.Claims.PartitionCount = 8
	passiveOpts.Claims.Disabled = true
	records := make(chan slog.Record, 1000)
	passiveOpts.Logger = slog.New(recordHandler{records})
	var passiveApplied atomic.Int64
	passiveOpts.Hooks.OnPerspectiveEventProcessed = func(e core.PerspectiveEventProcessed) { passiveApplied.Add(int64(e.EventCount)) }
	rebuilds := make(chan core.RewindInfo, streams+1)
	passiveOpts.Hooks.OnRewind = func(r core.RewindInfo) { rebuilds <- r }
	passive := startWorker(t, store.Backend(), reg, passiveOpts)
	for r := waitFor(t, records, "the start logged"); r.Message != "worker started"; r = waitFor(t, records, "the start logged") {
	}
	// The passive worker is live (it heartbeat at Start) before the active
	// one claims anything.

	activeOpts := quietOptions(t)
	activeOpts.Claims.PartitionCount = 8
	processed := reportProcessed(&activeOpts, 10*streams*perStream)
	startWorker(t, store.Backend(), reg, activeOpts)

	ids := make([]uuid.UUID, streams)
	for i := range ids {
		ids[i] = uuid.New()
		appendAdded(t, reg, store.Backend(), ids[i], 1, 2, 3)
	}
	reached := map[uuid.UUID]int64{}
	for len(reached) < streams || slices.ContainsFunc(ids, func(id uuid.UUID) bool { return reached[id] < perStream }) {
		e := waitFor(t, processed, "the active worker to apply the backlog")
		reached[e.StreamID] = max(reached[e.StreamID], e.LastVersion)
	}
	for _, id := range ids {
		tot := loadTotal(t, store.Backend(), id)
		require.Equal(t, 6, tot.Sum, "stream %s", id)
		require.Equal(t, []int64{1, 2, 3}, tot.Seen, "stream %s", id)
	}
	require.Zero(t, passiveApplied.Load(), "the passive worker claims nothing")

	list, err := store.Backend().Admin.InstancesList(t.Context())
	require.NoError(t, err)
	require.Len(t, list, 2)
	for _, inst := range list {
		require.Equal(t, inst.ID == passive.InstanceID(), inst.Passive, "instance %s", inst.ID)
	}

	rebuilt, err := passive.Rebuild(t.Context(), "total", ids...)
	require.NoError(t, err)
	require.Equal(t, streams, rebuilt)
	for range streams {
		require.True(t, waitFor(t, rebuilds, "a rebuild").Rebuild)
	}
	for _, id := range ids {
		tot := loadTotal(t, store.Backend(), id)
		require.Equal(t, 6, tot.Sum, "stream %s rebuilt", id)
		require.Equal(t, []int64{1, 2, 3}, tot.Seen, "stream %s rebuilt", id)
	}
}

// TestClaimsDisabledLogged checks that the start of a passive worker says
// that it claims nothing.
func TestClaimsDisabledLogged(t *testing.T) {
	t.Parallel()

	opts := quietOptions(t)
	opts.Claims.Disabled = true
	records := make(chan slog.Record, 1000)
	opts.Logger = slog.New(recordHandler{records})
	startWorker(t, memory.New(memory.Options{}).Backend(), testRegistry(t), opts)

	r := waitFor(t, records, "the start logged")
	for r.Message != "worker started" {
		r = waitFor(t, records, "the start logged")
	}
	disabled := false
	r.Attrs(func(a slog.Attr) bool {
		disabled = disabled || (a.Key == "claims_disabled" && a.Value.Bool())
		return true
	})
	require.True(t, disabled, "worker started says claims are disabled")
}
