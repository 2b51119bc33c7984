package postgres_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
)

// seqScanOnHotTable matches a plan line scanning a table that grows with
// the workload.
var seqScanOnHotTable = regexp.MustCompile(`Seq Scan on vantage_(work|events|cursors|active_streams|dead_letters|models|instances|snapshots|lifecycle)\b`)

// TestQueriesUseIndexes plans every query of the adapter on a seeded schema
// with sequential scans disabled: a plan that still scans a growing table
// sequentially has no index to use. (The planner may rightly prefer a
// sequential scan on small tables; disabling it asks whether an index path
// exists at all.)
func TestQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	s := pgx.Identifier{b.schema}.Sanitize()
	_, err := b.pool.Exec(ctx, `
INSERT INTO `+s+`.vantage_events (id, stream_id, type, version, data)
SELECT gen_random_uuid(), st.id, 'T', v, '{}'
FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, 500)) st, generate_series(1, 4) v;
INSERT INTO `+s+`.vantage_work (work_id, stream_id, perspective, event_id, event_version)
SELECT gen_random_uuid(), e.stream_id, p, e.id, e.version
FROM `+s+`.vantage_events e, (VALUES ('a'), ('b')) x(p);
INSERT INTO `+s+`.vantage_cursors (stream_id, perspective, last_version)
SELECT DISTINCT stream_id, 'a', 1 FROM `+s+`.vantage_events;
ANALYZE `+s+`.vantage_events; ANALYZE `+s+`.vantage_work; ANALYZE `+s+`.vantage_cursors;`)
	require.NoError(t, err)
	rows, err := b.pool.Query(ctx, `SELECT DISTINCT stream_id FROM `+s+`.vantage_work LIMIT 3`)
	require.NoError(t, err)
	streams, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)

	var (
		id      = uuid.New()
		ids     = []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
		names   = []string{"a", "b", "a"}
		texts   = []string{"x", "y", "z"}
		nums    = []int64{1, 2, 3}
		times   = []pgtype.Timestamptz{{}, {}, {}}
		minute  = time.Minute
		channel = b.store.Channel()
	)
	cases := map[string][]any{
		"ClaimAlive":        {id, nil, minute},
		"Claim":             {id, nil, minute, minute, 10, 100},
		"ClaimHeld":         {id, nil, 10},
		"Heartbeat":         {id, nil, "svc", "host", 1, []byte(`{}`)},
		"AbandonPins":       {id, nil, minute},
		"AbandonLeases":     {id, nil, minute},
		"AbandonInstances":  {id, nil, minute},
		"DeregisterPins":    {id},
		"DeregisterLeases":  {id},
		"Deregister":        {id},
		"RenewLeases":       {id, nil, minute, ids},
		"FetchLease":        {id, nil, minute, minute, streams},
		"FetchRows":         {id, nil, streams, nil},
		"ReadStream":        {streams[0], int64(1), nil},
		"CursorsGet":        {streams, ""},
		"Finish":            {id, ids, streams, names},
		"FinishDebug":       {id, ids, streams, names, nil},
		"CompleteCursors":   {nil, streams, names, ids, nums},
		"FlagStragglers":    {nil, streams, names, nums},
		"UnpinDrained":      {streams},
		"FailRows":          {id, ids, streams, names, texts, times},
		"FailCursors":       {nil, streams, names, ids, nums, texts},
		"Append":            {streams[0], nil, int64(0), ids, texts, nums, []string{"{}", "{}", "{}"}, []string{"{}", "{}", "{}"}, channel},
		"ModelLoad":         {streams[0], "a"},
		"ModelSave":         {streams[0], nil, "a", "{}", ids[0], int64(1), int64(0)},
		"DeadLetterMove":    {id, nil, ids[0], id, "reason", "error"},
		"DeadLettersList":   {"a", streams[0], nil},
		"DeadLetterRequeue": {id, nil, channel},

		"CursorsRewindRequired": {10},
		"StreamLockAcquire":     {streams[0], nil, "a", id, "rewind", minute},
		"StreamLockRelease":     {streams[0], "a", id},
		"StreamLocks":           {streams[0], nil},
		"StreamsWithEventTypes": {[]string{"T", "U"}, streams[0], 10},
		"SnapshotSave":          {streams[0], "a", int64(1), id, "{}", nil},
		"SnapshotLatestBefore":  {streams[0], "a", int64(3)},
		"SnapshotsDeleteFrom":   {streams[0], "a", int64(3)},
		"LifecycleClaim":        {id, nil, ids, int16(4)},
		"LifecycleStages":       {ids},
		"LifecycleOrphans":      {[]string{"T", "T"}, []string{"a", "b"}, nil, 10},
	}
	require.Len(t, cases, len(postgres.Queries), "every query has a case")
	for name, args := range cases {
		query, ok := postgres.Queries[name]
		require.True(t, ok, name)
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, "EXPLAIN "+b.store.Render(query), args...)
			if err != nil {
				return err
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			plan := strings.Join(lines, "\n")
			require.NotRegexp(t, seqScanOnHotTable, plan, "%s has no index path:\n%s", name, plan)
			return nil
		})
		require.NoError(t, err, name)
	}
}
