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

// sqlCandidate is the predicate of a row that may be leased: pending, not
// under a live lease, not scheduled in the future. w is the row, $1 the
// caller.
const sqlCandidate = `w.processed_at IS NULL
      AND (w.lease_expiry IS NULL OR w.lease_expiry <= clock.now)
      AND (w.scheduled_for IS NULL OR w.scheduled_for <= clock.now)`

// sqlPin pins the streams of the CTE named "picked" to the caller ($1): a
// missing row is inserted, a row that is unpinned or pinned to the caller or
// to an instance missing from the "live" CTE is taken over, and a row pinned
// to a live other instance is left alone. ON CONFLICT locks the pin row even
// when it does not update it, so claims and fetches of one stream serialise
// on it; rows are taken in stream id order, so two callers pinning
// overlapping sets cannot deadlock. RETURNING lists exactly the streams now
// pinned to the caller.
const sqlPin = `pinned AS (
    INSERT INTO /* SCHEMA */.vantage_active_streams AS a (stream_id, instance_id, last_activity_at, created_at)
    SELECT p.stream_id, $1::uuid, clock.now, clock.now FROM picked p, clock
    ORDER BY p.stream_id
    ON CONFLICT (stream_id) DO UPDATE
    SET instance_id = excluded.instance_id, last_activity_at = excluded.last_activity_at
    WHERE a.instance_id IS NULL
       OR a.instance_id = excluded.instance_id
       OR a.instance_id NOT IN (SELECT instance_id FROM live)
    RETURNING a.stream_id
)`

// sqlClock is the clock CTE of statements whose $2 is params.Now, sqlClock1
// that of statements whose $1 is.
const (
	sqlClock  = `clock AS (SELECT coalesce($2::timestamptz, now()) AS now)`
	sqlClock1 = `clock AS (SELECT coalesce($1::timestamptz, now()) AS now)`
)

