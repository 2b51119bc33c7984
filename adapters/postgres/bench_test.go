package postgres_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/enginebench"
	"github.com/vantage-go/vantage/internal/pgtest"
)

// BenchmarkRewind10k measures a rewind of a 10,000-event stream on
// PostgreSQL, from the start and from a snapshot (see enginebench.Rewind).
func BenchmarkRewind10k(b *testing.B) {
	for _, every := range []int{0, 1000} {
		b.Run(fmt.Sprintf("snapshot_every=%d", every), func(b *testing.B) {
			store, err := postgres.New(pgtest.Pool(b), postgres.Options{Schema: pgtest.Schema(b)})
			require.NoError(b, err)
			b.Cleanup(func() { _ = store.Close() })
			enginebench.Rewind(b, store.Backend(), 10_000, every)
		})
	}
}
