-- 005_stream_leases: work is leased per stream, not per row.
--
-- A stream's lease (holder, expiry, and per perspective the highest version
-- a fetch handed out) covers every pending row of the stream; claims and
-- fetches write the stream's row, never the work rows, which are written
-- only when stored, failed or deleted. Leasing a row was an UPDATE of the
-- row: a new tuple and five index entries per row, most of a catch-up's
-- database time.
--
-- Upgrade: stop every instance of the previous release, migrate, start. The
-- previous release's statements and functions do not survive this
-- migration (its lease columns and claim functions are dropped), so an old
-- instance still running fails loudly rather than acting on rules that no
-- longer hold. Leases in force are dropped: every stream with pending work
-- starts unleased, and the rows' attempts are left as they are.

DROP FUNCTION /* SCHEMA */.vantage_claim_candidates(uuid, timestamptz, interval, integer, integer, uuid[]);
DROP FUNCTION /* SCHEMA */.vantage_guard_open(uuid, text, bigint, uuid, timestamptz);

-- Work rows lose their lease. Dropping the columns drops the indexes and
-- checks built on them; they are named here so that the migration says
-- what goes.
DROP INDEX /* SCHEMA */.vantage_work_stream_unleased_idx;
DROP INDEX /* SCHEMA */.vantage_work_stream_leased_idx;
DROP INDEX /* SCHEMA */.vantage_work_unleased_idx;
DROP INDEX /* SCHEMA */.vantage_work_lease_expiry_idx;
DROP INDEX /* SCHEMA */.vantage_work_holder_idx;
ALTER TABLE /* SCHEMA */.vantage_work
    DROP CONSTRAINT vantage_work_lease_check,
    DROP CONSTRAINT vantage_work_schedule_check,
    DROP CONSTRAINT vantage_work_processed_check,
    DROP COLUMN instance_id,
    DROP COLUMN lease_expiry;

-- A retry time belongs to a pending row: debug mode clears it when it keeps
-- a row processed. So a row with a retry time is pending, and the per-pair
-- probe for the first row scheduled in the future is one range of
-- vantage_work_scheduled_idx, whose predicate no statement on the other
-- rows implies.
UPDATE /* SCHEMA */.vantage_work SET scheduled_for = NULL WHERE processed_at IS NOT NULL AND scheduled_for IS NOT NULL;
ALTER TABLE /* SCHEMA */.vantage_work
    ADD CONSTRAINT vantage_work_scheduled_check CHECK (scheduled_for IS NULL OR processed_at IS NULL);
-- Rows that failed and carry a retry time, per pair in version order: the
-- first row scheduled in the future ends a pair's prefix (fetches) and
-- holds back the rows after it. Appends store rows without a retry time,
-- so the index costs them nothing; only failures write it.
CREATE INDEX vantage_work_scheduled_idx ON /* SCHEMA */.vantage_work (stream_id, perspective, event_version)
    WHERE scheduled_for IS NOT NULL;

-- vantage_active_streams is now the table of streams with pending work and
-- their leases. Every stream with a pending work row has a row here: every
-- statement that stores pending rows inserts it (ON CONFLICT DO NOTHING),
-- and a row is deleted only by vantage_release_drained, which never
-- deletes the row of a stream that has or is getting pending work. A row
-- may outlive its stream's work for a while (a release that an append in
-- flight held off); claims release such rows when they meet them.
--
--   - instance_id and lease_expiry are the lease, both set or both NULL.
--     A lease is live while its holder is live and lease_expiry is after
--     Now.
--   - handed_out maps each perspective to the highest version a fetch
--     under the lease returned (ports.WorkClaimer, handed-out rows): the
--     rows to charge an attempt when the stream is taken from a holder that
--     is not live, and the bound below which a new row is late. It is
--     cleared when the stream passes to another holder.
--   - first_seq is the insertion order (vantage_work.seq) of the oldest
--     pending row when the row was created: claims take streams oldest
--     work first.
--
-- Fetches write handed_out on every call and completions lock the row:
-- fillfactor 70 leaves room on each page for those versions to stay
-- heap-only (handed_out is in no index).
ALTER TABLE /* SCHEMA */.vantage_active_streams
    ADD COLUMN lease_expiry timestamptz,
    ADD COLUMN handed_out   jsonb  NOT NULL DEFAULT '{}',
    ADD COLUMN first_seq    bigint;
