package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/vantage-go/vantage/ports"
)

const sqlDeadLetterColumns = `id, work_id, stream_id, perspective, event_id, event_version, attempts, reason, error, instance_id, dead_lettered_at`

// sqlDeadLetterMove deletes a pending row and records it, in one statement:
// $1 dead letter id, $2 now, $3 work id, $4 instance, $5 reason, $6 error.
// No row (already moved, completed, or kept as processed by debug mode)
// inserts nothing. The stream is unpinned when that was its last pending row.
const sqlDeadLetterMove = `WITH ` + sqlClock + `,
moved AS (
    DELETE FROM /* SCHEMA */.vantage_work
    WHERE work_id = $3 AND processed_at IS NULL
    RETURNING work_id, stream_id, perspective, event_id, event_version, attempts
),
unpinned AS (
    DELETE FROM /* SCHEMA */.vantage_active_streams a
    USING moved m
    WHERE a.stream_id = m.stream_id
      AND NOT EXISTS (
          SELECT 1 FROM /* SCHEMA */.vantage_work w
          WHERE w.stream_id = m.stream_id AND w.processed_at IS NULL AND w.work_id <> m.work_id)
)
INSERT INTO /* SCHEMA */.vantage_dead_letters (` + sqlDeadLetterColumns + `)
SELECT $1::uuid, m.work_id, m.stream_id, m.perspective, m.event_id, m.event_version, m.attempts,
       $5::text, $6::text, $4::uuid, clock.now
FROM moved m, clock
RETURNING ` + sqlDeadLetterColumns

// DeadLetterMove implements ports.DeadLetterStore in one statement. The row
// need not be held by params.InstanceID, which is recorded as the instance
// that dead-lettered it. Removing the row unblocks later rows of its
// (stream, perspective). A row already gone yields (DeadLetter{}, false,
// nil).
func (s *Store) DeadLetterMove(ctx context.Context, params *ports.DeadLetterMoveParams) (ports.DeadLetter, bool, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return ports.DeadLetter{}, false, fmt.Errorf("moving work %s to dead letters: generating id: %w", params.WorkID, err)
	}
	if err := s.ready(ctx); err != nil {
		return ports.DeadLetter{}, false, err
	}
	dls, err := queryRows(ctx, s, sqlDeadLetterMove, scanDeadLetter, id, nowArg(params.Now), params.WorkID,
		uuidArg(params.InstanceID), params.Reason, params.Error)
	if err != nil {
		return ports.DeadLetter{}, false, fmt.Errorf("moving work %s to dead letters: %w", params.WorkID, err)
	}
	if len(dls) == 0 {
		return ports.DeadLetter{}, false, nil
	}
	return dls[0], true, nil
}

const sqlDeadLettersList = `SELECT ` + sqlDeadLetterColumns + `
FROM /* SCHEMA */.vantage_dead_letters
WHERE ($1 = '' OR perspective = $1) AND ($2::uuid IS NULL OR stream_id = $2::uuid)
ORDER BY dead_lettered_at, id
LIMIT $3::bigint`

// DeadLettersList implements ports.DeadLetterStore: oldest first (ties in
// id order, which for UUIDv7 ids is the order they were recorded), at most
// Limit when positive. It returns ports.ErrInvalidArgument for a negative
// Limit.
func (s *Store) DeadLettersList(ctx context.Context, params *ports.DeadLettersListParams) ([]ports.DeadLetter, error) {
	if params.Limit < 0 {
		return nil, fmt.Errorf("listing dead letters: %w", invalid("limit %d is negative", params.Limit))
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	out, err := queryRows(ctx, s, sqlDeadLettersList, scanDeadLetter, params.Perspective, uuidArg(params.StreamID), limitArg(params.Limit))
	if err != nil {
		return nil, fmt.Errorf("listing dead letters: %w", err)
	}
	return out, nil
}

func scanDeadLetter(row pgx.CollectableRow) (ports.DeadLetter, error) {
	var (
		dl       ports.DeadLetter
		instance pgtype.UUID
		at       pgtype.Timestamptz
	)
	err := row.Scan(&dl.ID, &dl.WorkID, &dl.StreamID, &dl.Perspective, &dl.EventID, &dl.EventVersion,
		&dl.Attempts, &dl.Reason, &dl.Error, &instance, &at)
	dl.InstanceID, dl.DeadLetteredAt = fromUUID(instance), fromTime(at)
	return dl, err
}

// sqlDeadLetterRequeue deletes the dead letter $1 and stores its work row
// again with its original id, pending, unleased, unscheduled, with zero
// attempts; a cursor already past the event is flagged RewindRequired; the
// NOTIFY on channel $3 wakes the claimers on commit. $2 is now.
const sqlDeadLetterRequeue = `WITH ` + sqlClock + `,
dl AS (
    DELETE FROM /* SCHEMA */.vantage_dead_letters WHERE id = $1
    RETURNING work_id, stream_id, perspective, event_id, event_version
),
requeued AS (
    INSERT INTO /* SCHEMA */.vantage_work (work_id, stream_id, perspective, event_id, event_version, created_at)
    SELECT dl.work_id, dl.stream_id, dl.perspective, dl.event_id, dl.event_version, clock.now
    FROM dl, clock
    RETURNING 1
),
flagged AS (
    UPDATE /* SCHEMA */.vantage_cursors c
    SET ` + sqlFlagRewind + `
    FROM dl f, clock
    WHERE c.stream_id = f.stream_id AND c.perspective = f.perspective AND c.last_version > f.event_version
    RETURNING 1
),
notified AS (
    SELECT pg_notify($3, '') FROM dl
)
SELECT (SELECT count(*) FROM dl), (SELECT count(*) FROM requeued), (SELECT count(*) FROM flagged), (SELECT count(*) FROM notified)`

// DeadLetterRequeue implements ports.DeadLetterStore in one statement. The
// row comes back with its original work id, pending, unleased, unscheduled
// and with zero attempts, and listeners are woken on commit. If the pair's
// cursor is past the event (LastVersion greater than the event's version),
// the cursor is flagged RewindRequired (the trigger keeps the smallest
// version). It returns ports.ErrNotFound for an unknown id.
func (s *Store) DeadLetterRequeue(ctx context.Context, params *ports.DeadLetterRequeueParams) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	var found, requeued, flagged, notified int
	err := s.pool.QueryRow(ctx, s.sql(sqlDeadLetterRequeue), params.ID, nowArg(params.Now), s.channel).
		Scan(&found, &requeued, &flagged, &notified)
	if err != nil {
		return fmt.Errorf("requeueing dead letter %s: %w", params.ID, translate(err))
	}
	if found == 0 {
		return fmt.Errorf("requeueing dead letter %s: %w", params.ID, ports.ErrNotFound)
	}
	return nil
}

// DeadLetterIgnore implements ports.DeadLetterStore.
func (s *Store) DeadLetterIgnore(context.Context, *ports.DeadLetterIgnoreParams) error {
	return fmt.Errorf("ignoring dead letter: %w", errors.ErrUnsupported)
}

// DeadLettersRecover implements ports.DeadLetterStore.
func (s *Store) DeadLettersRecover(context.Context, *ports.DeadLettersRecoverParams) ([]ports.DeadLetter, error) {
	return nil, fmt.Errorf("recovering dead letters: %w", errors.ErrUnsupported)
}
