-- 008_model_queries: the models of a perspective are found by their
-- fields, in order, page by page (ports.ModelQuery).
--
-- The primary key of vantage_models becomes (perspective, stream_id): a
-- perspective's models are then one range of it, in stream id order, which
-- is the default order of a query and the keyset its pages continue after.
-- Loads and saves name both columns, and ON CONFLICT infers the key from
-- its set of columns, whatever their order, so instances of the previous
-- release keep working. The key is rebuilt, not added: saves of models
-- maintain one index, as before.
--
-- vantage_models_updated_idx orders a perspective's models by the time
-- they were saved (then by stream id), for queries by update time. It
-- costs each save of a model one more index entry, and saves that were
-- heap-only (no indexed column changed) no longer are, since updated_at
-- changes with every save.
--
-- vantage_json_time reads a time value of a model (ports.ModelFieldTime):
-- the instant of a JSON string in RFC 3339 format with a UTC offset, as
-- encoding/json writes a time.Time, or NULL for any other value. Casting
-- text to timestamptz is only stable, since it may depend on the session's
-- DateStyle and TimeZone; for the strings it accepts, which name year,
-- month and day in this order and carry their own offset, it depends on
-- neither, so the function is immutable and may appear in the expressions
-- of the indexes that perspectives declare. It never raises an error,
-- since an error in an index expression would fail the save of a model:
-- the pattern and the length of the month rule out what the cast rejects.
-- The memory adapter reads time values by the same pattern.
--
-- Building the new key and index holds saves of models back for a time
-- that grows with the models (the migration runs in one transaction).

CREATE UNIQUE INDEX vantage_models_key_idx ON /* SCHEMA */.vantage_models (perspective, stream_id);
ALTER TABLE /* SCHEMA */.vantage_models
    DROP CONSTRAINT vantage_models_pkey,
    ADD CONSTRAINT vantage_models_pkey PRIMARY KEY USING INDEX vantage_models_key_idx;

CREATE INDEX vantage_models_updated_idx ON /* SCHEMA */.vantage_models (perspective, updated_at, stream_id);

CREATE FUNCTION /* SCHEMA */.vantage_json_time(v jsonb) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    s text;
BEGIN
    IF jsonb_typeof(v) <> 'string' THEN
        RETURN NULL;
    END IF;
    s := v #>> '{}';
    IF s !~ '^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]([.][0-9]{1,9})?(Z|[+-](0[0-9]|1[0-5]):[0-5][0-9])$' THEN
        RETURN NULL;
    END IF;
    IF substr(s, 1, 4) = '0000' THEN
        RETURN NULL;
    END IF;
    IF substr(s, 9, 2)::integer > extract(day FROM make_date(substr(s, 1, 4)::integer, substr(s, 6, 2)::integer, 1) + interval '1 month - 1 day') THEN
        RETURN NULL;
    END IF;
    RETURN s::timestamptz;
END
$$;
