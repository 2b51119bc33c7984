package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/vantage-go/vantage/ports"
)

var _ ports.Admin = (*Store)(nil)

// Retiring a perspective takes two transactions. The first records the
// retirement and deletes the subscriptions under sqlRetireLock; the second
// (one statement, sqlRetireRows) deletes the work rows and, with DropState,
// the state. Every append and every registration reads
// vantage_subscriptions, so it holds the table in ACCESS SHARE mode from
// before its statement's snapshot (PostgreSQL locks a statement's tables
// when it parses or binds it) to its commit: the lock waits until those
// that may have read the old subscriptions committed (AppendTx's
// transactions included), and holds back the others until the retirement
// is visible to them. So once the
// first transaction committed, no append stores a row for the perspective,
// and the second, whose snapshot is later, sees and deletes every row one
// stored before.

// sqlRetireLock holds back appends and registrations (see above): only
// ACCESS EXCLUSIVE conflicts with the ACCESS SHARE of a reader. The table is
// read by appends and registrations alone, so nothing else waits.
const sqlRetireLock = `LOCK TABLE /* SCHEMA */.vantage_subscriptions IN ACCESS EXCLUSIVE MODE`

// retireLockTimeout bounds each attempt of a retirement to lock the
// subscriptions. While its request waits for the appends in progress to
// commit, every later append queues behind it: an attempt that waits
// longer gives up, lets them through, and tries again after a backoff.
// An application that keeps a transaction of AppendTx open until another
// append returns is thus never held up for long, where an unbounded wait
// would hold both for ever.
const retireLockTimeout = 100 * time.Millisecond

// retireLockRetry is the backoff between two attempts to lock (see
// retireLockTimeout): from 50ms, growing to 1s, spread at random; the
// retirement tries until its context ends.
func retireLockRetry(ctx context.Context) backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 50*time.Millisecond, time.Second, 0
	return backoff.WithContext(b, ctx)
}

// sqlRetire records $1 retired (the first retirement's time stays) and
// deletes its subscriptions, returning how many it deleted. The
// subscriptions are few; their key leads with the event type, so they are
// scanned.
const sqlRetire = `WITH retired AS (
    INSERT INTO /* SCHEMA */.vantage_retired_perspectives (perspective) VALUES ($1)
    ON CONFLICT (perspective) DO NOTHING
),
deleted AS (
    DELETE FROM /* SCHEMA */.vantage_subscriptions WHERE perspective = $1
    RETURNING 1
)
SELECT count(*) FROM deleted`

