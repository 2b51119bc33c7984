package postgres_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// TestConcurrentAbandonersAbandonOnce has eight survivors, each a Store on
// its own pool, heartbeat at the same instant just after a victim holding
// hundreds of rows over many streams went stale, several rounds in a row.
// Whatever the interleaving, no heartbeat fails (an abandonment that locked
// rows in no particular order deadlocked in about one of six), the victim
// is abandoned by exactly one of them, its streams are released, and each
// row it was handed gains exactly one attempt, the others none.
func TestConcurrentAbandonersAbandonOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const (
		survivors = 8
		rounds    = 6
		streams   = 40
		perStream = 10
		handedOut = 6 // the victim's fetches returned versions 1 to 6
		threshold = 30 * time.Second
	)
	b := setup(t)
	s := pgx.Identifier{b.schema}.Sanitize()
	handles := make([]*testBundle, survivors)
	ids := make([]uuid.UUID, survivors)
	for i := range handles {
		handles[i], ids[i] = newStore(t, b.schema), uuid.New()
	}
	heartbeat := func(h *testBundle, id uuid.UUID, now time.Time) (*ports.InstanceHeartbeatResult, error) {
		return h.backend.Claimer.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{InstanceID: id, StaleThreshold: threshold, Now: now})
	}

	for round := range rounds {
		start := base.Add(time.Duration(round) * time.Hour)
		victim := uuid.New()
		_, err := heartbeat(b, victim, start)
		require.NoError(t, err)
		var victimStreams []uuid.UUID
		require.NoError(t, b.pool.QueryRow(ctx, `
WITH st AS (SELECT gen_random_uuid() AS id FROM generate_series(1, $1::integer)),
rows AS (
    INSERT INTO `+s+`.vantage_work (work_id, stream_id, perspective, event_id, event_version)
    SELECT gen_random_uuid(), st.id, 'p', gen_random_uuid(), v
    FROM st, generate_series(1, $2::integer) v
),
leases AS (
    INSERT INTO `+s+`.vantage_active_streams (stream_id, instance_id, lease_expiry, handed_out, first_seq, last_activity_at)
    SELECT st.id, $3::uuid, $4::timestamptz + interval '1 hour', jsonb_build_object('p', $5::integer), 0, $4::timestamptz FROM st
)
SELECT array_agg(id) FROM st`, streams, perStream, victim, start, handedOut).Scan(&victimStreams))
		// The survivors come back after an hour (Rejoined: they abandon
		// nobody) and are live from here on; the victim never heartbeats
		// again.
		for i, h := range handles {
			res, err := heartbeat(h, ids[i], start.Add(20*time.Second))
			require.NoError(t, err)
			require.True(t, res.Rejoined, "round %d: a survivor silent for an hour rejoins", round)
			require.Empty(t, res.Abandoned)
		}

		var (
			wg      sync.WaitGroup
			release = make(chan struct{})
			results = make([]*ports.InstanceHeartbeatResult, survivors)
			errs    = make([]error, survivors)
		)
		for i, h := range handles {
			wg.Go(func() {
				<-release
				results[i], errs[i] = heartbeat(h, ids[i], start.Add(threshold+time.Second))
			})
		}
		close(release)
		wg.Wait()
		require.NoError(t, errors.Join(errs...), "round %d", round)

		var abandoned []uuid.UUID
		for _, res := range results {
			require.False(t, res.Rejoined, "round %d: survivors were live", round)
			abandoned = append(abandoned, res.Abandoned...)
		}
		require.Equal(t, []uuid.UUID{victim}, abandoned, "round %d: the victim is abandoned once in all", round)

		var total, charged, uncharged, released, instances int
		require.NoError(t, b.pool.QueryRow(ctx, `
SELECT count(*), count(*) FILTER (WHERE attempts = 1 AND event_version <= $3), count(*) FILTER (WHERE attempts = 0 AND event_version > $3),
       (SELECT count(*) FROM `+s+`.vantage_active_streams
        WHERE stream_id = ANY($1) AND instance_id IS NULL AND lease_expiry IS NULL AND handed_out = '{}'),
       (SELECT count(*) FROM `+s+`.vantage_instances WHERE instance_id = $2)
FROM `+s+`.vantage_work WHERE stream_id = ANY($1)`, victimStreams, victim, handedOut).Scan(&total, &charged, &uncharged, &released, &instances))
		require.Equal(t, streams*perStream, total, "round %d", round)
		require.Equal(t, streams*handedOut, charged, "round %d: every row handed to the victim gains one attempt", round)
		require.Equal(t, streams*(perStream-handedOut), uncharged, "round %d: the rows it was not handed gain none", round)
		require.Equal(t, streams, released, "round %d: the victim's leases are released and their marks cleared", round)
		require.Zero(t, instances, "round %d: the victim's row is deleted", round)

		listed, err := b.backend.Admin.InstancesList(ctx)
		require.NoError(t, err)
		require.Len(t, listed, survivors, "round %d: every survivor stays", round)
		require.False(t, slices.ContainsFunc(listed, func(in ports.Instance) bool { return in.ID == victim }))
	}
}

