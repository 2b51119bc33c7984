package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// Event and model of the core.AppendTx tests.
type (
	txPlaced struct{ Total int }
	txModel  struct {
		Total    int
		Metadata ports.Metadata
	}
)

// txRegistry registers txPlaced and two perspectives applying it, each
// keeping the total and the metadata of the last event.
func txRegistry(t *testing.T) *core.Registry {
	t.Helper()
	reg := core.NewRegistry()
	require.NoError(t, core.RegisterEvent[txPlaced](reg, "tx.placed"))
	for _, name := range []string{"tx_orders", "tx_totals"} {
		p := core.NewPerspective[txModel](name)
		core.MustHandle(p, func(ctx context.Context, m txModel, e txPlaced) (txModel, error) {
			ev, _ := core.EventFromContext(ctx)
			m.Total += e.Total
			m.Metadata = ev.Metadata
			return m, nil
		})
		require.NoError(t, reg.AddPerspective(p))
	}
	return reg
}

// requestContext returns a context carrying a scope, a correlation id and
// headers, and the metadata events appended under it store.
func requestContext(t *testing.T) (context.Context, ports.Metadata) {
	t.Helper()
	scope := ports.Scope{TenantID: "acme", UserID: "ann", Extras: map[string]string{"role": "clerk"}}
	correlation := newUUID(t)
	ctx := core.WithScope(t.Context(), scope)
	ctx = core.WithHeaders(core.WithCorrelationID(ctx, correlation), map[string]string{"request": "r-1"})
	return ctx, ports.Metadata{CorrelationID: correlation, Scope: &scope, Headers: map[string]string{"request": "r-1"}}
}

// rowCount returns the number of rows of a table of b's schema.
func rowCount(t *testing.T, b *testBundle, table string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{b.schema, table}.Sanitize()).Scan(&n))
	return n
}

// TestCoreAppendTx appends registered events through core.AppendTx inside
// transactions of the caller: they commit with its business writes, with
// the metadata of the context and the work rows of the registry's
// perspectives, whose subscriptions nobody recorded before; a rollback
// leaves nothing; a running worker applies them once committed.
func TestCoreAppendTx(t *testing.T) {
	t.Parallel()

	t.Run("CommitStoresMetadataAndWork", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		reg := txRegistry(t)
		ctx, md := requestContext(t)
		_, err := b.pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{b.schema, "orders"}.Sanitize()+` (id uuid PRIMARY KEY)`)
		require.NoError(t, err)
		stream := newUUID(t)

		var res *ports.EventsAppendResult
		err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{b.schema, "orders"}.Sanitize()+` VALUES ($1)`, stream); err != nil {
				return err
			}
			var err error
			res, err = core.AppendTx(ctx, reg, b.store, tx, stream, ports.ExpectNoStream, txPlaced{Total: 5}, txPlaced{Total: 7})
			if err != nil {
				return err
			}
			require.Empty(t, streamVersions(t, b, stream), "nothing visible before the commit")
			return nil
		})
		require.NoError(t, err)

		require.Equal(t, 4, res.WorkRows, "two events, two perspectives")
		require.Equal(t, 1, rowCount(t, b, "orders"), "the business write committed")
		events, err := b.backend.Fetcher.EventsReadStream(ctx, &ports.EventsReadStreamParams{StreamID: stream})
		require.NoError(t, err)
		require.Len(t, events, 2)
		for i, e := range events {
			require.Equal(t, res.Events[i].ID, e.ID)
			require.Equal(t, "tx.placed", e.Type)
			require.Equal(t, md, e.Metadata)
		}
		require.Equal(t, seq(1, 2), workVersions(t, b, stream, "tx_orders"))
		require.Equal(t, seq(1, 2), workVersions(t, b, stream, "tx_totals"))
		require.Equal(t, 2, rowCount(t, b, "vantage_subscriptions"), "the append registered the registry's subscriptions")
	})

	t.Run("RollbackStoresNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		reg := txRegistry(t)
		ctx, _ := requestContext(t)
		stream := newUUID(t)

		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		res, err := core.AppendTx(ctx, reg, b.store, tx, stream, ports.ExpectNoStream, txPlaced{Total: 5})
		require.NoError(t, err)
		require.Equal(t, 2, res.WorkRows)
		require.NoError(t, tx.Rollback(ctx))

		require.Empty(t, streamVersions(t, b, stream))
		for _, table := range []string{"vantage_events", "vantage_work"} {
			require.Zero(t, rowCount(t, b, table), "%s is empty", table)
		}
		// Recorded outside the transaction (see AppendTx): the registry's
		// facts, which a worker would record anyway.
		require.Equal(t, 2, rowCount(t, b, "vantage_subscriptions"), "the subscriptions stay recorded")
	})

	t.Run("WorkerAppliesAfterCommit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		reg := txRegistry(t)
		// Default intervals: the commit's NOTIFY wakes the worker, a short
		// drain window applies the events at once.
		w, err := core.New(b.backend, reg, &core.Options{
			Logger: testLogger(t),
			Drain: core.DrainOptions{
				Batcher: core.DrainBatcherOptions{SlidingWindow: time.Millisecond, MaxWait: 5 * time.Millisecond},
			},
		})
		require.NoError(t, err)
		require.NoError(t, w.Start(t.Context()))
		defer func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 20*time.Second)
			defer cancel()
			require.NoError(t, w.Stop(stopCtx))
		}()
		ctx, md := requestContext(t)
		stream := newUUID(t)

		err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := core.AppendTx(ctx, reg, b.store, tx, stream, ports.ExpectNoStream, txPlaced{Total: 5}, txPlaced{Total: 7})
			return err
		})
		require.NoError(t, err)

		waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		require.NoError(t, w.WaitForStream(waitCtx, stream, 2), "every perspective applied both events")
		for _, perspective := range reg.Perspectives() {
			stored, err := b.backend.Models.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: stream, Perspective: perspective})
			require.NoError(t, err)
			var m txModel
			require.NoError(t, json.Unmarshal(stored.Data, &m))
			require.Equal(t, txModel{Total: 12, Metadata: md}, m, "perspective %s", perspective)
		}
	})
}

