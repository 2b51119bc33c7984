-- 002_reliability: dead letters that remember their generation and status,
-- and work rows that remember the dead letter they were requeued from.

-- A dead letter's status is where it stands (ports.DeadLetterStatus):
-- 'dead' while it waits, 'requeued' once its work row was stored again,
-- 'recovered' once that row completed, 'ignored' when an operator gave up on
-- it. Rows recorded before this migration were waiting, so they start dead,
-- with no generation ('': none named), never requeued.
--
-- generation is the deploy generation of the instance that dead-lettered the
-- row; requeue_generation that of the latest requeue (NULL before the first),
-- so that a recovery by generation G retries each dead letter once: those
-- that failed on another generation and were never requeued on G.
ALTER TABLE /* SCHEMA */.vantage_dead_letters
    ADD COLUMN generation         text        NOT NULL DEFAULT '',
    ADD COLUMN status             text        NOT NULL DEFAULT 'dead'
        CONSTRAINT vantage_dead_letters_status_check CHECK (status IN ('dead', 'requeued', 'recovered', 'ignored')),
    ADD COLUMN requeues           integer     NOT NULL DEFAULT 0,
    ADD COLUMN requeued_at        timestamptz,
    ADD COLUMN requeue_generation text,
    ADD COLUMN resolved_at        timestamptz;

-- Dead letters of a status, oldest first: the status filter of a listing
-- and the oldest dead letters a recovery requeues. A table that keeps every
-- recovered dead letter as history would otherwise be walked in time order
-- past all of them to find the few still dead.
CREATE INDEX vantage_dead_letters_status_idx ON /* SCHEMA */.vantage_dead_letters (status, dead_lettered_at, id);

-- The dead letter a work row was requeued from (NULL for a row stored by an
-- append or a failure): completing the row marks that dead letter
-- recovered, and dead-lettering it again updates that dead letter instead
-- of recording a second one. Both look the dead letter up by its primary
-- key from the row, so the column needs no index. It is no foreign key:
-- operators may delete dead letters, and a row whose dead letter is gone is
-- recorded anew when it fails again.
ALTER TABLE /* SCHEMA */.vantage_work ADD COLUMN dead_letter_id uuid;
