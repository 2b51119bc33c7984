package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// seqScanOnHotTable matches a plan line scanning a table that grows with
// the workload.
var seqScanOnHotTable = regexp.MustCompile(`Seq Scan on vantage_(work|events|cursors|active_streams|dead_letters|models|instances|snapshots|lifecycle_stages)\b`)

// scansByDesign are the queries that scan growing tables on purpose, with
// the reason.
var scansByDesign = map[string]string{
	"RetireRows":         "an operator action finds a perspective's rows by scans: an index by perspective would cost every append and completion",
	"PerspectivesStatus": "an operator's status counts every cursor per perspective: an index by perspective would cost every completion",
}

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
INSERT INTO `+s+`.vantage_active_streams (stream_id, first_seq, last_activity_at)
SELECT stream_id, min(seq), now() FROM `+s+`.vantage_work GROUP BY stream_id;
ANALYZE `+s+`.vantage_events; ANALYZE `+s+`.vantage_work; ANALYZE `+s+`.vantage_cursors; ANALYZE `+s+`.vantage_active_streams;`)
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
		"Claim":              {id, nil, minute, minute, 10, 100, "lock"},
		"HeartbeatLock":      {id, nil, minute},
		"Heartbeat":          {id, nil, "svc", "host", 1, []byte(`{}`), false},
		"AbandonLeases":      {id, nil, minute},
		"AbandonInstances":   {id, nil, minute},
		"DeregisterLeases":   {id},
		"Deregister":         {id},
		"RenewLeases":        {id, nil, minute, streams},
		"FetchLease":         {id, nil, minute, minute, streams, "lock"},
		"FetchRows":          {id, nil, streams, nil},
		"FetchCursors":       {streams},
		"ReadStream":         {streams[0], int64(1), nil},
		"CursorsGet":         {streams, ""},
		"Finish":             {id, ids, streams, names, nil},
		"FinishDebug":        {id, ids, streams, names, nil},
		"CompleteCursors":    {nil, streams, names, ids, nums},
		"FlagStragglers":     {nil, streams, names, nums, ids},
		"ReleaseDrained":     {streams, id, "lock"},
		"FailRows":           {id, ids, streams, names, texts, times, []int32{1, 2, 3}},
		"FailFence":          {id, streams},
		"FailCursors":        {nil, streams, names, ids, nums, texts, ids, []bool{true, true, false}, id},
		"FailEvents":         {nil, streams, names, ids, nums, texts, times},
		"FlagFailedEvents":   {nil, streams, names, ids, nums},
		"Append":             {streams[0], nil, int64(0), ids, texts, nums, []string{"{}", "{}", "{}"}, []string{"{}", "{}", "{}"}, channel, texts, names, true},
		"AppendImplicit":     {streams[0], nil, int64(0), ids, texts, []string{"{}", "{}", "{}"}, []string{"{}", "{}", "{}"}, texts, names},
		"ModelLoad":          {streams[0], "a"},
		"ModelLoadMany":      {streams, names},
		"ModelSave":          {streams[0], nil, "a", "{}", ids[0], int64(1), int64(0), int64(0), int64(0), id, []int64{1}},
		"ModelSaveSet":       {streams, names, []string{"{}", "{}", "{}"}, ids, nums, nums, nums, nums, ids, times, streams, []uuid.UUID{id}},
		"DeadLetterMove":     {id, nil, ids[0], id, "reason", "error", 3, "g1"},
		"DeadLetterRefused":  {ids[0], id},
		"DeadLettersList":    {"a", streams[0], nil, "dead", nil, times[0], id},
		"DeadLettersNewest":  {"a", streams[0], 10, "", times[0], times[0], id},
		"DeadLetterRequeue":  {id, nil, channel, "g2", "lock"},
		"DeadLetterIgnore":   {id, nil},
		"DeadLetterGet":      {id},
		"RequeueIDs":         {"a", nil, channel, "g2", "lock", nil, ids},
		"RequeuePerspective": {"a", nil, channel, "g2", "lock", nil},
		"DeadLettersRecover": {10, nil, channel, "g2", "lock"},

		"CursorsRewindRequired": {10},
		"StreamLockAcquire":     {streams[0], nil, "a", id, "rewind", minute},
		"StreamLockRelease":     {streams[0], "a", id},
		"StreamLocks":           {streams[0], nil},
		"StreamsWithEventTypes": {[]string{"T", "U"}, streams[0], 10},
		"WorkLate":              {streams[0], "a"},
		"SnapshotSave":          {streams[0], "a", int64(1), id, int64(0), "{}", nil},
		"SnapshotLatestBefore":  {streams[0], "a", int64(3), int64(0)},
		"SnapshotsDeleteFrom":   {streams[0], "a", int64(3)},
		"LifecycleClaim":        {id, nil, ids, int16(8), "a", minute},
		"LifecycleComplete":     {id, nil, ids, int16(4), ""},
		"LifecycleStages":       {ids, "a"},
		"LifecycleReady":        {[]string{"T", "T"}, []string{"a", "b"}, ids},
		"LifecycleOrphans":      {[]string{"T", "T"}, []string{"a", "b"}, nil, 10},

		"SubscriptionsRegister": {texts, names},
		"Retire":                {"a"},
		"RetireRows":            {"a", true},
		"PerspectiveRevive":     {"a"},
		"PerspectivesRetired":   {},
		"PerspectivesLag":       {nil},
		"PerspectivesStatus":    {nil},

		"RebuildRequest":  {id, nil, "a", ids, "ops"},
		"RebuildGet":      {id},
		"RebuildsList":    {"a", "running", 10},
		"RebuildCancel":   {id, nil},
		"RebuildClaim":    {id, nil, []string{"a", "b"}, minute},
		"RebuildProgress": {id, nil, id, 1, int64(3), int64(1), int64(5), id, minute, false},
		"RebuildFinish":   {id, nil, id, 1, int64(3), int64(3), int64(9), id, ""},
	}
	require.Len(t, cases, len(postgres.Queries), "every query has a case")
	for name, args := range cases {
		query, ok := postgres.Queries[name]
		require.True(t, ok, name)
		for _, generic := range []bool{false, true} {
			err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
					return err
				}
				var lines []string
				if generic {
					// The plan a prepared statement keeps under the work
					// settings: made for no values of its parameters.
					if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
						return err
					}
					var err error
					if lines, err = explainPrepared(ctx, tx, "COSTS", b.store.Render(query), sqlLiterals(t, args)); err != nil {
						return err
					}
				} else {
					rows, err := tx.Query(ctx, "EXPLAIN "+b.store.Render(query), args...)
					if err != nil {
						return err
					}
					if lines, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
						return err
					}
				}
				plan := strings.Join(lines, "\n")
				if _, scans := scansByDesign[name]; scans {
					return nil
				}
				require.NotRegexp(t, seqScanOnHotTable, plan, "%s (generic plan: %v) has no index path:\n%s", name, generic, plan)
				return nil
			})
			require.NoError(t, err, "%s (generic plan: %v)", name, generic)
		}
	}
}

// sqlLiterals renders args as the argument list of an EXECUTE: each value
// as NULL or a quoted literal of unknown type, which takes the type of the
// prepared statement's parameter.
func sqlLiterals(t *testing.T, args []any) string {
	t.Helper()
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	array := func(elems []string) string {
		for i, e := range elems {
			if e != "NULL" {
				elems[i] = `"` + e + `"`
			}
		}
		return quote("{" + strings.Join(elems, ",") + "}")
	}
	out := make([]string, len(args))
	for i, arg := range args {
		switch v := arg.(type) {
		case nil:
			out[i] = "NULL"
		case uuid.UUID:
			out[i] = quote(v.String())
		case []uuid.UUID:
			elems := make([]string, len(v))
			for j, id := range v {
				elems[j] = id.String()
			}
			out[i] = array(elems)
		case string:
			out[i] = quote(v)
		case []string:
			out[i] = array(slices.Clone(v))
		case []byte:
			out[i] = quote(string(v))
		case int, int16, int64, bool:
			out[i] = quote(fmt.Sprint(v))
		case []int64:
			elems := make([]string, len(v))
			for j, n := range v {
				elems[j] = strconv.FormatInt(n, 10)
			}
			out[i] = array(elems)
		case []int32:
			elems := make([]string, len(v))
			for j, n := range v {
				elems[j] = strconv.FormatInt(int64(n), 10)
			}
			out[i] = array(elems)
		case []bool:
			elems := make([]string, len(v))
			for j, b := range v {
				elems[j] = strconv.FormatBool(b)
			}
			out[i] = array(elems)
		case time.Duration:
			out[i] = quote(fmt.Sprintf("%d microseconds", v.Microseconds()))
		case pgtype.Timestamptz:
			require.False(t, v.Valid, "only NULL times are rendered")
			out[i] = "NULL"
		case []pgtype.Timestamptz:
			elems := make([]string, len(v))
			for j, ts := range v {
				require.False(t, ts.Valid, "only NULL times are rendered")
				elems[j] = "NULL"
			}
			out[i] = array(elems)
		default:
			t.Fatalf("no SQL literal for %T", arg)
		}
	}
	return strings.Join(out, ", ")
}

// TestWorkStatementsReadBoundedRows runs the per-pair work statements with
// EXPLAIN ANALYZE on a stream whose two perspectives hold a backlog of 6,000
// rows, leased to the caller with the first 5,980 handed out, and checks
// that each reads a bounded number of work rows (rows and index entries
// returned or filtered out, over all loops), not the backlog: a scan of the
// stream reads thousands, a per-row correlated scan millions. Leases are
// per stream, so no statement that takes, extends or renews one reads the
// stream's rows beyond the first of each pair.
func TestWorkStatementsReadBoundedRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	s := pgx.Identifier{b.schema}.Sanitize()
	const (
		events = 3000
		fresh  = 10 // events whose rows are not leased yet
		limit  = 500
	)
	stream, instance := uuid.New(), uuid.New()
	seed := &pgx.Batch{}
	seed.Queue(`INSERT INTO `+s+`.vantage_events (id, stream_id, type, version, data)
		SELECT gen_random_uuid(), $1, 'T', v, '{}' FROM generate_series(1, $2::integer) v`, stream, events)
	seed.Queue(`INSERT INTO `+s+`.vantage_work (work_id, stream_id, perspective, event_id, event_version, attempts)
		SELECT gen_random_uuid(), e.stream_id, x.p, e.id, e.version, 1
		FROM `+s+`.vantage_events e, (VALUES ('a'), ('b')) x(p) WHERE e.stream_id = $1`, stream)
	seed.Queue(`INSERT INTO `+s+`.vantage_instances (instance_id, started_at, last_heartbeat_at) VALUES ($1, now(), now())`, instance)
	seed.Queue(`INSERT INTO `+s+`.vantage_active_streams (stream_id, instance_id, lease_expiry, handed_out, first_seq, last_activity_at)
		VALUES ($1, $2, now() + interval '1 hour', jsonb_build_object('a', $3::integer, 'b', $3::integer), 1, now())`, stream, instance, events-fresh)
	seed.Queue(`INSERT INTO `+s+`.vantage_cursors (stream_id, perspective, last_version) VALUES ($1, 'a', 5), ($1, 'b', 5)`, stream)
	seed.Queue(`ANALYZE ` + s + `.vantage_work`)
	seed.Queue(`ANALYZE ` + s + `.vantage_events`)
	require.NoError(t, b.pool.SendBatch(ctx, seed).Close())
	rows, err := b.pool.Query(ctx, `SELECT work_id FROM `+s+`.vantage_work WHERE perspective = 'a' ORDER BY event_version LIMIT 10`)
	require.NoError(t, err)
	first, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)

	var (
		minute  = time.Minute
		ten     = func(v any) []any { return []any{v, v, v, v, v, v, v, v, v, v} }
		streams = ten(stream)
		persps  = ten("a")
	)
	cases := map[string][]any{
		"Append":           {stream, nil, int64(0), []uuid.UUID{uuid.New()}, []string{"T"}, []int64{0}, []string{"{}"}, []string{"{}"}, b.store.Channel(), []string{"T"}, []string{"a"}, true},
		"Claim":            {instance, nil, minute, minute, 10, 100, "lock"},
		"CompleteCursors":  {nil, []uuid.UUID{stream}, []string{"a"}, []uuid.UUID{uuid.New()}, []int64{10}},
		"FailCursors":      {nil, []uuid.UUID{stream}, []string{"a"}, []uuid.UUID{uuid.New()}, []int64{10}, []string{"boom"}, []uuid.UUID{uuid.New()}, []bool{true}, uuid.New()},
		"FailRows":         {instance, first, streams, persps, ten("boom"), ten(pgtype.Timestamptz{}), ten(int32(1))},
		"FetchLease":       {instance, nil, minute, minute, []uuid.UUID{stream}, "lock"},
		"FetchRows":        {instance, nil, []uuid.UUID{stream}, 10},
		"Finish":           {instance, first, streams, persps, nil},
		"FlagStragglers":   {nil, []uuid.UUID{stream, stream}, []string{"a", "b"}, []int64{10, 10}, []uuid.UUID{uuid.New()}},
		"FlagFailedEvents": {nil, []uuid.UUID{stream}, []string{"a"}, []uuid.UUID{uuid.New()}, []int64{3}},
		"RenewLeases":      {instance, nil, minute, []uuid.UUID{stream}},
		"ReleaseDrained":   {[]uuid.UUID{stream}, instance, "lock"},
		"AbandonLeases":    {uuid.New(), nil, minute},
		"DeregisterLeases": {instance},
	}
	for name, args := range cases {
		rolledBack(t, b, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, postgres.WorkSettings); err != nil {
				return err
			}
			plan, read, err := explainWorkRows(ctx, tx, b.store.Render(postgres.Queries[name]), args...)
			if err != nil {
				return err
			}
			bound := float64(limit)
			t.Logf("%s reads %.0f work rows", name, read)
			require.Less(t, read, bound, "%s reads the backlog:\n%v", name, plan)
			return nil
		}, name)
	}
}

// rolledBack runs f in a transaction on b's pool and rolls it back, undoing
// what the statements it explains with ANALYZE changed. msgAndArgs label a
// failure.
func rolledBack(t *testing.T, b *testBundle, f func(tx pgx.Tx) error, msgAndArgs ...any) {
	t.Helper()
	ctx := t.Context()
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if err := f(tx); err != nil {
			return err
		}
		return tx.Rollback(ctx)
	})
	if !errors.Is(err, pgx.ErrTxClosed) {
		require.NoError(t, err, msgAndArgs...)
	}
}

// explainWorkRows runs stmt with args under EXPLAIN (ANALYZE, FORMAT JSON)
// and returns its plan and the work rows it read (see workRowsRead).
func explainWorkRows(ctx context.Context, tx pgx.Tx, stmt string, args ...any) ([]map[string]any, float64, error) {
	var plan []map[string]any
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+stmt, args...).Scan(&plan); err != nil {
		return nil, 0, err
	}
	return plan, workRowsRead(plan[0]["Plan"].(map[string]any)), nil
}

// workRowsRead sums, over a JSON plan tree, the rows that scans of
// vantage_work and its indexes returned or filtered out, over all loops.
func workRowsRead(node map[string]any) float64 { return tableRowsRead(node, "vantage_work") }

// tableRowsRead sums, over a JSON plan tree, the rows that scans of table and
// its indexes returned or filtered out, over all loops.
func tableRowsRead(node map[string]any, table string) float64 {
	return planSum(node, func(n map[string]any) float64 {
		relation, _ := n["Relation Name"].(string)
		index, _ := n["Index Name"].(string)
		if relation != table && (relation != "" || !strings.HasPrefix(index, table+"_")) {
			return 0
		}
		var read float64
		for _, key := range []string{"Actual Rows", "Rows Removed by Filter", "Rows Removed by Index Recheck"} {
			read += perLoop(n, key)
		}
		return read
	})
}

// planSum sums f over the nodes of a JSON plan tree.
func planSum(node map[string]any, f func(map[string]any) float64) float64 {
	sum := f(node)
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		sum += planSum(c.(map[string]any), f)
	}
	return sum
}

// perLoop returns a node's figure key, which PostgreSQL reports per loop,
// over all its loops.
func perLoop(node map[string]any, key string) float64 {
	loops, _ := node["Actual Loops"].(float64)
	n, _ := node[key].(float64)
	return n * loops
}

// subplan returns the node of a JSON plan tree whose Subplan Name is name,
// or nil.
func subplan(node map[string]any, name string) map[string]any {
	if n, _ := node["Subplan Name"].(string); n == name {
		return node
	}
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		if found := subplan(c.(map[string]any), name); found != nil {
			return found
		}
	}
	return nil
}

// TestFetchReadsTheRequestedStreamsOnly fetches the rows of one stream for
// an instance that holds 500, with statistics taken before it held any,
// under the plan made for the call and the generic one, and
// checks that finding the requested streams under the caller's lease (the
// CTE heads, into which mine is folded) and recording their handed-out
// marks (the CTE handed) read the requested stream's row of
// vantage_active_streams, not every stream the instance holds; and so does
// the leasing step before it.
func TestFetchReadsTheRequestedStreamsOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	s := pgx.Identifier{b.schema}.Sanitize()
	holder := uuid.New()
	_, err := b.pool.Exec(ctx, `
