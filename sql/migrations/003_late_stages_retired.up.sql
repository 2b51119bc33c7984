-- 003_late_stages_retired: late work rows, lifecycle stages claimed before
-- their receptors run and completed after, and retired perspectives.

-- late marks a pending row whose event its pair's cursor passed, or may
-- pass, without applying it (ports.WorkItem.Late): stored below the cursor
-- (a late arrival, a dead letter requeued, a failed replay), found pending
-- below the position a completion or failure reported (a straggler), or
-- stored below a leased row of its pair (handed to an apply whose save may
-- move the cursor past it). Only a rewind applies such an event in order
-- once the cursor is past it; a row below the cursor that is not late is
-- one applied earlier whose completion is still on its way. The flag is set
-- once and never cleared: it goes with the row.
--
-- No index mentions the column, neither as a key nor in a predicate, so the
-- claim and fetch plans stay as they were, and setting it is a heap-only
-- update where the page has room. Adding a column with a constant default
-- rewrites nothing. Rows stored before this migration start not late: a late
-- event among them flagged its cursor RewindRequired, which still starts its
-- rewind.
ALTER TABLE /* SCHEMA */.vantage_work ADD COLUMN late boolean NOT NULL DEFAULT false;

-- Lifecycle stages, one row per (event, stage, perspective), in two steps: a
-- claim before the stage's receptors run (completed_at NULL, instance_id the
-- claimer), then the completion once they returned (completed_at set,
-- instance_id the instance that completed it). A claim stands while its
-- instance is live, a heartbeat in vantage_instances newer than the claim's
-- stale threshold; the claim of an instance that died is taken over, so a
-- crash never loses a stage. A completed stage is never claimed again; a
-- completed StagePostLifecycle is the event's completion marker.
--
-- stage is one ports.LifecycleStage flag: 1 PrePerspective, 2
-- PostAllPerspectives, 4 PostLifecycle, recorded per event with perspective
-- '' (part of the key, so not NULL), and 8 PostPerspective, recorded per
-- perspective. claimed_at is the latest claim, NULL for a stage completed
-- without one. The key serves every statement: claims and completions by
-- (event, stage, perspective), the completed stages of events by event id.
CREATE TABLE /* SCHEMA */.vantage_lifecycle_stages (
    event_id     uuid        NOT NULL,
    stage        smallint    NOT NULL CHECK (stage IN (1, 2, 4, 8)),
    perspective  text        NOT NULL DEFAULT '',
    instance_id  uuid        NOT NULL,
    claimed_at   timestamptz,
    completed_at timestamptz,
    PRIMARY KEY (event_id, stage, perspective),
    CONSTRAINT vantage_lifecycle_stages_perspective_check CHECK ((stage = 8) = (perspective <> ''))
);

-- 001 recorded a stage when it claimed it and fired its receptors right
-- away: what it recorded is completed.
INSERT INTO /* SCHEMA */.vantage_lifecycle_stages (event_id, stage, instance_id, claimed_at, completed_at)
SELECT l.event_id, s.stage, l.instance_id, l.claimed_at, l.claimed_at
FROM /* SCHEMA */.vantage_lifecycle l
CROSS JOIN (VALUES (1), (2), (4)) AS s(stage)
WHERE l.stages & s.stage <> 0;

DROP TABLE /* SCHEMA */.vantage_lifecycle;

-- Perspectives an operator retired (ports.AdminStore.PerspectiveRetire):
-- their subscriptions were deleted, and registrations of them (by
-- SubscriptionsRegister or carried by an append) are ignored, so appends
-- store no work for them until they are revived. retired_at is the first
-- retirement.
CREATE TABLE /* SCHEMA */.vantage_retired_perspectives (
    perspective text        PRIMARY KEY CHECK (perspective <> ''),
    retired_at  timestamptz NOT NULL DEFAULT now()
);

-- vantage_subscriptions_add records the subscriptions (p_types[i],
-- p_perspectives[i]) that are not recorded yet, those of retired
-- perspectives excepted, in key order so that concurrent registrations
-- cannot deadlock, and returns how many it recorded. Appends call it only
-- when a subscription they carry is missing: the common append, whose
-- subscriptions are all recorded, then runs no insert at all, which would
-- cost it the setup of one even when it inserts nothing.
CREATE FUNCTION /* SCHEMA */.vantage_subscriptions_add(p_types text[], p_perspectives text[]) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    WITH added AS (
        INSERT INTO /* SCHEMA */.vantage_subscriptions (event_type, perspective)
        SELECT x.event_type, x.perspective
        FROM (SELECT DISTINCT * FROM unnest(p_types, p_perspectives) AS u(event_type, perspective)) x
        WHERE NOT EXISTS (SELECT 1 FROM /* SCHEMA */.vantage_retired_perspectives r WHERE r.perspective = x.perspective)
        ORDER BY x.event_type COLLATE "C", x.perspective COLLATE "C"
        ON CONFLICT DO NOTHING
        RETURNING 1
    )
    SELECT count(*) FROM added
$$;
