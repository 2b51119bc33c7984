package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/vantage-go/vantage/ports"
)

// Dead-letter statuses as SQL literals (ports.DeadLetterStatus values).
const (
	sqlDeadLetterDead      = `'` + string(ports.DeadLetterDead) + `'`
	sqlDeadLetterRequeued  = `'` + string(ports.DeadLetterRequeued) + `'`
	sqlDeadLetterRecovered = `'` + string(ports.DeadLetterRecovered) + `'`
	sqlDeadLetterIgnored   = `'` + string(ports.DeadLetterIgnored) + `'`
)

const sqlDeadLetterColumns = `id, work_id, stream_id, perspective, event_id, event_version, attempts, reason, error,
       instance_id, generation, dead_lettered_at, status, requeues, requeued_at, requeue_generation, resolved_at`

// sqlDeadLetterMove deletes a pending row and records it, in one statement:
// $1 dead letter id, $2 now, $3 work id, $4 instance, $5 reason, $6 error
// (empty: the row's), $7 attempts (when larger than the row's), $8
// generation. No row (already moved, completed, or kept as processed by
// debug mode) records nothing. The stream's row in vantage_active_streams
// is locked first (stream rows before work rows, as everywhere), and only
// when its lease names the caller, live or expired (the fence, as in
// sqlFenced): a stream the caller lost moves nothing either, and
// DeadLetterMove tells the two apart with sqlDeadLetterRefused. The lock
// (FOR KEY SHARE) keeps a claim, fetch or abandonment from taking the
// stream before the move commits: a change of holder is a key update. It
// releases the stream afterwards when that was its last pending row.
//
// A row that DeadLetterRequeue stored names its dead letter, which is
// updated instead of a new one recorded (the conflict on its id): dead
// again, with the new cause, attempts, instance, generation and time; its
// requeue history stays, so a dead letter that failed again on the
// generation that requeued it reads generation = requeue_generation. A row
// whose dead letter an operator deleted records it again under that id.
// Locks are taken as everywhere: the stream row, then the work row, then
// the dead letter.
const sqlDeadLetterMove = `WITH ` + sqlClock + `,
stream AS MATERIALIZED (
    SELECT a.stream_id
    FROM /* SCHEMA */.vantage_active_streams a
    WHERE a.stream_id = (SELECT w.stream_id FROM /* SCHEMA */.vantage_work w WHERE w.work_id = $3 AND w.processed_at IS NULL)
      AND coalesce(a.instance_id = $4::uuid, false)
    FOR KEY SHARE
),
moved AS (
    DELETE FROM /* SCHEMA */.vantage_work
    WHERE work_id = $3 AND processed_at IS NULL AND EXISTS (SELECT 1 FROM stream)
    RETURNING work_id, stream_id, perspective, event_id, event_version, attempts, error, dead_letter_id
)
INSERT INTO /* SCHEMA */.vantage_dead_letters AS d
    (id, work_id, stream_id, perspective, event_id, event_version, attempts, reason, error, instance_id, generation, dead_lettered_at)
SELECT coalesce(m.dead_letter_id, $1::uuid), m.work_id, m.stream_id, m.perspective, m.event_id, m.event_version,
       greatest(m.attempts, $7::integer), $5::text, coalesce(nullif($6::text, ''), m.error, ''), $4::uuid, $8::text, clock.now
FROM moved m, clock
ON CONFLICT (id) DO UPDATE
SET attempts = excluded.attempts,
    reason = excluded.reason,
    error = excluded.error,
    instance_id = excluded.instance_id,
    generation = excluded.generation,
    dead_lettered_at = excluded.dead_lettered_at,
    status = ` + sqlDeadLetterDead + `,
    resolved_at = NULL
RETURNING ` + sqlDeadLetterColumns

