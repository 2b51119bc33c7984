-- 002_reliability: drop the columns and the index of the up migration.
ALTER TABLE /* SCHEMA */.vantage_work DROP COLUMN dead_letter_id;
DROP INDEX /* SCHEMA */.vantage_dead_letters_status_idx;
ALTER TABLE /* SCHEMA */.vantage_dead_letters
    DROP COLUMN resolved_at,
    DROP COLUMN requeue_generation,
    DROP COLUMN requeued_at,
    DROP COLUMN requeues,
    DROP COLUMN status,
    DROP COLUMN generation;
