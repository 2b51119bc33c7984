-- 001_init: every table of the perspective worker.
--
-- /* SCHEMA */ is replaced by the quoted schema name. Times are timestamptz and
-- are written from the engine's clock when it injects one, otherwise from now().

-- vantage_uuid_v7 returns a time-ordered UUID (version 7) so work ids, which are
-- inserted and deleted at a high rate, land at the right edge of their index.
CREATE FUNCTION /* SCHEMA */.vantage_uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                placing substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;

-- vantage_partition is a stream's partition: |hashtext(stream id)| modulo the
-- partition count. It is computed in SQL, never in Go, so every instance agrees.
-- The bigint cast keeps abs() from overflowing on hashtext's minimum value.
CREATE FUNCTION /* SCHEMA */.vantage_partition(stream_id uuid, partition_count integer) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT (abs(hashtext(stream_id::text)::bigint) % partition_count)::integer
$$;

-- Events, one row per event. Within a stream, version is the processing order;
-- appends assign it under a per-stream advisory lock so it follows commit order.
CREATE TABLE /* SCHEMA */.vantage_events (
    id         uuid        PRIMARY KEY,
    stream_id  uuid        NOT NULL,
    type       text        NOT NULL CHECK (type <> ''),
    version    bigint      NOT NULL CHECK (version > 0),
    data       jsonb       NOT NULL,
    metadata   jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT vantage_events_stream_version_key UNIQUE (stream_id, version)
);
-- Events of a type by creation (interrupted lifecycles) and by stream
-- (rebuilds page through the streams having a type).
CREATE INDEX vantage_events_type_created_idx ON /* SCHEMA */.vantage_events (type, created_at, stream_id, version);
CREATE INDEX vantage_events_type_stream_idx ON /* SCHEMA */.vantage_events (type, stream_id);

-- Which perspectives apply which event types; appends fan out through it.
CREATE TABLE /* SCHEMA */.vantage_subscriptions (
    event_type  text        NOT NULL CHECK (event_type <> ''),
    perspective text        NOT NULL CHECK (perspective <> ''),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_type, perspective)
);

-- Work: one ephemeral row per (stream, perspective, event) still to apply.
-- Pending means processed_at IS NULL; processed rows exist only in debug mode.
-- A lease is instance_id and lease_expiry together, both set or both NULL.
-- The partition is not stored: it depends on the partition count, which is a
-- claim parameter, so claims compute it with vantage_partition.
CREATE TABLE /* SCHEMA */.vantage_work (
    work_id       uuid        PRIMARY KEY,
    -- seq is the insertion order: claims serve the oldest pending work first.
    seq           bigint      GENERATED ALWAYS AS IDENTITY,
    stream_id     uuid        NOT NULL,
    perspective   text        NOT NULL,
    event_id      uuid        NOT NULL,
    event_version bigint      NOT NULL,
    instance_id   uuid,
    lease_expiry  timestamptz,
    attempts      integer     NOT NULL DEFAULT 0,
    error         text,
    scheduled_for timestamptz,
    processed_at  timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT vantage_work_lease_check CHECK ((instance_id IS NULL) = (lease_expiry IS NULL)),
    -- A retry time applies to a released row only: leasing clears it. So a
    -- row scheduled in the future is always unleased, and the per-pair
    -- probes below find such rows in vantage_work_stream_unleased_idx.
    CONSTRAINT vantage_work_schedule_check CHECK (scheduled_for IS NULL OR instance_id IS NULL),
    -- Rows kept by debug mode are released when processed: a leased row is
    -- always pending (see vantage_work_stream_leased_idx).
    CONSTRAINT vantage_work_processed_check CHECK (processed_at IS NULL OR instance_id IS NULL)
);
-- The statements on the rows of a (stream, perspective) work through the
-- three indexes below, one pair at a time, with probes and bounded range
-- scans (first row, first blocking row, rows below a version), never by
-- comparing each row with the rows before it: a pair costs the rows a
-- statement returns or changes, times log n, whatever its backlog.
--
-- In-stream order: a pair's first pending row and the distinct perspectives
-- of a stream (skip scan), the prefix a fetch leases and returns, straggler
-- detection, "has pending". It is also the key of pending work: one pending
-- row per (stream, perspective, event), the version standing for the event
-- (versions are unique within a stream). A separate unique key on event_id
-- would cost an index entry on every write of a row, and a lease is a write
-- that PostgreSQL cannot keep in place (the lease columns are indexed): one
-- index fewer makes leasing a backlog 28% cheaper.
CREATE UNIQUE INDEX vantage_work_pending_idx ON /* SCHEMA */.vantage_work (stream_id, perspective, event_version)
    WHERE processed_at IS NULL;