// sqlDeadLetterRefused tells why sqlDeadLetterMove moved nothing: true when
// the row $1 is pending in a stream whose lease the caller $2 does not hold
// (the fence refused the move), false when the row is gone.
const sqlDeadLetterRefused = `SELECT EXISTS (
    SELECT 1
    FROM /* SCHEMA */.vantage_work w
    LEFT JOIN /* SCHEMA */.vantage_active_streams a ON a.stream_id = w.stream_id
    WHERE w.work_id = $1 AND w.processed_at IS NULL AND NOT coalesce(a.instance_id = $2::uuid, false))`

// DeadLetterMove implements ports.DeadLetterStore in one statement, then
// releases the stream when it has no pending row left (sqlReleaseDrained).
// The stream must be held by params.InstanceID, live or expired, which is
// recorded as the instance that dead-lettered the row; otherwise it
// returns ports.ErrLeaseLost and changes nothing. Removing the row unblocks
// later rows of its (stream, perspective). A row already gone yields Moved
// false. Only a move that moved nothing costs a second statement, which
// tells a refusal from a row gone (the row is looked at again: one gone
// meanwhile is gone).
func (s *Store) DeadLetterMove(ctx context.Context, params *ports.DeadLetterMoveParams) (*ports.DeadLetterMoveResult, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("moving work %s to dead letters: generating id: %w", params.WorkID, err)
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	dls, err := queryRows(ctx, s, sqlDeadLetterMove, scanDeadLetter, id, nowArg(params.Now), params.WorkID,
		uuidArg(params.InstanceID), params.Reason, params.Error, params.Attempts, params.Generation)
	if err != nil {
		return nil, fmt.Errorf("moving work %s to dead letters: %w", params.WorkID, err)
	}
	if len(dls) == 0 {
		var refused bool
		if err := s.pool.QueryRow(ctx, s.sql(sqlDeadLetterRefused), params.WorkID, uuidArg(params.InstanceID)).Scan(&refused); err != nil {
			return nil, fmt.Errorf("moving work %s to dead letters: %w", params.WorkID, translate(err))
		}
		if refused {
			return nil, fmt.Errorf("moving work %s to dead letters: its stream is not leased to instance %s: %w",
				params.WorkID, params.InstanceID, ports.ErrLeaseLost)
		}
		return &ports.DeadLetterMoveResult{}, nil
	}
	streams := []pgtype.UUID{uuidElem(dls[0].StreamID)}
	if _, err := s.pool.Exec(ctx, s.sql(sqlReleaseDrained), streams, uuidArg(params.InstanceID), s.appendLockClass()); err != nil {
		return nil, fmt.Errorf("moving work %s to dead letters: releasing its stream: %w", params.WorkID, translate(err))
	}
	return &ports.DeadLetterMoveResult{DeadLetter: dls[0], Moved: true}, nil
}

// sqlDeadLettersFilter is the WHERE clause of the listings: $1 perspective,
// $2 stream, $4 status (” or NULL: any), $5 since, $6 and $7 the time and
// id of the cursor (After) the listing continues from.
const sqlDeadLettersFilter = `
FROM /* SCHEMA */.vantage_dead_letters
WHERE ($1 = '' OR perspective = $1) AND ($2::uuid IS NULL OR stream_id = $2::uuid) AND ($4 = '' OR status = $4)
  AND ($5::timestamptz IS NULL OR dead_lettered_at >= $5::timestamptz)`

// sqlDeadLettersList lists dead letters oldest first ($3 the limit, NULL
// for none); sqlDeadLettersListNewest newest first. Either walks
// vantage_dead_letters_time_idx in its order, or another index of the
// filters.
const (
	sqlDeadLettersList = `SELECT ` + sqlDeadLetterColumns + sqlDeadLettersFilter + `
  AND ($6::timestamptz IS NULL OR (dead_lettered_at, id) > ($6::timestamptz, $7::uuid))
ORDER BY dead_lettered_at, id
LIMIT $3::bigint`
	sqlDeadLettersListNewest = `SELECT ` + sqlDeadLetterColumns + sqlDeadLettersFilter + `
  AND ($6::timestamptz IS NULL OR (dead_lettered_at, id) < ($6::timestamptz, $7::uuid))
ORDER BY dead_lettered_at DESC, id DESC
LIMIT $3::bigint`
)

