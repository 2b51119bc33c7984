-- 006_pending_age: the key of pending work carries the rows' creation time.
--
-- The backlog figures (ports.Stats: pending rows and the age of the oldest,
-- per perspective) read every pending row. vantage_work_pending_idx holds
-- one entry per pending row already; with created_at as an INCLUDE column
-- it answers the count and the oldest age by an index-only scan, which
-- reads fewer pages than the table and, once the visibility map is set,
-- none of its heap. A separate index by perspective would be smaller
-- to scan, but would cost every append and completion an index entry;
-- INCLUDE costs them 8 bytes in an entry they write anyway, and created_at
-- never changes, so updates that were heap-only stay heap-only.
--
-- The index keeps its name, key and predicate: the statements that infer
-- it as their ON CONFLICT arbiter, or probe it per pair, are unchanged, so
-- instances of the previous release may keep running. The new index is
-- built before the old one is dropped, in the migration's transaction:
-- appends and completions wait while it is built, for a time that grows
-- with the pending rows.

CREATE UNIQUE INDEX vantage_work_pending_age_idx ON /* SCHEMA */.vantage_work (stream_id, perspective, event_version)
    INCLUDE (created_at)
    WHERE processed_at IS NULL;
DROP INDEX /* SCHEMA */.vantage_work_pending_idx;
ALTER INDEX /* SCHEMA */.vantage_work_pending_age_idx RENAME TO vantage_work_pending_idx;