INSERT INTO `+s+`.vantage_events (id, stream_id, type, version, data)
SELECT gen_random_uuid(), gen_random_uuid(), 'T', 1, '{}' FROM generate_series(1, 500);
INSERT INTO `+s+`.vantage_work (work_id, stream_id, perspective, event_id, event_version)
SELECT gen_random_uuid(), e.stream_id, p, e.id, e.version
FROM `+s+`.vantage_events e, (VALUES ('a'), ('b')) x(p)`)
	require.NoError(t, err)
	// The statistics are taken while nobody holds a stream, then the
	// caller takes them all: its leases are news to the planner.
	_, err = b.pool.Exec(ctx, `
INSERT INTO `+s+`.vantage_active_streams (stream_id, first_seq, last_activity_at)
SELECT stream_id, min(seq), now() FROM `+s+`.vantage_work GROUP BY stream_id;
ANALYZE `+s+`.vantage_active_streams`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE `+s+`.vantage_active_streams SET instance_id = $1, lease_expiry = now() + interval '1 hour'`, holder)
	require.NoError(t, err)
	var stream uuid.UUID
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT stream_id FROM `+s+`.vantage_active_streams LIMIT 1`).Scan(&stream))
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		rolledBack(t, b, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+mode); err != nil {
				return err
			}
			var plan []map[string]any
			if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+b.store.Render(postgres.Queries["FetchRows"]),
				holder, nil, []uuid.UUID{stream}, nil).Scan(&plan); err != nil {
				return err
			}
			heads := subplan(plan[0]["Plan"].(map[string]any), "CTE heads")
			require.NotNil(t, heads, "the fetch (%s) has no CTE heads: %v", mode, plan)
			read := tableRowsRead(heads, "vantage_active_streams")
			require.LessOrEqual(t, read, 2.0, "the fetch (%s) read %v rows of vantage_active_streams for one stream: %v", mode, read, heads)
			handed := subplan(plan[0]["Plan"].(map[string]any), "CTE handed")
			require.NotNil(t, handed, "the fetch (%s) has no CTE handed: %v", mode, plan)
			// Marking the stream reads its index entries (the lease update
			// above left a dead one) and its row.
			read = tableRowsRead(handed, "vantage_active_streams")
			require.LessOrEqual(t, read, 4.0, "the fetch (%s) read %v rows of vantage_active_streams to mark one stream: %v", mode, read, handed)
			return nil
		}, mode)
	}
	// The leasing step before the rows, on the stream with its lease run
	// out: it locks, leases and checks the one stream. (Its updates,
	// rolled back, leave dead index entries: it runs after the checks
	// above.)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		rolledBack(t, b, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+mode); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE `+s+`.vantage_active_streams SET lease_expiry = now() - interval '1 minute' WHERE stream_id = $1`, stream); err != nil {
				return err
			}
			var plan []map[string]any
			if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+b.store.Render(postgres.Queries["FetchLease"]),
				holder, nil, time.Minute, time.Minute, []uuid.UUID{stream}, "lock").Scan(&plan); err != nil {
				return err
			}
			read := tableRowsRead(plan[0]["Plan"].(map[string]any), "vantage_active_streams")
			require.LessOrEqual(t, read, 8.0, "the lease (%s) read %v rows of vantage_active_streams for one stream: %v", mode, read, plan)
			return nil
		}, mode)
	}
}