// sqlRetireRows deletes the pending rows of perspective $1, leased ones
// included, with $2 (DropState) its cursors (and with them the rewind
// locks they carry), models and snapshots; without it, it takes the rewind
// flag off its cursors (the late rows a rewind awaited are deleted: the
// flag would hold the pair once revived); it returns how many rows of
// each it deleted, and the streams whose rows it deleted, which
// PerspectiveRetire then releases when they have no pending row left. Rows
// kept processed by debug mode stay: they are history.
//
// Locks are taken as everywhere: the streams' rows in vantage_active_streams
// in stream id order, then work rows in work id order (a completion, which
// shares the streams' lock, deletes its rows in the order of their
// location: should the two deadlock, PostgreSQL cancels one of them, and
// a completion is sent again while a retirement reports the error), then
// cursors in key order, then models (as ModelSave takes them) and
// snapshots; each step waits for the one before (the count subqueries).
// The rows of a perspective are found by scans, since every key leads with
// the stream: an index by perspective would cost every append and
// completion for the sake of a rare operator action.
const sqlRetireRows = `WITH streams AS MATERIALIZED (
    SELECT a.stream_id
    FROM /* SCHEMA */.vantage_active_streams a
    WHERE a.stream_id IN (
        SELECT l.stream_id FROM /* SCHEMA */.vantage_work l WHERE l.perspective = $1 AND l.processed_at IS NULL)
    ORDER BY a.stream_id
    FOR KEY SHARE
),
deleted AS (
    DELETE FROM /* SCHEMA */.vantage_work w
    WHERE w.work_id = ANY (ARRAY(
        SELECT l.work_id
        FROM /* SCHEMA */.vantage_work l
        WHERE l.perspective = $1 AND l.processed_at IS NULL AND (SELECT count(*) FROM streams) >= 0
        ORDER BY l.work_id
        FOR UPDATE))
    RETURNING w.stream_id
),
unflagged AS (
    UPDATE /* SCHEMA */.vantage_cursors c
    SET status = c.status & ~` + sqlStatusRewindRequired + `, rewind_trigger_event_id = NULL, rewind_trigger_version = NULL,
        rewind_flagged_at = NULL, rewind_first_flagged_at = NULL, updated_at = now()
    WHERE (c.stream_id, c.perspective) IN (
        SELECT l.stream_id, l.perspective FROM /* SCHEMA */.vantage_cursors l
        WHERE NOT $2 AND l.perspective = $1 AND l.status & ` + sqlStatusRewindRequired + ` <> 0 AND (SELECT count(*) FROM deleted) >= 0
        ORDER BY l.stream_id
        FOR UPDATE)
    RETURNING 1
),
cursors AS (
    DELETE FROM /* SCHEMA */.vantage_cursors c
    WHERE (c.stream_id, c.perspective) IN (
        SELECT l.stream_id, l.perspective FROM /* SCHEMA */.vantage_cursors l
        WHERE $2 AND l.perspective = $1 AND (SELECT count(*) FROM deleted) >= 0
        ORDER BY l.stream_id
        FOR UPDATE)
    RETURNING 1
),
models AS (
    DELETE FROM /* SCHEMA */.vantage_models m
    WHERE (m.stream_id, m.perspective) IN (
        SELECT l.stream_id, l.perspective FROM /* SCHEMA */.vantage_models l
        WHERE $2 AND l.perspective = $1 AND (SELECT count(*) FROM cursors) >= 0
        ORDER BY l.stream_id
        FOR UPDATE)
    RETURNING 1
),
snapshots AS (
    DELETE FROM /* SCHEMA */.vantage_snapshots s
    WHERE (s.stream_id, s.perspective, s.event_version) IN (
        SELECT l.stream_id, l.perspective, l.event_version FROM /* SCHEMA */.vantage_snapshots l
        WHERE $2 AND l.perspective = $1 AND (SELECT count(*) FROM models) >= 0
        ORDER BY l.stream_id, l.event_version
        FOR UPDATE)
    RETURNING 1
)
SELECT (SELECT count(*) FROM deleted), (SELECT count(*) FROM cursors), (SELECT count(*) FROM models),
       (SELECT count(*) FROM snapshots), ARRAY(SELECT DISTINCT d.stream_id FROM deleted d)`

