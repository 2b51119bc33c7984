package postgres

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

func TestModelIndexName(t *testing.T) {
	t.Parallel()

	text := func(path ...string) ports.ModelField { return ports.ModelField{Path: path, Kind: ports.ModelFieldText} }

	t.Run("ReadableWhenShort", func(t *testing.T) {
		t.Parallel()
		name := modelIndexName("orders", ports.ModelIndex{Fields: []ports.ModelField{text("customer", "id")}})
		require.Regexp(t, `^vantage_model_orders_customer_id_[0-9a-f]{16}$`, name)
		require.Equal(t, name, modelIndexName("orders", ports.ModelIndex{Fields: []ports.ModelField{text("customer", "id")}}), "deterministic")
	})

	t.Run("StableAcrossReleases", func(t *testing.T) {
		t.Parallel()
		// The name is how ModelIndexesEnsure finds an index it built
		// before: a field index keeps its name when the definitions grow.
		require.Equal(t, "vantage_model_orders_customer_id_2d684962f1e75850",
			modelIndexName("orders", ports.ModelIndex{Fields: []ports.ModelField{text("customer", "id")}}))
	})

	t.Run("AtMost63BytesWhenLong", func(t *testing.T) {
		t.Parallel()
		long := strings.Repeat("Ä", 60)
		name := modelIndexName(long+"'\\", ports.ModelIndex{Fields: []ports.ModelField{text(long), text("b", long)}, UpdatedAt: true})
		require.LessOrEqual(t, len(name), 63)
		require.Regexp(t, `^vantage_model_[a-z0-9_]+_[0-9a-f]{16}$`, name, "a plain identifier")
	})

	t.Run("DistinctForEveryDefinition", func(t *testing.T) {
		t.Parallel()
		names := map[string]bool{}
		for _, def := range []struct {
			perspective string
			idx         ports.ModelIndex
		}{
			{"orders", ports.ModelIndex{Fields: []ports.ModelField{text("a_b")}}},
			{"orders", ports.ModelIndex{Fields: []ports.ModelField{text("a", "b")}}},
			{"orders", ports.ModelIndex{Fields: []ports.ModelField{text("a"), text("b")}}},
			{"orders", ports.ModelIndex{Fields: []ports.ModelField{text("b"), text("a")}}},
			{"orders", ports.ModelIndex{Fields: []ports.ModelField{{Path: []string{"a_b"}, Kind: ports.ModelFieldNumber}}}},
			{"orders", ports.ModelIndex{Fields: []ports.ModelField{{Path: []string{"a_b"}, Kind: ports.ModelFieldTime}}}},
			{"orders_a", ports.ModelIndex{Fields: []ports.ModelField{text("b")}}},
			{"Orders", ports.ModelIndex{Fields: []ports.ModelField{text("a_b")}}},
			{"orders", ports.ModelIndex{Fields: []ports.ModelField{text("a_b")}, UpdatedAt: true}},
			{"orders", ports.ModelIndex{Fields: []ports.ModelField{text("updated_at")}}},
			{"orders", ports.ModelIndex{UpdatedAt: true}},
			{"orders_updated_at", ports.ModelIndex{UpdatedAt: true}},
		} {
			name := modelIndexName(def.perspective, def.idx)
			require.False(t, names[name], "%s is another definition's", name)
			names[name] = true
		}
	})
}

func TestQuoteLiteral(t *testing.T) {
	t.Parallel()

	require.Equal(t, `'orders'`, quoteLiteral("orders"))
	require.Equal(t, `'o''k'`, quoteLiteral("o'k"))
	require.Equal(t, `E'a\\b''c'`, quoteLiteral(`a\b'c`), "an escape string, read alike whatever standard_conforming_strings says")
}

// Two instances building one model index at once fail in several ways,
// each a collision to wait out, not an error: among them the internal
// error of two sessions updating the table's catalog row together.
func TestIsIndexCollision(t *testing.T) {
	t.Parallel()
	pg := func(code, msg string) error {
		return fmt.Errorf("building: %w", &pgconn.PgError{Code: code, Message: msg})
	}
	for _, err := range []error{
		pg(pgDeadlockDetected, "deadlock detected"),
		pg(pgLockNotAvailable, "could not obtain lock"),
		pg(pgUniqueViolation, "duplicate key value violates unique constraint"),
		pg(pgDuplicateTable, "relation already exists"),
		pg(pgInternalError, "tuple concurrently updated"),
	} {
		require.True(t, isIndexCollision(err), err)
	}
	for _, err := range []error{
		pg(pgInternalError, "could not read block"),
		pg("42501", "must be owner of table"),
		errors.New("conn closed"),
	} {
		require.False(t, isIndexCollision(err), err)
	}
}
