-- 015_models_saved_in_place: the models indexed by update time again.
CREATE INDEX IF NOT EXISTS vantage_models_updated_idx ON /* SCHEMA */.vantage_models (perspective, updated_at, stream_id);
