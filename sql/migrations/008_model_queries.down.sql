-- 008_model_queries: back to the shape of 007. Dropping the function drops
-- the indexes that perspectives declared on time fields with it; the
-- others stay, unused by the previous release, until dropped by hand.

DROP FUNCTION /* SCHEMA */.vantage_json_time(jsonb) CASCADE;
DROP INDEX /* SCHEMA */.vantage_models_updated_idx;

CREATE UNIQUE INDEX vantage_models_key_idx ON /* SCHEMA */.vantage_models (stream_id, perspective);
ALTER TABLE /* SCHEMA */.vantage_models
    DROP CONSTRAINT vantage_models_pkey,
    ADD CONSTRAINT vantage_models_pkey PRIMARY KEY USING INDEX vantage_models_key_idx;