// TestClaimCandidatesReadBoundedBuffers calls vantage_claim_streams, the
// walk behind every claim, on 500 unleased streams (10,000 rows), and
// again after 7,500 more streams (150,000 rows) arrived behind them (the
// statistics still from the first), and checks that its reads (the shared
// buffers of the function and the statements it runs) do not grow with the
// backlog: the walk stops once it has found enough streams among the
// oldest. A plan that filters and sorts every stream reads many times as
// much at the second call. A passive caller takes nothing and reads no
// stream at all.
func TestClaimCandidatesReadBoundedBuffers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	s := pgx.Identifier{b.schema}.Sanitize()
	instance, passive := uuid.New(), uuid.New()
	seed := func(streams int) {
		t.Helper()
		_, err := b.pool.Exec(ctx, `
WITH w AS (
    INSERT INTO `+s+`.vantage_work (work_id, stream_id, perspective, event_id, event_version)
    SELECT gen_random_uuid(), st.id, x.p, gen_random_uuid(), v
    FROM (SELECT gen_random_uuid() AS id, n FROM generate_series(1, $1::integer) n) st,
         (VALUES ('a'), ('b')) x(p), generate_series(1, 10) v
    ORDER BY v, st.n, x.p
    RETURNING stream_id, seq
)
INSERT INTO `+s+`.vantage_active_streams (stream_id, first_seq, last_activity_at)
SELECT stream_id, min(seq), now() FROM w GROUP BY stream_id`, streams)
		require.NoError(t, err)
	}
	// Under the settings of the work batches that call the function in
	// production. A first call compiles the function and reads the catalog,
	// so each measure is the second of two calls on one connection.
	buffers := func(instance uuid.UUID) float64 {
		t.Helper()
		var plan []map[string]any
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, postgres.WorkSettings); err != nil {
				return err
			}
			for range 2 {
				if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
SELECT count(*) FROM `+s+`.vantage_claim_streams($1, now(), '30 seconds', 10000, 65, 'lock')`, instance).Scan(&plan); err != nil {
					return err
				}
			}
			return nil
		})
		require.NoError(t, err)
		root := plan[0]["Plan"].(map[string]any)
		hit, _ := root["Shared Hit Blocks"].(float64)
		read, _ := root["Shared Read Blocks"].(float64)
		return hit + read
	}
	_, err := b.pool.Exec(ctx, `INSERT INTO `+s+`.vantage_instances (instance_id, started_at, last_heartbeat_at, passive)
VALUES ($1, now(), now(), false), ($2, now(), now(), true)`, instance, passive)
	require.NoError(t, err)
	seed(500)
	_, err = b.pool.Exec(ctx, `ANALYZE `+s+`.vantage_work; ANALYZE `+s+`.vantage_active_streams`)
	require.NoError(t, err)
	small, passiveSmall := buffers(instance), buffers(passive)
	seed(7500)
	large, passiveLarge := buffers(instance), buffers(passive)

	t.Logf("buffers read: %.0f with 10,000 rows, %.0f with 160,000; passive: %.0f and %.0f", small, large, passiveSmall, passiveLarge)
	require.Less(t, large, 2*small, "the claim walk reads the backlog")
	require.Less(t, passiveLarge, 2*passiveSmall+1, "the passive walk reads the backlog")
	require.Less(t, passiveLarge, small, "the passive walk reads streams")
}

// TestClaimReadsBoundedRowsWithStaleStatistics leases a backlog that the
// table statistics saw unleased (as after a burst of appends, before
// autovacuum analyzes the table again) and checks that the statements of a
// claim still read a bounded number of work rows, with the plan made for
// the call's values and with the generic plan that the server switches a
// prepared statement (pgx prepares every statement it sends) to after a few
// calls: the streams the caller holds come from
// vantage_active_streams_instance_idx, and the backlog count goes through
// vantage_work_pending_idx, never reading the caller's rows once per
// stream.
func TestClaimReadsBoundedRowsWithStaleStatistics(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	s := pgx.Identifier{b.schema}.Sanitize()
	const streams, versions, held = 200, 100, 40
	instance := uuid.New()
	seed := &pgx.Batch{}
	seed.Queue(`INSERT INTO `+s+`.vantage_work (work_id, stream_id, perspective, event_id, event_version)
		SELECT gen_random_uuid(), st.id, x.p, gen_random_uuid(), v
		FROM (SELECT gen_random_uuid() AS id, n FROM generate_series(1, $1::integer) n) st,
		     (VALUES ('a'), ('b')) x(p), generate_series(1, $2::integer) v
		ORDER BY v, st.n, x.p`, streams, versions)
	seed.Queue(`INSERT INTO `+s+`.vantage_instances (instance_id, started_at, last_heartbeat_at) VALUES ($1, now(), now())`, instance)
	seed.Queue(`INSERT INTO ` + s + `.vantage_active_streams (stream_id, first_seq, last_activity_at)
		SELECT stream_id, min(seq), now() FROM ` + s + `.vantage_work GROUP BY stream_id`)
	seed.Queue(`ANALYZE ` + s + `.vantage_work`)
	seed.Queue(`ANALYZE ` + s + `.vantage_active_streams`)
	seed.Queue(`WITH h AS (SELECT stream_id FROM `+s+`.vantage_active_streams ORDER BY stream_id LIMIT $2)
		UPDATE `+s+`.vantage_active_streams a SET instance_id = $1, lease_expiry = now() + interval '1 hour',
		       handed_out = jsonb_build_object('a', 50, 'b', 50)
		FROM h WHERE a.stream_id = h.stream_id`, instance, held)
	require.NoError(t, b.pool.SendBatch(ctx, seed).Close())

	// The claim has room for two new streams, and writes their stream rows,
	// not their work rows; its result's backlog count reads up to 100 rows
	// per held stream (4,000). A sort of the caller's rows per held stream
	// reads held × held × 2 × versions = 320,000, a limited sequential scan
	// per held stream 20,000.
	bounds := map[string]float64{"Claim": 40000}
	id := "'" + instance.String() + "'::uuid"
	for name, args := range map[string][]string{
		"Claim": {id, "NULL", "'1 minute'", "'1 minute'", strconv.Itoa(held + 2), "100", "'lock'"},
	} {
		for _, c := range []struct{ generic, work bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
			rolledBack(t, b, func(tx pgx.Tx) error {
				mode := "force_custom_plan"
				if c.generic {
					mode = "force_generic_plan"
				}
				if c.work {
					if _, err := tx.Exec(ctx, postgres.WorkSettings); err != nil {
						return err
					}
					mode += ", work settings"
				}
				if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+strings.SplitN(mode, ",", 2)[0]); err != nil {
					return err
				}
				// PREPARE outlives the transaction: DEALLOCATE it.
				if _, err := tx.Exec(ctx, `PREPARE stale_stats_probe AS `+b.store.Render(postgres.Queries[name])); err != nil {
					return err
				}
				plan, read, err := explainWorkRows(ctx, tx, `EXECUTE stale_stats_probe(`+strings.Join(args, ", ")+`)`)
				if _, derr := tx.Exec(ctx, `DEALLOCATE stale_stats_probe`); err == nil {
					err = derr
				}
				if err != nil {
					return err
				}
				t.Logf("%s (%s) reads %.0f work rows", name, mode, read)
				require.Less(t, read, bounds[name], "%s (%s) reads the leased rows once per stream:\n%v", name, mode, plan)
				return nil
			}, name)
		}
	}
}

// TestFinishLooksUpItsRowsByKey completes, and fails, 10,000 of 200,000
// rows with EXPLAIN ANALYZE, under the settings the statements run with,
// with a plan for the call's arrays and with the generic plan the adapter
// keeps, and checks that each reads about the rows it changes: found by
// primary key, not by reading the whole work table into a hash (what the
// planner chose once a completion flush carried a few thousand ids), and
// not by comparing every listed row with every row found (what the generic
// plan, counting 10 listed rows, chose: 15.7 million comparisons for a
// completion of 5,600 rows).
func TestFinishLooksUpItsRowsByKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	s := pgx.Identifier{b.schema}.Sanitize()
	const rows, completed = 200000, 10000
	instance := uuid.New()
	seed := &pgx.Batch{}
	seed.Queue(`INSERT INTO `+s+`.vantage_work (work_id, stream_id, perspective, event_id, event_version, attempts)
		SELECT gen_random_uuid(), st.id, x.p, gen_random_uuid(), v, 1
		FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, $1::integer / 200)) st,
		     (VALUES ('a'), ('b')) x(p), generate_series(1, 100) v`, rows)
	seed.Queue(`INSERT INTO `+s+`.vantage_active_streams (stream_id, instance_id, lease_expiry, first_seq, last_activity_at)
		SELECT stream_id, $1::uuid, now() + interval '1 hour', min(seq), now() FROM `+s+`.vantage_work GROUP BY stream_id`, instance)
	seed.Queue(`ANALYZE ` + s + `.vantage_work`)
	seed.Queue(`ANALYZE ` + s + `.vantage_active_streams`)
	require.NoError(t, b.pool.SendBatch(ctx, seed).Close())
	ids, streams, perspectives := randomWorkRows(t, b, completed)
	errs, retries, attempts := make([]string, completed), make([]pgtype.Timestamptz, completed), make([]int32, completed)
	for i := range errs {
		errs[i] = "boom"
	}

	cases := map[string][]any{
		"Finish":   {instance, ids, streams, perspectives, nil},
		"FailRows": {instance, ids, streams, perspectives, errs, retries, attempts},
	}
	for name, args := range cases {
		for _, generic := range []bool{false, true} {
			rolledBack(t, b, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, postgres.WorkSettings); err != nil {
					return err
				}
				var root map[string]any
				if generic {
					var err error
					if root, err = explainPreparedPlan(ctx, tx, b.store.Render(postgres.Queries[name]), sqlLiterals(t, args)); err != nil {
						return err
					}
				} else {
					plan, _, err := explainWorkRows(ctx, tx, b.store.Render(postgres.Queries[name]), args...)
					if err != nil {
						return err
					}
					root = plan[0]["Plan"].(map[string]any)
				}
				read, compared := workRowsRead(root), joinFilterRemoved(root)
				t.Logf("%s of %d rows (generic plan %v) reads %.0f work rows, drops %.0f joined rows", name, completed, generic, read, compared)
				// A probe, a fetch by ctid and the change per listed row;
				// a scan of the table reads 200,000.
				require.LessOrEqual(t, read, float64(3*completed), "%s (generic plan %v) reads the work table", name, generic)
				require.Less(t, compared, float64(completed), "%s (generic plan %v) compares listed rows with rows of other ids", name, generic)
				return nil
			}, name)
		}
	}
}

// joinFilterRemoved sums, over a JSON plan tree, the rows that join filters
// dropped, over all loops.
func joinFilterRemoved(node map[string]any) float64 {
	return planSum(node, func(n map[string]any) float64 { return perLoop(n, "Rows Removed by Join Filter") })
}

// randomWorkRows returns n work rows of b's schema picked at random, as the
// parallel lists a completion names them by.
func randomWorkRows(t *testing.T, b *testBundle, n int) (ids, streams []uuid.UUID, perspectives []string) {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT work_id, stream_id, perspective FROM `+pgx.Identifier{b.schema}.Sanitize()+`.vantage_work ORDER BY random() LIMIT $1`, n)
	require.NoError(t, err)
	var (
		id, stream  uuid.UUID
		perspective string
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &stream, &perspective}, func() error {
		ids, streams, perspectives = append(ids, id), append(streams, stream), append(perspectives, perspective)
		return nil
	})
	require.NoError(t, err)
	return ids, streams, perspectives
}

