package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// Fields of the seeded orders.
var (
	customerField = ports.ModelField{Path: []string{"customer_id"}, Kind: ports.ModelFieldText}
	statusField   = ports.ModelField{Path: []string{"status"}, Kind: ports.ModelFieldText}
	createdField  = ports.ModelField{Path: []string{"created_at"}, Kind: ports.ModelFieldTime}
	totalField    = ports.ModelField{Path: []string{"total"}, Kind: ports.ModelFieldNumber}
	tierField     = ports.ModelField{Path: []string{"customer", "tier"}, Kind: ports.ModelFieldText}
)

// ordersIndexes are the indexes the order queries are served by.
var ordersIndexes = []ports.ModelIndex{
	{Fields: []ports.ModelField{customerField}},
	{Fields: []ports.ModelField{statusField, createdField}},
	{Fields: []ports.ModelField{totalField}},
	{Fields: []ports.ModelField{tierField}},
	{UpdatedAt: true},
}

// seedOrders stores n models of perspective "orders" and n of "other" in
// schema, and analyzes the table. Order i has customer c<i mod 1000>, one
// of four statuses, a total, a creation time a minute after the last's,
// and a tier, "platinum" for one in a hundred; it was saved a second after
// the last.
func seedOrders(t testing.TB, schema string, n int) {
	t.Helper()
	q := pgx.Identifier{schema}.Sanitize()
	_, err := pgtest.Pool(t).Exec(t.Context(), `
INSERT INTO `+q+`.vantage_models (stream_id, perspective, data, last_event_id, last_version, updated_at)
SELECT gen_random_uuid(), 'orders', jsonb_build_object(
    'customer_id', 'c' || (i % 1000),
    'status', (ARRAY['open', 'paid', 'shipped', 'closed'])[1 + i % 4],
    'total', (i % 997) * 1.5,
    'created_at', to_char(timestamp '2026-01-01' + i * interval '1 minute', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
    'customer', jsonb_build_object('tier', CASE WHEN i % 100 = 0 THEN 'platinum' ELSE (ARRAY['gold', 'silver'])[1 + i % 2] END)),
    gen_random_uuid(), 1, timestamptz '2026-01-01 00:00:00Z' + i * interval '1 second'
FROM generate_series(1, $1::integer) i`, n)
	require.NoError(t, err)
	_, err = pgtest.Pool(t).Exec(t.Context(), `
INSERT INTO `+q+`.vantage_models (stream_id, perspective, data, last_event_id, last_version, updated_at)
SELECT gen_random_uuid(), 'other', jsonb_build_object('customer_id', 'c' || (i % 1000), 'status', 'open'),
    gen_random_uuid(), 1, timestamptz '2026-01-01 00:00:00Z' + i * interval '1 second'
FROM generate_series(1, $1::integer) i`, n)
	require.NoError(t, err)
	_, err = pgtest.Pool(t).Exec(t.Context(), `VACUUM ANALYZE `+q+`.vantage_models`)
	require.NoError(t, err)
}

// orderQueries are the queries of the index test and the benchmark, each
// with the index that serves it. A next page starts after a model of the
// first, which the test finds.
var orderQueries = []struct {
	name   string
	params ports.ModelsFindParams
	index  string // the index that serves it: a declared one's fields, or a table index
	page2  bool   // run as the second page, after the first one's Next
}{
	{"CustomerOrders", ports.ModelsFindParams{Filters: []ports.ModelFilter{equalFilter(`"c42"`, "customer_id")}}, "customer_id", false},
	{"CustomerOrdersNextPage", ports.ModelsFindParams{Filters: []ports.ModelFilter{equalFilter(`"c42"`, "customer_id")}, Limit: 20}, "customer_id", true},
	{"NewestShipped", ports.ModelsFindParams{
		Filters: []ports.ModelFilter{equalFilter(`"shipped"`, "status")},
		Order:   ports.ModelOrder{By: ports.ModelOrderField, Field: createdField, Desc: true}, Limit: 20,
	}, "status,created_at", false},
	{"NewestShippedNextPage", ports.ModelsFindParams{
		Filters: []ports.ModelFilter{equalFilter(`"shipped"`, "status")},
		Order:   ports.ModelOrder{By: ports.ModelOrderField, Field: createdField, Desc: true}, Limit: 20,
	}, "status,created_at", true},
	{"NestedPath", ports.ModelsFindParams{Filters: []ports.ModelFilter{equalFilter(`"platinum"`, "customer", "tier")}}, "customer.tier", false},
	{"LargestTotalsNextPage", ports.ModelsFindParams{
		Order: ports.ModelOrder{By: ports.ModelOrderField, Field: totalField, Desc: true}, Limit: 50,
	}, "total", true},
	{"RecentlyUpdatedNextPage", ports.ModelsFindParams{
		Order: ports.ModelOrder{By: ports.ModelOrderUpdatedAt, Desc: true}, Limit: 50,
	}, "updated_at", true},
	{"ByStreamNextPage", ports.ModelsFindParams{Limit: 100}, "vantage_models_pkey", true},
}

