package postgres

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/vantage-go/vantage/ports"
)

var (
	_ ports.RewindStore = (*Store)(nil)
	_ ports.LockReader  = (*Store)(nil)
)

const sqlCursorsRewindRequired = `SELECT ` + sqlCursorColumns + `
FROM /* SCHEMA */.vantage_cursors
WHERE status & ` + sqlStatusRewindRequired + ` <> 0
ORDER BY stream_id, perspective COLLATE "C"
LIMIT $1::bigint`

// CursorsRewindRequired implements ports.RewindStore. It returns
// ports.ErrInvalidArgument for a negative Limit.
func (s *Store) CursorsRewindRequired(ctx context.Context, params *ports.CursorsRewindRequiredParams) ([]ports.Cursor, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("listing cursors requiring rewind: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	out, err := queryRows(ctx, s, sqlCursorsRewindRequired, scanCursor, limitArg(params.Limit))
	if err != nil {
		return nil, fmt.Errorf("listing cursors requiring rewind: %w", err)
	}
	return out, nil
}

// sqlStreamLockAcquire takes the lock kept in the cursor row: $1 stream, $2
// now, $3 perspective, $4 instance, $5 reason, $6 duration. A missing cursor
// is created (status None, no position) holding the lock; an existing one
// gets the lock when it is free, expired (Now reached the expiry) or already
// the caller's, and is otherwise left as it is. RETURNING reports whether
// the caller holds the lock.
const sqlStreamLockAcquire = `WITH ` + sqlClock + `
INSERT INTO /* SCHEMA */.vantage_cursors AS c
    (stream_id, perspective, stream_lock_instance_id, stream_lock_expiry, stream_lock_reason, updated_at)
SELECT $1::uuid, $3::text, $4::uuid, clock.now + $6::interval, $5::text, clock.now FROM clock
ON CONFLICT (stream_id, perspective) DO UPDATE
SET stream_lock_instance_id = excluded.stream_lock_instance_id,
    stream_lock_expiry = excluded.stream_lock_expiry,
    stream_lock_reason = excluded.stream_lock_reason
WHERE c.stream_lock_instance_id IS NULL
   OR c.stream_lock_instance_id = excluded.stream_lock_instance_id
   OR c.stream_lock_expiry <= excluded.updated_at
RETURNING 1`

// StreamLockAcquire implements ports.RewindStore in one statement. The lock
// is not part of ports.Cursor: taking it leaves an existing cursor's fields
// and UpdatedAt alone. It returns ports.ErrInvalidArgument for a nil stream
// or instance id, an empty perspective or a non-positive Duration.
func (s *Store) StreamLockAcquire(ctx context.Context, params *ports.StreamLockParams) (bool, error) {
	if err := params.ValidateAcquire(); err != nil {
		return false, fmt.Errorf("acquiring stream lock: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return false, err
	}
	tag, err := s.pool.Exec(ctx, s.sql(sqlStreamLockAcquire), params.StreamID, nowArg(params.Now), params.Perspective,
		params.InstanceID, params.Reason, params.Duration)
	if err != nil {
		return false, fmt.Errorf("acquiring stream lock %q of stream %s: %w", params.Perspective, params.StreamID, translate(err))
	}
	return tag.RowsAffected() == 1, nil
}

const sqlStreamLockRelease = `UPDATE /* SCHEMA */.vantage_cursors
SET stream_lock_instance_id = NULL, stream_lock_expiry = NULL, stream_lock_reason = NULL
WHERE stream_id = $1 AND perspective = $2 AND stream_lock_instance_id = $3`

// StreamLockRelease implements ports.RewindStore. The caller holds the lock
// while it is the recorded holder, even past the expiry (nobody took it
// over). Releasing never creates a cursor. It returns
// ports.ErrInvalidArgument for a nil stream or instance id or an empty
// perspective.
func (s *Store) StreamLockRelease(ctx context.Context, params *ports.StreamLockParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("releasing stream lock: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, s.sql(sqlStreamLockRelease), params.StreamID, params.Perspective, params.InstanceID); err != nil {
		return fmt.Errorf("releasing stream lock %q of stream %s: %w", params.Perspective, params.StreamID, translate(err))
	}
	return nil
}

const sqlStreamLocks = `WITH ` + sqlClock + `
SELECT c.perspective, c.stream_lock_instance_id, c.stream_lock_reason, c.stream_lock_expiry
FROM /* SCHEMA */.vantage_cursors c, clock
WHERE c.stream_id = $1 AND c.stream_lock_instance_id IS NOT NULL AND c.stream_lock_expiry > clock.now`

// StreamLocks implements ports.LockReader. A lock is unexpired while its
// expiry is after Now. The map is never nil.
func (s *Store) StreamLocks(ctx context.Context, params *ports.StreamLocksParams) (map[string]ports.StreamLock, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.sql(sqlStreamLocks), params.StreamID, nowArg(params.Now))
	if err != nil {
		return nil, fmt.Errorf("reading stream locks of stream %s: %w", params.StreamID, translate(err))
	}
	out := map[string]ports.StreamLock{}
	var (
		perspective string
		instanceID  uuid.UUID
		reason      pgtype.Text
		expiry      pgtype.Timestamptz
	)
	_, err = pgx.ForEachRow(rows, []any{&perspective, &instanceID, &reason, &expiry}, func() error {
		out[perspective] = ports.StreamLock{InstanceID: instanceID, Reason: fromText(reason), Expiry: fromTime(expiry)}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading stream locks of stream %s: %w", params.StreamID, translate(err))
	}
	return out, nil
}

// sqlStreamsWithEventTypes pages through the streams having events of the
// types $1, after $2 in byte order, at most $3: per type an ordered walk of
// vantage_events_type_stream_idx, merged.
const sqlStreamsWithEventTypes = `SELECT DISTINCT s.stream_id
FROM unnest($1::text[]) AS t(type)
CROSS JOIN LATERAL (
    SELECT DISTINCT e.stream_id
    FROM /* SCHEMA */.vantage_events e
    WHERE e.type = t.type AND e.stream_id > $2
    ORDER BY e.stream_id
    LIMIT $3::bigint
) s
ORDER BY s.stream_id
LIMIT $3::bigint`

// StreamsWithEventTypes implements ports.RewindStore. A type listed twice
// counts once. It returns ports.ErrInvalidArgument for a negative Limit.
func (s *Store) StreamsWithEventTypes(ctx context.Context, params *ports.StreamsWithEventTypesParams) ([]uuid.UUID, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("listing streams with event types: %w", err)
	}
	if len(params.EventTypes) == 0 {
		return nil, nil
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	out, err := queryRows(ctx, s, sqlStreamsWithEventTypes, pgx.RowTo[uuid.UUID], params.EventTypes, params.After, limitArg(params.Limit))
	if err != nil {
		return nil, fmt.Errorf("listing streams with event types: %w", err)
	}
	return out, nil
}

// limitArg is a LIMIT parameter: NULL (no limit) when not positive.
func limitArg(limit int) any {
	if limit <= 0 {
		return nil
	}
	return limit
}

// sqlWorkLate lists the late pending rows of the pair ($1 stream, $2
// perspective) through vantage_work_pending_idx.
const sqlWorkLate = `SELECT work_id, stream_id, perspective, event_id, event_version, attempts, late, replay
FROM /* SCHEMA */.vantage_work
WHERE stream_id = $1 AND perspective = $2 AND processed_at IS NULL AND late
ORDER BY event_version`

// WorkLate implements ports.RewindStore in one statement. It returns
// ports.ErrInvalidArgument for a nil stream id or an empty perspective.
func (s *Store) WorkLate(ctx context.Context, params *ports.WorkLateParams) ([]ports.WorkItem, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("listing late work: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	out, err := queryRows(ctx, s, sqlWorkLate, func(row pgx.CollectableRow) (ports.WorkItem, error) {
		var w ports.WorkItem
		err := row.Scan(&w.WorkID, &w.StreamID, &w.Perspective, &w.EventID, &w.EventVersion, &w.Attempts, &w.Late, &w.Replay)
		return w, err
	}, params.StreamID, params.Perspective)
	if err != nil {
		return nil, fmt.Errorf("listing late work: %w", err)
	}
	return out, nil
}