// TestFinishProbesItsStreamsAndRows completes a handful of rows, as a
// completion flush does under live traffic, for an instance that holds 800
// streams with 1,600 pending rows, under the generic plan the statement
// keeps and statistics taken while the tables were empty: it locks the
// streams it completes and deletes the rows it lists, each found by
// primary key, not by reading the instance's whole range of
// vantage_active_streams_instance_idx or every entry of
// vantage_work_pending_idx.
func TestFinishProbesItsStreamsAndRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	s := pgx.Identifier{b.schema}.Sanitize()
	instance := uuid.New()
	seed := &pgx.Batch{}
	seed.Queue(`ANALYZE ` + s + `.vantage_work`)
	seed.Queue(`ANALYZE ` + s + `.vantage_active_streams`)
	seed.Queue(`INSERT INTO ` + s + `.vantage_work (work_id, stream_id, perspective, event_id, event_version)
		SELECT gen_random_uuid(), st.id, x.p, gen_random_uuid(), 1
		FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, 800)) st, (VALUES ('a'), ('b')) x(p)`)
	seed.Queue(`INSERT INTO `+s+`.vantage_active_streams (stream_id, instance_id, lease_expiry, first_seq, last_activity_at)
		SELECT stream_id, $1::uuid, now() + interval '1 hour', min(seq), now() FROM `+s+`.vantage_work GROUP BY stream_id`, instance)
	require.NoError(t, b.pool.SendBatch(ctx, seed).Close())
	ids, streams, perspectives := randomWorkRows(t, b, 3)

	rolledBack(t, b, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, postgres.WorkSettings); err != nil {
			return err
		}
		root, err := explainPreparedPlan(ctx, tx, b.store.Render(postgres.Queries["Finish"]),
			sqlLiterals(t, []any{instance, ids, streams, perspectives, nil}))
		if err != nil {
			return err
		}
		// Per listed row or stream a few reads (an index entry, the row,
		// the delete or lock, as the plan's shape counts them), against the
		// 800 streams and 1,600 rows a scan reads.
		work, held := workRowsRead(root), tableRowsRead(root, "vantage_active_streams")
		require.LessOrEqual(t, work, 12.0, "Finish of 3 rows read %v work rows: %v", work, root)
		require.LessOrEqual(t, held, 12.0, "Finish of 3 rows read %v rows of vantage_active_streams: %v", held, root)
		return nil
	})
}

