-- 004_passive_instances: back to the shape of 003. The claim function is
-- 001's again, counting and ranking every live instance.
CREATE OR REPLACE FUNCTION /* SCHEMA */.vantage_claim_candidates(
    p_instance uuid, p_now timestamptz, p_stale interval, p_partitions integer, p_limit integer, p_skip uuid[])
RETURNS TABLE (candidate_stream uuid, candidate_seq bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_live  uuid[];
    v_rank  integer;
    v_found uuid[];
    v_after bigint := 0;
    v_rows  integer;
    r       record;
BEGIN
    SELECT array_agg(i.instance_id ORDER BY i.instance_id) INTO v_live
    FROM /* SCHEMA */.vantage_instances i
    WHERE i.last_heartbeat_at > p_now - p_stale;
    v_rank := array_position(v_live, p_instance) - 1;
    IF v_rank IS NULL OR p_limit <= 0 THEN
        RETURN;
    END IF;

    -- Lease-expired rows: few, found by expiry, walked in insertion order.
    v_found := coalesce(p_skip, '{}');
    FOR r IN
        SELECT w.stream_id, w.perspective, w.event_version, w.seq
        FROM /* SCHEMA */.vantage_work w
        LEFT JOIN /* SCHEMA */.vantage_active_streams a ON a.stream_id = w.stream_id
        WHERE w.processed_at IS NULL AND w.instance_id IS NOT NULL AND w.lease_expiry <= p_now
          AND (w.scheduled_for IS NULL OR w.scheduled_for <= p_now)
          AND (a.instance_id IS NOT DISTINCT FROM p_instance
               OR ((a.instance_id IS NULL OR a.instance_id <> ALL (v_live))
                   AND /* SCHEMA */.vantage_partition(w.stream_id, p_partitions) % cardinality(v_live) = v_rank))
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

    -- Unleased rows, oldest first, a chunk at a time. The chunk is read in
    -- a subquery of its own, ordered and limited by seq alone, so that it
    -- is always an ordered scan of vantage_work_unleased_idx that stops
    -- after the chunk: with the pin and partition filters in the same
    -- query, the planner (which cannot estimate them) may read and sort
    -- every unleased row instead. The filters are evaluated per row of the
    -- chunk (eligible), so the walk still advances over the rows they drop.
    v_found := coalesce(p_skip, '{}');
    LOOP
        v_rows := 0;
        FOR r IN
            SELECT w.stream_id, w.perspective, w.event_version, w.seq,
                   (w.scheduled_for IS NULL OR w.scheduled_for <= p_now)
                   AND (a.instance_id IS NOT DISTINCT FROM p_instance
                        OR ((a.instance_id IS NULL OR a.instance_id <> ALL (v_live))
                            AND /* SCHEMA */.vantage_partition(w.stream_id, p_partitions) % cardinality(v_live) = v_rank)) AS eligible
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

ALTER TABLE /* SCHEMA */.vantage_instances DROP COLUMN passive;