// DeadLettersList implements ports.DeadLetterStore in one statement: by the
// time they were last dead-lettered, then by id (for UUIDv7 ids the order
// they were first recorded), oldest or newest first, after params.After
// when set, at most Limit when positive. It returns
// ports.ErrInvalidArgument for a negative Limit or an unknown Status.
func (s *Store) DeadLettersList(ctx context.Context, params *ports.DeadLettersListParams) ([]ports.DeadLetter, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("listing dead letters: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	query := sqlDeadLettersList
	if params.NewestFirst {
		query = sqlDeadLettersListNewest
	}
	// A nil cursor id is the all-zero id, which comes before every other.
	out, err := queryRows(ctx, s, query, scanDeadLetter, params.Perspective, uuidArg(params.StreamID),
		limitArg(params.Limit), string(params.Status), nowArg(params.Since), nowArg(params.After.DeadLetteredAt), uuidElem(params.After.ID))
	if err != nil {
		return nil, fmt.Errorf("listing dead letters: %w", err)
	}
	return out, nil
}

const sqlDeadLetterGet = `SELECT ` + sqlDeadLetterColumns + ` FROM /* SCHEMA */.vantage_dead_letters WHERE id = $1`

// DeadLetterGet implements ports.Admin in one statement. It returns
// ports.ErrNotFound for an unknown id.
func (s *Store) DeadLetterGet(ctx context.Context, params *ports.DeadLetterGetParams) (ports.DeadLetter, error) {
	if err := s.ready(ctx); err != nil {
		return ports.DeadLetter{}, err
	}
	dls, err := queryRows(ctx, s, sqlDeadLetterGet, scanDeadLetter, uuidArg(params.ID))
	switch {
	case err != nil:
		return ports.DeadLetter{}, fmt.Errorf("reading dead letter %s: %w", params.ID, err)
	case len(dls) == 0:
		return ports.DeadLetter{}, fmt.Errorf("reading dead letter %s: %w", params.ID, ports.ErrNotFound)
	}
	return dls[0], nil
}

// scanDeadLetter scans the columns of sqlDeadLetterColumns.
func scanDeadLetter(row pgx.CollectableRow) (ports.DeadLetter, error) {
	var (
		dl                         ports.DeadLetter
		instance                   pgtype.UUID
		status                     string
		at, requeuedAt, resolvedAt pgtype.Timestamptz
		requeueGeneration          pgtype.Text
	)
	err := row.Scan(uuidDest(&dl.ID), uuidDest(&dl.WorkID), uuidDest(&dl.StreamID), &dl.Perspective, uuidDest(&dl.EventID), &dl.EventVersion,
		&dl.Attempts, &dl.Reason, &dl.Error, &instance, &dl.Generation, &at, &status, &dl.Requeues, &requeuedAt, &requeueGeneration, &resolvedAt)
	dl.InstanceID, dl.DeadLetteredAt, dl.Status = fromUUID(instance), fromTime(at), ports.DeadLetterStatus(status)
	dl.RequeuedAt, dl.RequeueGeneration, dl.ResolvedAt = fromTime(requeuedAt), fromText(requeueGeneration), fromTime(resolvedAt)
	return dl, err
}

// sqlRequeue is the part DeadLetterRequeue and DeadLettersRecover share: the
// CTEs that store the work rows of the dead letters in the CTE dl (id,
// work_id, stream_id, perspective, event_id, event_version), flag the
// cursors already past them and wake the claimers. $3 is the NOTIFY
// channel, $5 the append lock class.
//
//   - locked takes the streams' append locks in stream id order (see
//     sqlAppendLock): the rows stored here are pending work, which a
//     concurrent release must not miss.
//   - marks share-locks the streams' rows in vantage_active_streams and
//     reads their handed-out marks; cur then locks the pairs' cursors in
//     key order and reads their positions as committed: stream rows before
//     cursors, as everywhere. A fetch moving a mark or a completion moving
//     a cursor past a requeued event either committed before (marks or cur
//     sees it) or waits for the requeue to commit (the fetch then hands out
//     the row, the completion's straggler check sees it).
//   - requeued stores each row again with its original work id, pending,
//     unscheduled, with zero attempts, naming its dead letter. It is late
//     when cur is at or past its event (a dead-lettered event is in no
//     model, even one whose save left the cursor at it), or when its pair's
//     handed-out mark is past it:
//     rows above it were handed to an apply, whose save may move the cursor
//     past the requeued one (see ports.WorkItem.Late). When the pair has a
//     pending row for the event already (say, a replay failure stored one),
//     that row is linked to the dead letter instead (and becomes late too
//     when the requeued row would be): the event is applied once, and its
//     completion recovers the dead letter.
//   - streamed gives the streams their row in vantage_active_streams when
//     they have none (see sqlAppend).
//   - flagged flags RewindRequired on the cursors at or past a requeued
//     event, so that a rewind applies it in order; the trigger keeps the
//     smallest version (sqlFlagRewind).
//   - notified queues a NOTIFY, delivered when the transaction commits.
//
// Locks: the dead letters (in dl), then the append locks, then stream
// rows, then cursors; the new rows last.
const sqlRequeue = `locked AS MATERIALIZED (
    SELECT count(pg_advisory_xact_lock(hashtext($5::text), hashtext(s.stream_id::text))) AS n
    FROM (SELECT DISTINCT r.stream_id FROM dl r ORDER BY 1) s
),
marks AS MATERIALIZED (
    SELECT a.stream_id, a.handed_out
    FROM /* SCHEMA */.vantage_active_streams a
    WHERE a.stream_id IN (SELECT r.stream_id FROM dl r)
      AND (SELECT n FROM locked) >= 0 -- after the append locks
    ORDER BY a.stream_id
    FOR SHARE OF a
),
cur AS MATERIALIZED (
    SELECT c.stream_id, c.perspective, c.last_version
    FROM /* SCHEMA */.vantage_cursors c
    WHERE (c.stream_id, c.perspective) IN (SELECT r.stream_id, r.perspective FROM dl r)
      AND (SELECT count(*) FROM marks) >= 0 -- after marks: stream rows first
    ORDER BY c.stream_id, c.perspective COLLATE "C"
    FOR UPDATE OF c
),
requeued AS (
    INSERT INTO /* SCHEMA */.vantage_work AS w
        (work_id, stream_id, perspective, event_id, event_version, dead_letter_id, late, created_at)
    SELECT DISTINCT ON (r.stream_id, r.perspective, r.event_version)
           r.work_id, r.stream_id, r.perspective, r.event_id, r.event_version, r.id,
           coalesce(c.last_version >= r.event_version, false)
           OR coalesce((SELECT (m.handed_out ->> r.perspective)::bigint FROM marks m WHERE m.stream_id = r.stream_id) > r.event_version, false),
           clock.now
    FROM dl r
    LEFT JOIN cur c ON c.stream_id = r.stream_id AND c.perspective = r.perspective
    CROSS JOIN clock
    ORDER BY r.stream_id, r.perspective, r.event_version, r.id
    ON CONFLICT (stream_id, perspective, event_version) WHERE processed_at IS NULL
    DO UPDATE SET dead_letter_id = excluded.dead_letter_id, late = w.late OR excluded.late
    RETURNING w.stream_id, w.seq
),
streamed AS (
    INSERT INTO /* SCHEMA */.vantage_active_streams (stream_id, first_seq, last_activity_at, created_at)
    SELECT q.stream_id, min(q.seq), clock.now, clock.now
    FROM requeued q, clock
    GROUP BY q.stream_id, clock.now
    ORDER BY q.stream_id
    ON CONFLICT (stream_id) DO NOTHING
),
flagged AS (
    UPDATE /* SCHEMA */.vantage_cursors c
    SET ` + sqlFlagRewind + `
    FROM (
        SELECT DISTINCT ON (r.stream_id, r.perspective) r.stream_id, r.perspective, r.event_id, r.event_version
        FROM dl r
        JOIN cur l ON l.stream_id = r.stream_id AND l.perspective = r.perspective
        WHERE l.last_version >= r.event_version
        ORDER BY r.stream_id, r.perspective, r.event_version
    ) f, clock
    WHERE c.stream_id = f.stream_id AND c.perspective = f.perspective
    RETURNING 1
),
notified AS (
    SELECT pg_notify($3, '') WHERE EXISTS (SELECT 1 FROM dl)
)`

// sqlRequeueSet is the SET list that marks the dead letter d requeued at
// clock.now by generation $4, which joins the generations it was ever
// requeued on (see sqlDeadLettersRecover).
const sqlRequeueSet = `status = ` + sqlDeadLetterRequeued + `,
        requeues = d.requeues + 1,
        requeued_at = clock.now,
        requeue_generation = $4::text,
        requeue_generations = CASE WHEN $4::text IS NULL OR $4::text = ANY (d.requeue_generations)
                                   THEN d.requeue_generations ELSE d.requeue_generations || $4::text END,
        resolved_at = NULL`

// sqlDeadLetterRequeue requeues the dead letter $1 when it is dead or
// ignored (see sqlRequeue): $2 now, $3 NOTIFY channel, $4 generation, $5
// the append lock class. It
// returns whether it did, and the status the dead letter had (NULL for an
// unknown id), which tells a requeued or recovered one from an unknown one.
const sqlDeadLetterRequeue = `WITH ` + sqlClock + `,
prior AS (
    SELECT d.status FROM /* SCHEMA */.vantage_dead_letters d WHERE d.id = $1
),
dl AS (
    UPDATE /* SCHEMA */.vantage_dead_letters d
    SET ` + sqlRequeueSet + `
    FROM clock
    WHERE d.id = $1 AND d.status IN (` + sqlDeadLetterDead + `, ` + sqlDeadLetterIgnored + `)
    RETURNING d.id, d.work_id, d.stream_id, d.perspective, d.event_id, d.event_version
),
` + sqlRequeue + `
SELECT (SELECT count(*) FROM dl), (SELECT status FROM prior), (SELECT count(*) FROM notified)`

// DeadLetterRequeue implements ports.Admin in one statement. The
// row comes back with its original work id, pending, unscheduled and with
// zero attempts, and listeners are woken on commit. If the pair's cursor
// is at or past the event (LastVersion at least the event's version), the
// row is late and the cursor is flagged RewindRequired (the trigger keeps
// the smallest version); the row is late too, without the flag, when the
// event is below its pair's handed-out mark. It returns ports.ErrNotFound for an unknown id and
// ports.ErrVersionConflict for a dead letter that is requeued or recovered
// (or that a concurrent call requeued first).
func (s *Store) DeadLetterRequeue(ctx context.Context, params *ports.DeadLetterRequeueParams) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	var (
		requeued, notified int
		prior              pgtype.Text
	)
	err := s.pool.QueryRow(ctx, s.sql(sqlDeadLetterRequeue), params.ID, nowArg(params.Now), s.channel, params.Generation, s.appendLockClass()).
		Scan(&requeued, &prior, &notified)
	if err != nil {
		return fmt.Errorf("requeueing dead letter %s: %w", params.ID, translate(err))
	}
	return deadLetterOutcome("requeueing", params.ID, requeued > 0, prior)
}