// TestLifecycleStatementsReadBoundedBuffers runs the lifecycle reads that
// look events up by id (LifecycleReady, LifecycleStages) for 200 events of a
// table of 10,000 and again once 150,000 more events arrived (the
// statistics still from the first), and checks that their reads do not grow
// with the table: each listed event is a primary key probe, its cursors and
// pending rows probes too. A plan that hashes the whole events table reads
// fifteen times as much at the second call.
func TestLifecycleStatementsReadBoundedBuffers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	s := pgx.Identifier{b.schema}.Sanitize()
	seed := func(streams int) {
		t.Helper()
		_, err := b.pool.Exec(ctx, `
WITH st AS (SELECT gen_random_uuid() AS id FROM generate_series(1, $1::integer)),
ev AS (
    INSERT INTO `+s+`.vantage_events (id, stream_id, type, version, data)
    SELECT gen_random_uuid(), st.id, 'T', v, '{}' FROM st, generate_series(1, 10) v
    RETURNING id, stream_id, version
),
cur AS (
    INSERT INTO `+s+`.vantage_cursors (stream_id, perspective, last_version)
    SELECT st.id, p, 8 FROM st, (VALUES ('a'), ('b')) x(p)
)
INSERT INTO `+s+`.vantage_lifecycle_stages (event_id, stage, instance_id, completed_at)
SELECT ev.id, 4, gen_random_uuid(), now() FROM ev WHERE ev.version <= 5`, streams)
		require.NoError(t, err)
	}
	seed(1000)
	_, err := b.pool.Exec(ctx, `ANALYZE `+s+`.vantage_events; ANALYZE `+s+`.vantage_cursors; ANALYZE `+s+`.vantage_lifecycle_stages`)
	require.NoError(t, err)
	rows, err := b.pool.Query(ctx, `SELECT id FROM `+s+`.vantage_events ORDER BY random() LIMIT 200`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)

	cases := map[string][]any{
		"LifecycleReady":  {[]string{"T", "T"}, []string{"a", "b"}, ids},
		"LifecycleStages": {ids, "a"},
	}
	// buffers returns the shared buffers the query reads, measured at the
	// second of two runs on one connection (the first reads the catalog).
	buffers := func(name string) float64 {
		t.Helper()
		var plan []map[string]any
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			for range 2 {
				if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+b.store.Render(postgres.Queries[name]), cases[name]...).Scan(&plan); err != nil {
					return err
				}
			}
			return nil
		})
		require.NoError(t, err, name)
		root := plan[0]["Plan"].(map[string]any)
		hit, _ := root["Shared Hit Blocks"].(float64)
		read, _ := root["Shared Read Blocks"].(float64)
		return hit + read
	}
	small := map[string]float64{}
	for name := range cases {
		small[name] = buffers(name)
	}
	seed(15000)
	for name := range cases {
		large := buffers(name)
		t.Logf("%s reads %.0f buffers with 10,000 events, %.0f with 160,000", name, small[name], large)
		require.Less(t, large, 2*small[name], "%s reads the events table", name)
	}
}

