package faults

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// movesTable records every forward move of a cursor of the run (see
// movesSQL): the delay of each event and the work of each worker are read
// from it.
const movesTable = "fault_cursor_moves"

// movesSQL creates movesTable in schema and the deferred trigger that
// fills it: each transaction that moves a cursor of vantage_cursors
// forward (a model or projection save, a completion) adds a row with the
// pair, the versions it moved from and to, the time of its commit
// (clock_timestamp() in a trigger deferred to the commit) and the
// application_name of the connection, which names the worker process.
// Moves back (a rewind's reset) are not recorded; the replay's moves
// forward are. A transaction rolled back, or a savepoint, records nothing.
func movesSQL(schema string) string {
	moves := pgx.Identifier{schema, movesTable}.Sanitize()
	cursors := pgx.Identifier{schema, "vantage_cursors"}.Sanitize()
	fn := pgx.Identifier{schema, "fault_record_cursor_move"}.Sanitize()
	return `CREATE TABLE ` + moves + ` (
    stream_id    uuid        NOT NULL,
    perspective  text        NOT NULL,
    from_version bigint      NOT NULL,
    to_version   bigint      NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    writer       text        NOT NULL DEFAULT current_setting('application_name')
);
CREATE INDEX ON ` + moves + ` (stream_id);
CREATE INDEX ON ` + moves + ` (writer, at);
CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ` + moves + ` (stream_id, perspective, from_version, to_version)
    VALUES (NEW.stream_id, NEW.perspective, CASE WHEN TG_OP = 'UPDATE' THEN OLD.last_version ELSE 0 END, NEW.last_version);
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER fault_cursor_moved AFTER UPDATE OF last_version ON ` + cursors + `
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.last_version > OLD.last_version) EXECUTE FUNCTION ` + fn + `();
CREATE CONSTRAINT TRIGGER fault_cursor_created AFTER INSERT ON ` + cursors + `
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.last_version > 0) EXECUTE FUNCTION ` + fn + `()`
}

// delay is the largest delay of a healthy event.
type delay struct {
	d           time.Duration
	stream      uuid.UUID
	version     int64
	perspective string
}

func (d delay) String() string {
	if d.stream == uuid.Nil {
		return "no healthy event applied"
	}
	return fmt.Sprintf("%.1fs: stream %s version %d (%s)", d.d.Seconds(), d.stream, d.version, d.perspective)
}

// maxDelay returns the largest delay of the healthy events of the streams
// that hold no fault event (the streams of the healthy lag): for each
// such event and perspective, from the event's created_at to the commit of
// the first cursor move of the perspective past the event after it was
// stored (movesTable). An event is applied by every perspective at the
// latest of them, so the largest of these is the largest delay from an
// append to its event applied by every perspective. An event that a
// perspective never passed (lost, still pending) has no delay there: the
// other checks report it.
func maxDelay(ctx context.Context, pool *pgxpool.Pool, schema string) (delay, error) {
	events := pgx.Identifier{schema, "vantage_events"}.Sanitize()
	moves := pgx.Identifier{schema, movesTable}.Sanitize()
	var (
		d       delay
		seconds float64
	)
	err := pool.QueryRow(ctx, `WITH faulted AS (SELECT DISTINCT stream_id FROM `+events+` WHERE data ? 'fault'),
firsts AS (
    SELECT e.stream_id, e.version, m.perspective, min(m.at) - e.created_at AS delay
    FROM `+events+` e
    JOIN `+moves+` m ON m.stream_id = e.stream_id AND e.version > m.from_version AND e.version <= m.to_version
                      AND m.at >= e.created_at
    WHERE e.stream_id NOT IN (SELECT stream_id FROM faulted)
    GROUP BY e.stream_id, e.version, e.created_at, m.perspective
)
SELECT stream_id, version, perspective, extract(epoch FROM delay)::float8
FROM firsts ORDER BY delay DESC LIMIT 1`).Scan(&d.stream, &d.version, &d.perspective, &seconds)
	if errors.Is(err, pgx.ErrNoRows) {
		return delay{}, nil
	}
	if err != nil {
		return delay{}, fmt.Errorf("measuring the delays: %w", err)
	}
	d.d = time.Duration(seconds * float64(time.Second))
	return d, nil
}

// firstMoveBy returns the commit time of the first cursor move by the
// process writer (its application_name) after since, and false when it
// made none.
func firstMoveBy(ctx context.Context, pool *pgxpool.Pool, schema, writer string, since time.Time) (time.Time, bool, error) {
	var at *time.Time
	err := pool.QueryRow(ctx, `SELECT min(at) FROM `+pgx.Identifier{schema, movesTable}.Sanitize()+
		` WHERE writer = $1 AND at > $2`, writer, since).Scan(&at)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("reading the cursor moves of %s: %w", writer, err)
	}
	if at == nil {
		return time.Time{}, false, nil
	}
	return *at, true, nil
}