// PerspectiveRetire implements ports.Admin in two transactions (see
// above): the retirement and the subscriptions, then the work rows and the
// state. The first waits for appends in progress to commit; appends wait
// for it at most retireLockTimeout at a time. Rows held by instances are
// deleted like the others; their holders' completions and failures of them
// then change nothing, except that a completion still moves a cursor that
// exists (a model saved by an apply in flight comes back with its cursor:
// retiring again drops it); one deleted by DropState is not created again
// (see sqlNoCursorOfRetired). Streams left without pending rows are released. Its dead
// letters and lifecycle stages are kept: they are history, not work. Should
// the second transaction fail, the perspective is retired all the same, and
// retiring it again deletes the rest. It returns ports.ErrInvalidArgument
// for an empty perspective.
func (s *Store) PerspectiveRetire(ctx context.Context, params *ports.PerspectiveRetireParams) (*ports.RetireResult, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("retiring perspective: %w", err)
	}
	name := params.Perspective
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	result := &ports.RetireResult{}
	err := backoff.Retry(func() error {
		err := withTx(ctx, s.txBeginner(ctx, ownTxIdleTimeout), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", retireLockTimeout.Milliseconds())); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, s.sql(sqlRetireLock)); err != nil {
				return err
			}
			return tx.QueryRow(ctx, s.sql(sqlRetire), name).Scan(&result.Subscriptions)
		})
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgLockNotAvailable {
			return err // appends in progress: try again
		}
		return backoff.Permanent(err)
	}, retireLockRetry(ctx))
	if err != nil {
		return nil, fmt.Errorf("retiring perspective %q: %w", name, translate(err))
	}
	var streams []pgtype.UUID
	err = s.pool.QueryRow(ctx, s.sql(sqlRetireRows), name, params.DropState).
		Scan(&result.Work, &result.Cursors, &result.Models, &result.Snapshots, &streams)
	if err != nil {
		return nil, fmt.Errorf("deleting the work of retired perspective %q: %w", name, translate(err))
	}
	if _, err := s.pool.Exec(ctx, s.sql(sqlReleaseDrained), streams, nil, s.appendLockClass()); err != nil {
		return nil, fmt.Errorf("releasing the streams of retired perspective %q: %w", name, translate(err))
	}
	return result, nil
}

const sqlPerspectiveRevive = `DELETE FROM /* SCHEMA */.vantage_retired_perspectives WHERE perspective = $1`

// PerspectiveRevive implements ports.Admin. Its subscriptions stay
// deleted until registered again.
func (s *Store) PerspectiveRevive(ctx context.Context, params *ports.PerspectiveReviveParams) error {
	perspective := params.Perspective
	if err := s.ready(ctx); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, s.sql(sqlPerspectiveRevive), perspective); err != nil {
		return fmt.Errorf("reviving perspective %q: %w", perspective, translate(err))
	}
	return nil
}

// sqlPerspectivesRetired lists the retired perspectives in byte order, as Go
// sorts strings.
const sqlPerspectivesRetired = `SELECT perspective FROM /* SCHEMA */.vantage_retired_perspectives ORDER BY perspective COLLATE "C"`

// PerspectivesRetired implements ports.Admin. The slice is never nil.
func (s *Store) PerspectivesRetired(ctx context.Context) ([]string, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	out, err := queryRows(ctx, s, sqlPerspectivesRetired, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("listing retired perspectives: %w", err)
	}
	if out == nil {
		out = []string{}
	}
	return out, nil
}