DELETE FROM /* SCHEMA */.vantage_active_streams;
INSERT INTO /* SCHEMA */.vantage_active_streams (stream_id, first_seq, last_activity_at, created_at)
SELECT w.stream_id, min(w.seq), now(), now()
FROM /* SCHEMA */.vantage_work w
WHERE w.processed_at IS NULL
GROUP BY w.stream_id;
ALTER TABLE /* SCHEMA */.vantage_active_streams
    ALTER COLUMN first_seq SET NOT NULL,
    ADD CONSTRAINT vantage_active_streams_lease_check CHECK ((instance_id IS NULL) = (lease_expiry IS NULL)),
    SET (fillfactor = 70);

-- The streams an instance holds, in stream id order: a claim's held
-- streams, renewals, completions' fence, abandonment and deregistration,
-- and (a skip scan over the holders) the streams of holders that are not
-- live. It is unique, and not partial, so that instance_id is a key column
-- of the table: an UPDATE that changes a stream's holder (a takeover, a
-- release) then locks the row as strongly as a DELETE and waits for the
-- FOR KEY SHARE lock a completion holds on the streams it completes (its
-- fence), while the updates a holder makes itself (its marks, its expiry)
-- do not conflict with that lock: a fetch never waits for a completion.
DROP INDEX /* SCHEMA */.vantage_active_streams_instance_idx;
CREATE UNIQUE INDEX vantage_active_streams_instance_idx ON /* SCHEMA */.vantage_active_streams (instance_id, stream_id);
-- Streams nobody holds, oldest work first: what claims mostly take.
CREATE INDEX vantage_active_streams_unleased_idx ON /* SCHEMA */.vantage_active_streams (first_seq)
    WHERE instance_id IS NULL;
-- Leases by expiry: the expired ones a claim may take.
CREATE INDEX vantage_active_streams_expiry_idx ON /* SCHEMA */.vantage_active_streams (lease_expiry)
    WHERE instance_id IS NOT NULL;

-- vantage_stream_drainable tells whether the stream p_stream can be drained
-- at p_now: true when the first pending row of one of its perspectives is
-- not scheduled in the future (a pair's rows are applied in version order,
-- so a row waiting for its retry time holds back its pair, and only its
-- pair), false when every pair waits, NULL when the stream has no pending
-- row. It is a skip scan over vantage_work_pending_idx, one probe per pair,
-- that stops at the first pair that can go.
CREATE FUNCTION /* SCHEMA */.vantage_stream_drainable(p_stream uuid, p_now timestamptz) RETURNS boolean
LANGUAGE sql STABLE AS $$
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
$$;

