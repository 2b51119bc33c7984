-- 007_rebuild_requests: rebuild requests that operators store
-- (ports.Admin.RebuildRequest) and running instances carry out
-- (ports.RebuildQueue).
--
-- A request names a perspective and the streams to rebuild (stream_ids,
-- sorted by their bytes, without duplicates; NULL for every stream with
-- events the perspective handles). status is where it stands
-- (ports.RebuildStatus). Its claim is instance_id, attempt and
-- claim_expiry: the instance running it renews claim_expiry whenever it
-- records its progress; once the claim expired another instance may claim
-- the request (attempt + 1) and resume it after resume_after, the last
-- stream done in byte order of the ids. Progress and finish name their
-- claim (instance_id, attempt), so an instance whose claim was taken over
-- changes nothing. claim_expiry is set exactly while the request runs.
--
-- A new table: instances of the previous release never read it, and
-- simply carry out no request.
CREATE TABLE /* SCHEMA */.vantage_rebuilds (
    id              uuid        PRIMARY KEY,
    perspective     text        NOT NULL CHECK (perspective <> ''),
    stream_ids      uuid[],
    requested_by    text        NOT NULL DEFAULT '',
    requested_at    timestamptz NOT NULL,
    status          text        NOT NULL DEFAULT 'pending'
        CONSTRAINT vantage_rebuilds_status_check CHECK (status IN ('pending', 'running', 'done', 'failed', 'cancelled')),
    instance_id     uuid,
    attempt         integer     NOT NULL DEFAULT 0,
    claim_expiry    timestamptz,
    started_at      timestamptz,
    updated_at      timestamptz NOT NULL,
    finished_at     timestamptz,
    error           text        NOT NULL DEFAULT '',
    streams_total   bigint      NOT NULL DEFAULT 0,
    streams_done    bigint      NOT NULL DEFAULT 0,
    events_replayed bigint      NOT NULL DEFAULT 0,
    resume_after    uuid,
    CONSTRAINT vantage_rebuilds_claim_check CHECK ((status = 'running') = (claim_expiry IS NOT NULL))
);

-- The open requests, oldest first: what the periodic claim of every
-- instance probes, a short range however many requests finished before.
CREATE INDEX vantage_rebuilds_open_idx ON /* SCHEMA */.vantage_rebuilds (requested_at, id)
    WHERE status IN ('pending', 'running');
-- Every request by time: listings, newest first.
CREATE INDEX vantage_rebuilds_requested_idx ON /* SCHEMA */.vantage_rebuilds (requested_at, id);
