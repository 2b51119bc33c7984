package postgres_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/conformance"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// bouncerExecModes are the query exec modes that work through PgBouncer
// before 1.21 in transaction pooling mode (see bouncerExecMode), which
// TestFlow runs there.
var bouncerExecModes = []struct {
	name string
	mode pgx.QueryExecMode
}{
	{"CacheDescribe", pgx.QueryExecModeCacheDescribe},
	{"Exec", pgx.QueryExecModeExec},
	{"SimpleProtocol", pgx.QueryExecModeSimpleProtocol},
}

// bouncerExecMode is the query exec mode docs/postgres.md tells users of
// PgBouncer before 1.21 (Debian's is 1.18) to configure, and that of the
// pools of the tests behind it: in transaction pooling mode a named
// prepared statement, which the default mode caches per connection, stays
// behind on the server connection of its transaction, and DescribeExec
// may run a statement on another server connection than the one it
// described it on.
const bouncerExecMode = pgx.QueryExecModeExec

// TestConformanceThroughPgBouncer runs the conformance suite with every
// handle's pool going through a private PgBouncer in transaction pooling
// mode, in the exec mode users configure there, and the listener dialing
// the server directly, as docs/postgres.md (PgBouncer) configures it.
// Lost connections are not simulated: the pool's connections end at the
// PgBouncer, which keeps the server's.
func TestConformanceThroughPgBouncer(t *testing.T) {
	t.Parallel()
	bouncer := pgtest.RequirePgBouncer(t, pgtest.PgBouncerOptions{})

	conformance.Run(t, func(t *testing.T) conformance.Opener {
		schema := pgtest.Schema(t)
		return func(t *testing.T) ports.Backend {
			pool := pgtest.PoolOptions{ConnString: bouncer.ConnString(), QueryExecMode: bouncerExecMode}
			return newStoreWith(t, pool, postgres.Options{Schema: schema}).backend
		}
	}, conformance.Features{})
}

// TestWorkerThroughPgBouncer runs a worker whose pool goes through a
// PgBouncer in transaction pooling mode: with a listener dialing the server
// directly, or a PgBouncer in session pooling mode, notifications wake it;
// poll-only, it applies every event and says once that it polls only.
func TestWorkerThroughPgBouncer(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		logs   *logRecorder
		store  *postgres.Store
		worker *core.Worker
		reg    *core.Registry
	}
	// setup starts a worker on a Store made with opts, behind bouncer,
	// stopped in t.Cleanup.
	setup := func(t *testing.T, bouncer *pgtest.PgBouncer, opts postgres.Options, workerOpts core.Options) *testBundle {
		t.Helper()
		logs := newLogRecorder(t)
		opts.Schema = pgtest.Schema(t)
		opts.Logger = slog.New(logs)
		b := newStoreWith(t, pgtest.PoolOptions{ConnString: bouncer.ConnString(), QueryExecMode: bouncerExecMode}, opts)
		reg := txRegistry(t)
		workerOpts.Logger = slog.New(logs)
		workerOpts.Drain.Batcher = core.DrainBatcherOptions{SlidingWindow: time.Millisecond, MaxWait: 5 * time.Millisecond}
		w, err := core.New(b.backend, reg, &workerOpts)
		require.NoError(t, err)
		require.NoError(t, w.Start(t.Context()))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			require.NoError(t, w.Stop(ctx))
		})
		return &testBundle{logs: logs, store: b.store, worker: w, reg: reg}
	}
	// appendAndWait appends an event to a new stream through the worker's
	// Store and waits until every perspective applied it.
	appendAndWait := func(t *testing.T, b *testBundle) {
		t.Helper()
		ctx := t.Context()
		stream := newUUID(t)
		_, err := b.reg.Append(ctx, b.store, stream, ports.ExpectNoStream, txPlaced{Total: 1})
		require.NoError(t, err)
		waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		require.NoError(t, b.worker.WaitForStream(waitCtx, stream, 1), "every perspective applied the event")
	}

	t.Run("DirectListenerWakesTheWorker", func(t *testing.T) {
		t.Parallel()
		bouncer := pgtest.RequirePgBouncer(t, pgtest.PgBouncerOptions{})
		// Every poll a minute apart: within the test's wait, only a
		// notification can make the worker claim and apply the event.
		b := setup(t, bouncer, postgres.Options{ConnString: pgtest.ConnString(t)}, core.Options{
			Drain: core.DrainOptions{
				PollingInterval:              time.Minute,
				NotifyHealthyPollingInterval: time.Minute,
			},
			Claims: core.ClaimOptions{
				Interval:              time.Minute,
				NotifyHealthyInterval: time.Minute,
			},
		})
		require.True(t, b.store.NotifierHealthy(), "the listener is up once the worker started")
		appendAndWait(t, b)
		appendAndWait(t, b)
		require.True(t, b.store.NotifierHealthy())
	})

	t.Run("ListenerThroughSessionPooling", func(t *testing.T) {
		t.Parallel()
		bouncer := pgtest.RequirePgBouncer(t, pgtest.PgBouncerOptions{})
		session := pgtest.RequirePgBouncer(t, pgtest.PgBouncerOptions{PoolMode: pgtest.PoolModeSession})
		b := setup(t, bouncer, postgres.Options{ConnString: session.ConnString()}, core.Options{
			Drain: core.DrainOptions{
				PollingInterval:              time.Minute,
				NotifyHealthyPollingInterval: time.Minute,
			},
			Claims: core.ClaimOptions{
				Interval:              time.Minute,
				NotifyHealthyInterval: time.Minute,
			},
		})
		appendAndWait(t, b)
		require.True(t, b.store.NotifierHealthy())
	})

	t.Run("PollOnlyWorkerAppliesEverything", func(t *testing.T) {
		t.Parallel()
		bouncer := pgtest.RequirePgBouncer(t, pgtest.PgBouncerOptions{})
		b := setup(t, bouncer, postgres.Options{PollOnly: true}, core.Options{
			Drain:  core.DrainOptions{PollingInterval: 20 * time.Millisecond},
			Claims: core.ClaimOptions{Interval: 20 * time.Millisecond},
		})
		// Two events, each applied after polls: the line is logged once,
		// at start, not per poll.
		appendAndWait(t, b)
		appendAndWait(t, b)
		require.Len(t, withMessage(b.logs.all(), "the backend has no notifier; polling only"), 1)
		require.False(t, b.store.NotifierHealthy())
		report := b.worker.Health(t.Context())
		for _, c := range report.Checks {
			if c.Name == core.HealthCheckListener {
				require.Equal(t, core.HealthOK, c.Status, "polling only is healthy by design: %s", c.Message)
			}
		}
	})
}

// TestMigrateThroughPgBouncer migrates a new schema through a PgBouncer in
// transaction pooling mode: each version and the migration lock live in
// one transaction.
func TestMigrateThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	bouncer := pgtest.RequirePgBouncer(t, pgtest.PgBouncerOptions{})
	pool := pgtest.NewPoolWith(t, pgtest.PoolOptions{ConnString: bouncer.ConnString(), QueryExecMode: bouncerExecMode})
	schema := pgtest.NewSchemaName(t)
	t.Cleanup(func() {
		_, err := pgtest.Pool(t).Exec(context.WithoutCancel(ctx), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		require.NoError(t, err)
	})

	m, err := postgres.NewMigrator(nil, schema)
	require.NoError(t, err)
	require.NoError(t, m.Up(ctx, pool))
	v, err := m.Version(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, m.Latest(), v)
	require.NoError(t, m.Up(ctx, pool), "a second run finds nothing to do")
}
