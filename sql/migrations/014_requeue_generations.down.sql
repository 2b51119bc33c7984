-- 014_requeue_generations: back to the latest requeue's generation only.
ALTER TABLE /* SCHEMA */.vantage_dead_letters DROP COLUMN requeue_generations;
