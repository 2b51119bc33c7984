package postgres_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// TestWorkFailChargesFailedEvent checks WorkFail's FailedEventID, which a
// rewind sets when the replay of an event applied long ago fails: the event
// gets a pending row again with the attempt and the retry time, the cursor
// past it is flagged for a rewind, and a second failure of the same event
// adds an attempt to that row, taking it from whoever holds it.
func TestWorkFailChargesFailedEvent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	subscribe(t, b, testPerspective)
	s := pgx.Identifier{b.schema}.Sanitize()
	stream, inst, other := newUUID(t), uuid.New(), uuid.New()
	appended, err := b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, Events: newEvents(3), Now: base})
	require.NoError(t, err)
	events := appended.Events
	_, err = b.backend.Claimer.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{InstanceID: inst, StaleThreshold: time.Minute, Now: base})
	require.NoError(t, err)
	fetched, err := b.backend.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
		InstanceID: inst, StreamIDs: []uuid.UUID{stream}, LeaseDuration: time.Minute, StaleThreshold: time.Minute, Now: base,
	})
	require.NoError(t, err)
	var ids []uuid.UUID
	for _, w := range fetched.Work {
		ids = append(ids, w.WorkID)
	}
	_, err = b.backend.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{InstanceID: inst, Now: base, Completions: []ports.Completion{{
		StreamID: stream, Perspective: testPerspective, LastEventID: events[2].ID, LastVersion: 3, WorkIDs: ids,
	}}})
	require.NoError(t, err)

	type row struct {
		eventID  uuid.UUID
		attempts int
		errText  string
		holder   pgtype.UUID
		retryAt  pgtype.Timestamptz
	}
	rows := func() []row {
		t.Helper()
		r, err := b.pool.Query(ctx, `SELECT w.event_id, w.attempts, w.error, a.instance_id, w.scheduled_for
FROM `+s+`.vantage_work w LEFT JOIN `+s+`.vantage_active_streams a ON a.stream_id = w.stream_id
WHERE w.stream_id = $1 ORDER BY w.event_version`, stream)
		require.NoError(t, err)
		out, err := pgx.CollectRows(r, func(r pgx.CollectableRow) (row, error) {
			var x row
			return x, r.Scan(&x.eventID, &x.attempts, &x.errText, &x.holder, &x.retryAt)
		})
		require.NoError(t, err)
		return out
	}
	fail := func(now time.Time, errText string) error {
		return b.backend.Cursors.WorkFail(ctx, &ports.WorkFailParams{InstanceID: inst, Now: now, Failures: []ports.Failure{{
			StreamID: stream, Perspective: testPerspective, LastEventID: events[2].ID, LastVersion: 3,
			FailedEventID: events[1].ID, FailedEventVersion: 2, Error: errText, RetryAt: now.Add(time.Hour),
		}}})
	}

	require.NoError(t, fail(base.Add(time.Second), "replay failed"))
	got := rows()
	require.Len(t, got, 1, "a pending row for the failed event")
	require.Equal(t, events[1].ID, got[0].eventID)
	require.Equal(t, 1, got[0].attempts)
	require.Equal(t, "replay failed", got[0].errText)
	require.False(t, got[0].holder.Valid, "its stream is unleased: the completion released it, the failure took no lease")
	require.Equal(t, base.Add(time.Second+time.Hour), got[0].retryAt.Time.UTC())
	cursors, err := b.backend.Cursors.CursorsGet(ctx, &ports.CursorsGetParams{StreamIDs: []uuid.UUID{stream}})
	require.NoError(t, err)
	require.Len(t, cursors, 1)
	c := cursors[0]
	require.True(t, c.Status.Has(ports.CursorFailed|ports.CursorRewindRequired), c.Status.String())
	require.Equal(t, int64(2), c.RewindTriggerVersion)
	require.Equal(t, events[1].ID, c.RewindTriggerEventID)
	require.Equal(t, int64(3), c.LastVersion)

	// The stream is taken by another instance; failing the event again
	// charges that row, whoever holds the stream, and keeps the earlier
	// trigger.
	_, err = b.pool.Exec(ctx, `UPDATE `+s+`.vantage_active_streams SET instance_id = $2, lease_expiry = $3 WHERE stream_id = $1`,
		stream, other, base.Add(2*time.Hour))
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE `+s+`.vantage_work SET scheduled_for = NULL WHERE stream_id = $1`, stream)
	require.NoError(t, err)
	require.NoError(t, fail(base.Add(2*time.Second), "again"))
	got = rows()
	require.Len(t, got, 1)
	require.Equal(t, 2, got[0].attempts)
	require.Equal(t, "again", got[0].errText)
	require.Equal(t, [16]byte(other), got[0].holder.Bytes, "the stream stays with its holder")
	require.Equal(t, base.Add(2*time.Second+time.Hour), got[0].retryAt.Time.UTC())
	cursors, err = b.backend.Cursors.CursorsGet(ctx, &ports.CursorsGetParams{StreamIDs: []uuid.UUID{stream}})
	require.NoError(t, err)
	require.Equal(t, int64(2), cursors[0].RewindTriggerVersion)
	require.Equal(t, c.RewindFirstFlaggedAt, cursors[0].RewindFirstFlaggedAt)

	err = b.backend.Cursors.WorkFail(ctx, &ports.WorkFailParams{InstanceID: inst, Now: base, Failures: []ports.Failure{{
		StreamID: stream, Perspective: testPerspective, FailedEventID: events[1].ID, Error: "x",
	}}})
	require.ErrorIs(t, err, ports.ErrInvalidArgument, "a failed event needs its version")
}
