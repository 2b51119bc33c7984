package postgres_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/ports"
)

// BenchmarkModelSaveTx measures what grouping the saves of table
// projections buys: 32 pairs' saves, each moving a cursor and upserting
// one row of the application's table, as one ModelSaveTxMany (one commit,
// a savepoint per pair, as the engine groups the pairs it drains at once)
// against 32 ModelSaveTx calls (a commit each).
//
//	go test -run '^$' -bench ModelSaveTx ./adapters/postgres/
func BenchmarkModelSaveTx(b *testing.B) {
	const pairs = 32
	for _, grouped := range []bool{false, true} {
		name := "PerPair"
		if grouped {
			name = "Grouped"
		}
		b.Run(name, func(b *testing.B) {
			ctx := b.Context()
			pool, schema, store := benchStore(b)
			table := pgx.Identifier{schema, "order_lines"}.Sanitize()
			_, err := pool.Exec(ctx, `CREATE TABLE `+table+` (stream_id uuid PRIMARY KEY, qty bigint NOT NULL)`)
			require.NoError(b, err)

			streams := make([]uuid.UUID, pairs)
			for i := range streams {
				streams[i] = uuid.New()
			}
			version := int64(0)
			saves := func() []*ports.ModelSaveTxParams {
				out := make([]*ports.ModelSaveTxParams, pairs)
				for i, s := range streams {
					out[i] = &ports.ModelSaveTxParams{
						Save: ports.ModelSaveParams{StreamID: s, Perspective: "order_lines", Data: []byte(`{}`), LastEventID: uuid.New(), LastVersion: version + 1, ExpectedVersion: version},
						Apply: func(ctx context.Context, tx ports.Tx) error {
							_, err := postgres.TxOf(tx).Exec(ctx, `INSERT INTO `+table+` VALUES ($1, $2)
ON CONFLICT (stream_id) DO UPDATE SET qty = excluded.qty`, s, version+1)
							return err
						},
					}
				}
				version++
				return out
			}
			for b.Loop() {
				batch := saves()
				if grouped {
					errs, err := store.ModelSaveTxMany(ctx, &ports.ModelSaveTxManyParams{Saves: batch})
					require.NoError(b, err)
					for _, err := range errs {
						require.NoError(b, err)
					}
					continue
				}
				for _, s := range batch {
					require.NoError(b, store.ModelSaveTx(ctx, s))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*pairs), "µs/save")
		})
	}
}