// TestAppendProbesEventsWithoutStatistics plans the append on a young
// schema, its events table small and never analyzed, as in a deployment's
// first minute, and checks that it looks its events up by key. A plan
// made then is kept (a connection caches its generic plan, and no ANALYZE
// has run to invalidate it); with a sequential scan it made every later
// append read the whole table, which grew with every append.
func TestAppendProbesEventsWithoutStatistics(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	s := pgx.Identifier{b.schema}.Sanitize()
	_, err := b.pool.Exec(ctx, `INSERT INTO `+s+`.vantage_events (id, stream_id, type, version, data)
		SELECT gen_random_uuid(), gen_random_uuid(), 'T', 1, '{}' FROM generate_series(1, 50)`)
	require.NoError(t, err)
	args := []string{"'" + uuid.NewString() + "'::uuid", "NULL", "0", "ARRAY['" + uuid.NewString() + "']::uuid[]",
		"ARRAY['T']", "ARRAY[0]::bigint[]", "ARRAY['{}']", "ARRAY['{}']", "'" + b.store.Channel() + "'", "ARRAY['T']", "ARRAY['a']", "true"}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		rolledBack(t, b, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+mode); err != nil {
				return err
			}
			lines, err := explainPrepared(ctx, tx, "ANALYZE, TIMING off", b.store.Render(postgres.Queries["Append"]), strings.Join(args, ", "))
			if err != nil {
				return err
			}
			plan := strings.Join(lines, "\n")
			require.NotRegexp(t, `Seq Scan on vantage_events\b`, plan, "the append (%s) scans the events table", mode)
			return nil
		}, mode)
	}
}