// Heartbeat statements, sent as one batch in this order: lock, leases,
// pins, instances, upsert. Parameters: $1 caller, $2 now, and $3 the stale
// threshold, except in sqlHeartbeat: $3 service, $4 host, $5 pid, $6
// metadata, $7 passive.
//
// Only a caller that was live before the call abandons others (see
// ports.WorkClaimer.InstanceHeartbeat): the upsert comes last, so every
// statement before it reads the caller's previous heartbeat (sqlWasLive).
//
// Lock order: instance rows, then work rows, then stream pins, each in key
// order. sqlHeartbeatLock locks the caller's instance row and the stale ones
// in instance id order before anything else, so survivors abandoning the
// same dead instances queue there: the first abandons them, and the others,
// once it committed, find them gone (FOR UPDATE skips a deleted row and
// rechecks a changed one) and abandon nothing, so each is abandoned once and
// each released row gains one attempt. Work rows are locked in work id
// order and pins in stream id order, so that overlapping abandonments
// cannot deadlock on the rows either. Every other statement that waits for
// locks on both work rows and stream pins also takes the work rows first
// (completions, failures, dead letters) and several of them in key order;
// deregistration takes its instance row first. Claims and fetches take pins
// first, but never wait for work rows (SKIP LOCKED). So none of them
// deadlock: a deadlock would stall the heartbeat for deadlock_timeout and
// could make the caller itself look stale. Each statement finds the stale
// instances again (sqlStale), on the rows the lock statement locked; the
// caller is never one, whatever its stored heartbeat says.
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

	// sqlAbandonLeases releases the leases of the stale instances, one
	// attempt more on each row (a takeover from a dead instance). The rows
	// are locked in work id order by the subquery, then updated by key.
	sqlAbandonLeases = `WITH ` + sqlClock + `,
` + sqlStale + `
UPDATE /* SCHEMA */.vantage_work w
SET instance_id = NULL, lease_expiry = NULL, attempts = w.attempts + 1
WHERE w.work_id = ANY (ARRAY(
    SELECT l.work_id
    FROM /* SCHEMA */.vantage_work l
    WHERE l.instance_id = ANY (ARRAY(SELECT instance_id FROM stale)) AND l.processed_at IS NULL
    ORDER BY l.work_id
    FOR UPDATE))`

	sqlAbandonPins = `WITH ` + sqlClock + `,
` + sqlStale + `
DELETE FROM /* SCHEMA */.vantage_active_streams a
WHERE a.stream_id IN (
    SELECT p.stream_id
    FROM /* SCHEMA */.vantage_active_streams p
    WHERE p.instance_id = ANY (ARRAY(SELECT instance_id FROM stale))
    ORDER BY p.stream_id
    FOR UPDATE
)`

	// sqlAbandonInstances deletes the stale instances and returns one row:
	// their ids, the NextStaleAt of the other instances (see
	// ports.InstanceHeartbeatResult) and whether the caller rejoined.
	// NextStaleAt counts the instances that are not stale: the subquery sees
	// the snapshot from before the DELETE, so it applies the complementary
	// filter, and on the same clock an instance is either abandoned or
	// counted, never both. A caller that rejoins leaves the stale instances
	// recorded, but they are stale already: its next heartbeat, once it is
	// live, abandons them unless they heartbeat first.
	sqlAbandonInstances = `WITH ` + sqlClock + `,
` + sqlStale + `,
abandoned AS (
    DELETE FROM /* SCHEMA */.vantage_instances i
    WHERE i.instance_id = ANY (ARRAY(SELECT instance_id FROM stale))
    RETURNING i.instance_id
)
SELECT
    ARRAY(SELECT a.instance_id FROM abandoned a),
    (SELECT min(i.last_heartbeat_at) + $3::interval
     FROM /* SCHEMA */.vantage_instances i
     WHERE i.last_heartbeat_at >= clock.now - $3::interval AND i.instance_id <> $1),
    NOT ` + sqlWasLive + `
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
	b.Queue(s.sql(sqlAbandonPins), params.InstanceID, now, params.StaleThreshold)
	b.Queue(s.sql(sqlAbandonInstances), params.InstanceID, now, params.StaleThreshold)
	b.Queue(s.sql(sqlHeartbeat), params.InstanceID, now, params.ServiceName, params.HostName, params.ProcessID, meta, params.Passive)
	result := &ports.InstanceHeartbeatResult{}
	err = s.sendWork(ctx, b, func(br pgx.BatchResults) error {
		if err := execN(br, 3); err != nil {
			return err
		}
		var nextStaleAt pgtype.Timestamptz
		if err := br.QueryRow().Scan(&result.Abandoned, &nextStaleAt, &result.Rejoined); err != nil {
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
// lock order of abandonment: the instance row, then the leases, then the
// pins in stream id order. Taking the instance row first matters: a
// survivor abandoning the instance at the same time has locked it, and
// waits for nothing the deregistration holds.
const (
	sqlDeregister = `DELETE FROM /* SCHEMA */.vantage_instances WHERE instance_id = $1`

	sqlDeregisterLeases = `UPDATE /* SCHEMA */.vantage_work
SET instance_id = NULL, lease_expiry = NULL
WHERE instance_id = $1 AND processed_at IS NULL`

	sqlDeregisterPins = `DELETE FROM /* SCHEMA */.vantage_active_streams a
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
	b.Queue(s.sql(sqlDeregisterPins), instanceID)
	err := s.sendWork(ctx, b, func(br pgx.BatchResults) error { return execN(br, b.Len()) })
	if err != nil {
		return fmt.Errorf("deregistering instance %s: %w", instanceID, translate(err))
	}
	return nil
}

const sqlInstancesList = `SELECT instance_id, service_name, host_name, process_id, metadata, started_at, last_heartbeat_at, passive
FROM /* SCHEMA */.vantage_instances ORDER BY instance_id`

