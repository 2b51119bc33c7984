-- 009_append_implicit: the common append, every event at the next version
-- of its stream, runs as a function of a few small statements instead of
-- the general append statement, whose plan is set up in full by every
-- execution, the branches it does not take included.
--
-- vantage_append_implicit appends the events (p_ids[i], p_types[i],
-- p_data[i], p_metadata[i]) to p_stream at the versions after its head, and
-- fans them out to the recorded subscriptions of their types, at p_now (the
-- transaction's time when NULL). The caller holds the stream's append lock.
-- It returns one row per stored event, in the order given, each with the
-- count of work rows stored; or no row at all, having written nothing, when
-- the general statement must decide:
--   - p_expected (ports.EventsAppendParams.ExpectedVersion) does not match
--     the head: the general statement reports the conflict;
--   - an event id is stored already: a repeated append, or a conflict;
--   - a cursor of the stream is past its head (a new event would be late,
--     which the general statement detects and flags);
--   - a subscription the call carries (p_sub_types[i], p_sub_perspectives[i])
--     is not recorded and its perspective is not retired: the general
--     statement records it and fans out to it.
-- Otherwise its work rows are what the general statement would store: none
-- of them late, since no cursor passes the head and no row was handed out
-- above it.
CREATE FUNCTION /* SCHEMA */.vantage_append_implicit(
    p_stream uuid, p_now timestamptz, p_expected bigint,
    p_ids uuid[], p_types text[], p_data text[], p_metadata text[],
    p_sub_types text[], p_sub_perspectives text[])
RETURNS TABLE (id uuid, version bigint, created_at timestamptz, work_rows bigint)
LANGUAGE plpgsql VOLATILE
-- Its statements read arrays of a few elements: with a plan for the actual
-- parameters the planner would plan them anew on every call.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_head bigint;
    v_now timestamptz := coalesce(p_now, now());
    v_first bigint;
    v_rows bigint;
BEGIN
    SELECT coalesce(max(e.version), 0) INTO v_head
    FROM /* SCHEMA */.vantage_events e WHERE e.stream_id = p_stream;
    IF NOT (p_expected = 0 OR (p_expected = -1 AND v_head = 0) OR v_head = p_expected) THEN
        RETURN;
    END IF;
    -- A primary key probe per id, whatever the statistics say.
    IF EXISTS (SELECT 1 FROM unnest(p_ids) AS i(id)
               CROSS JOIN LATERAL (SELECT 1 FROM /* SCHEMA */.vantage_events e WHERE e.id = i.id LIMIT 1) k) THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM /* SCHEMA */.vantage_cursors c
               WHERE c.stream_id = p_stream AND c.last_version > v_head) THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_sub_types, p_sub_perspectives) AS x(event_type, perspective)
               WHERE NOT EXISTS (SELECT 1 FROM /* SCHEMA */.vantage_subscriptions s
                                 WHERE s.event_type = x.event_type AND s.perspective = x.perspective)
                 AND NOT EXISTS (SELECT 1 FROM /* SCHEMA */.vantage_retired_perspectives r
                                 WHERE r.perspective = x.perspective)) THEN
        RETURN;
    END IF;

    INSERT INTO /* SCHEMA */.vantage_events (id, stream_id, type, version, data, metadata, created_at)
    SELECT i.id, p_stream, i.type, v_head + i.ord, i.data::jsonb, i.metadata::jsonb, v_now
    FROM unnest(p_ids, p_types, p_data, p_metadata) WITH ORDINALITY AS i(id, type, data, metadata, ord);

    WITH work AS (
        INSERT INTO /* SCHEMA */.vantage_work (work_id, stream_id, perspective, event_id, event_version, late, created_at)
        SELECT /* SCHEMA */.vantage_uuid_v7(), p_stream, s.perspective, i.id, v_head + i.ord, false, v_now
        FROM unnest(p_ids, p_types) WITH ORDINALITY AS i(id, type, ord)
        JOIN /* SCHEMA */.vantage_subscriptions s ON s.event_type = i.type
        ORDER BY i.ord, s.perspective COLLATE "C"
        RETURNING seq
    )
    SELECT min(w.seq), count(*) INTO v_first, v_rows FROM work w;
    IF v_first IS NOT NULL THEN
        INSERT INTO /* SCHEMA */.vantage_active_streams (stream_id, first_seq, last_activity_at, created_at)
        VALUES (p_stream, v_first, v_now, v_now)
        ON CONFLICT (stream_id) DO NOTHING;
    END IF;

    RETURN QUERY
    SELECT i.id, v_head + i.ord, v_now, v_rows
    FROM unnest(p_ids) WITH ORDINALITY AS i(id, ord);
END
$$;
