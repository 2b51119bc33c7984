package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// waitUntilBlockedBy waits until a backend waits for a lock that the
// backend pid holds. Polling the catalog is the only way to observe a
// blocked statement.
func waitUntilBlockedBy(t *testing.T, pid uint32) {
	t.Helper()
	require.Eventually(t, func() bool {
		var blocked int
		err := pgtest.Pool(t).QueryRow(t.Context(),
			`SELECT count(*) FROM pg_stat_activity WHERE $1::integer = ANY (pg_blocking_pids(pid))`, pid).Scan(&blocked)
		require.NoError(t, err)
		return blocked > 0
	}, 10*time.Second, 5*time.Millisecond)
}

// TestLateAppendWaitsForCursorMovers checks the statement shape that keeps
// a late arrival from being missed by a concurrent completion: an append
// whose event may land below a cursor (an explicit version at or below the
// stream head) locks the stream's cursors before it reads them, so it waits
// for a transaction moving one and then sees where it moved; an append
// above the head, the common case, reads no cursor and waits for nobody.
func TestLateAppendWaitsForCursorMovers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	q := pgx.Identifier{b.schema}.Sanitize()
	subscribe(t, b, testPerspective)
	stream := newUUID(t)
	appendAt := func(version int64) *ports.EventsAppendResult {
		t.Helper()
		res, err := b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{
			StreamID: stream, Events: []ports.NewEvent{{Type: testType, Data: []byte(`{}`), Version: version}}, Now: base,
		})
		require.NoError(t, err)
		return res
	}
	appendAt(1)
	appendAt(3)
	require.NoError(t, b.backend.Models.ModelSave(ctx, &ports.ModelSaveParams{
		StreamID: stream, Perspective: testPerspective, Data: []byte(`{}`), LastEventID: newUUID(t), LastVersion: 1, Now: base,
	}))

	// A completion moving the cursor to 4 holds its row until it commits.
	mover, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = mover.Rollback(context.WithoutCancel(ctx)) })
	var pid uint32
	require.NoError(t, mover.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	_, err = mover.Exec(ctx, `UPDATE `+q+`.vantage_cursors SET last_version = 4 WHERE stream_id = $1 AND perspective = $2`, stream, testPerspective)
	require.NoError(t, err)

	aboveCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := b.backend.Events.EventsAppend(aboveCtx, &ports.EventsAppendParams{StreamID: stream, Events: newEvents(1), Now: base})
	require.NoError(t, err, "an append above the head does not wait for the cursor")
	require.Equal(t, int64(4), res.Events[0].Version)

	late := make(chan error, 1)
	go func() {
		_, err := b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{
			StreamID: stream, Events: []ports.NewEvent{{Type: testType, Data: []byte(`{}`), Version: 2}}, Now: base,
		})
		late <- err
	}()
	waitUntilBlockedBy(t, pid)
	require.NoError(t, mover.Commit(ctx))
	require.NoError(t, wait(t, late, "the late append"))

	var lateRows []int64
	rows, err := b.pool.Query(ctx, `SELECT event_version FROM `+q+`.vantage_work WHERE stream_id = $1 AND late ORDER BY 1`, stream)
	require.NoError(t, err)
	lateRows, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{2}, lateRows, "the append read the cursor as the mover committed it (4), not as it was (1)")
	cursors, err := b.backend.Cursors.CursorsGet(ctx, &ports.CursorsGetParams{StreamIDs: []uuid.UUID{stream}})
	require.NoError(t, err)
	require.Len(t, cursors, 1)
	require.True(t, cursors[0].Status.Has(ports.CursorRewindRequired))
	require.Equal(t, int64(2), cursors[0].RewindTriggerVersion)
}