// InstancesList implements ports.Admin.
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
		if err := row.Scan(&inst.ID, &inst.ServiceName, &inst.HostName, &inst.ProcessID, &meta, &started, &beat, &inst.Passive); err != nil {
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

// sqlClaimAlive reports whether the caller ($1) is live at now ($2) given the
// stale threshold ($3). A passive caller is live: its claim serves the
// streams pinned to it.
const sqlClaimAlive = `WITH ` + sqlClock + `
SELECT EXISTS (
    SELECT 1 FROM /* SCHEMA */.vantage_instances i, clock
    WHERE i.instance_id = $1 AND i.last_heartbeat_at > clock.now - $3::interval
)`

// sqlDrainable lists the streams the caller ($1) can drain now: those where
// some perspective's first pending row is under the caller's live lease,
// which is what EventsFetchPending would return. Held rows that wait behind
// a row scheduled for later (or behind their own expired lease) do not count.
// held is a skip scan over vantage_work_holder_idx (one probe per stream the
// caller holds rows of), held_heads the first row of each of their pairs
// (see sqlPairHeads), so the cost does not depend on how many rows it holds.
// The statement must begin WITH RECURSIVE.
var sqlDrainable = `held AS (
    (SELECT w.stream_id
     FROM /* SCHEMA */.vantage_work w
     WHERE w.instance_id = $1 AND w.processed_at IS NULL
     ORDER BY w.stream_id
     LIMIT 1)
    UNION ALL
    SELECT (SELECT w.stream_id
            FROM /* SCHEMA */.vantage_work w
            WHERE w.instance_id = $1 AND w.processed_at IS NULL AND w.stream_id > h.stream_id
            ORDER BY w.stream_id
            LIMIT 1)
    FROM held h
    WHERE h.stream_id IS NOT NULL
),
` + sqlPairHeads("held_heads", "(SELECT h.stream_id FROM held h WHERE h.stream_id IS NOT NULL)") + `,
drainable AS (
    SELECT DISTINCT h.stream_id
    FROM held_heads h, clock
    WHERE h.instance_id = $1 AND h.lease_expiry > clock.now
)`

// sqlClaim leases work to the caller ($1). Parameters: $2 now, $3 stale
// threshold, $4 lease duration, $5 MaxStreams, $6 partition count.
//
//   - live are every live instance, passive or not: a stream pinned to one
//     is never taken (sqlPin). Only the partition rule leaves the passive
//     ones out, inside vantage_claim_candidates (see 004).
//   - drainable are the streams the caller drains already; they take their
//     new candidate rows without counting against MaxStreams.
//   - ranked takes, oldest pending work first, as many other candidate
//     streams as MaxStreams leaves room for (at most sqlClaimChunk), plus one to learn whether any
//     was left over, from vantage_claim_candidates (see the migration): it
//     walks the rows with the caller's rank, the partition rule and the
//     ordering guard, and stops as soon as it has found enough; a passive
//     caller, which has no rank, gets only the streams pinned to it. It
//     returns nothing when the caller is not live, and then the whole
//     statement changes nothing.
//   - refresh keeps, when the caller is live, the drainable streams that
//     have rows to lease (a pair with an unleased row or a lease-expired
//     row: four index probes per pair, none reading the caller's live rows)
//     or that are not pinned to the caller (a completion's unpin can race
//     with a claim that leases a row appended meanwhile; re-pinning repairs
//     it). The others are pinned to the caller and have nothing to lease,
//     so the steps below, whose cost grows with the pairs they visit, skip
//     them: most held streams of a claim, whether live appends reach a few
//     of them between two claims or a catch-up holds streams whose rows it
//     leased at once.
//   - pinned pins the selected and the refreshed streams (see sqlPin).
//   - guarded bounds each pair of the pinned streams by its ordering guard
//     (see sqlGuardBound), and candidate reads, up to that bound, the pair's
//     unleased rows (vantage_work_stream_unleased_idx) and its lease-expired
//     rows (vantage_work_stream_leased_idx, per holder range, so the caller's
//     live rows are not read): only rows the claim leases.
//   - leasable locks them, SKIP LOCKED, checking again that each is still a
//     candidate, and leased leases them (clearing a past retry time, see
//     vantage_work_schedule_check). A row taken from another instance's
//     expired lease gains an attempt (sqlTakeoverAttempt); an unleased row,
//     or one whose lease the caller itself let expire, does not.
var sqlClaim = `WITH RECURSIVE ` + sqlClock + `,
live AS (
    SELECT i.instance_id
    FROM /* SCHEMA */.vantage_instances i, clock
    WHERE i.last_heartbeat_at > clock.now - $3::interval
),
` + sqlDrainable + `,
room AS (
    SELECT least(greatest($5 - (SELECT count(*) FROM drainable), 0), ` + sqlClaimChunk + `)::integer AS n
),
ranked AS (
    SELECT c.candidate_stream AS stream_id, row_number() OVER (ORDER BY min(c.candidate_seq)) AS rn
    FROM clock, room,
         /* SCHEMA */.vantage_claim_candidates($1, clock.now, $3::interval, $6, room.n + 1,
                                               ARRAY(SELECT stream_id FROM drainable)) c
    GROUP BY c.candidate_stream
    ORDER BY min(c.candidate_seq)
    LIMIT (SELECT n + 1 FROM room)
),
refresh AS (
    SELECT DISTINCT p.stream_id
    FROM held_heads p, clock
    WHERE p.stream_id IN (SELECT stream_id FROM drainable)
      AND EXISTS (SELECT 1 FROM live l WHERE l.instance_id = $1)
      AND (` + sqlMinUnleased("") + ` IS NOT NULL
           OR ` + sqlMinLeased("<", "<= clock.now") + ` IS NOT NULL
           OR ` + sqlMinLeased("=", "<= clock.now") + ` IS NOT NULL
           OR ` + sqlMinLeased(">", "<= clock.now") + ` IS NOT NULL
           OR NOT EXISTS (SELECT 1 FROM /* SCHEMA */.vantage_active_streams a
                          WHERE a.stream_id = p.stream_id AND a.instance_id = $1))
),
picked AS (
    SELECT stream_id FROM ranked WHERE rn <= (SELECT n FROM room)
    UNION
    SELECT stream_id FROM refresh
),
` + sqlPin + `,
` + sqlPairHeads("heads", "pinned") + `,
guarded AS MATERIALIZED (
    SELECT p.stream_id, p.perspective, ` + sqlGuardBound + ` AS bound
    FROM heads p, clock
),
candidate AS (
    SELECT c.work_id
    FROM guarded g
    CROSS JOIN clock
    CROSS JOIN LATERAL (
        SELECT w.work_id FROM /* SCHEMA */.vantage_work w
        WHERE w.stream_id = g.stream_id AND w.perspective = g.perspective AND w.processed_at IS NULL
          AND w.instance_id IS NULL AND w.event_version <= g.bound
          AND (w.scheduled_for IS NULL OR w.scheduled_for <= clock.now)
        UNION ALL ` + sqlExpiredRows("<") + `
        UNION ALL ` + sqlExpiredRows("=") + `
        UNION ALL ` + sqlExpiredRows(">") + `
    ) c
),
leasable AS (
    SELECT w.work_id
    FROM /* SCHEMA */.vantage_work w, clock
    WHERE w.work_id = ANY (ARRAY(SELECT work_id FROM candidate))
      AND ` + sqlCandidate + `
    FOR UPDATE OF w SKIP LOCKED
),
leased AS (
    UPDATE /* SCHEMA */.vantage_work w
    SET instance_id = $1, lease_expiry = clock.now + $4::interval, attempts = ` + sqlTakeoverAttempt + `, scheduled_for = NULL
    FROM clock
    WHERE w.work_id = ANY (ARRAY(SELECT work_id FROM leasable))
    RETURNING w.work_id
)
SELECT (SELECT count(*) FROM ranked) > (SELECT n FROM room), (SELECT count(*) FROM leased)`

// sqlTakeoverAttempt is the attempts of a row w that the caller $1 leases:
// one more when w is taken from another instance's lease (which, for a row
// that claims and fetches may lease, has expired), the same otherwise. In
// an UPDATE's SET list, w.instance_id is the holder before the update.
const sqlTakeoverAttempt = `w.attempts + CASE WHEN w.instance_id <> $1 THEN 1 ELSE 0 END`

// sqlClaimChunk bounds the new streams one claim takes. A claim leases every
// candidate row of the streams it takes, in one statement, and nothing is
// drained before it returns: with long backlogs, 300 streams are 100,000
// rows and more, seconds of updates. Smaller claims report HasMore, and the
// engine claims again at once while it drains what the first one took.
const sqlClaimChunk = `64`

// sqlExpiredRows reads the rows of the pair g (see sqlClaim) up to its guard
// bound whose lease expired, held by instances whose id compares to the
// caller's ($1) by op: one bounded range of vantage_work_stream_leased_idx
// per op, so the caller's live rows, between the others', are never read.
// Like sqlMinLeased, it tests no processed_at (leased rows are pending).
func sqlExpiredRows(op string) string {
	return `
        SELECT w.work_id FROM /* SCHEMA */.vantage_work w
        WHERE w.stream_id = g.stream_id AND w.perspective = g.perspective
          AND w.instance_id ` + op + ` $1 AND w.lease_expiry <= clock.now AND w.event_version <= g.bound`
}

// sqlBacklogCap bounds the count of a stream's pending rows by which
// sqlClaimHeld orders its result, so that ordering costs at most this many
// index entries per stream however long the backlog: streams with at least
// this many pending rows rank as equally long, by stream id.
const sqlBacklogCap = `100`

// sqlClaimHeld lists the streams the caller can drain (see sqlDrainable),
// smallest backlog (pending rows of the stream, counted up to
// sqlBacklogCap) first, with how many there are in all. The count reads
// the stream's rows in vantage_work_pending_idx order, so that it is a
// bounded range scan of that index whatever the statistics say (a limited
// sequential scan looks as cheap to a planner that sees few rows, and reads
// the whole table for a stream with fewer rows than the cap). Parameters: $1
// caller, $2 now, $3 MaxStreams.
var sqlClaimHeld = `WITH RECURSIVE ` + sqlClock + `,
` + sqlDrainable + `
SELECT d.stream_id, count(*) OVER ()
FROM drainable d
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
LIMIT $3`

// WorkClaim implements ports.WorkClaimer in one round trip: a batch of three
// statements in one implicit transaction (liveness check, claim, result).
//
// The result lists the streams the caller can drain now: those where some
// perspective's first pending row is under the caller's live lease (what
// EventsFetchPending would return). A stream whose held rows all wait behind
// a failed row scheduled for later is left out until the retry time.
//
// Candidate streams are selected oldest pending work first, so no stream
// starves, and only as long as the result stays within MaxStreams: a caller
// already draining MaxStreams streams leases no new stream, only new rows of
// the streams it drains (leasing more would leave leases ticking on streams
// nobody drains, which keeps other instances from them and, should the
// caller die, counts a takeover attempt against events that never ran).
// HasMore is true when candidate streams were left unselected or the
// result was cut at MaxStreams. The result lists the smallest backlogs
// first (pending rows counted up to sqlBacklogCap, then by stream id). A
// non-positive PartitionCount selects ports.PartitionCountDefault. It returns
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
	b.Queue(s.sql(sqlClaimAlive), params.InstanceID, now, params.StaleThreshold)
	b.Queue(s.sql(sqlClaim), params.InstanceID, now, params.StaleThreshold, params.LeaseDuration, params.MaxStreams, partitions)
	b.Queue(s.sql(sqlClaimHeld), params.InstanceID, now, params.MaxStreams)

	var (
		alive, unselected bool
		leased            int
		result            = &ports.WorkClaimResult{}
	)
	err := s.sendWork(ctx, b, func(br pgx.BatchResults) error {
		if err := br.QueryRow().Scan(&alive); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&unselected, &leased); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		var (
			id   uuid.UUID
			held int
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &held}, func() error {
			result.StreamIDs = append(result.StreamIDs, id)
			return nil
		})
		result.HasMore = unselected || held > params.MaxStreams
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

// sqlRenewLeases extends the leases of the rows $4 held by the caller $1
// (see sqlHeldByCaller) to $2 + $3.
const sqlRenewLeases = `WITH ` + sqlClock + `
UPDATE /* SCHEMA */.vantage_work w
SET lease_expiry = clock.now + $3::interval
FROM clock
WHERE w.work_id = ANY($4::uuid[]) AND ` + sqlHeldByCaller + ` AND w.processed_at IS NULL`

// sqlHeldByCaller is the fence of the statements that find rows by id: the
// row w is leased to $1. It is written so that no index serves it (a
// coalesce is not indexable): the statistics of a queue table lag behind,
// and after a burst of appends they make the rows leased to $1 look rare
// just when the caller holds the whole backlog; the planner would then read
// them all through an index on instance_id, testing each against the listed
// ids, instead of looking the ids up in the primary key (see sqlListedRow).
const sqlHeldByCaller = `coalesce(w.instance_id = $1, false)`

// WorkRenewLeases implements ports.WorkClaimer. A row whose lease expired but
// that nobody took over is still the caller's and is renewed. It returns
// ports.ErrInvalidArgument for a non-positive LeaseDuration.
func (s *Store) WorkRenewLeases(ctx context.Context, params *ports.WorkRenewLeasesParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, fmt.Errorf("renewing leases: %w", err)
	}
	if len(params.WorkIDs) == 0 || params.InstanceID == uuid.Nil {
		return 0, nil
	}
	if err := s.ready(ctx); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, s.sql(sqlRenewLeases), params.InstanceID, nowArg(params.Now), params.LeaseDuration, uuidsArg(params.WorkIDs))
	if err != nil {
		return 0, fmt.Errorf("renewing leases of instance %s: %w", params.InstanceID, translate(err))
	}
	return int(tag.RowsAffected()), nil
}

// jsonMap encodes m as a JSON object ("{}" for nil).
func jsonMap(m map[string]string) ([]byte, error) {
	if m == nil {
		return []byte("{}"), nil
	}
	return json.Marshal(m)
}
