package postgres_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/conformance"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// TestMain checks for leaked goroutines once every test ran and pgtest
// closed the shared pool. No goroutine is ignored: stores stop their
// listeners in Close and pools are closed in t.Cleanup.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.WrapMain(m))
}

// testBundle is one engine instance's view of a fresh schema.
type testBundle struct {
	pool    *pgxpool.Pool
	schema  string
	store   *postgres.Store
	backend ports.Backend
}

// newStore opens a Store with its own pool on schema, closed in t.Cleanup.
func newStore(t *testing.T, schema string) *testBundle {
	t.Helper()
	pool := pgtest.NewPool(t, 4)
	store, err := postgres.New(pool, postgres.Options{
		Schema:               schema,
		ConnString:           pgtest.ConnString(t),
		ListenerMinReconnect: 10 * time.Millisecond,
		ListenerMaxReconnect: 200 * time.Millisecond,
		Logger:               testLogger(t),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	return &testBundle{pool: pool, schema: schema, store: store, backend: store.Backend()}
}

// setup returns a store on a fresh migrated schema.
func setup(t *testing.T) *testBundle {
	t.Helper()
	return newStore(t, pgtest.Schema(t))
}

// base is the fixed instant the tests derive every Now from.
var base = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// wait returns the next value of ch, failing the test after a timeout.
func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// TestConformance runs the port contract suite on PostgreSQL: every backend
// is a fresh migrated schema, and every handle (one simulated engine
// instance) is a Store on its own pool, as in production.
func TestConformance(t *testing.T) {
	t.Parallel()

	conformance.Run(t, func(t *testing.T) conformance.Opener {
		schema := pgtest.Schema(t)
		return func(t *testing.T) ports.Backend { return newStore(t, schema).backend }
	}, conformance.Features{})
}

// newUUID returns a fresh UUIDv7.
func newUUID(t *testing.T) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	require.NoError(t, err)
	return id
}

// testLogger routes a Store's logs to the test's log (t.Output).
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
