-- 010_drainable_plpgsql: vantage_stream_drainable keeps its plan.
--
-- As a SQL function whose body PostgreSQL cannot inline (a recursive
-- query), it was parsed and planned again by every statement calling it:
-- every fetch's leasing step and every claim, about half a millisecond of
-- the database's CPU each, more than the rest of a fetch's lease. A PL/pgSQL
-- function plans its query once per session. What it returns is unchanged
-- (see 005_stream_leases).
CREATE OR REPLACE FUNCTION /* SCHEMA */.vantage_stream_drainable(p_stream uuid, p_now timestamptz) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (
        WITH RECURSIVE heads AS (
            (SELECT w.perspective, w.scheduled_for
             FROM /* SCHEMA */.vantage_work w
             WHERE w.stream_id = p_stream AND w.processed_at IS NULL
             ORDER BY w.perspective, w.event_version
             LIMIT 1)
            UNION ALL
            SELECT f.perspective, f.scheduled_for
            FROM heads h
            CROSS JOIN LATERAL (
                SELECT w.perspective, w.scheduled_for
                FROM /* SCHEMA */.vantage_work w
                WHERE w.stream_id = p_stream AND w.perspective > h.perspective AND w.processed_at IS NULL
                ORDER BY w.perspective, w.event_version
                LIMIT 1
            ) f
            WHERE h.scheduled_for > p_now
        )
        SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM heads) THEN NULL
                    ELSE EXISTS (SELECT 1 FROM heads h WHERE h.scheduled_for IS NULL OR h.scheduled_for <= p_now) END
    );
END
$$;
