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
// caller, $2 now, $3 stale threshold, $4 lease duration, $5 stream ids, $6
// the append lock class (see vantage_release_drained).
//
// taken locks, in stream id order, the rows of the requested streams that
// are not under another instance's live lease (sqlOpenTo), waiting for a
// statement that holds one: the lock is what orders this fetch with an
// append that may be late (see sqlAppend), so it is taken even on a stream
// the caller holds with lease to spare, whose row it then does not write.
// Each comes with its holder and marks as they were, and whether it is
// drainable (vantage_stream_drainable). leased leases the drainable ones
// to the caller until $2 + $4, except those it holds with at least half of
// the lease left: a fetch right after a claim or an earlier fetch writes no
// lease. The marks are cleared when the stream passes to another holder,
// and charged charges the rows handed out under a lease taken from a
// holder that is not live (sqlCharge). released releases the streams the
// caller holds that have no pending row left. No partition rule applies,
// and the caller need not be live.
var sqlFetchLease = `WITH ` + sqlClock + `,
` + sqlLive + `,
taken AS MATERIALIZED (
    SELECT a.stream_id, a.instance_id AS holder, a.lease_expiry, a.handed_out,
           /* SCHEMA */.vantage_stream_drainable(a.stream_id, clock.now) AS drainable
    FROM /* SCHEMA */.vantage_active_streams a, clock
    WHERE a.stream_id = ANY ($5::uuid[]) AND ` + sqlOpenTo + `
    ORDER BY a.stream_id
    FOR NO KEY UPDATE OF a
),
leased AS (
    UPDATE /* SCHEMA */.vantage_active_streams a
    SET ` + sqlLeaseTo + `
    FROM taken t, clock
    WHERE a.stream_id = t.stream_id AND t.drainable
      AND (t.holder IS DISTINCT FROM $1 OR t.lease_expiry < clock.now + $4::interval / 2)
    RETURNING 1
),
` + sqlCharge("taken", "t.drainable") + `,
released AS (
    SELECT /* SCHEMA */.vantage_release_drained(
        ARRAY(SELECT t.stream_id FROM taken t WHERE t.drainable IS NULL AND t.holder = $1), $6, $1) AS n
)
SELECT (SELECT count(*) FROM leased), (SELECT n FROM released)`

// sqlFetchRows returns, per (stream, perspective) of the requested streams
// under the caller's live lease, the longest version-order prefix of
// pending rows not scheduled in the future, and records in each stream's
// lease the highest version it returns per pair (the handed-out marks).
// Parameters: $1 caller, $2 now, $3 stream ids, $4 row limit (NULL for
// none).
//
// mine reads the requested streams' rows by one index probe each (the
// LATERAL ... LIMIT 1): the planner, which cannot know how many streams a
// call names, would otherwise pick the caller's whole range of
// vantage_active_streams_instance_idx when its statistics were taken
// while the caller held few streams, every stream it holds and the dead
// entries of those it held, for a handful of requested streams.
//
// bounded finds where each pair's prefix ends with a probe (see
// sqlPrefixEnd), and picked reads the prefixes pair after pair, in the
// order of the result, by a range scan each, and stops at $4 rows: the
// pairs come sorted, so the rows of a pair need sorting only among
// themselves (an incremental sort), and the pairs after the cut are not
// read. A fetch reads the rows it returns, not the backlog behind them, nor
// the rows of the pairs it cuts off.
//
// handed raises the marks that the rows returned pass (a mark never drops
// here: a refetch that returns fewer rows leaves it), one update of a
// stream row per fetch, in no index, so heap-only. It finds the rows to
// update by primary key (= ANY of an array); whether a mark rises is an
// aggregate per row, which the planner cannot turn into a join: as a join
// (an EXISTS or IN), it hashed the few streams fetched against a scan of
// every stream.
//
// Each event's payload is sent once, on its row of the first perspective
// (firsts, hashed: no sort), and looked up only for that row, by primary
// key (the LATERAL ... LIMIT 1 keeps the planner from hashing the whole
// events table, which it would otherwise pick for the row estimate of a
// LIMIT $4 plan). picked is in the result's order already, so the final
// sort finds its input sorted.
var sqlFetchRows = `WITH RECURSIVE ` + sqlClock + `,
mine AS (
    SELECT a.stream_id
    FROM (SELECT DISTINCT r.stream_id FROM unnest($3::uuid[]) AS r(stream_id)) r
    CROSS JOIN LATERAL (
        SELECT a.stream_id
        FROM /* SCHEMA */.vantage_active_streams a, clock
        WHERE a.stream_id = r.stream_id AND a.instance_id = $1 AND a.lease_expiry > clock.now
        LIMIT 1
    ) a
),
` + sqlPairHeads("heads", "mine") + `,
bounded AS MATERIALIZED (
    SELECT p.stream_id, p.perspective, ` + sqlPrefixEnd + ` AS prefix_end
    FROM heads p, clock
),
picked AS (
    SELECT w.*
    FROM (SELECT * FROM bounded b ORDER BY b.stream_id, b.perspective COLLATE "C") b
    CROSS JOIN LATERAL (
        SELECT w.work_id, w.stream_id, w.perspective, w.event_id, w.event_version, w.attempts, w.late, w.replay
        FROM /* SCHEMA */.vantage_work w
        WHERE w.stream_id = b.stream_id AND w.perspective = b.perspective AND w.processed_at IS NULL
          AND w.event_version < b.prefix_end
        ORDER BY w.event_version
        LIMIT $4::bigint
    ) w
    ORDER BY b.stream_id, b.perspective COLLATE "C", w.event_version
    LIMIT $4::bigint
),
tops AS MATERIALIZED (
    SELECT p.stream_id, p.perspective, max(p.event_version) AS version
    FROM picked p
    GROUP BY p.stream_id, p.perspective
),
handed AS (
    UPDATE /* SCHEMA */.vantage_active_streams a
    SET handed_out = a.handed_out || (
        SELECT jsonb_object_agg(t.perspective, t.version)
        FROM tops t
        WHERE t.stream_id = a.stream_id AND t.version > coalesce((a.handed_out ->> t.perspective)::bigint, 0))
    WHERE a.stream_id = ANY (ARRAY(SELECT DISTINCT t.stream_id FROM tops t))
      AND (SELECT bool_or(t.version > coalesce((a.handed_out ->> t.perspective)::bigint, 0))
           FROM tops t WHERE t.stream_id = a.stream_id)
),
firsts AS (
    SELECT p.event_id, min(p.perspective COLLATE "C") AS perspective
    FROM picked p
    GROUP BY p.event_id
)
SELECT p.work_id, p.stream_id, p.perspective, p.event_id, p.event_version, p.attempts, p.late, p.replay, f.event_id IS NOT NULL,
       e.type, e.data, e.metadata, e.created_at
FROM picked p
LEFT JOIN firsts f ON f.event_id = p.event_id AND f.perspective = p.perspective
LEFT JOIN LATERAL (
    SELECT e.type, e.data, e.metadata, e.created_at
    FROM /* SCHEMA */.vantage_events e
    WHERE e.id = p.event_id AND f.event_id IS NOT NULL
    LIMIT 1
) e ON true
ORDER BY p.stream_id, p.perspective COLLATE "C", p.event_version`

