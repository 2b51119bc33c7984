-- 006_pending_age: back to the shape of 005, the key of pending work
-- without the rows' creation time (see 001 for the index).

CREATE UNIQUE INDEX vantage_work_pending_key_idx ON /* SCHEMA */.vantage_work (stream_id, perspective, event_version)
    WHERE processed_at IS NULL;
DROP INDEX /* SCHEMA */.vantage_work_pending_idx;
ALTER INDEX /* SCHEMA */.vantage_work_pending_key_idx RENAME TO vantage_work_pending_idx;
