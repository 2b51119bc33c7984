-- 005_stream_leases: back to the shape of 004, leases per work row and
-- stream pins. Leases in force are dropped: every pending row comes back
-- unleased and every stream unpinned (a pin row without a holder), and the
-- rows' attempts stay as they are.

DROP FUNCTION /* SCHEMA */.vantage_claim_streams(uuid, timestamptz, interval, integer, integer, text);
DROP FUNCTION /* SCHEMA */.vantage_release_drained(uuid[], text, uuid);
DROP FUNCTION /* SCHEMA */.vantage_stream_drainable(uuid, timestamptz);

DROP INDEX /* SCHEMA */.vantage_active_streams_expiry_idx;
DROP INDEX /* SCHEMA */.vantage_active_streams_unleased_idx;
DROP INDEX /* SCHEMA */.vantage_active_streams_instance_idx;
ALTER TABLE /* SCHEMA */.vantage_active_streams DROP CONSTRAINT vantage_active_streams_lease_check;
UPDATE /* SCHEMA */.vantage_active_streams SET instance_id = NULL;
ALTER TABLE /* SCHEMA */.vantage_active_streams
    DROP COLUMN lease_expiry,
    DROP COLUMN handed_out,
    DROP COLUMN first_seq,
    RESET (fillfactor);
CREATE INDEX vantage_active_streams_instance_idx ON /* SCHEMA */.vantage_active_streams (instance_id)
    WHERE instance_id IS NOT NULL;

DROP INDEX /* SCHEMA */.vantage_work_scheduled_idx;
ALTER TABLE /* SCHEMA */.vantage_work
    DROP CONSTRAINT vantage_work_scheduled_check,
    ADD COLUMN instance_id uuid,
    ADD COLUMN lease_expiry timestamptz,
    ADD CONSTRAINT vantage_work_lease_check CHECK ((instance_id IS NULL) = (lease_expiry IS NULL)),
    ADD CONSTRAINT vantage_work_schedule_check CHECK (scheduled_for IS NULL OR instance_id IS NULL),
    ADD CONSTRAINT vantage_work_processed_check CHECK (processed_at IS NULL OR instance_id IS NULL);
-- The indexes of 001, as 001 defines and explains them.
CREATE INDEX vantage_work_stream_unleased_idx ON /* SCHEMA */.vantage_work (stream_id, perspective, event_version)
    WHERE processed_at IS NULL AND instance_id IS NULL;
CREATE INDEX vantage_work_stream_leased_idx ON /* SCHEMA */.vantage_work (stream_id, perspective, instance_id, lease_expiry)
    WHERE instance_id IS NOT NULL AND lease_expiry IS NOT NULL;
CREATE INDEX vantage_work_unleased_idx ON /* SCHEMA */.vantage_work (seq)
    WHERE processed_at IS NULL AND instance_id IS NULL AND seq > 0;
CREATE INDEX vantage_work_lease_expiry_idx ON /* SCHEMA */.vantage_work (lease_expiry)
    WHERE processed_at IS NULL AND instance_id IS NOT NULL AND lease_expiry IS NOT NULL;
CREATE INDEX vantage_work_holder_idx ON /* SCHEMA */.vantage_work (instance_id, stream_id, lease_expiry)
    WHERE processed_at IS NULL AND instance_id IS NOT NULL;

-- vantage_guard_open reports whether the ordering guard lets p_instance
-- claim the row of (p_stream, p_perspective) at p_version: no earlier row of
-- the pair is under another holder's live lease or scheduled in the future.
-- It is three index probes: the holder ranges below and above p_instance in
-- vantage_work_stream_leased_idx (leased rows are pending, so the probes
-- test no processed_at) and the rows scheduled in the future, which are
-- unleased (vantage_work_stream_unleased_idx); none walks the rows the
-- caller holds itself.
CREATE FUNCTION /* SCHEMA */.vantage_guard_open(
    p_stream uuid, p_perspective text, p_version bigint, p_instance uuid, p_now timestamptz)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (
               SELECT 1 FROM /* SCHEMA */.vantage_work e
               WHERE e.stream_id = p_stream AND e.perspective = p_perspective
                 AND e.instance_id < p_instance AND e.lease_expiry > p_now AND e.event_version < p_version)
       AND NOT EXISTS (
               SELECT 1 FROM /* SCHEMA */.vantage_work e
               WHERE e.stream_id = p_stream AND e.perspective = p_perspective
                 AND e.instance_id > p_instance AND e.lease_expiry > p_now AND e.event_version < p_version)
       AND NOT EXISTS (
               SELECT 1 FROM /* SCHEMA */.vantage_work e
               WHERE e.stream_id = p_stream AND e.perspective = p_perspective AND e.processed_at IS NULL
                 AND e.instance_id IS NULL AND e.scheduled_for > p_now AND e.event_version < p_version)
