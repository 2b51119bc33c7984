package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// BenchmarkModelSaveMany measures what the indexes of vantage_models cost
// the engine's saves of models: batches of 100 saves of existing models
// (ModelSaveMany, as a drain makes them) among 20,000, on the latest schema
// (the primary key, the key by perspective and the update-time index) and
// on it with the four indexes of the order queries declared
// (BenchmarkModelsFind). The schemas before the key by perspective (version
// 7) lack the columns today's saves write, so they are no longer compared.
//
//	go test -run '^$' -bench ModelSaveMany ./adapters/postgres/
func BenchmarkModelSaveMany(b *testing.B) {
	for _, c := range []struct {
		name    string
		indexes []ports.ModelIndex
	}{
		{"Latest", nil},
		{"LatestDeclared4", ordersIndexes},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := b.Context()
			pool, schema, store := benchStore(b)
			backend := store.Backend()

			const models, batch = 20_000, 100
			streams := make([]uuid.UUID, models)
			versions := make([]int64, models)
			save := func(from int, perspective string) {
				saves := make([]*ports.ModelSaveParams, 0, batch)
				for i := from; i < from+batch; i++ {
					v := versions[i]
					saves = append(saves, &ports.ModelSaveParams{
						StreamID: streams[i], Perspective: perspective, LastEventID: uuid.New(),
						LastVersion: v + 1, ExpectedVersion: v,
						Data: fmt.Appendf(nil, `{"customer_id": "c%d", "status": "open", "total": %d, "created_at": %q, "customer": {"tier": "gold"}, "lines": ["a", "b", "c"]}`,
							i%1000, v, time.Unix(v, 0).UTC().Format(time.RFC3339)),
					})
					versions[i] = v + 1
				}
				errs, err := backend.ModelBatch.ModelSaveMany(ctx, &ports.ModelSaveManyParams{Saves: saves})
				require.NoError(b, err)
				for _, err := range errs {
					require.NoError(b, err)
				}
			}
			for i := range streams {
				streams[i] = uuid.New()
			}
			for from := 0; from < models; from += batch {
				save(from, "orders")
			}
			if c.indexes != nil {
				require.NoError(b, backend.ModelQuery.ModelIndexesEnsure(ctx, &ports.ModelIndexesEnsureParams{Perspective: "orders", Indexes: c.indexes}))
			}
			_, err := pool.Exec(ctx, `VACUUM ANALYZE `+schema+`.vantage_models`)
			require.NoError(b, err)

			from := 0
			for b.Loop() {
				save(from, "orders")
				from = (from + batch) % models
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*batch), "µs/save")
		})
	}
}

// BenchmarkModelSaveManyShapes compares the two shapes of ModelSaveMany on
// batches of the sizes a live drain and a catch-up make: a statement per
// entry in one batch, or one statement for every entry. Each save moves an
// existing model of 2,000 to its next version.
//
//	go test -run '^$' -bench ModelSaveManyShapes ./adapters/postgres/
func BenchmarkModelSaveManyShapes(b *testing.B) {
	ctx := b.Context()
	pool, schema, store := benchStore(b)
	backend := store.Backend()

	const models = 2000
	streams := make([]uuid.UUID, models)
	versions := make([]int64, models)
	for i := range streams {
		streams[i] = uuid.New()
	}
	save := func(b *testing.B, from, batch int) {
		saves := make([]*ports.ModelSaveParams, 0, batch)
		for i := from; i < from+batch; i++ {
			v := versions[i]
			saves = append(saves, &ports.ModelSaveParams{
				StreamID: streams[i], Perspective: "orders", LastEventID: uuid.New(),
				LastVersion: v + 1, ExpectedVersion: v, Data: fmt.Appendf(nil, `{"status": "open", "total": %d}`, v),
			})
			versions[i] = v + 1
		}
		errs, err := backend.ModelBatch.ModelSaveMany(ctx, &ports.ModelSaveManyParams{Saves: saves})
		require.NoError(b, err)
		for _, err := range errs {
			require.NoError(b, err)
		}
	}
	for from := 0; from < models; from += 100 {
		save(b, from, 100)
	}
	for _, table := range []string{"vantage_models", "vantage_cursors"} {
		_, err := pool.Exec(ctx, `VACUUM ANALYZE `+schema+`.`+table)
		require.NoError(b, err)
	}

	for _, batch := range []int{1, 4, 32, 256} {
		for _, shape := range []struct {
			name string
			min  int
		}{{"StatementEach", models + 1}, {"OneStatement", 1}} {
			b.Run(fmt.Sprintf("Batch%d/%s", batch, shape.name), func(b *testing.B) {
				defer postgres.SetSaveSetMin(shape.min)()
				from := 0
				for b.Loop() {
					save(b, from, batch)
					from = (from + batch) % (models - batch)
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*batch), "µs/save")
			})
		}
	}
}

// benchStore returns a pool of 4 connections, a new schema migrated to the
// latest version on it and a Store of that schema (polling only); the
// schema is dropped and the store closed when b ends.
func benchStore(b *testing.B) (*pgxpool.Pool, string, *postgres.Store) {
	b.Helper()
	ctx := b.Context()
	schema := pgtest.NewSchemaName(b)
	pool := pgtest.NewPool(b, 4)
	m, err := postgres.NewMigrator(nil, schema)
	require.NoError(b, err)
	require.NoError(b, m.Up(ctx, pool))
	// b's context is done by the time cleanups run.
	b.Cleanup(func() { _, _ = pgtest.Pool(b).Exec(context.WithoutCancel(ctx), `DROP SCHEMA `+schema+` CASCADE`) })
	store, err := postgres.New(pool, postgres.Options{Schema: schema, PollOnly: true})
	require.NoError(b, err)
	b.Cleanup(func() { _ = store.Close() })
	return pool, schema, store
}
