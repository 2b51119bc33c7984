-- 001_init: drop every table and function of the up migration.
DROP FUNCTION /* SCHEMA */.vantage_claim_candidates(uuid, timestamptz, interval, integer, integer, uuid[]);
DROP FUNCTION /* SCHEMA */.vantage_guard_open(uuid, text, bigint, uuid, timestamptz);
DROP TABLE /* SCHEMA */.vantage_snapshots;
DROP TABLE /* SCHEMA */.vantage_lifecycle;
DROP TABLE /* SCHEMA */.vantage_dead_letters;
DROP TABLE /* SCHEMA */.vantage_instances;
DROP TABLE /* SCHEMA */.vantage_active_streams;
DROP TABLE /* SCHEMA */.vantage_models;
DROP TABLE /* SCHEMA */.vantage_cursors;
DROP TABLE /* SCHEMA */.vantage_work;
DROP TABLE /* SCHEMA */.vantage_subscriptions;
DROP TABLE /* SCHEMA */.vantage_events;
DROP FUNCTION /* SCHEMA */.vantage_partition(uuid, integer);
DROP FUNCTION /* SCHEMA */.vantage_uuid_v7();