func equalFilter(value string, path ...string) ports.ModelFilter {
	return ports.ModelFilter{Op: ports.ModelFilterEqual, Path: path, Value: []byte(value)}
}

// indexNames maps the names orderQueries give indexes to their names in
// the schema.
func indexNames(store *postgres.Store) map[string]string {
	names := map[string]string{
		"vantage_models_pkey": "vantage_models_pkey",
	}
	for _, idx := range ordersIndexes {
		key := ""
		for i, f := range idx.Fields {
			if i > 0 {
				key += ","
			}
			for j, p := range f.Path {
				if j > 0 {
					key += "."
				}
				key += p
			}
		}
		if idx.UpdatedAt {
			key += "updated_at"
		}
		names[key], _ = store.ModelIndexDefinition("orders", idx)
	}
	return names
}

// planNode is a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	Plans        []planNode `json:"Plans"`
}

// scans returns the nodes of the plan that read a table or an index.
func (n planNode) scans() []planNode {
	var out []planNode
	if n.RelationName != "" || n.IndexName != "" {
		out = append(out, n)
	}
	for _, c := range n.Plans {
		out = append(out, c.scans()...)
	}
	return out
}

// explain plans the statement of a ModelsFind with params, as the generic
// plan that pgx's cached statement ends up with (the parameters unknown).
func explain(t *testing.T, b *testBundle, params ports.ModelsFindParams) planNode {
	t.Helper()
	text, args, err := b.store.FindStatement(&params)
	require.NoError(t, err)
	var plan planNode
	err = pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
			return err
		}
		var out []byte
		if err := tx.QueryRow(t.Context(), "EXPLAIN (FORMAT JSON) "+text, args...).Scan(&out); err != nil {
			return err
		}
		var plans []struct{ Plan planNode }
		if err := json.Unmarshal(out, &plans); err != nil {
			return err
		}
		plan = plans[0].Plan
		return nil
	})
	require.NoError(t, err)
	return plan
}

// withFirstPage returns params continued after the first page, when page2.
func withFirstPage(t *testing.T, b ports.Backend, params ports.ModelsFindParams, page2 bool) ports.ModelsFindParams {
	t.Helper()
	params.Perspective = "orders"
	if !page2 {
		return params
	}
	res, err := b.ModelQuery.ModelsFind(t.Context(), &params)
	require.NoError(t, err)
	require.NotNil(t, res.Next, "%v has a second page", params)
	params.After = res.Next
	return params
}

