package postgres_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// TestConcurrentClaimers has several instances, each on its own pool, claim
// and then fetch every stream at the same time. Whatever the interleaving,
// a stream ends up leased to exactly one instance, every row is leased once
// (attempts 1), and fetches by non-owners lease nothing.
func TestConcurrentClaimers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const (
		instances = 4
		streams   = 40
	)
	first := setup(t)
	subscribe(t, first, testPerspective, "totals")
	all := make([]uuid.UUID, streams)
	for i := range all {
		all[i] = newUUID(t)
		_, err := first.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: all[i], Events: newEvents(3), Now: base})
		require.NoError(t, err)
	}
	handles := make([]*testBundle, instances)
	ids := make([]uuid.UUID, instances)
	for i := range handles {
		handles[i] = newStore(t, first.schema)
		ids[i] = uuid.New()
		_, err := handles[i].backend.Claimer.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{InstanceID: ids[i], StaleThreshold: time.Minute, Now: base})
		require.NoError(t, err)
	}

	run := func(fn func(i int) error) {
		var (
			wg   sync.WaitGroup
			errs = make([]error, instances)
		)
		for i := range instances {
			wg.Go(func() { errs[i] = fn(i) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
	}
	claimed := make([][]uuid.UUID, instances)
	run(func(i int) error {
		res, err := handles[i].backend.Claimer.WorkClaim(ctx, &ports.WorkClaimParams{
			InstanceID: ids[i], MaxStreams: streams, PartitionCount: 7, LeaseDuration: time.Minute, StaleThreshold: time.Minute, Now: base,
		})
		if err == nil {
			claimed[i] = res.StreamIDs
		}
		return err
	})
	seen := map[uuid.UUID]int{}
	for i, ss := range claimed {
		for _, s := range ss {
			prev, dup := seen[s]
			require.False(t, dup, "stream %s claimed by instances %d and %d", s, prev, i)
			seen[s] = i
		}
	}
	require.Len(t, seen, streams, "every stream has exactly one owner")

	// Everyone fetches every stream: only owners lease, and only their rows.
	fetched := make([][]ports.WorkItem, instances)
	run(func(i int) error {
		res, err := handles[i].backend.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
			InstanceID: ids[i], StreamIDs: all, LeaseDuration: time.Minute, StaleThreshold: time.Minute, Now: base.Add(time.Second),
		})
		if err == nil {
			fetched[i] = res.Work
		}
		return err
	})
	rowsSeen := 0
	for i, work := range fetched {
		for _, w := range work {
			require.Equal(t, i, seen[w.StreamID], "instance %d fetched a stream it does not own", i)
			require.Equal(t, 1, w.Attempts, "extending the owner's lease is not an attempt")
			rowsSeen++
		}
	}
	require.Equal(t, streams*3*2, rowsSeen)

	// Fresh, unpinned streams fetched by everyone at once: the pin decides
	// a single owner per stream, the others lease nothing there.
	fresh := make([]uuid.UUID, streams)
	for i := range fresh {
		fresh[i] = newUUID(t)
		_, err := first.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: fresh[i], Events: newEvents(2), Now: base})
		require.NoError(t, err)
	}
	run(func(i int) error {
		res, err := handles[i].backend.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
			InstanceID: ids[i], StreamIDs: fresh, LeaseDuration: time.Minute, StaleThreshold: time.Minute, Now: base.Add(2 * time.Second),
		})
		if err == nil {
			fetched[i] = res.Work
		}
		return err
	})
	owner := map[uuid.UUID]int{}
	rowsSeen = 0
	for i, work := range fetched {
		for _, w := range work {
			if prev, ok := owner[w.StreamID]; ok {
				require.Equal(t, prev, i, "stream %s fetched by two instances", w.StreamID)
			}
			owner[w.StreamID] = i
			require.Equal(t, 1, w.Attempts)
			rowsSeen++
		}
	}
	require.Equal(t, streams*2*2, rowsSeen, "every row of the fresh streams was leased once")

	var holders int
	require.NoError(t, first.pool.QueryRow(ctx, `SELECT count(DISTINCT (stream_id, instance_id)) FROM `+
		pgx.Identifier{first.schema}.Sanitize()+`.vantage_work`).Scan(&holders))
	require.Equal(t, 2*streams, holders, "each stream's rows have one holder")
}