// sqlFetchCursors reads the cursors of the fetched streams $1 (a primary
// key range per stream); EventsFetchPending keeps those of the pairs it
// returns rows of.
const sqlFetchCursors = `SELECT ` + sqlCursorColumns + `
FROM /* SCHEMA */.vantage_cursors
WHERE stream_id = ANY($1::uuid[])`

// EventsFetchPending implements ports.EventFetcher in one round trip: the
// lease, fetch and cursor statements go as one batch in one implicit
// transaction. The rows are read in a statement after the lease, so they
// include every row stored before the stream's row was locked; the cursors
// are read after the rows, so a cursor is at least as recent as the rows
// returned with it. The caller need not be live; only another instance's
// live lease stops the leasing step. Duplicate stream ids are ignored.
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
	b.Queue(s.sql(sqlFetchLease), params.InstanceID, now, params.StaleThreshold, params.LeaseDuration, streams, s.appendLockClass())
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
	names := internedNames{}
	for rows.Next() {
		var (
			item        ports.WorkItem
			first       bool
			ev          ports.Event
			perspective pgtype.DriverBytes
			evType      pgtype.DriverBytes
			meta        []byte
			created     pgtype.Timestamptz
		)
		if err := rows.Scan(uuidDest(&item.WorkID), uuidDest(&item.StreamID), &perspective, uuidDest(&item.EventID), &item.EventVersion,
			&item.Attempts, &item.Late, &item.Replay, &first, &evType, &ev.Data, &meta, &created); err != nil {
			return err
		}
		item.Perspective = names.intern(perspective)
		result.Work = append(result.Work, item)
		if !first {
			continue
		}
		ev.ID, ev.StreamID, ev.Type, ev.Version, ev.CreatedAt = item.EventID, item.StreamID, names.intern(evType), item.EventVersion, fromTime(created)
		if err := json.Unmarshal(meta, &ev.Metadata); err != nil {
			return fmt.Errorf("decoding metadata of event %s: %w", ev.ID, err)
		}
		result.Events = append(result.Events, ev)
	}
	return rows.Err()
}

// internedNames hands out one string per distinct perspective or event
// type name of a fetch: thousands of rows name a few of them, and a string
// of its own per row would be an allocation per row, held as long as the
// row.
type internedNames map[string]string

// intern returns the string of b, which may be the driver's memory (valid
// until the next row only).
func (n internedNames) intern(b []byte) string {
	if s, ok := n[string(b)]; ok {
		return s
	}
	s := string(b)
	n[s] = s
	return s
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
