-- 012_work_replay: vantage_work.replay marks the row WorkFail stores for a
-- failure's event with no pending row (ports.Failure.FailedEventID): a
-- replay (a rewind, a rebuild) failed on an event the pair's model
-- reflected already, and the row stands for that event's retry
-- (ports.WorkItem.Replay). The rewind that applies it again then neither
-- counts it as a new event nor runs its stages as for a first apply.
--
-- A constant default adds the column without rewriting the table; the
-- rows stored before read false, as every row of an append or a requeue
-- does. Instances of the previous release may keep running: they never
-- read the column, and the rows they store for failed replays read false
-- (counted as new, as before).

ALTER TABLE /* SCHEMA */.vantage_work ADD COLUMN replay boolean NOT NULL DEFAULT false;
