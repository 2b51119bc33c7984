package postgres_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/internal/pgtest"
)

// TestDocsOperatorSQL runs every SQL block of the operations guide (its
// "Operator SQL" section) against a migrated schema, so the operator
// queries stay true to the real tables.
func TestDocsOperatorSQL(t *testing.T) {
	t.Parallel()

	guide, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(guide), -1)
	require.GreaterOrEqual(t, len(blocks), 5, "docs/operations.md documents the operator queries")

	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	quoted := pgx.Identifier{schema}.Sanitize()
	for _, b := range blocks {
		query := strings.ReplaceAll(b[1], "vantage.vantage_", quoted+".vantage_")
		require.NotEqual(t, b[1], query, "each query names the schema")
		rows, err := pool.Query(t.Context(), query)
		require.NoError(t, err, query)
		for rows.Next() {
		}
		require.NoError(t, rows.Err(), query)
		rows.Close()
	}
}
