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
			require.Zero(t, w.Attempts, "leasing unleased rows and extending the owner's lease are no attempts")
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
			require.Zero(t, w.Attempts)
			rowsSeen++
		}
	}
	require.Equal(t, streams*2*2, rowsSeen, "every row of the fresh streams was leased once")

	var holders int
	require.NoError(t, first.pool.QueryRow(ctx, `SELECT count(DISTINCT (stream_id, instance_id)) FROM `+
		pgx.Identifier{first.schema}.Sanitize()+`.vantage_work`).Scan(&holders))
	require.Equal(t, 2*streams, holders, "each stream's rows have one holder")
}

// TestClaimRefreshesHeldStreams checks the rows and pins a claim writes for
// the streams the caller already drains, which it skips when they have
// nothing to lease: a row appended to a held stream is leased by the next
// claim, a held stream whose pin was lost is pinned again, and a claim by a
// caller that is no longer live changes neither.
func TestClaimRefreshesHeldStreams(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	subscribe(t, b, testPerspective)
	s := pgx.Identifier{b.schema}.Sanitize()
	stream, instance := newUUID(t), uuid.New()
	appendAt := func(at time.Time) {
		t.Helper()
		_, err := b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, Events: newEvents(1), Now: at})
		require.NoError(t, err)
	}
	claim := func(at time.Time) error {
		t.Helper()
		_, err := b.backend.Claimer.WorkClaim(ctx, &ports.WorkClaimParams{
			InstanceID: instance, MaxStreams: 10, LeaseDuration: time.Hour, StaleThreshold: time.Minute, Now: at,
		})
		return err
	}
	leasedTo := func() []any {
		t.Helper()
		rows, err := b.pool.Query(ctx, `SELECT instance_id FROM `+s+`.vantage_work ORDER BY event_version`)
		require.NoError(t, err)
		holders, err := pgx.CollectRows(rows, pgx.RowTo[any])
		require.NoError(t, err)
		return holders
	}
	pinned := func() bool {
		t.Helper()
		var ok bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+s+`.vantage_active_streams WHERE stream_id = $1 AND instance_id = $2)`, stream, instance).Scan(&ok))
		return ok
	}
	holder := [16]byte(instance)
	_, err := b.backend.Claimer.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{InstanceID: instance, StaleThreshold: time.Minute, Now: base})
	require.NoError(t, err)
	appendAt(base)
	require.NoError(t, claim(base))
	require.Equal(t, []any{holder}, leasedTo())

	appendAt(base.Add(time.Second))
	require.NoError(t, claim(base.Add(2*time.Second)))
	require.Equal(t, []any{holder, holder}, leasedTo(), "the appended row of the held stream")

	_, err = b.pool.Exec(ctx, `DELETE FROM `+s+`.vantage_active_streams WHERE stream_id = $1`, stream)
	require.NoError(t, err)
	require.NoError(t, claim(base.Add(3*time.Second)))
	require.True(t, pinned(), "the held stream is pinned again")

	_, err = b.pool.Exec(ctx, `DELETE FROM `+s+`.vantage_active_streams WHERE stream_id = $1`, stream)
	require.NoError(t, err)
	appendAt(base.Add(4 * time.Second))
	require.ErrorIs(t, claim(base.Add(2*time.Minute)), ports.ErrInstanceNotAlive)
	require.False(t, pinned(), "a claim of a caller that is not live pins nothing")
	require.Equal(t, []any{holder, holder, nil}, leasedTo(), "and leases nothing")
}
