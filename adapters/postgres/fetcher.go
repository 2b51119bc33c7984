package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/vantage-go/vantage/ports"
)

// sqlFetchLease is the leasing step of EventsFetchPending. Parameters: $1
// caller, $2 now, $3 stale threshold, $4 lease duration, $5 stream ids.
//
// heads lists the pairs of the requested streams (see sqlPairHeads), and
// guarded bounds each by its ordering guard (see sqlGuardBound). candidate
// reads, per pair, the rows up to that bound that the caller may lease:
// pending, not scheduled in the future, unleased, lease-expired or the
// caller's with less than half of the lease left (see sqlLeasableByCaller).
// Rows the caller holds with more left are not written. OFFSET 0 keeps the
// per-pair range scan: flattened, the subquery became a hash join over the
// whole work table.
// picked are the streams with a candidate row, and pinned keeps those not
// pinned to a live other instance (see sqlPin). Their candidate rows are
// locked SKIP LOCKED, checked again and leased, and a past retry time is
// cleared (see vantage_work_schedule_check). Only a row taken from another
// instance's expired lease gains an attempt (see sqlTakeoverAttempt):
// unleased rows and the caller's own, expired or extended, do not.
var sqlFetchLease = `WITH RECURSIVE ` + sqlClock + `,
live AS (
    SELECT i.instance_id
    FROM /* SCHEMA */.vantage_instances i, clock
    WHERE i.last_heartbeat_at > clock.now - $3::interval
),
requested AS (
    SELECT DISTINCT r.stream_id FROM unnest($5::uuid[]) AS r(stream_id)
),
` + sqlPairHeads("heads", "requested") + `,
guarded AS MATERIALIZED (
    SELECT p.stream_id, p.perspective, ` + sqlGuardBound + ` AS bound
    FROM heads p, clock
),
candidate AS (
    SELECT w.work_id, w.stream_id
    FROM guarded g
    CROSS JOIN clock
    CROSS JOIN LATERAL (
        SELECT w.work_id, w.stream_id
        FROM /* SCHEMA */.vantage_work w
        WHERE w.stream_id = g.stream_id AND w.perspective = g.perspective AND w.event_version <= g.bound
          AND ` + sqlLeasableByCaller + `
        OFFSET 0
    ) w
),
picked AS (
    SELECT DISTINCT stream_id FROM candidate
),
` + sqlPin + `,
leasable AS (
    SELECT w.work_id
    FROM /* SCHEMA */.vantage_work w, clock
    WHERE w.work_id = ANY (ARRAY(
              SELECT c.work_id FROM candidate c WHERE c.stream_id IN (SELECT stream_id FROM pinned)))
      AND ` + sqlLeasableByCaller + `
    FOR UPDATE OF w SKIP LOCKED
)
UPDATE /* SCHEMA */.vantage_work w
SET instance_id = $1,
    lease_expiry = clock.now + $4::interval,
    attempts = ` + sqlTakeoverAttempt + `,
    scheduled_for = NULL
FROM clock
WHERE w.work_id = ANY (ARRAY(SELECT work_id FROM leasable))`

// sqlLeasableByCaller is sqlCandidate widened to rows under the caller's own
// live lease with less than half of the lease duration ($4) left, which a
// fetch extends. Rows with more left are not written: a fetch right after a
// claim or an earlier fetch updates nothing.
const sqlLeasableByCaller = `w.processed_at IS NULL
      AND (w.lease_expiry IS NULL OR w.lease_expiry <= clock.now
           OR (w.instance_id = $1 AND w.lease_expiry < clock.now + $4::interval / 2))
      AND (w.scheduled_for IS NULL OR w.scheduled_for <= clock.now)`

// sqlFetchRows returns, per (stream, perspective), the longest version-order
// prefix of pending rows under the caller's live lease. Parameters: $1
// caller, $2 now, $3 stream ids, $4 row limit (NULL for none).
//
// bounded finds where each pair's prefix ends with a few index probes (see
// sqlPrefixEnd), and picked reads the prefix by a range scan, at most $4
// rows a pair, before the rows of all pairs are ordered and cut at $4: a
// fetch reads the rows it returns, not the backlog behind them. Each event's
// payload is sent once, on its first row. Events are looked up by primary
// key row by row (the LATERAL ... LIMIT 1 keeps the planner from hashing the
// whole events table, which it would otherwise pick for the row estimate of
// a LIMIT $4 plan).
var sqlFetchRows = `WITH RECURSIVE ` + sqlClock + `,
requested AS (
    SELECT DISTINCT r.stream_id FROM unnest($3::uuid[]) AS r(stream_id)
),
` + sqlPairHeads("heads", "requested") + `,
bounded AS MATERIALIZED (
    SELECT p.stream_id, p.perspective, ` + sqlPrefixEnd + ` AS prefix_end
    FROM heads p, clock
),
picked AS (
    SELECT w.*
    FROM bounded b
    CROSS JOIN LATERAL (
        SELECT w.work_id, w.stream_id, w.perspective, w.event_id, w.event_version, w.attempts, w.late
        FROM /* SCHEMA */.vantage_work w
        WHERE w.stream_id = b.stream_id AND w.perspective = b.perspective AND w.processed_at IS NULL
          AND w.event_version < b.prefix_end
        ORDER BY w.event_version
        LIMIT $4::bigint
    ) w
    ORDER BY w.stream_id, w.perspective COLLATE "C", w.event_version
    LIMIT $4::bigint
),
marked AS (
    SELECT picked.*, row_number() OVER (PARTITION BY event_id ORDER BY perspective COLLATE "C") = 1 AS first
    FROM picked
)
SELECT p.work_id, p.stream_id, p.perspective, p.event_id, p.event_version, p.attempts, p.late, p.first,
       CASE WHEN p.first THEN e.type END,
       CASE WHEN p.first THEN e.data END,
       CASE WHEN p.first THEN e.metadata END,
       e.created_at
FROM marked p
CROSS JOIN LATERAL (
    SELECT e.type, e.data, e.metadata, e.created_at
    FROM /* SCHEMA */.vantage_events e
    WHERE e.id = p.event_id
    LIMIT 1
) e
ORDER BY p.stream_id, p.perspective COLLATE "C", p.event_version`