// explainPreparedPlan runs query with args as explainPrepared does, under
// EXPLAIN (ANALYZE, FORMAT JSON), and returns the root of its plan.
func explainPreparedPlan(ctx context.Context, tx pgx.Tx, query, args string) (map[string]any, error) {
	lines, err := explainPrepared(ctx, tx, "ANALYZE, FORMAT JSON", query, args)
	if err != nil {
		return nil, err
	}
	var plan []map[string]any
	if err := json.Unmarshal([]byte(strings.Join(lines, "\n")), &plan); err != nil {
		return nil, err
	}
	return plan[0]["Plan"].(map[string]any), nil
}

// explainPrepared prepares query in tx, runs it with args (SQL literals,
// comma-separated, see sqlLiterals) under EXPLAIN (options) and returns the
// plan's lines: a prepared statement is planned as the plan_cache_mode of
// tx says, as the adapter's statements are. PREPARE outlives the
// transaction, so the statement is deallocated.
func explainPrepared(ctx context.Context, tx pgx.Tx, options, query, args string) ([]string, error) {
	if _, err := tx.Exec(ctx, `PREPARE plan_probe AS `+query); err != nil {
		return nil, err
	}
	execute := `EXPLAIN (` + options + `) EXECUTE plan_probe`
	if args != "" {
		execute += `(` + args + `)`
	}
	rows, err := tx.Query(ctx, execute)
	if err != nil {
		return nil, err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `DEALLOCATE plan_probe`); err != nil {
		return nil, err
	}
	return lines, nil
}

// TestModelLoadsProbeWithoutStatistics loads models of pairs that are not
// cached, as live traffic does one at a time, from a models table whose
// statistics are young (never analyzed): under the plan made for the call
// and the generic one alike, each pair is one probe of the primary key,
// never a scan of every model.
func TestModelLoadsProbeWithoutStatistics(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	s := pgx.Identifier{b.schema}.Sanitize()
	_, err := b.pool.Exec(ctx, `INSERT INTO `+s+`.vantage_models (stream_id, perspective, data, last_event_id, last_version)
		SELECT gen_random_uuid(), p, '{}', gen_random_uuid(), 1 FROM generate_series(1, 1000), (VALUES ('a'), ('b')) x(p)`)
	require.NoError(t, err)
	args := "ARRAY['" + uuid.NewString() + "', '" + uuid.NewString() + "']::uuid[], ARRAY['a', 'b']"
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		rolledBack(t, b, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+mode); err != nil {
				return err
			}
			lines, err := explainPrepared(ctx, tx, "ANALYZE, TIMING off", b.store.Render(postgres.Queries["ModelLoadMany"]), args)
			if err != nil {
				return err
			}
			plan := strings.Join(lines, "\n")
			require.NotRegexp(t, `Seq Scan on vantage_models\b`, plan, "the load (%s) scans the models table:\n%s", mode, plan)
			return nil
		}, mode)
	}
}

// TestPerspectivesLagScansTheIndexOnly plans the backlog figures on 105,000
// pending rows of three perspectives (and 15,000 kept processed by debug
// mode) under the settings the adapter reads them with, and checks that
// both the plan made for the call and the generic one read
// vantage_work_pending_idx by an index-only scan that fetches no heap page,
// never the work table by a sequential scan: counting reads every pending
// row, and the index holds them in fewer pages than the table. The rows are
// loaded frozen (COPY FREEZE into the table truncated in the same
// transaction), so the visibility map covers them as autovacuum keeps it
// on a backlog that stays, whatever snapshots the tests running alongside
// hold (which would keep a VACUUM from setting it).
func TestPerspectivesLagScansTheIndexOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	s := pgx.Identifier{b.schema}.Sanitize()
	var rows bytes.Buffer
	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(conn.Release)
	_, err = conn.Conn().PgConn().CopyTo(ctx, &rows, `COPY (
SELECT gen_random_uuid(), st.id, x.p, gen_random_uuid(), v,
       now() - interval '1 hour' + v * interval '1 second', CASE WHEN v <= 5 THEN now() END
FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, 1000)) st,
     (VALUES ('a'), ('b'), ('c')) x(p), generate_series(1, 40) v
ORDER BY v, st.id, x.p
) TO STDOUT`)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `TRUNCATE `+s+`.vantage_work`); err != nil {
			return err
		}
		_, err := tx.Conn().PgConn().CopyFrom(ctx, &rows, `COPY `+s+`.vantage_work
(work_id, stream_id, perspective, event_id, event_version, created_at, processed_at) FROM STDIN WITH (FREEZE)`)
		return err
	}))
	_, err = conn.Exec(ctx, `ANALYZE `+s+`.vantage_work`)
	require.NoError(t, err)

	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		rolledBack(t, b, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, postgres.WorkSettings); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+mode); err != nil {
				return err
			}
			lines, err := explainPrepared(ctx, tx, "ANALYZE, TIMING off", b.store.Render(postgres.Queries["PerspectivesLag"]), "NULL")
			if err != nil {
				return err
			}
			plan := strings.Join(lines, "\n")
			t.Logf("PerspectivesLag (%s):\n%s", mode, plan)
			require.NotRegexp(t, `Seq Scan on vantage_work\b`, plan, "%s scans the work table", mode)
			require.Regexp(t, `Index Only Scan using vantage_work_pending_idx on vantage_work\b`, plan, mode)
			require.NotRegexp(t, `Heap Fetches: [1-9]`, plan, "%s visits the heap", mode)
			require.Regexp(t, `\(actual rows=3 loops=1\)`, lines[0], "one row per perspective")
			return nil
		}, mode)
	}
}