// sqlPerspectivesStatus returns, per perspective the schema knows, whether
// it is retired, its event types, its cursor counts (all, with no pending
// row, failed, flagged for a rewind), its pending pairs, the rows awaiting
// a retry, its backlog (as sqlPerspectivesLag), its waiting dead letters,
// and the time ages are measured at ($1, else the database clock).
//
//   - pairs groups the pending rows by pair in one pass over
//     vantage_work_pending_idx, whose order is the grouping's (an
//     index-only scan, as sqlPerspectivesLag's), and backlog sums them up
//     per perspective.
//   - cur reads every cursor once, joined to pairs by hash: counting the
//     cursors of a perspective reads them all, whatever the index, and an
//     index by perspective would cost every completion for the sake of an
//     operator's read.
//   - retry reads the rows scheduled in the future through
//     vantage_work_scheduled_idx (rows that failed: few), dead the waiting
//     dead letters through vantage_dead_letters_status_idx.
//
// Everything comes from the statement's one snapshot.
const sqlPerspectivesStatus = `WITH ` + sqlClock1 + `,
pairs AS MATERIALIZED (
    SELECT w.stream_id, w.perspective, count(*) AS pending, min(w.created_at) AS oldest
    FROM /* SCHEMA */.vantage_work w
    WHERE w.processed_at IS NULL
    GROUP BY w.stream_id, w.perspective
),
backlog AS (
    SELECT p.perspective, count(*) AS streams, sum(p.pending)::bigint AS pending, min(p.oldest) AS oldest
    FROM pairs p
    GROUP BY p.perspective
),
cur AS (
    SELECT c.perspective, count(*) AS streams,
           count(*) FILTER (WHERE p.stream_id IS NULL) AS caught_up,
           count(*) FILTER (WHERE c.status & ` + sqlStatusFailed + ` <> 0) AS failed,
           count(*) FILTER (WHERE c.status & ` + sqlStatusRewindRequired + ` <> 0) AS rewind
    FROM /* SCHEMA */.vantage_cursors c
    LEFT JOIN pairs p ON p.stream_id = c.stream_id AND p.perspective = c.perspective
    GROUP BY c.perspective
),
retry AS (
    SELECT w.perspective, count(*) AS rows
    FROM /* SCHEMA */.vantage_work w, clock
    WHERE w.scheduled_for > clock.now
    GROUP BY w.perspective
),
dead AS (
    SELECT d.perspective, count(*) AS waiting
    FROM /* SCHEMA */.vantage_dead_letters d
    WHERE d.status = ` + sqlDeadLetterDead + `
    GROUP BY d.perspective
),
subs AS (
    SELECT s.perspective, array_agg(s.event_type ORDER BY s.event_type COLLATE "C") AS types
    FROM /* SCHEMA */.vantage_subscriptions s
    GROUP BY s.perspective
),
names AS (
    SELECT perspective FROM subs
    UNION SELECT perspective FROM /* SCHEMA */.vantage_retired_perspectives
    UNION SELECT perspective FROM cur
    UNION SELECT perspective FROM backlog
    UNION SELECT perspective FROM dead
)
SELECT n.perspective, r.perspective IS NOT NULL, s.types,
       coalesce(c.streams, 0), coalesce(c.caught_up, 0), coalesce(b.streams, 0), coalesce(c.failed, 0),
       coalesce(q.rows, 0), coalesce(c.rewind, 0), coalesce(b.pending, 0), b.oldest, coalesce(d.waiting, 0), clock.now
FROM names n
CROSS JOIN clock
LEFT JOIN /* SCHEMA */.vantage_retired_perspectives r ON r.perspective = n.perspective
LEFT JOIN subs s ON s.perspective = n.perspective
LEFT JOIN cur c ON c.perspective = n.perspective
LEFT JOIN backlog b ON b.perspective = n.perspective
LEFT JOIN retry q ON q.perspective = n.perspective
LEFT JOIN dead d ON d.perspective = n.perspective
ORDER BY n.perspective COLLATE "C"`

// PerspectivesStatus implements ports.Admin in one statement, under the
// planner settings of the work statements (see sqlPerspectivesStatus).
// Perspectives are ordered by the bytes of their names, as the memory
// adapter orders them.
func (s *Store) PerspectivesStatus(ctx context.Context, params *ports.PerspectivesStatusParams) ([]ports.PerspectiveStatus, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	out := []ports.PerspectiveStatus{}
	b := &pgx.Batch{}
	b.Queue(s.sql(sqlPerspectivesStatus), nowArg(params.Now))
	err := s.sendWork(ctx, b, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		var (
			ps          ports.PerspectiveStatus
			oldest, now pgtype.Timestamptz
		)
		_, err = pgx.ForEachRow(rows, []any{&ps.Perspective, &ps.Retired, &ps.EventTypes, &ps.Streams, &ps.CaughtUp, &ps.PendingStreams,
			&ps.Failed, &ps.AwaitingRetry, &ps.RewindRequired, &ps.Pending, &oldest, &ps.DeadLetters, &now}, func() error {
			ps.OldestAge = 0
			if oldest.Valid {
				ps.OldestAge = max(now.Time.Sub(oldest.Time), 0)
			}
			out = append(out, ps)
			ps.EventTypes = nil // scanned anew into a fresh slice for the next row
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the status of each perspective: %w", translate(err))
	}
	return out, nil
}
