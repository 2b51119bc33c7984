package postgres_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// TestConcurrentClaimers has several instances, each on its own pool, claim
// and then fetch every stream at the same time. Whatever the interleaving,
// a stream ends up leased to exactly one instance, no row gains an attempt,
// and fetches by non-owners take nothing.
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

	for s, i := range owner {
		seen[s] = i
	}
	rows, err := first.pool.Query(ctx, `SELECT stream_id, instance_id FROM `+
		pgx.Identifier{first.schema}.Sanitize()+`.vantage_active_streams`)
	require.NoError(t, err)
	var (
		stream, holder uuid.UUID
		leases         int
	)
	_, err = pgx.ForEachRow(rows, []any{&stream, &holder}, func() error {
		require.Equal(t, ids[seen[stream]], holder, "stream %s is leased to the instance that fetched it", stream)
		leases++
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 2*streams, leases, "one lease per stream")
}

// TestClaimLeavesLiveHeldStreamsAlone checks what a claim writes for the
// streams the caller holds: nothing while their lease is live (a new row
// appended to one is drained under the same lease), a new expiry once it
// expired (nobody took the stream), and nothing at all when the caller is
// no longer live.
func TestClaimLeavesLiveHeldStreamsAlone(t *testing.T) {
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
	claim := func(at time.Time) ([]uuid.UUID, error) {
		t.Helper()
		res, err := b.backend.Claimer.WorkClaim(ctx, &ports.WorkClaimParams{
			InstanceID: instance, MaxStreams: 10, LeaseDuration: time.Minute, StaleThreshold: time.Hour, Now: at,
		})
		if err != nil {
			return nil, err
		}
		return res.StreamIDs, nil
	}
	type lease struct {
		holder  pgtype.UUID
		expiry  pgtype.Timestamptz
		version string // the row version (xmin): a write changes it
	}
	leaseOf := func() lease {
		t.Helper()
		var l lease
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT instance_id, lease_expiry, xmin::text FROM `+s+`.vantage_active_streams WHERE stream_id = $1`, stream).
			Scan(&l.holder, &l.expiry, &l.version))
		return l
	}
	_, err := b.backend.Claimer.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{InstanceID: instance, StaleThreshold: time.Hour, Now: base})
	require.NoError(t, err)
	appendAt(base)
	got, err := claim(base)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{stream}, got)
	first := leaseOf()
	require.Equal(t, [16]byte(instance), first.holder.Bytes)
	require.Equal(t, base.Add(time.Minute), first.expiry.Time.UTC())

	appendAt(base.Add(time.Second))
	got, err = claim(base.Add(2 * time.Second))
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{stream}, got)
	require.Equal(t, first, leaseOf(), "a held stream under a live lease is not written")

	got, err = claim(base.Add(2 * time.Minute))
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{stream}, got)
	require.Equal(t, base.Add(3*time.Minute), leaseOf().expiry.Time.UTC(), "the caller's own expired lease is taken back")

	_, err = claim(base.Add(2 * time.Hour))
	require.ErrorIs(t, err, ports.ErrInstanceNotAlive)
	require.Equal(t, base.Add(3*time.Minute), leaseOf().expiry.Time.UTC(), "a claim of a caller that is not live writes nothing")
}
