package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/vantage-go/vantage/ports"
)

// Shared SQL fragments. Every statement that needs the current time starts
// with the clock CTE: the caller's Now when set, else the database's now().

// sqlLive is the CTE of the live instances at clock.now, passive ones
// included (their leases stand), given the stale threshold $3.
const sqlLive = `live AS (
    SELECT i.instance_id
    FROM /* SCHEMA */.vantage_instances i, clock
    WHERE i.last_heartbeat_at > clock.now - $3::interval
)`

// sqlOpenTo is true when the stream row a is not under the live lease of an
// instance other than the caller $1: unleased, held by the caller, expired,
// or held by an instance missing from the live CTE. Such a stream may be
// taken (a claim adds the partition rule).
const sqlOpenTo = `(a.instance_id IS NULL OR a.instance_id = $1 OR a.lease_expiry <= clock.now
       OR a.instance_id NOT IN (SELECT l.instance_id FROM live l))`

// sqlCharge returns the CTE charged, which adds an attempt to every pending
// row handed out under the leases of the streams of the CTE taken (columns
// stream_id, holder and handed_out, as they were before the statement
// changed them) whose holder is neither the caller $1 nor live, and that
// satisfy cond: the rows of a pair at or below its mark (see
// vantage_active_streams.handed_out), one range of
// vantage_work_pending_idx per pair. A takeover from a live holder (its
// lease expired) charges nothing.
func sqlCharge(taken, cond string) string {
	return `charged AS (
    UPDATE /* SCHEMA */.vantage_work w
    SET attempts = w.attempts + 1
    FROM (
        SELECT t.stream_id, m.key AS perspective, m.value::bigint AS mark
        FROM ` + taken + ` t
        CROSS JOIN LATERAL jsonb_each_text(t.handed_out) m
        WHERE t.holder IS NOT NULL AND t.holder <> $1 AND t.holder NOT IN (SELECT l.instance_id FROM live l)
          AND ` + cond + `
    ) h
    WHERE w.stream_id = h.stream_id AND w.perspective = h.perspective AND w.event_version <= h.mark
      AND w.processed_at IS NULL
    RETURNING 1
)`
}

// sqlUnlease is the SET list that releases a stream row a's lease.
const sqlUnlease = `instance_id = NULL, lease_expiry = NULL, handed_out = '{}'`

// sqlLeaseTo is the SET list that leases a stream row a, taken as t (with
// its holder before the statement), to the caller $1 until clock.now + $4:
// the handed-out marks stay with a lease the caller renews and are cleared
// when the stream passes to it from another holder.
const sqlLeaseTo = `instance_id = $1, lease_expiry = clock.now + $4::interval, last_activity_at = clock.now,
        handed_out = CASE WHEN t.holder = $1 THEN a.handed_out ELSE '{}' END`

// sqlClock is the clock CTE of statements whose $2 is params.Now, sqlClock1
// that of statements whose $1 is.
const (
	sqlClock  = `clock AS (SELECT coalesce($2::timestamptz, now()) AS now)`
	sqlClock1 = `clock AS (SELECT coalesce($1::timestamptz, now()) AS now)`
)