// sqlFetchCursors reads the cursors of the fetched streams $1 (a primary
// key range per stream); EventsFetchPending keeps those of the pairs it
// returns rows of.
const sqlFetchCursors = `SELECT ` + sqlCursorColumns + `
FROM /* SCHEMA */.vantage_cursors
WHERE stream_id = ANY($1::uuid[])`

// EventsFetchPending implements ports.EventFetcher in one round trip: the
// lease, fetch and cursor statements go as one batch in one implicit
// transaction. The cursors are read after the rows, so a cursor is at least
// as recent as the rows returned with it.
// The caller need not be live; only a live other owner's pin stops the
// leasing step. Duplicate stream ids are ignored.
//
// It returns ports.ErrInvalidArgument for a nil instance id, a non-positive
// LeaseDuration or StaleThreshold, or a negative MaxRows.
func (s *Store) EventsFetchPending(ctx context.Context, params *ports.EventsFetchPendingParams) (*ports.EventsFetchPendingResult, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("fetching pending events: %w", err)
	}
	result := &ports.EventsFetchPendingResult{}
	if len(params.StreamIDs) == 0 {
		return result, nil
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	now, streams := nowArg(params.Now), uuidsArg(params.StreamIDs)
	b := &pgx.Batch{}
	b.Queue(s.sql(sqlFetchLease), params.InstanceID, now, params.StaleThreshold, params.LeaseDuration, streams)
	b.Queue(s.sql(sqlFetchRows), params.InstanceID, now, streams, limitArg(params.MaxRows))
	b.Queue(s.sql(sqlFetchCursors), streams)

	err := s.sendWork(ctx, b, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := readFetchedRows(br, result); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		cursors, err := pgx.CollectRows(rows, scanCursor)
		if err != nil {
			return err
		}
		result.Cursors = pairCursors(cursors, result.Work)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fetching pending events for instance %s: %w", params.InstanceID, translate(err))
	}
	slices.SortFunc(result.Events, func(a, b ports.Event) int {
		return cmp.Or(compareUUID(a.StreamID, b.StreamID), cmp.Compare(a.Version, b.Version))
	})
	return result, nil
}

// readFetchedRows reads the result of sqlFetchRows into result's Work and
// Events.
func readFetchedRows(br pgx.BatchResults, result *ports.EventsFetchPendingResult) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			item    ports.WorkItem
			first   bool
			ev      ports.Event
			evType  pgtype.Text
			meta    []byte
			created pgtype.Timestamptz
		)
		if err := rows.Scan(uuidDest(&item.WorkID), uuidDest(&item.StreamID), &item.Perspective, uuidDest(&item.EventID), &item.EventVersion,
			&item.Attempts, &item.Late, &first, &evType, &ev.Data, &meta, &created); err != nil {
			return err
		}
		result.Work = append(result.Work, item)
		if !first {
			continue
		}
		ev.ID, ev.StreamID, ev.Type, ev.Version, ev.CreatedAt = item.EventID, item.StreamID, fromText(evType), item.EventVersion, fromTime(created)
		if err := json.Unmarshal(meta, &ev.Metadata); err != nil {
			return fmt.Errorf("decoding metadata of event %s: %w", ev.ID, err)
		}
		result.Events = append(result.Events, ev)
	}
	return rows.Err()
}

// pairCursors keeps the cursors of the pairs of work.
func pairCursors(cursors []ports.Cursor, work []ports.WorkItem) []ports.Cursor {
	pairs := make(map[pairKey]bool, len(cursors))
	for _, w := range work {
		pairs[pairKey{w.StreamID, w.Perspective}] = true
	}
	return slices.DeleteFunc(cursors, func(c ports.Cursor) bool { return !pairs[pairKey{c.StreamID, c.Perspective}] })
}

const sqlReadStream = `SELECT id, stream_id, type, version, data, metadata, created_at
FROM /* SCHEMA */.vantage_events
WHERE stream_id = $1 AND version > $2
ORDER BY version
LIMIT $3::bigint`

// EventsReadStream implements ports.EventFetcher. An unknown stream has no
// events. It returns ports.ErrInvalidArgument for a nil stream id or a
// negative Limit.
func (s *Store) EventsReadStream(ctx context.Context, params *ports.EventsReadStreamParams) ([]ports.Event, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("reading stream: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	events, err := queryRows(ctx, s, sqlReadStream, scanEvent, params.StreamID, params.AfterVersion, limitArg(params.Limit))
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", params.StreamID, err)
	}
	return events, nil
}

// scanEvent scans id, stream_id, type, version, data, metadata, created_at.
func scanEvent(row pgx.CollectableRow) (ports.Event, error) {
	var (
		ev      ports.Event
		meta    []byte
		created pgtype.Timestamptz
	)
	if err := row.Scan(uuidDest(&ev.ID), uuidDest(&ev.StreamID), &ev.Type, &ev.Version, &ev.Data, &meta, &created); err != nil {
		return ev, err
	}
	if err := json.Unmarshal(meta, &ev.Metadata); err != nil {
		return ev, fmt.Errorf("decoding metadata of event %s: %w", ev.ID, err)
	}
	ev.CreatedAt = fromTime(created)
	return ev, nil
}