// sqlDeadLettersRequeueTail requeues the dead letters of the CTE picked
// (see sqlRequeue) and returns how many: $2 now, $3 NOTIFY channel, $4
// generation, $5 the append lock class.
const sqlDeadLettersRequeueTail = `
dl AS (
    UPDATE /* SCHEMA */.vantage_dead_letters d
    SET ` + sqlRequeueSet + `
    FROM clock
    WHERE d.id IN (SELECT p.id FROM picked p)
    RETURNING d.id, d.work_id, d.stream_id, d.perspective, d.event_id, d.event_version
),
` + sqlRequeue + `
SELECT (SELECT count(*) FROM dl), (SELECT count(*) FROM notified)`

// sqlDeadLettersRequeueIDs requeues the dead letters $7 that are dead or
// ignored, of perspective $1 (” for any), dead-lettered since $6 (NULL
// for any); sqlDeadLettersRequeuePerspective every dead one of $1 since
// $6. picked locks them in id order, so that concurrent requeues, which
// lock them in the same order, wait for each other rather than deadlock;
// one that waited re-reads the status once the other committed, and leaves
// out the dead letters the other requeued (READ COMMITTED re-checks the
// rows it locks), so none is requeued twice. DeadLettersRecover skips the
// rows locked here. The IDs variant reads them by primary key, the other
// by vantage_dead_letters_status_idx or vantage_dead_letters_perspective_idx.
const (
	sqlDeadLettersRequeueIDs = `WITH ` + sqlClock + `,
picked AS (
    SELECT d.id
    FROM /* SCHEMA */.vantage_dead_letters d
    WHERE d.id = ANY ($7::uuid[]) AND d.status IN (` + sqlDeadLetterDead + `, ` + sqlDeadLetterIgnored + `)
      AND ($1 = '' OR d.perspective = $1) AND ($6::timestamptz IS NULL OR d.dead_lettered_at >= $6::timestamptz)
    ORDER BY d.id
    FOR UPDATE
),` + sqlDeadLettersRequeueTail
	sqlDeadLettersRequeuePerspective = `WITH ` + sqlClock + `,
picked AS (
    SELECT d.id
    FROM /* SCHEMA */.vantage_dead_letters d
    WHERE d.status = ` + sqlDeadLetterDead + ` AND d.perspective = $1
      AND ($6::timestamptz IS NULL OR d.dead_lettered_at >= $6::timestamptz)
    ORDER BY d.id
    FOR UPDATE
),` + sqlDeadLettersRequeueTail
)