// TestDrainStatementsKeepTheirPlans drains single events one after another
// on one connection, as a worker does under live traffic: append, fetch,
// load the models, save them, complete. A prepared statement that
// PostgreSQL plans again on every execution (it does so when the plan for
// the call's values looks cheaper than the generic one, as it does for
// small arrays) spends more on planning than on running: 0.7 ms for each
// fetch. Whether it does depends on the tables' sizes and statistics, so
// the worker's connection here runs with plan_cache_mode at
// force_custom_plan, where every statement would be planned for its call:
// each statement of the cycle must choose its generic plan itself. The
// events are appended through another connection, as an application's
// would be.
func TestDrainStatementsKeepTheirPlans(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	u, err := url.Parse(pgtest.ConnString(t))
	require.NoError(t, err)
	q := u.Query()
	q.Set("plan_cache_mode", "force_custom_plan")
	u.RawQuery = q.Encode()
	schema := pgtest.Schema(t)
	b := newStoreWith(t, pgtest.PoolOptions{MaxConns: 1, ConnString: u.String()}, postgres.Options{Schema: schema, PollOnly: true})
	app := newStoreWith(t, pgtest.PoolOptions{MaxConns: 1}, postgres.Options{Schema: schema, PollOnly: true})
	var mode string
	require.NoError(t, b.pool.QueryRow(ctx, `SHOW plan_cache_mode`).Scan(&mode))
	require.Equal(t, "force_custom_plan", mode, "the worker's connection plans every call unless told otherwise")
	subscribe(t, b, "a", "b")
	instance := uuid.New()
	streams := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	const rounds = 15
	for round := range rounds {
		stream := streams[round%len(streams)]
		_, err := app.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, Events: newEvents(1)})
		require.NoError(t, err)
		res, err := b.backend.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
			InstanceID: instance, StreamIDs: []uuid.UUID{stream}, LeaseDuration: time.Minute, StaleThreshold: time.Minute, MaxRows: 100,
		})
		require.NoError(t, err)
		require.Len(t, res.Work, 2, "round %d fetches the event for both perspectives", round)
		var (
			pairs       []ports.Pair
			saves       []*ports.ModelSaveParams
			completions []ports.Completion
		)
		for _, w := range res.Work {
			pairs = append(pairs, ports.Pair{StreamID: w.StreamID, Perspective: w.Perspective})
			saves = append(saves, &ports.ModelSaveParams{
				StreamID: w.StreamID, Perspective: w.Perspective, Data: []byte(`{}`),
				LastEventID: w.EventID, LastVersion: w.EventVersion, ExpectedVersion: w.EventVersion - 1, InstanceID: instance,
			})
			completions = append(completions, ports.Completion{
				StreamID: w.StreamID, Perspective: w.Perspective, LastEventID: w.EventID, LastVersion: w.EventVersion, WorkIDs: []uuid.UUID{w.WorkID},
			})
		}
		_, err = b.backend.ModelBatch.ModelLoadMany(ctx, &ports.ModelLoadManyParams{Pairs: pairs})
		require.NoError(t, err)
		errs, err := b.backend.ModelBatch.ModelSaveMany(ctx, &ports.ModelSaveManyParams{Saves: saves})
		require.NoError(t, err)
		for _, err := range errs {
			require.NoError(t, err)
		}
		done, err := b.backend.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{InstanceID: instance, Completions: completions})
		require.NoError(t, err)
		require.Equal(t, 2, done.Completed)
	}
	rows, err := b.pool.Query(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements WHERE generic_plans + custom_plans >= $1`, rounds)
	require.NoError(t, err)
	type prepared struct {
		statement       string
		generic, custom int64
	}
	stmts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (prepared, error) {
		var p prepared
		return p, row.Scan(&p.statement, &p.generic, &p.custom)
	})
	require.NoError(t, err)
	require.NotEmpty(t, stmts, "the cycle's statements are prepared on the connection")
	var replanned []string
	for _, p := range stmts {
		if p.custom > 5 {
			replanned = append(replanned, fmt.Sprintf("%d generic and %d custom plans:\n%s", p.generic, p.custom, p.statement))
		}
	}
	require.Empty(t, replanned, "statements planned for every call")
}

// TestModelSavesRewriteInPlace checks that a save of a model changes no
// indexed column of vantage_models, so that PostgreSQL rewrites the model
// on its page (a heap-only update) instead of adding an entry to each of
// the table's indexes: saved one by one, in a batch of a statement each,
// and set-wise.
func TestModelSavesRewriteInPlace(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	schema := pgtest.Schema(t)
	b := newStoreWith(t, pgtest.PoolOptions{MaxConns: 1}, postgres.Options{Schema: schema, PollOnly: true})
	streams := make([]uuid.UUID, 4)
	for i := range streams {
		streams[i] = uuid.New()
	}
	saves := func(version int64, n int) []*ports.ModelSaveParams {
		out := make([]*ports.ModelSaveParams, n)
		for i := range out {
			out[i] = &ports.ModelSaveParams{
				StreamID: streams[i], Perspective: "p", Data: []byte(fmt.Sprintf(`{"v": %d}`, version)),
				LastEventID: uuid.New(), LastVersion: version, ExpectedVersion: version - 1,
			}
		}
		return out
	}
	saveMany := func(version int64, n int) {
		t.Helper()
		errs, err := b.backend.ModelBatch.ModelSaveMany(ctx, &ports.ModelSaveManyParams{Saves: saves(version, n)})
		require.NoError(t, err)
		for _, err := range errs {
			require.NoError(t, err)
		}
	}
	// updates returns the updates of vantage_models counted so far, and
	// how many of them were heap-only. The pool's one connection reports
	// its counts when its next statement ends.
	updates := func() (all, hot int64) {
		t.Helper()
		_, err := b.pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `SELECT 1`)
		require.NoError(t, err)
		require.NoError(t, pgtest.Pool(t).QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'vantage_models'`, schema).Scan(&all, &hot))
		return all, hot
	}

	saveMany(1, 4) // creates the models
	all0, hot0 := updates()
	saveMany(2, 4) // set-wise
	require.NoError(t, b.backend.Models.ModelSave(ctx, saves(3, 1)[0]))
	saveMany(4, 1) // a statement each
	all, hot := updates()
	require.Equal(t, int64(6), all-all0, "six saves of existing models")
	require.Equal(t, all-all0, hot-hot0, "every save rewrote its model in place")
}
