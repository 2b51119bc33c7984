-- 011_pair_epochs: back to model saves fenced by version only.
ALTER TABLE /* SCHEMA */.vantage_models DROP COLUMN epoch;
ALTER TABLE /* SCHEMA */.vantage_cursors DROP COLUMN epoch;