// DeadLettersRequeue implements ports.Admin in one statement (see
// sqlDeadLettersRequeueIDs): the dead letters it selects are requeued
// together or not at all, and listeners are woken on commit. It returns
// ports.ErrInvalidArgument for a nil id or when neither Perspective nor IDs
// is given.
func (s *Store) DeadLettersRequeue(ctx context.Context, params *ports.DeadLettersRequeueParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, fmt.Errorf("requeueing dead letters: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return 0, err
	}
	query := sqlDeadLettersRequeuePerspective
	args := []any{params.Perspective, nowArg(params.Now), s.channel, params.Generation, s.appendLockClass(), nowArg(params.Since)}
	if len(params.IDs) > 0 {
		query = sqlDeadLettersRequeueIDs
		args = append(args, uuidsArg(params.IDs))
	}
	var requeued, notified int
	if err := s.pool.QueryRow(ctx, s.sql(query), args...).Scan(&requeued, &notified); err != nil {
		return 0, fmt.Errorf("requeueing dead letters: %w", translate(err))
	}
	return requeued, nil
}

// deadLetterOutcome turns the outcome of a statement that changes one dead
// letter into the error of the port: nil when it changed it, else
// ErrNotFound when the id is unknown and ErrVersionConflict when the dead
// letter's status does not allow the change.
func deadLetterOutcome(doing string, id uuid.UUID, changed bool, prior pgtype.Text) error {
	switch {
	case changed:
		return nil
	case !prior.Valid:
		return fmt.Errorf("%s dead letter %s: %w", doing, id, ports.ErrNotFound)
	default:
		return fmt.Errorf("%s dead letter %s: it is %s: %w", doing, id, prior.String, ports.ErrVersionConflict)
	}
}

