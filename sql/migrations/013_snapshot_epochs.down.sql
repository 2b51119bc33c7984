-- 013_snapshot_epochs: back to snapshots without an epoch.
ALTER TABLE /* SCHEMA */.vantage_snapshots DROP COLUMN epoch;
