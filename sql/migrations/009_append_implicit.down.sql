-- 009_append_implicit: back to the shape of 008.

DROP FUNCTION /* SCHEMA */.vantage_append_implicit(uuid, timestamptz, bigint, uuid[], text[], text[], text[], text[], text[]);
