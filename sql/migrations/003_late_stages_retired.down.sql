-- 003_late_stages_retired: back to the shape of 002.
DROP FUNCTION /* SCHEMA */.vantage_subscriptions_add(text[], text[]);
DROP TABLE /* SCHEMA */.vantage_retired_perspectives;

-- Lifecycle stages recorded per event (ports.LifecycleStage flags), so each
-- durable stage fires once per event across instances; a StagePostLifecycle
-- record is the event's completion marker.
CREATE TABLE /* SCHEMA */.vantage_lifecycle (
    event_id    uuid        PRIMARY KEY,
    stages      smallint    NOT NULL,
    instance_id uuid        NOT NULL,
    claimed_at  timestamptz NOT NULL
);

-- 001 records a stage once its receptors fired: the completed per-event
-- stages, each event's latest completer and time. Open claims are left out,
-- so their stages fire again rather than never (a down migration runs with
-- the instances stopped, so every open claim is one of a dead instance), and
-- so are the PostPerspective stages, which 001 does not record.
INSERT INTO /* SCHEMA */.vantage_lifecycle (event_id, stages, instance_id, claimed_at)
SELECT s.event_id, bit_or(s.stage), (array_agg(s.instance_id ORDER BY s.completed_at DESC))[1], max(s.completed_at)
FROM /* SCHEMA */.vantage_lifecycle_stages s
WHERE s.completed_at IS NOT NULL AND s.stage <> 8
GROUP BY s.event_id;

DROP TABLE /* SCHEMA */.vantage_lifecycle_stages;

ALTER TABLE /* SCHEMA */.vantage_work DROP COLUMN late;
