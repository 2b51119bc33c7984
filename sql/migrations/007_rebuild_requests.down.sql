-- 007_rebuild_requests: back to the shape of 006, without rebuild
-- requests. The requests stored, finished or not, are dropped with the
-- table.

DROP TABLE /* SCHEMA */.vantage_rebuilds;