// A stale instance paused in the middle of a work statement (a SIGSTOP
// while its batch held a stream row) must not hold up the heartbeats of
// the live ones: waiting for its lock, a survivor's heartbeat waited for
// as long as the pause, and could go stale itself. The survivor abandons
// the streams it can lock, leaves the locked one and the instance for a
// later heartbeat, and that one abandons them once the lock is gone.
func TestAbandonmentPassesOverAStreamTheStaleInstanceLocks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const threshold = 30 * time.Second
	b := setup(t)
	s := pgx.Identifier{b.schema}.Sanitize()
	victim, survivor := uuid.New(), uuid.New()
	heartbeat := func(id uuid.UUID, now time.Time) *ports.InstanceHeartbeatResult {
		t.Helper()
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		res, err := b.backend.Claimer.InstanceHeartbeat(hctx, &ports.InstanceHeartbeatParams{InstanceID: id, StaleThreshold: threshold, Now: now})
		require.NoError(t, err)
		return res
	}
	heartbeat(victim, base)
	heartbeat(survivor, base)
	locked, free := uuid.New(), uuid.New()
	_, err := b.pool.Exec(ctx, `
INSERT INTO `+s+`.vantage_work (work_id, stream_id, perspective, event_id, event_version)
SELECT gen_random_uuid(), st, 'p', gen_random_uuid(), 1 FROM unnest($1::uuid[]) st`, []uuid.UUID{locked, free})
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `
INSERT INTO `+s+`.vantage_active_streams (stream_id, instance_id, lease_expiry, handed_out, first_seq, last_activity_at)
SELECT st, $2::uuid, $3::timestamptz + interval '1 hour', jsonb_build_object('p', 1), 0, $3::timestamptz FROM unnest($1::uuid[]) st`,
		[]uuid.UUID{locked, free}, victim, base)
	require.NoError(t, err)
	leaseOf := func(stream uuid.UUID) *uuid.UUID {
		t.Helper()
		var holder *uuid.UUID
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT instance_id FROM `+s+`.vantage_active_streams WHERE stream_id = $1`, stream).Scan(&holder))
		return holder
	}

	// The victim's unfinished statement.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM `+s+`.vantage_active_streams WHERE stream_id = $1 FOR UPDATE`, locked)
	require.NoError(t, err)

	heartbeat(survivor, base.Add(threshold/2))
	res := heartbeat(survivor, base.Add(threshold+time.Second))
	require.Empty(t, res.Abandoned, "the victim stays until its last stream is abandoned")
	require.Nil(t, leaseOf(free), "the stream it could lock is released")
	require.Equal(t, &victim, leaseOf(locked), "the locked stream waits")

	require.NoError(t, tx.Rollback(ctx))
	res = heartbeat(survivor, base.Add(threshold+2*time.Second))
	require.Equal(t, []uuid.UUID{victim}, res.Abandoned)
	require.Nil(t, leaseOf(locked))
	var attempts []int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT array_agg(attempts ORDER BY stream_id) FROM `+s+`.vantage_work WHERE stream_id = ANY($1)`, []uuid.UUID{locked, free}).Scan(&attempts))
	require.Equal(t, []int{1, 1}, attempts, "each handed-out row charged once, by the abandonment that took its stream")
}
