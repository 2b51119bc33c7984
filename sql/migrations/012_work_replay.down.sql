-- 012_work_replay: back to the shape of 011, without vantage_work.replay.

ALTER TABLE /* SCHEMA */.vantage_work DROP COLUMN replay;