// TestModelQueriesUseIndexes declares the order indexes on 100,000 orders
// (and as many models of another perspective) from three instances at once,
// then checks that the planner serves each order query from its index,
// never scanning vantage_models sequentially, with the parameters unknown
// (the generic plan of a cached statement).
func TestModelQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("seeds 200,000 models")
	}
	schema := pgtest.Schema(t)
	b := newStore(t, schema)
	seedOrders(t, schema, 100_000)

	stores := []*testBundle{b, newStore(t, schema), newStore(t, schema)}
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			errs[i] = s.backend.ModelQuery.ModelIndexesEnsure(t.Context(), &ports.ModelIndexesEnsureParams{Perspective: "orders", Indexes: ordersIndexes})
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	var invalid int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND NOT i.indisvalid`, schema).Scan(&invalid))
	require.Zero(t, invalid, "every index is valid")
	_, err := b.pool.Exec(t.Context(), `ANALYZE `+pgx.Identifier{schema}.Sanitize()+`.vantage_models`)
	require.NoError(t, err)

	names := indexNames(b.store)
	for _, q := range orderQueries {
		t.Run(q.name, func(t *testing.T) {
			params := withFirstPage(t, b.backend, q.params, q.page2)
			scans := explain(t, b, params).scans()
			require.NotEmpty(t, scans)
			var used []string
			for _, s := range scans {
				require.NotEqual(t, "Seq Scan", s.NodeType, "%s scans %s sequentially", q.name, s.RelationName)
				used = append(used, s.IndexName)
			}
			require.Contains(t, used, names[q.index], "%s is served by its index (%+v)", q.name, scans)
			for _, s := range scans {
				if s.IndexName == names[q.index] {
					require.Contains(t, []string{"Index Scan", "Index Only Scan", "Bitmap Index Scan"}, s.NodeType)
				}
			}

			res, err := b.backend.ModelQuery.ModelsFind(t.Context(), &params)
			require.NoError(t, err)
			require.NotEmpty(t, res.Models)
		})
	}
}

// TestModelIndexesEnsureRebuildsAFailedBuild leaves an invalid index of the
// name of a declared one, as a concurrent build that failed does, and
// checks that ModelIndexesEnsure drops it and builds the declared index.
func TestModelIndexesEnsureRebuildsAFailedBuild(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	schema := pgtest.Schema(t)
	b := newStore(t, schema)
	q := pgx.Identifier{schema}.Sanitize()
	fields := []ports.ModelField{statusField, createdField}
	name, _ := b.store.ModelIndexDefinition("orders", ports.ModelIndex{Fields: fields})
	for version, doc := range []string{`{"status": "open"}`, `{"status": "shipped", "created_at": "2026-01-01T00:00:00Z"}`} {
		require.NoError(t, b.backend.Models.ModelSave(ctx, &ports.ModelSaveParams{
			StreamID: uuid.New(), Perspective: "orders", Data: []byte(doc), LastEventID: uuid.New(), LastVersion: int64(version + 1), Now: base,
		}))
	}
	// The build divides by zero on the second model and fails, leaving the
	// index behind, invalid.
	_, err := b.pool.Exec(ctx, `CREATE INDEX CONCURRENTLY `+pgx.Identifier{name}.Sanitize()+` ON `+q+`.vantage_models ((1 / (last_version - 2)))`)
	require.Error(t, err)
	valid := func() (bool, string) {
		t.Helper()
		var (
			ok  bool
			def string
		)
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT i.indisvalid, pg_get_indexdef(i.indexrelid) FROM pg_index i
			WHERE i.indexrelid = ($1 || '.' || $2)::regclass`, q, name).Scan(&ok, &def))
		return ok, def
	}
	ok, _ := valid()
	require.False(t, ok, "the failed build left an invalid index")

	require.NoError(t, b.backend.ModelQuery.ModelIndexesEnsure(ctx, &ports.ModelIndexesEnsureParams{
		Perspective: "orders", Indexes: []ports.ModelIndex{{Fields: fields}},
	}))

	ok, def := valid()
	require.True(t, ok)
	require.Contains(t, def, "vantage_json_time((data -> 'created_at'::text))", "the declared index replaced it")
	require.Contains(t, def, "WHERE (perspective = 'orders'::text)")
}

// TestModelIndexesEnsureWaitsForABuildInFlight holds vantage_models as a
// concurrent build of another instance does, and checks that
// ModelIndexesEnsure waits, starting no build of its own (which would
// deadlock with the other), until the lock is released or its context ends.
func TestModelIndexesEnsureWaitsForABuildInFlight(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	b := newStore(t, schema)
	seedOrders(t, schema, 100)
	params := &ports.ModelIndexesEnsureParams{Perspective: "orders", Indexes: []ports.ModelIndex{{Fields: []ports.ModelField{createdField}}}}
	name, _ := b.store.ModelIndexDefinition("orders", params.Indexes[0])
	exists := func() bool {
		t.Helper()
		var ok bool
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{schema, name}.Sanitize()).Scan(&ok))
		return ok
	}

	tx, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), `LOCK TABLE `+pgx.Identifier{schema}.Sanitize()+`.vantage_models IN SHARE UPDATE EXCLUSIVE MODE`)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err = b.backend.ModelQuery.ModelIndexesEnsure(ctx, params)
	require.ErrorIs(t, err, context.DeadlineExceeded, "it waits while the table is held")
	require.False(t, exists(), "and builds nothing meanwhile")
	require.NoError(t, tx.Rollback(t.Context()))

	require.NoError(t, b.backend.ModelQuery.ModelIndexesEnsure(t.Context(), params))
	require.True(t, exists())
}

// BenchmarkModelsFind runs each order query of TestModelQueriesUseIndexes
// on 100,000 orders (and as many models of another perspective), without
// the declared indexes, then with them: the latency of a ModelsFind, round
// trip included, and the scan the planner chose, reported as a metric of
// the rows it read per call (rows/op, from EXPLAIN ANALYZE).
//
//	go test -run '^$' -bench ModelsFind ./adapters/postgres/
func BenchmarkModelsFind(b *testing.B) {
	schema := pgtest.Schema(b)
	tb := newStoreB(b, schema)
	seedOrders(b, schema, 100_000)
	run := func(phase string) {
		for _, q := range orderQueries {
			params := q.params
			params.Perspective = "orders"
			if q.page2 {
				res, err := tb.backend.ModelQuery.ModelsFind(b.Context(), &params)
				require.NoError(b, err)
				params.After = res.Next
			}
			b.Run(phase+"/"+q.name, func(b *testing.B) {
				for b.Loop() {
					if _, err := tb.backend.ModelQuery.ModelsFind(b.Context(), &params); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(rowsRead(b, tb, params)), "rows/op")
			})
		}
	}
	run("Unindexed")
	require.NoError(b, tb.backend.ModelQuery.ModelIndexesEnsure(b.Context(), &ports.ModelIndexesEnsureParams{Perspective: "orders", Indexes: ordersIndexes}))
	_, err := tb.pool.Exec(b.Context(), `ANALYZE `+pgx.Identifier{schema}.Sanitize()+`.vantage_models`)
	require.NoError(b, err)
	run("Indexed")
}

