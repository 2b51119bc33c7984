-- 014_requeue_generations: vantage_dead_letters.requeue_generations, every
-- deploy generation a dead letter was requeued on.
--
-- A recovery by generation G retries each dead letter once: those that
-- failed on another generation and were never requeued on G. With only the
-- latest requeue's generation (requeue_generation) to tell, two generations
-- took turns forever once a third had run: a dead letter that failed on G2,
-- then on G3 after G3 requeued it, was requeued by G2 again, failed there,
-- and so on. The array keeps them all (one entry per deploy that retried
-- the dead letter, so it stays small); requeue_generation stays the latest.
--
-- A constant default adds the column without rewriting the table; the dead
-- letters requeued before start with the generation of their latest requeue.
ALTER TABLE /* SCHEMA */.vantage_dead_letters ADD COLUMN requeue_generations text[] NOT NULL DEFAULT '{}';
UPDATE /* SCHEMA */.vantage_dead_letters
SET requeue_generations = ARRAY[requeue_generation]
WHERE requeue_generation IS NOT NULL;