// An AppendTx that carries a subscription not recorded yet (a perspective
// new to the schema, or revived after a retirement) records it outside
// the caller's transaction: recorded inside, its row would stay
// uncommitted as long as the application keeps the transaction open, and
// every other append carrying the subscription would wait for it. An
// application that keeps such a transaction open until another append
// returns (appends on two connections at once) would stand still.
func TestAppendTxHoldsNoAppendBehindItsSubscriptions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	subs := []ports.Subscription{{EventType: testType, Perspective: "fresh"}}

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
	res, err := b.store.AppendTx(ctx, tx, &ports.EventsAppendParams{StreamID: newUUID(t), Events: newEvents(1), Subscriptions: subs, Now: base})
	require.NoError(t, err)
	require.Equal(t, 1, res.WorkRows)

	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err = b.backend.Events.EventsAppend(actx, &ports.EventsAppendParams{StreamID: newUUID(t), Events: newEvents(1), Subscriptions: subs, Now: base})
	require.NoError(t, err, "an append while the transaction is open")
	require.Equal(t, 1, res.WorkRows)
	require.NoError(t, tx.Rollback(ctx))

	// Recorded although the transaction rolled back: an append of another
	// service, which carries no subscription, fans out to it.
	res, err = b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: newUUID(t), Events: newEvents(1), Now: base})
	require.NoError(t, err)
	require.Equal(t, 1, res.WorkRows, "the subscription is recorded")
}

// When the store's pool has no connection to record a missing
// subscription with (the caller's transaction holds the last one), AppendTx
// records it in the caller's transaction rather than wait on the pool.
func TestAppendTxRecordsSubscriptionsInTxWhenThePoolIsFull(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newStoreWith(t, pgtest.PoolOptions{MaxConns: 1}, postgres.Options{Schema: pgtest.Schema(t)})
	subs := []ports.Subscription{{EventType: testType, Perspective: "fresh"}}

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
	res, err := b.store.AppendTx(ctx, tx, &ports.EventsAppendParams{StreamID: newUUID(t), Events: newEvents(1), Subscriptions: subs, Now: base})
	require.NoError(t, err, "the append goes through without a second connection")
	require.Equal(t, 1, res.WorkRows)
	require.NoError(t, tx.Commit(ctx))

	res, err = b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: newUUID(t), Events: newEvents(1), Now: base})
	require.NoError(t, err)
	require.Equal(t, 1, res.WorkRows, "the subscription was recorded with the transaction")
}