-- Unleased rows of a pair in version order: the rows a claim takes, the
-- first row scheduled in the future (ordering guard) and the first unleased
-- row, which ends a fetch's prefix.
CREATE INDEX vantage_work_stream_unleased_idx ON /* SCHEMA */.vantage_work (stream_id, perspective, event_version)
    WHERE processed_at IS NULL AND instance_id IS NULL;
-- Leased rows of a pair by holder, then expiry: the rows under another
-- holder's live lease (ordering guard: the ranges below and above the
-- caller's id), and the caller's own expired rows, without walking the rows
-- the caller holds. Leased rows are pending (vantage_work_processed_check),
-- so the predicate and the statements using it need no processed_at test;
-- the statements leave it out so that vantage_work_pending_idx, whose
-- predicate it is, cannot serve them (the planner would walk the whole pair
-- in version order for a min that finds nothing). The lease_expiry term,
-- implied by the lease check, admits only statements that test the expiry:
-- the skip scan over the streams a caller holds must go through
-- vantage_work_holder_idx, bounded by the caller, not through this index in
-- stream order.
CREATE INDEX vantage_work_stream_leased_idx ON /* SCHEMA */.vantage_work (stream_id, perspective, instance_id, lease_expiry)
    WHERE instance_id IS NOT NULL AND lease_expiry IS NOT NULL;
-- Claims walk the candidate rows oldest first: unleased rows by insertion
-- order, leased rows by lease expiry (the expired ones). The seq > 0 term,
-- always true, keeps the per-pair statements, which do not mention seq, off
-- this index: with statistics that underestimate the unleased rows, the
-- planner could otherwise filter the whole index once per pair.
CREATE INDEX vantage_work_unleased_idx ON /* SCHEMA */.vantage_work (seq)
    WHERE processed_at IS NULL AND instance_id IS NULL AND seq > 0;
-- The lease_expiry term, implied by the lease check, keeps statements that
-- do not test the expiry off this index: the skip scan over the streams a
-- caller holds (vantage_work_holder_idx) would otherwise, with statistics
-- that see few leased rows, be planned as a sort of every leased row per
-- probe.
CREATE INDEX vantage_work_lease_expiry_idx ON /* SCHEMA */.vantage_work (lease_expiry)
    WHERE processed_at IS NULL AND instance_id IS NOT NULL AND lease_expiry IS NOT NULL;
-- Rows held by one instance: the streams a claim returns (skip scan),
-- abandonment, deregistration. The expiry keeps a probe for the caller's
-- own expired rows of a stream bounded whichever of this index and
-- vantage_work_stream_leased_idx the planner picks.
CREATE INDEX vantage_work_holder_idx ON /* SCHEMA */.vantage_work (instance_id, stream_id, lease_expiry)
    WHERE processed_at IS NULL AND instance_id IS NOT NULL;
-- Purging rows kept by debug mode.
CREATE INDEX vantage_work_processed_idx ON /* SCHEMA */.vantage_work (processed_at)
    WHERE processed_at IS NOT NULL;

-- Cursors: how far each perspective has applied each stream. status holds the
-- ports.CursorStatus flags. stream_lock_* is the cooperative rewind lock.
CREATE TABLE /* SCHEMA */.vantage_cursors (
    stream_id               uuid        NOT NULL,
    perspective             text        NOT NULL,
    last_event_id           uuid,
    last_version            bigint      NOT NULL DEFAULT 0,
    status                  smallint    NOT NULL DEFAULT 0,
    error                   text,
    rewind_trigger_event_id uuid,
    rewind_trigger_version  bigint,
    rewind_flagged_at       timestamptz,
    rewind_first_flagged_at timestamptz,
    stream_lock_instance_id uuid,
    stream_lock_expiry      timestamptz,
    stream_lock_reason      text,
    updated_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stream_id, perspective)
);
-- Cursors requiring rewind (status & 32 = RewindRequired).
CREATE INDEX vantage_cursors_rewind_idx ON /* SCHEMA */.vantage_cursors (stream_id, perspective COLLATE "C")
    WHERE status & 32 <> 0;