$$;

-- vantage_claim_candidates returns up to p_limit streams, other than those in
-- p_skip, that a claim by p_instance may take, each with the insertion order
-- (seq) of its oldest candidate row, oldest first, from unleased rows, and as
-- many again from lease-expired rows (the caller merges the two and keeps
-- the oldest). A candidate row is pending, unleased or lease-expired, not
-- scheduled in the future, of a stream pinned to the caller or else unpinned
-- (or pinned to a dead instance) in a partition whose number modulo the
-- count of live instances that are not passive is the caller's rank among
-- them ordered by id, and no earlier row of its (stream, perspective) is
-- under another holder's live lease or scheduled in the future (the
-- ordering guard). A stream pinned to any live instance, passive or not, is
-- not an orphan. A passive caller has no rank: its candidates are the rows
-- of the streams pinned to it. It returns nothing when the caller is not
-- live.
--
-- It walks rows oldest first and stops as soon as it has enough streams, so
-- a claim's cost grows with the rows it passes over, not with the backlog
-- behind the streams it finds: a single SQL query cannot stop a "distinct
-- streams, oldest first" search early, and the planner cannot estimate the
-- rank and guard filters, so it would sort the whole backlog. The walk
-- queries tell the rows of streams the caller may not take (pinned to a
-- live other, or in another rank's partition) by a pin probe each, and the
-- loops drop them; only the rows left cost a call of vantage_guard_open.
-- The unleased walk goes through vantage_work_unleased_idx in chunks (an
-- ordered, limited subquery keeps the plan an ordered index scan); that of
-- a passive caller starts from its pins (vantage_active_streams_instance_idx)
-- instead, so it never reads the backlog of streams it may not take.
CREATE FUNCTION /* SCHEMA */.vantage_claim_candidates(
    p_instance uuid, p_now timestamptz, p_stale interval, p_partitions integer, p_limit integer, p_skip uuid[])
RETURNS TABLE (candidate_stream uuid, candidate_seq bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_live   uuid[];
    v_ranked uuid[];
    v_rank   integer;
    v_found  uuid[];
    v_after  bigint := 0;
    v_rows   integer;
    r        record;
BEGIN
    -- v_live: every live instance, whose pins stand. v_ranked: those that
    -- are not passive, ordered by id, the ranks of the partition rule.
    SELECT array_agg(i.instance_id ORDER BY i.instance_id),
           array_agg(i.instance_id ORDER BY i.instance_id) FILTER (WHERE NOT i.passive)
    INTO v_live, v_ranked
    FROM /* SCHEMA */.vantage_instances i
    WHERE i.last_heartbeat_at > p_now - p_stale;
    IF v_live IS NULL OR p_instance <> ALL (v_live) OR p_limit <= 0 THEN
        RETURN;
    END IF;
    v_rank := array_position(v_ranked, p_instance) - 1; -- NULL for a passive caller

    -- Lease-expired rows: few, found by expiry, walked in insertion order.
    v_found := coalesce(p_skip, '{}');
    FOR r IN
        SELECT w.stream_id, w.perspective, w.event_version, w.seq
        FROM /* SCHEMA */.vantage_work w
        LEFT JOIN /* SCHEMA */.vantage_active_streams a ON a.stream_id = w.stream_id
        WHERE w.processed_at IS NULL AND w.instance_id IS NOT NULL AND w.lease_expiry <= p_now
          AND (w.scheduled_for IS NULL OR w.scheduled_for <= p_now)
          AND (a.instance_id IS NOT DISTINCT FROM p_instance
               OR (v_rank IS NOT NULL
                   AND (a.instance_id IS NULL OR a.instance_id <> ALL (v_live))
                   AND /* SCHEMA */.vantage_partition(w.stream_id, p_partitions) % cardinality(v_ranked) = v_rank))
        ORDER BY w.seq
    LOOP
        CONTINUE WHEN r.stream_id = ANY (v_found);
        CONTINUE WHEN NOT /* SCHEMA */.vantage_guard_open(r.stream_id, r.perspective, r.event_version, p_instance, p_now);
        v_found := v_found || r.stream_id;
        candidate_stream := r.stream_id;
        candidate_seq := r.seq;
        RETURN NEXT;
        EXIT WHEN cardinality(v_found) - cardinality(coalesce(p_skip, '{}')) >= p_limit;
    END LOOP;

    v_found := coalesce(p_skip, '{}');

    -- A passive caller: the unleased rows of the streams pinned to it,
    -- oldest first.
    IF v_rank IS NULL THEN
        FOR r IN
            SELECT w.stream_id, w.perspective, w.event_version, w.seq
            FROM /* SCHEMA */.vantage_active_streams a
            JOIN /* SCHEMA */.vantage_work w ON w.stream_id = a.stream_id
            WHERE a.instance_id = p_instance
              AND w.processed_at IS NULL AND w.instance_id IS NULL
              AND (w.scheduled_for IS NULL OR w.scheduled_for <= p_now)
            ORDER BY w.seq
        LOOP
            CONTINUE WHEN r.stream_id = ANY (v_found);
            CONTINUE WHEN NOT /* SCHEMA */.vantage_guard_open(r.stream_id, r.perspective, r.event_version, p_instance, p_now);
            v_found := v_found || r.stream_id;
            candidate_stream := r.stream_id;
            candidate_seq := r.seq;
            RETURN NEXT;
            EXIT WHEN cardinality(v_found) - cardinality(coalesce(p_skip, '{}')) >= p_limit;
        END LOOP;
        RETURN;
    END IF;

    -- Unleased rows, oldest first, a chunk at a time. The chunk is read in
    -- a subquery of its own, ordered and limited by seq alone, so that it
    -- is always an ordered scan of vantage_work_unleased_idx that stops
    -- after the chunk: with the pin and partition filters in the same
    -- query, the planner (which cannot estimate them) may read and sort
    -- every unleased row instead. The filters are evaluated per row of the
    -- chunk (eligible), so the walk still advances over the rows they drop.
    LOOP
        v_rows := 0;
        FOR r IN
            SELECT w.stream_id, w.perspective, w.event_version, w.seq,
                   (w.scheduled_for IS NULL OR w.scheduled_for <= p_now)
                   AND (a.instance_id IS NOT DISTINCT FROM p_instance
                        OR ((a.instance_id IS NULL OR a.instance_id <> ALL (v_live))
                            AND /* SCHEMA */.vantage_partition(w.stream_id, p_partitions) % cardinality(v_ranked) = v_rank)) AS eligible
            FROM (
                SELECT w.stream_id, w.perspective, w.event_version, w.seq, w.scheduled_for
                FROM /* SCHEMA */.vantage_work w
                WHERE w.processed_at IS NULL AND w.instance_id IS NULL AND w.seq > 0 AND w.seq > v_after
                ORDER BY w.seq
                LIMIT 1000
            ) w
            LEFT JOIN /* SCHEMA */.vantage_active_streams a ON a.stream_id = w.stream_id
            ORDER BY w.seq
        LOOP
            v_rows := v_rows + 1;
            v_after := r.seq;
            CONTINUE WHEN r.eligible IS NOT TRUE OR r.stream_id = ANY (v_found);
            CONTINUE WHEN NOT /* SCHEMA */.vantage_guard_open(r.stream_id, r.perspective, r.event_version, p_instance, p_now);
            v_found := v_found || r.stream_id;
            candidate_stream := r.stream_id;
            candidate_seq := r.seq;
            RETURN NEXT;
            IF cardinality(v_found) - cardinality(coalesce(p_skip, '{}')) >= p_limit THEN
                RETURN;
            END IF;
        END LOOP;
        EXIT WHEN v_rows < 1000;
    END LOOP;
END
$$;