// sqlDeadLetterIgnore marks the dead letter $1 ignored at $2 when it is dead,
// and leaves an ignored one as it is (rewriting it, so that a concurrent
// ignore of the same dead letter, which re-checks the status once the first
// committed, still finds it ignorable). It returns whether it matched, and
// the status the dead letter had (NULL for an unknown id).
const sqlDeadLetterIgnore = `WITH ` + sqlClock + `,
prior AS (
    SELECT d.status FROM /* SCHEMA */.vantage_dead_letters d WHERE d.id = $1
),
ignored AS (
    UPDATE /* SCHEMA */.vantage_dead_letters d
    SET status = ` + sqlDeadLetterIgnored + `,
        resolved_at = CASE WHEN d.status = ` + sqlDeadLetterIgnored + ` THEN d.resolved_at ELSE clock.now END
    FROM clock
    WHERE d.id = $1 AND d.status IN (` + sqlDeadLetterDead + `, ` + sqlDeadLetterIgnored + `)
    RETURNING 1
)
SELECT (SELECT count(*) FROM ignored), (SELECT status FROM prior)`

// DeadLetterIgnore implements ports.Admin in one statement.
// Ignoring an ignored dead letter changes nothing (ResolvedAt stays the
// first time). It returns ports.ErrNotFound for an unknown id and
// ports.ErrVersionConflict for a dead letter that is requeued or recovered.
func (s *Store) DeadLetterIgnore(ctx context.Context, params *ports.DeadLetterIgnoreParams) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	var (
		ignored int
		prior   pgtype.Text
	)
	err := s.pool.QueryRow(ctx, s.sql(sqlDeadLetterIgnore), params.ID, nowArg(params.Now)).Scan(&ignored, &prior)
	if err != nil {
		return fmt.Errorf("ignoring dead letter %s: %w", params.ID, translate(err))
	}
	return deadLetterOutcome("ignoring", params.ID, ignored > 0, prior)
}