// Heartbeat statements, sent as one batch in this order: lock, leases,
// instances, upsert. Parameters: $1 caller, $2 now, and $3 the stale
// threshold, except in sqlHeartbeat: $3 service, $4 host, $5 pid, $6
// metadata, $7 passive.
//
// Only a caller that was live before the call abandons others (see
// ports.WorkClaimer.InstanceHeartbeat): the upsert comes last, so every
// statement before it reads the caller's previous heartbeat (sqlWasLive).
//
// Lock order, for every statement of the adapter that waits for row locks:
// instance rows, then stream rows (vantage_active_streams), then work rows,
// then cursors and dead letters, several rows of a table in key order; a
// requeue, whose work rows are new, takes its dead letters first. The
// per-stream append locks (sqlAppendLock) are waited for only before any
// row lock; vantage_release_drained takes them without waiting.
// sqlHeartbeatLock locks the caller's instance row and the stale ones in
// instance id order before anything else, so survivors abandoning the same
// dead instances queue there: the first abandons them, and the others, once
// it committed, find them gone (FOR UPDATE skips a deleted row and rechecks
// a changed one) and abandon nothing, so each is abandoned once and each
// handed-out row gains one attempt. Stream rows are locked in stream id
// order, so that overlapping abandonments cannot deadlock on them either;
// the work rows they charge are reached only through the stream rows they
// hold, which every other writer of a stream's work rows locks first
// (completions, failures, dead letters, retirement) or never waits for
// (claims skip locked stream rows). So none of them deadlock: a deadlock
// would stall the heartbeat for deadlock_timeout and could make the caller
// itself look stale. Each statement finds the stale instances again
// (sqlStale), on the rows the lock statement locked; the caller is never
// one, whatever its stored heartbeat says.
const (
	// sqlWasLive is true when the caller $1 was live before this call: its
	// stored heartbeat is newer than now - $3.
	sqlWasLive = `EXISTS (
    SELECT 1 FROM /* SCHEMA */.vantage_instances me
    WHERE me.instance_id = $1 AND me.last_heartbeat_at > clock.now - $3::interval)`

	// sqlStale lists the instances the caller abandons: stale ones other than
	// the caller, none when the caller was not live itself.
	sqlStale = `stale AS (
    SELECT i.instance_id
    FROM /* SCHEMA */.vantage_instances i, clock
    WHERE i.last_heartbeat_at < clock.now - $3::interval AND i.instance_id <> $1 AND ` + sqlWasLive + `
)`

	sqlHeartbeatLock = `WITH ` + sqlClock + `
SELECT i.instance_id
FROM /* SCHEMA */.vantage_instances i, clock
WHERE i.instance_id = $1
   OR (i.last_heartbeat_at < clock.now - $3::interval AND ` + sqlWasLive + `)
ORDER BY i.instance_id
FOR UPDATE OF i`

	// sqlAbandonInstances deletes the stale instances that hold no stream
	// (sqlAbandonLeases released them all, but those it passed over) and
	// returns their ids, NextStaleAt, Rejoined and Live: the caller, whose
	// upsert comes next, and the other instances live at clock.now (the
	// stale ones are not).
	sqlAbandonInstances = `WITH ` + sqlClock + `,
` + sqlStale + `,
abandoned AS (
    DELETE FROM /* SCHEMA */.vantage_instances i
    WHERE i.instance_id = ANY (ARRAY(SELECT instance_id FROM stale))
      AND NOT EXISTS (SELECT 1 FROM /* SCHEMA */.vantage_active_streams a WHERE a.instance_id = i.instance_id)
    RETURNING i.instance_id
)
SELECT
    ARRAY(SELECT a.instance_id FROM abandoned a),
    (SELECT min(i.last_heartbeat_at) + $3::interval
     FROM /* SCHEMA */.vantage_instances i
     WHERE i.last_heartbeat_at >= clock.now - $3::interval AND i.instance_id <> $1),
    NOT ` + sqlWasLive + `,
    1 + (SELECT count(*)
         FROM /* SCHEMA */.vantage_instances i
         WHERE i.last_heartbeat_at > clock.now - $3::interval AND i.instance_id <> $1)
FROM clock`

	sqlHeartbeat = `WITH ` + sqlClock + `
INSERT INTO /* SCHEMA */.vantage_instances AS i
    (instance_id, service_name, host_name, process_id, metadata, started_at, last_heartbeat_at, passive)
SELECT $1::uuid, $3::text, $4::text, $5::integer, $6::jsonb, clock.now, clock.now, $7::boolean FROM clock
ON CONFLICT (instance_id) DO UPDATE
SET service_name = excluded.service_name,
    host_name = excluded.host_name,
    process_id = excluded.process_id,
    metadata = excluded.metadata,
    last_heartbeat_at = excluded.last_heartbeat_at,
    passive = excluded.passive`
)

