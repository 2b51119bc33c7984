package postgres_test

import (
	"cmp"
	"log/slog"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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
	return newStoreWith(t, pgtest.PoolOptions{}, postgres.Options{Schema: schema})
}

// newStoreWith is newStore on a pool made with poolOpts and a Store made
// with opts, whose listener settings and logger default to newStore's: the
// listener dials the test database, unless opts.PollOnly.
func newStoreWith(t *testing.T, poolOpts pgtest.PoolOptions, opts postgres.Options) *testBundle {
	t.Helper()
	var app string // names the pool's connections on the server, for breakConnections
	if poolOpts.ConnString == "" {
		u, err := url.Parse(pgtest.ConnString(t))
		require.NoError(t, err)
		app = "vantage-test-" + uuid.NewString()
		q := u.Query()
		q.Set("application_name", app)
		u.RawQuery = q.Encode()
		poolOpts.ConnString = u.String()
	}
	pool := pgtest.NewPoolWith(t, poolOpts)
	if !opts.PollOnly {
		opts.ConnString = cmp.Or(opts.ConnString, pgtest.ConnString(t))
	}
	opts.ListenerMinReconnect = cmp.Or(opts.ListenerMinReconnect, 10*time.Millisecond)
	opts.ListenerMaxReconnect = cmp.Or(opts.ListenerMaxReconnect, 200*time.Millisecond)
	opts.Logger = cmp.Or(opts.Logger, testLogger(t))
	store, err := postgres.New(pool, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	storePools.Store(store, storePool{pool: pool, app: app})
	t.Cleanup(func() { storePools.Delete(store) })
	return &testBundle{pool: pool, schema: opts.Schema, store: store, backend: store.Backend()}
}

// storePool is the pool of a Store of newStore, and the application_name
// of its connections ("" when the pool is not on the test database).
type storePool struct {
	pool *pgxpool.Pool
	app  string
}

// storePools maps the Stores of newStore to their pools, for
// breakConnections, which gets only a handle's ports.
var storePools sync.Map // *postgres.Store -> storePool

// breakConnections makes the next call on b (a handle of newStore) fail the
// way a call fails when the connection to the database is lost, and the
// calls in flight on b too (a transaction's): the pool is left with one
// idle connection, and the server processes of all its connections, busy
// ones included, are terminated. The pool pings a connection only after
// it idled for a second, so the next call uses it and fails; the pool then
// drops it, and the call after that connects anew.
func breakConnections(t *testing.T, b ports.Backend) {
	t.Helper()
	ctx := t.Context()
	store, ok := b.Claimer.(*postgres.Store)
	require.True(t, ok, "a handle of the PostgreSQL adapter")
	v, ok := storePools.Load(store)
	require.True(t, ok, "a Store of newStore")
	sp := v.(storePool)
	require.NotEmpty(t, sp.app, "a Store of newStore on the test database")
	// Reset closes the idle connections, and the busy ones when they come
	// back, so the one acquired next is the only idle connection left in
	// the pool.
	sp.pool.Reset()
	conn, err := sp.pool.Acquire(ctx)
	require.NoError(t, err)
	pid := conn.Conn().PgConn().PID()
	conn.Release()
	// With a timeout, pg_terminate_backend waits until the process is gone.
	rows, err := pgtest.Pool(t).Query(ctx, `WITH mine AS MATERIALIZED (
    SELECT pid FROM pg_catalog.pg_stat_activity WHERE application_name = $1
) SELECT pid FROM mine WHERE pg_catalog.pg_terminate_backend(pid, 10000)`, sp.app)
	require.NoError(t, err)
	terminated, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	require.Contains(t, terminated, int32(pid), "the server process of the idle connection ended")
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
	}, conformance.Features{BreakConnections: breakConnections})
}

// queryExecModes are pgx's query exec modes, the default first.
var queryExecModes = []struct {
	name string
	mode pgx.QueryExecMode
}{
	{"CacheStatement", pgx.QueryExecModeCacheStatement},
	{"CacheDescribe", pgx.QueryExecModeCacheDescribe},
	{"DescribeExec", pgx.QueryExecModeDescribeExec},
	{"Exec", pgx.QueryExecModeExec},
	{"SimpleProtocol", pgx.QueryExecModeSimpleProtocol},
}

// TestConformanceQueryExecModes runs the suite of TestConformance on pools
// in QueryExecModeSimpleProtocol. There, as in QueryExecModeExec, the modes
// of a pool behind PgBouncer before 1.21, the server never describes a
// statement: pgx sends every parameter as text and infers its type from
// its Go type, so a parameter pgx knows only by the type the server
// describes fails (a [16]byte for a uuid), and a []byte meant for jsonb is
// sent as bytea. QueryExecModeExec runs the whole suite behind PgBouncer
// (TestConformanceThroughPgBouncer). The modes that describe statements,
// where parameters encode as in the default mode, run TestFlow only: the
// suite waits on timers more than it computes, and each run of it holds
// the test slots of the whole package for as long as TestConformance.
func TestConformanceQueryExecModes(t *testing.T) {
	t.Parallel()

	t.Run("SimpleProtocol", func(t *testing.T) {
		t.Parallel()
		conformance.Run(t, func(t *testing.T) conformance.Opener {
			schema := pgtest.Schema(t)
			return func(t *testing.T) ports.Backend {
				return newStoreWith(t, pgtest.PoolOptions{QueryExecMode: pgx.QueryExecModeSimpleProtocol}, postgres.Options{Schema: schema}).backend
			}
		}, conformance.Features{BreakConnections: breakConnections})
	})
}

// TestLostConnectionIsTransient checks that a call whose connection was
// lost fails with ports.ErrTransient, single statements and batches alike,
// and that the next call reconnects.
func TestLostConnectionIsTransient(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	subscribe(t, b, testPerspective)
	inst := uuid.New()
	for name, call := range map[string]func() error{
		"InstancesList": func() error {
			_, err := b.backend.Admin.InstancesList(ctx)
			return err
		},
		"InstanceHeartbeat": func() error {
			_, err := b.backend.Claimer.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{InstanceID: inst, StaleThreshold: time.Minute, Now: base})
			return err
		},
		"EventsAppend": func() error {
			_, err := b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: newUUID(t), Events: newEvents(1), Now: base})
			return err
		},
		"DeadLettersRecover": func() error {
			_, err := b.backend.DeadLetters.DeadLettersRecover(ctx, &ports.DeadLettersRecoverParams{Generation: "g", Limit: 1, Now: base})
			return err
		},
	} {
		breakConnections(t, b.backend)
		err := call()
		require.ErrorIs(t, err, ports.ErrTransient, "%s on a lost connection: %v", name, err)
		require.NoError(t, call(), "%s reconnects", name)
	}
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