// sqlDeadLettersRecover requeues (see sqlRequeue), by generation $4, up to
// $1 dead letters, oldest first, that are dead, failed on a generation other
// than $4 and were never requeued on it (by any requeue, not only the
// latest: requeue_generations): $2 now, $3 NOTIFY channel, $5 the append
// lock class. It walks
// vantage_dead_letters_status_idx in time order and stops after $1 matches.
// FOR UPDATE SKIP LOCKED passes over the dead letters a concurrent recovery
// has locked, and one it committed meanwhile no longer matches when locked,
// so concurrent recoveries never requeue a dead letter twice. It returns the
// requeued dead letters as they are after the requeue; the join with n
// makes it run notified (a SELECT in WITH runs only when it is read).
const sqlDeadLettersRecover = `WITH ` + sqlClock + `,
picked AS (
    SELECT d.id
    FROM /* SCHEMA */.vantage_dead_letters d
    WHERE d.status = ` + sqlDeadLetterDead + ` AND d.generation <> $4::text AND NOT $4::text = ANY (d.requeue_generations)
    ORDER BY d.dead_lettered_at, d.id
    LIMIT $1::bigint
    FOR UPDATE SKIP LOCKED
),
dl AS (
    UPDATE /* SCHEMA */.vantage_dead_letters d
    SET ` + sqlRequeueSet + `
    FROM clock
    WHERE d.id IN (SELECT id FROM picked)
    RETURNING ` + sqlDeadLetterColumns + `
),
` + sqlRequeue + `
SELECT ` + sqlDeadLetterColumns + `
FROM dl, (SELECT count(*) FROM notified) n
ORDER BY dead_lettered_at, id`

// DeadLettersRecover implements ports.DeadLetterStore in one statement (see
// sqlDeadLettersRecover). It returns ports.ErrInvalidArgument for an empty
// Generation or a Limit below 1.
func (s *Store) DeadLettersRecover(ctx context.Context, params *ports.DeadLettersRecoverParams) ([]ports.DeadLetter, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("recovering dead letters: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	out, err := queryRows(ctx, s, sqlDeadLettersRecover, scanDeadLetter, params.Limit, nowArg(params.Now), s.channel, params.Generation, s.appendLockClass())
	if err != nil {
		return nil, fmt.Errorf("recovering dead letters of generation %q: %w", params.Generation, err)
	}
	slices.SortFunc(out, func(a, b ports.DeadLetter) int {
		return cmp.Or(a.DeadLetteredAt.Compare(b.DeadLetteredAt), compareUUID(a.ID, b.ID))
	})
	return out, nil
}