// sqlAbandonLeases releases the stream leases of the stale instances and
// charges the rows handed out under them an attempt (a takeover from a dead
// instance, see sqlCharge): the stream rows are locked in stream id order
// (vantage_active_streams_instance_idx), released by key, then the rows
// charged. The charge runs last (a data-modifying CTE the main statement
// does not read), on the marks as they were locked. A stream row locked
// by someone else is passed over (SKIP LOCKED): abandoners are serialized
// by sqlHeartbeatLock already, so the lock is the stale instance's own,
// an unfinished statement of a process paused mid-batch, which holds it
// for as long as the pause; waiting for it, every live instance's
// heartbeat would wait as long, and could go stale. sqlAbandonInstances
// keeps the instance while it holds such a stream, so a later heartbeat
// abandons it once the lock is gone.
var sqlAbandonLeases = `WITH ` + sqlClock + `,
` + sqlStale + `,
` + sqlLive + `,
taken AS MATERIALIZED (
    SELECT a.stream_id, a.instance_id AS holder, a.handed_out
    FROM /* SCHEMA */.vantage_active_streams a
    WHERE a.instance_id = ANY (ARRAY(SELECT instance_id FROM stale))
    ORDER BY a.stream_id
    FOR UPDATE OF a SKIP LOCKED
),
` + sqlCharge("taken", "true") + `
UPDATE /* SCHEMA */.vantage_active_streams a
SET ` + sqlUnlease + `
FROM taken t
WHERE a.stream_id = t.stream_id`