-- Models: a perspective's model per stream, saved together with its cursor.
CREATE TABLE /* SCHEMA */.vantage_models (
    stream_id     uuid        NOT NULL,
    perspective   text        NOT NULL,
    data          jsonb       NOT NULL,
    last_event_id uuid,
    last_version  bigint      NOT NULL DEFAULT 0,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stream_id, perspective)
);

-- Stream pins: at most one live instance drains a stream. A missing row or a
-- NULL instance_id is an unpinned stream. Like vantage_work, the table stores
-- no partition: it depends on the claim's partition count.
CREATE TABLE /* SCHEMA */.vantage_active_streams (
    stream_id        uuid        PRIMARY KEY,
    instance_id      uuid,
    last_activity_at timestamptz NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX vantage_active_streams_instance_idx ON /* SCHEMA */.vantage_active_streams (instance_id)
    WHERE instance_id IS NOT NULL;

-- Engine instances and their heartbeats.
CREATE TABLE /* SCHEMA */.vantage_instances (
    instance_id       uuid        PRIMARY KEY,
    service_name      text        NOT NULL DEFAULT '',
    host_name         text        NOT NULL DEFAULT '',
    process_id        integer     NOT NULL DEFAULT 0,
    metadata          jsonb       NOT NULL DEFAULT '{}',
    started_at        timestamptz NOT NULL,
    last_heartbeat_at timestamptz NOT NULL
);
CREATE INDEX vantage_instances_heartbeat_idx ON /* SCHEMA */.vantage_instances (last_heartbeat_at);

-- Work rows that exhausted their attempts.
CREATE TABLE /* SCHEMA */.vantage_dead_letters (
    id               uuid        PRIMARY KEY,
    work_id          uuid        NOT NULL,
    stream_id        uuid        NOT NULL,
    perspective      text        NOT NULL,
    event_id         uuid        NOT NULL,
    event_version    bigint      NOT NULL,
    attempts         integer     NOT NULL,
    reason           text        NOT NULL,
    error            text        NOT NULL DEFAULT '',
    instance_id      uuid,
    dead_lettered_at timestamptz NOT NULL
);
CREATE INDEX vantage_dead_letters_time_idx ON /* SCHEMA */.vantage_dead_letters (dead_lettered_at, id);
CREATE INDEX vantage_dead_letters_stream_idx ON /* SCHEMA */.vantage_dead_letters (stream_id);
CREATE INDEX vantage_dead_letters_perspective_idx ON /* SCHEMA */.vantage_dead_letters (perspective, dead_lettered_at);

-- Lifecycle stages recorded per event (ports.LifecycleStage flags), so each
-- durable stage fires once per event across instances; a StagePostLifecycle
-- record is the event's completion marker.
CREATE TABLE /* SCHEMA */.vantage_lifecycle (
    event_id    uuid        PRIMARY KEY,
    stages      smallint    NOT NULL,
    instance_id uuid        NOT NULL,
    claimed_at  timestamptz NOT NULL
);

-- Periodic model snapshots that shorten rewinds; the key serves "latest
-- before a version" and "delete from a version".
CREATE TABLE /* SCHEMA */.vantage_snapshots (
    stream_id     uuid        NOT NULL,
    perspective   text        NOT NULL,
    event_version bigint      NOT NULL,
    event_id      uuid        NOT NULL,
    data          jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stream_id, perspective, event_version)
);

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
-- live-instance count is the caller's rank among live instances ordered by
-- id, and no earlier row of its (stream, perspective) is under another
-- holder's live lease or scheduled in the future (the ordering guard). It
-- returns nothing when the caller is not live.
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
-- ordered, limited subquery keeps the plan an ordered index scan).
CREATE FUNCTION /* SCHEMA */.vantage_claim_candidates(
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