-- vantage_release_drained deletes the rows of the streams p_streams that
-- have no pending work row, those held by an instance other than p_holder
-- excepted (p_holder NULL: whoever holds them), and returns how many it
-- deleted.
--
-- A DELETE whose condition is "no pending row" cannot see a row stored
-- after its snapshot: an append that stores a stream's first row commits
-- while the DELETE runs, finds the stream's row still there (its insert
-- does nothing), and the row is then deleted under it: pending work that
-- no claim would ever find. So every statement that stores pending rows
-- holds the stream's append lock (see the adapter's sqlAppendLock: p_lock
-- is its class) until it commits, and this function takes each stream's
-- lock first, without waiting: a stream whose lock is held is being given
-- work, and keeps its row. Then, in a new statement and so a new snapshot
-- (a VOLATILE function takes one per statement), which every writer that
-- held a lock before committed before, it deletes the streams that have no
-- pending row. A writer that comes after waits for the lock until this
-- transaction ends, and then inserts the row anew. Rows are locked in
-- stream id order, as every statement locks them, and a row another
-- transaction has locked is skipped rather than waited for (a concurrent
-- completion's fence, a fetch): a release never waits, and so never
-- deadlocks; a stream it skips is released by a later completion, or by the
-- claims that meet it.
CREATE FUNCTION /* SCHEMA */.vantage_release_drained(p_streams uuid[], p_lock text, p_holder uuid) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_free    uuid[];
    v_deleted integer;
BEGIN
    IF cardinality(p_streams) IS NULL OR cardinality(p_streams) = 0 THEN
        RETURN 0;
    END IF;
    SELECT array_agg(s.stream_id ORDER BY s.stream_id) INTO v_free
    FROM (SELECT DISTINCT u.stream_id FROM unnest(p_streams) AS u(stream_id)) s
    WHERE pg_try_advisory_xact_lock(hashtext(p_lock), hashtext(s.stream_id::text));
    IF v_free IS NULL THEN
        RETURN 0;
    END IF;
    DELETE FROM /* SCHEMA */.vantage_active_streams a
    WHERE a.stream_id IN (
        SELECT l.stream_id
        FROM /* SCHEMA */.vantage_active_streams l
        WHERE l.stream_id = ANY (v_free)
          AND (p_holder IS NULL OR l.instance_id IS NULL OR l.instance_id = p_holder)
          AND NOT EXISTS (
              SELECT 1 FROM /* SCHEMA */.vantage_work w
              WHERE w.stream_id = l.stream_id AND w.processed_at IS NULL)
        ORDER BY l.stream_id
        FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;

-- vantage_claim_streams returns up to p_limit streams that a claim by
-- p_instance may take, each with its first_seq, oldest first, from each of
-- three sources (the caller merges them and keeps the oldest): streams
-- held by instances that are not live, expired leases of other instances,
-- and streams nobody holds. A stream qualifies when its partition modulo
-- the count of live instances that are not passive is the caller's rank
-- among them ordered by id, and it is drainable (vantage_stream_drainable).
-- A passive caller has no rank and takes nothing; a caller that is not
-- live neither. Streams it meets without pending work it releases
-- (vantage_release_drained, p_lock the append lock class).
--
-- It walks streams oldest first and stops as soon as it has enough, so a
-- claim costs the streams it passes over, not the backlog: a single query
-- cannot stop a "drainable streams, oldest first" search early, and the
-- planner cannot estimate the partition and drainability filters. The
-- unleased walk goes through vantage_active_streams_unleased_idx in chunks
-- (an ordered, limited subquery keeps the plan an ordered index scan); the
-- holders that are not live are found by a skip scan over
-- vantage_active_streams_instance_idx (one probe per holder).
CREATE FUNCTION /* SCHEMA */.vantage_claim_streams(
    p_instance uuid, p_now timestamptz, p_stale interval, p_partitions integer, p_limit integer, p_lock text)
RETURNS TABLE (candidate_stream uuid, candidate_seq bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_live   uuid[];
    v_ranked uuid[];
    v_rank   integer;
    v_found  integer;
    v_after  bigint := -1;
    v_rows   integer;
    v_state  boolean;
    r        record;
BEGIN
    SELECT array_agg(i.instance_id ORDER BY i.instance_id),
           array_agg(i.instance_id ORDER BY i.instance_id) FILTER (WHERE NOT i.passive)
    INTO v_live, v_ranked
    FROM /* SCHEMA */.vantage_instances i
    WHERE i.last_heartbeat_at > p_now - p_stale;
    v_rank := array_position(v_ranked, p_instance) - 1;
    IF v_rank IS NULL OR p_limit <= 0 THEN
        RETURN;
    END IF;

    -- Streams held by instances that are not live: dead ones not abandoned
    -- yet, or callers of a fetch that never registered.
    v_found := 0;
    FOR r IN
        WITH RECURSIVE holders AS (
            (SELECT a.instance_id FROM /* SCHEMA */.vantage_active_streams a
             WHERE a.instance_id IS NOT NULL ORDER BY a.instance_id LIMIT 1)
            UNION ALL
            SELECT (SELECT a.instance_id FROM /* SCHEMA */.vantage_active_streams a
                    WHERE a.instance_id > h.instance_id ORDER BY a.instance_id LIMIT 1)
            FROM holders h
            WHERE h.instance_id IS NOT NULL
        )
        SELECT a.stream_id, a.first_seq
        FROM holders h
        JOIN /* SCHEMA */.vantage_active_streams a ON a.instance_id = h.instance_id
        WHERE h.instance_id IS NOT NULL AND h.instance_id <> ALL (v_live)
          AND /* SCHEMA */.vantage_partition(a.stream_id, p_partitions) % cardinality(v_ranked) = v_rank
        ORDER BY a.first_seq
    LOOP
        v_state := /* SCHEMA */.vantage_stream_drainable(r.stream_id, p_now);
        IF v_state IS NULL THEN
            PERFORM /* SCHEMA */.vantage_release_drained(ARRAY[r.stream_id], p_lock, NULL);
        END IF;
        CONTINUE WHEN v_state IS NOT TRUE;
        candidate_stream := r.stream_id;
        candidate_seq := r.first_seq;
        RETURN NEXT;
        v_found := v_found + 1;
        EXIT WHEN v_found >= p_limit;
    END LOOP;

    -- Expired leases of other instances: few, found by expiry.
    v_found := 0;
    FOR r IN
        SELECT a.stream_id, a.first_seq
        FROM /* SCHEMA */.vantage_active_streams a
        WHERE a.instance_id IS NOT NULL AND a.lease_expiry <= p_now AND a.instance_id <> p_instance
          AND /* SCHEMA */.vantage_partition(a.stream_id, p_partitions) % cardinality(v_ranked) = v_rank
        ORDER BY a.first_seq
    LOOP
        v_state := /* SCHEMA */.vantage_stream_drainable(r.stream_id, p_now);
        IF v_state IS NULL THEN
            PERFORM /* SCHEMA */.vantage_release_drained(ARRAY[r.stream_id], p_lock, NULL);
        END IF;
        CONTINUE WHEN v_state IS NOT TRUE;
        candidate_stream := r.stream_id;
        candidate_seq := r.first_seq;
        RETURN NEXT;
        v_found := v_found + 1;
        EXIT WHEN v_found >= p_limit;
    END LOOP;

    -- Streams nobody holds, oldest first, a chunk at a time. The chunk is
    -- read in a subquery of its own, ordered and limited by first_seq
    -- alone, so that it is always an ordered scan of
    -- vantage_active_streams_unleased_idx that stops after the chunk; the
    -- filters are evaluated per row of the chunk, so the walk advances
    -- over the rows they drop.
    v_found := 0;
    LOOP
        v_rows := 0;
        FOR r IN
            SELECT a.stream_id, a.first_seq,
                   /* SCHEMA */.vantage_partition(a.stream_id, p_partitions) % cardinality(v_ranked) = v_rank AS mine
            FROM (
                SELECT a.stream_id, a.first_seq
                FROM /* SCHEMA */.vantage_active_streams a
                WHERE a.instance_id IS NULL AND a.first_seq > v_after
                ORDER BY a.first_seq
                LIMIT 1000
            ) a
            ORDER BY a.first_seq
        LOOP
            v_rows := v_rows + 1;
            v_after := r.first_seq;
            CONTINUE WHEN NOT r.mine;
            v_state := /* SCHEMA */.vantage_stream_drainable(r.stream_id, p_now);
            IF v_state IS NULL THEN
                PERFORM /* SCHEMA */.vantage_release_drained(ARRAY[r.stream_id], p_lock, NULL);
            END IF;
            CONTINUE WHEN v_state IS NOT TRUE;
            candidate_stream := r.stream_id;
            candidate_seq := r.first_seq;
            RETURN NEXT;
            v_found := v_found + 1;
            IF v_found >= p_limit THEN
                RETURN;
            END IF;
        END LOOP;
        EXIT WHEN v_rows < 1000;
    END LOOP;
END
$$;