// newStoreB is newStore for a benchmark.
func newStoreB(b *testing.B, schema string) *testBundle {
	b.Helper()
	pool := pgtest.NewPool(b, 4)
	store, err := postgres.New(pool, postgres.Options{Schema: schema, PollOnly: true})
	require.NoError(b, err)
	b.Cleanup(func() { _ = store.Close() })
	return &testBundle{pool: pool, schema: schema, store: store, backend: store.Backend()}
}

// rowsRead runs the statement of a ModelsFind with EXPLAIN ANALYZE and
// returns the rows its scans of vantage_models returned or removed by a
// filter: what a call reads.
func rowsRead(b *testing.B, tb *testBundle, params ports.ModelsFindParams) int64 {
	b.Helper()
	text, args, err := tb.store.FindStatement(&params)
	require.NoError(b, err)
	var out []byte
	require.NoError(b, tb.pool.QueryRow(b.Context(), "EXPLAIN (ANALYZE, FORMAT JSON) "+text, args...).Scan(&out))
	type node struct {
		RelationName string  `json:"Relation Name"`
		IndexName    string  `json:"Index Name"`
		Rows         float64 `json:"Actual Rows"`
		Loops        float64 `json:"Actual Loops"`
		Filtered     float64 `json:"Rows Removed by Filter"`
		Rechecked    float64 `json:"Rows Removed by Index Recheck"`
		Plans        []node  `json:"Plans"`
	}
	var plans []struct{ Plan node }
	require.NoError(b, json.Unmarshal(out, &plans))
	var sum func(n node) float64
	sum = func(n node) float64 {
		var total float64
		if n.RelationName == "vantage_models" {
			total += (n.Rows + n.Filtered + n.Rechecked) * max(n.Loops, 1)
		}
		for _, c := range n.Plans {
			total += sum(c)
		}
		return total
	}
	return int64(sum(plans[0].Plan))
}

// TestPerspectiveFind reads typed models through core on PostgreSQL: a
// perspective declares its indexes, which EnsureIndexes builds, and Find
// pages through a query by a time field, its cursors opaque to the caller.
func TestPerspectiveFind(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	type order struct {
		Status    string    `json:"status"`
		Total     float64   `json:"total"`
		CreatedAt time.Time `json:"created_at"`
	}
	summary := core.NewPerspective[order]("order_summary")
	require.NoError(t, summary.Index(core.TextField("status"), core.TimeField("created_at")))
	require.NoError(t, summary.EnsureIndexes(ctx, b.backend.ModelQuery))
	name, _ := b.store.ModelIndexDefinition("order_summary", summary.Indexes()[0])
	var valid bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)`,
		pgx.Identifier{b.schema, name}.Sanitize()).Scan(&valid))
	require.True(t, valid, "EnsureIndexes built the declared index")

	// Orders created a nanosecond-precise 90 minutes apart, in three time
	// zones; every third one shipped.
	zones := []*time.Location{time.UTC, time.FixedZone("+0530", 5*3600+1800), time.FixedZone("-0800", -8*3600)}
	var want []uuid.UUID
	for i := range 10 {
		stream := newUUID(t)
		o := order{Status: "open", Total: float64(i), CreatedAt: base.Add(time.Duration(i)*90*time.Minute + 123456789).In(zones[i%3])}
		if i%3 == 0 {
			o.Status = "shipped"
		} else {
			want = append([]uuid.UUID{stream}, want...) // newest first
		}
		data, err := json.Marshal(o)
		require.NoError(t, err)
		require.NoError(t, b.backend.Models.ModelSave(ctx, &ports.ModelSaveParams{
			StreamID: stream, Perspective: "order_summary", Data: data, LastEventID: newUUID(t), LastVersion: 1, Now: base,
		}))
	}

	q := core.Query{Where: []core.Filter{core.Eq("status", "open")}, OrderBy: core.ByField("created_at").Desc(), Limit: 4}
	var got []uuid.UUID
	for {
		page, err := summary.Find(ctx, b.backend.ModelQuery, q)
		require.NoError(t, err)
		for _, m := range page.Models {
			require.Equal(t, "open", m.Value.Status)
			got = append(got, m.StreamID)
		}
		if page.Next == "" {
			break
		}
		q.After = page.Next
	}
	require.Equal(t, want, got, "the open orders, newest first, each once")
}