// InstanceHeartbeat implements ports.WorkClaimer in one round trip: the lock,
// the abandonment, NextStaleAt and the upsert go as one batch in one
// implicit transaction. Liveness boundaries: an instance is live while
// last_heartbeat_at > Now - StaleThreshold and abandoned once
// last_heartbeat_at < Now - StaleThreshold, by a caller whose own previous
// heartbeat was live at Now; a caller that was not (new, or back from an
// outage) abandons nobody and gets Rejoined. It returns
// ports.ErrInvalidArgument for a nil instance id or a non-positive
// StaleThreshold.
func (s *Store) InstanceHeartbeat(ctx context.Context, params *ports.InstanceHeartbeatParams) (*ports.InstanceHeartbeatResult, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("recording heartbeat: %w", err)
	}
	meta, err := jsonMap(params.Metadata)
	if err != nil {
		return nil, fmt.Errorf("recording heartbeat: encoding metadata: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	now := nowArg(params.Now)
	b := &pgx.Batch{}
	b.Queue(s.sql(sqlHeartbeatLock), params.InstanceID, now, params.StaleThreshold)
	b.Queue(s.sql(sqlAbandonLeases), params.InstanceID, now, params.StaleThreshold)
	b.Queue(s.sql(sqlAbandonInstances), params.InstanceID, now, params.StaleThreshold)
	b.Queue(s.sql(sqlHeartbeat), params.InstanceID, now, params.ServiceName, params.HostName, params.ProcessID, meta, params.Passive)
	result := &ports.InstanceHeartbeatResult{}
	err = s.sendWork(ctx, b, func(br pgx.BatchResults) error {
		if err := execN(br, 2); err != nil {
			return err
		}
		var nextStaleAt pgtype.Timestamptz
		if err := br.QueryRow().Scan(&result.Abandoned, &nextStaleAt, &result.Rejoined, &result.Live); err != nil {
			return err
		}
		result.NextStaleAt = fromTime(nextStaleAt)
		_, err := br.Exec()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("recording heartbeat of %s: %w", params.InstanceID, translate(err))
	}
	slices.SortFunc(result.Abandoned, compareUUID)
	return result, nil
}

// Deregistration statements ($1 the instance), sent as one batch in the
// lock order: the instance row, then its stream rows in stream id order,
// whose leases are released without charge (a graceful stop is no
// takeover). Taking the instance row first matters: a survivor abandoning
// the instance at the same time has locked it, and waits for nothing the
// deregistration holds.
const (
	sqlDeregister = `DELETE FROM /* SCHEMA */.vantage_instances WHERE instance_id = $1`

	sqlDeregisterLeases = `UPDATE /* SCHEMA */.vantage_active_streams a
SET ` + sqlUnlease + `
WHERE a.stream_id IN (
    SELECT p.stream_id FROM /* SCHEMA */.vantage_active_streams p
    WHERE p.instance_id = $1
    ORDER BY p.stream_id
    FOR UPDATE
)`
)

// InstanceDeregister implements ports.WorkClaimer in one round trip (a batch
// in one implicit transaction).
func (s *Store) InstanceDeregister(ctx context.Context, params *ports.InstanceDeregisterParams) error {
	instanceID := params.InstanceID
	if err := s.ready(ctx); err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(s.sql(sqlDeregister), instanceID)
	b.Queue(s.sql(sqlDeregisterLeases), instanceID)
	err := s.sendWork(ctx, b, func(br pgx.BatchResults) error { return execN(br, b.Len()) })
	if err != nil {
		return fmt.Errorf("deregistering instance %s: %w", instanceID, translate(err))
	}
	return nil
}

// sqlInstancesList lists the instances with the count of the streams their
// leases name, one range of vantage_active_streams_instance_idx each.
const sqlInstancesList = `SELECT i.instance_id, i.service_name, i.host_name, i.process_id, i.metadata, i.started_at, i.last_heartbeat_at, i.passive,
       (SELECT count(*) FROM /* SCHEMA */.vantage_active_streams a WHERE a.instance_id = i.instance_id)
FROM /* SCHEMA */.vantage_instances i ORDER BY i.instance_id`

// InstancesList implements ports.Admin in one statement.
func (s *Store) InstancesList(ctx context.Context) ([]ports.Instance, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	out, err := queryRows(ctx, s, sqlInstancesList, func(row pgx.CollectableRow) (ports.Instance, error) {
		var (
			inst          ports.Instance
			meta          []byte
			started, beat pgtype.Timestamptz
		)
		if err := row.Scan(&inst.ID, &inst.ServiceName, &inst.HostName, &inst.ProcessID, &meta, &started, &beat, &inst.Passive, &inst.LeasedStreams); err != nil {
			return inst, err
		}
		if err := json.Unmarshal(meta, &inst.Metadata); err != nil {
			return inst, fmt.Errorf("decoding metadata of instance %s: %w", inst.ID, err)
		}
		inst.StartedAt, inst.LastHeartbeatAt = fromTime(started), fromTime(beat)
		return inst, nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing instances: %w", err)
	}
	return out, nil
}

// sqlClaim leases streams to the caller ($1) and lists those it can drain,
// in one statement. Parameters: $2 now, $3 stale threshold, $4 lease
// duration, $5 MaxStreams, $6 partition count, $7 the append lock class
// (see vantage_release_drained).
//
//   - held are the streams the caller holds, when it is live
//     (vantage_active_streams_instance_idx), each with whether it is
//     drainable (vantage_stream_drainable: a skip scan of its pairs' first
//     rows). Those it can drain take room in the result; those without a
//     pending row left (a release that an append in flight held off, and
//     the append rolled back) are released by emptied.
//   - ranked takes, oldest pending work first, as many other streams as
//     MaxStreams leaves room for (at most sqlClaimChunk), plus one to learn
//     whether any was left over, from vantage_claim_streams (see the
//     migration): it walks the streams nobody holds, those whose lease
//     expired and those of holders that are not live, with the caller's
//     rank, the partition rule and drainability, and stops as soon as it
//     has found enough; a passive caller, which has no rank, gets none. It
//     returns nothing when the caller is not live, and then the whole
//     statement changes nothing.
//   - picked adds the held streams the caller can drain whose lease
//     expired: nobody took them, and the caller takes them back without
//     charge. A held stream under a live lease is not written.
//   - sqlTake locks the picked streams, SKIP LOCKED, checking again that
//     no other instance holds them under a live lease, leases them, and
//     charges the rows handed out under a lease taken from a holder that is
//     not live (sqlCharge).
//   - drain is the result: the held streams the caller can drain under its
//     live lease, and those it just leased (found drainable on the way).
//     Each stream's drainability is checked once: a claim runs about once
//     per event under live traffic, and its cost grows with the streams
//     the caller holds.
//
// It returns one row per stream of drain, at most MaxStreams of them,
// smallest backlog (pending rows of the stream, counted up to
// sqlBacklogCap) first, each with the figures of the whole claim: whether
// the caller is live, whether candidates were left out, how many streams
// it released (the column that makes emptied run: a CTE without a
// reference is not run unless it writes) and how many streams drain holds
// in all; and one row of those figures alone, the stream NULL, when drain
// is empty.
// The backlog count reads the stream's rows in vantage_work_pending_idx
// order, so that it is a bounded range scan of that index whatever the
// statistics say (a limited sequential scan looks as cheap to a planner
// that sees few rows, and reads the whole table for a stream with fewer
// rows than the cap).
var sqlClaim = `WITH ` + sqlClock + `,
` + sqlLive + `,
held AS MATERIALIZED (
    SELECT a.stream_id, a.lease_expiry, /* SCHEMA */.vantage_stream_drainable(a.stream_id, clock.now) AS drainable
    FROM /* SCHEMA */.vantage_active_streams a, clock
    WHERE a.instance_id = $1 AND EXISTS (SELECT 1 FROM live l WHERE l.instance_id = $1)
),
emptied AS (
    SELECT /* SCHEMA */.vantage_release_drained(ARRAY(SELECT h.stream_id FROM held h WHERE h.drainable IS NULL), $7, $1) AS n
),
room AS (
    SELECT least(greatest($5 - (SELECT count(*) FROM held h WHERE h.drainable), 0), ` + sqlClaimChunk + `)::integer AS n
),
ranked AS (
    SELECT c.candidate_stream AS stream_id, row_number() OVER (ORDER BY min(c.candidate_seq)) AS rn
    FROM clock, room,
         /* SCHEMA */.vantage_claim_streams($1, clock.now, $3::interval, $6, room.n + 1, $7) c
    GROUP BY c.candidate_stream
    ORDER BY min(c.candidate_seq)
    LIMIT (SELECT n + 1 FROM room)
),
picked AS (
    SELECT stream_id FROM ranked WHERE rn <= (SELECT n FROM room)
    UNION
    SELECT h.stream_id FROM held h, clock WHERE h.drainable AND h.lease_expiry <= clock.now
),
` + sqlTake + `,
drain AS MATERIALIZED (
    SELECT h.stream_id FROM held h, clock WHERE h.drainable AND h.lease_expiry > clock.now
    UNION
    SELECT l.stream_id FROM leased l
),
figures AS (
    SELECT EXISTS (SELECT 1 FROM live l WHERE l.instance_id = $1) AS alive,
           (SELECT count(*) FROM ranked) > (SELECT n FROM room) AS unselected,
           (SELECT n FROM emptied) AS released,
           (SELECT count(*) FROM drain) AS drainable
)
SELECT f.alive, f.unselected, f.released, f.drainable, d.stream_id
FROM figures f
LEFT JOIN LATERAL (
    SELECT d.stream_id, b.pending
    FROM drain d
    CROSS JOIN LATERAL (
        SELECT count(*) AS pending
        FROM (
            SELECT 1
            FROM /* SCHEMA */.vantage_work p
            WHERE p.stream_id = d.stream_id AND p.processed_at IS NULL
            ORDER BY p.perspective, p.event_version
            LIMIT ` + sqlBacklogCap + `
        ) p
    ) b
    ORDER BY b.pending, d.stream_id
    LIMIT $5
) d ON true
ORDER BY d.pending, d.stream_id`

// sqlTake leases the streams of the CTE picked to the caller ($1) until
// clock.now + $4. taken locks their rows FOR UPDATE (a change of holder is
// a key update, see sqlFenced) in stream id order, SKIP LOCKED (a claim
// never waits: a stream being completed, fetched or taken by another is
// left for the next claim), keeping those not under another instance's
// live lease (sqlOpenTo), with their holder and marks as they were. leased
// leases them: the marks are cleared when the stream passes to another
// holder. charged charges the rows handed out under a lease taken from a
// holder that is not live (sqlCharge), after the stream rows were locked.
var sqlTake = `taken AS MATERIALIZED (
    SELECT a.stream_id, a.instance_id AS holder, a.handed_out
    FROM /* SCHEMA */.vantage_active_streams a, clock
    WHERE a.stream_id IN (SELECT stream_id FROM picked) AND ` + sqlOpenTo + `
    ORDER BY a.stream_id
    FOR UPDATE OF a SKIP LOCKED
),
leased AS (
    UPDATE /* SCHEMA */.vantage_active_streams a
    SET ` + sqlLeaseTo + `
    FROM taken t, clock
    WHERE a.stream_id = t.stream_id
    RETURNING a.stream_id
),
` + sqlCharge("taken", "true")

// sqlClaimChunk bounds the new streams one claim takes. Nothing is drained
// before a claim returns, and a stream taken from a dead holder charges its
// handed-out rows in the claim: smaller claims report HasMore, and the
// engine claims again at once while it drains what the first one took.
const sqlClaimChunk = `64`

// sqlBacklogCap bounds the count of a stream's pending rows by which
// sqlClaim orders its result, so that ordering costs at most this many
// index entries per stream however long the backlog: streams with at least
// this many pending rows rank as equally long, by stream id.
const sqlBacklogCap = `100`

// WorkClaim implements ports.WorkClaimer in one round trip: one statement
// (sqlClaim) that checks the caller's liveness, leases and lists the
// streams.
//
// The result lists the streams the caller can drain now: held under its
// live lease, with a perspective whose first pending row is not scheduled
// in the future (what EventsFetchPending would return rows of). A stream
// whose pairs all wait for a retry time is left out until then.
//
// Streams are taken oldest pending work first, so no stream starves, and
// only as long as the result stays within MaxStreams: a caller already
// draining MaxStreams streams takes no new stream (a lease on a stream
// nobody drains keeps other instances from it and, should the caller die,
// charges a takeover attempt to events that never ran). HasMore is true
// when candidate streams were left out or the result was cut at
// MaxStreams. The result lists the smallest backlogs first (pending rows
// counted up to sqlBacklogCap, then by stream id). A non-positive
// PartitionCount selects ports.PartitionCountDefault. It returns
// ports.ErrInvalidArgument for a nil instance id or a non-positive
// MaxStreams, LeaseDuration or StaleThreshold, and
// ports.ErrInstanceNotAlive when the caller has no live heartbeat (the claim
// then changes nothing).
func (s *Store) WorkClaim(ctx context.Context, params *ports.WorkClaimParams) (*ports.WorkClaimResult, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("claiming work: %w", err)
	}
	partitions := params.PartitionCount
	if partitions <= 0 {
		partitions = ports.PartitionCountDefault
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	now := nowArg(params.Now)
	b := &pgx.Batch{}
	b.Queue(s.sql(sqlClaim), params.InstanceID, now, params.StaleThreshold, params.LeaseDuration, params.MaxStreams, partitions, s.appendLockClass())
	var (
		alive, unselected bool
		streams           int
		result            = &ports.WorkClaimResult{}
	)
	err := s.sendWork(ctx, b, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		var id pgtype.UUID
		// nil skips the count of released streams.
		_, err = pgx.ForEachRow(rows, []any{&alive, &unselected, nil, &streams, &id}, func() error {
			if id.Valid {
				result.StreamIDs = append(result.StreamIDs, uuid.UUID(id.Bytes))
			}
			return nil
		})
		result.HasMore = unselected || streams > params.MaxStreams
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claiming work for instance %s: %w", params.InstanceID, translate(err))
	}
	if !alive {
		return nil, fmt.Errorf("claiming work for instance %s: %w", params.InstanceID, ports.ErrInstanceNotAlive)
	}
	return result, nil
}

// sqlRenewLeases extends to $2 + $3 the leases of the streams $4 held by
// the caller $1, expired or not (nobody took them). The rows are locked in
// stream id order, as every statement locks them; the (instance_id,
// stream_id) key of vantage_active_streams_instance_idx bounds the lookup
// by both, whichever index the planner picks.
const sqlRenewLeases = `WITH ` + sqlClock + `
UPDATE /* SCHEMA */.vantage_active_streams a
SET lease_expiry = clock.now + $3::interval
FROM clock
WHERE a.stream_id IN (
    SELECT p.stream_id FROM /* SCHEMA */.vantage_active_streams p
    WHERE p.stream_id = ANY ($4::uuid[]) AND p.instance_id = $1
    ORDER BY p.stream_id
    FOR NO KEY UPDATE)
  AND a.instance_id = $1`

// WorkRenewLeases implements ports.WorkClaimer. A stream whose lease
// expired but that nobody took is still the caller's and is renewed. It
// returns ports.ErrInvalidArgument for a non-positive LeaseDuration.
func (s *Store) WorkRenewLeases(ctx context.Context, params *ports.WorkRenewLeasesParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, fmt.Errorf("renewing leases: %w", err)
	}
	if len(params.StreamIDs) == 0 || params.InstanceID == uuid.Nil {
		return 0, nil
	}
	if err := s.ready(ctx); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, s.sql(sqlRenewLeases), params.InstanceID, nowArg(params.Now), params.LeaseDuration, uuidsArg(params.StreamIDs))
	if err != nil {
		return 0, fmt.Errorf("renewing leases of instance %s: %w", params.InstanceID, translate(err))
	}
	return int(tag.RowsAffected()), nil
}

// jsonMap encodes m as a JSON object ("{}" for nil) for a jsonb parameter:
// a string, because under QueryExecModeExec and QueryExecModeSimpleProtocol
// pgx sends a []byte as bytea ('\x7b7d'), which is no JSON.
func jsonMap(m map[string]string) (string, error) {
	if m == nil {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	return string(b), err
}
