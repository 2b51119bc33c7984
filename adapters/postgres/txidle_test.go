package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// TestTxIdleBound checks that a table projection's save whose process goes
// quiet in the middle of its transaction, as a frozen process does (its
// Apply blocks, ignoring its context), holds the stream's row no longer
// than the transaction's idle bound: the server then ends the session, and
// another instance can lock the row (as a takeover does). Once Apply
// returns, the save fails as the backend's failure, never as Apply's, and
// the next save finds the pool working.
func TestTxIdleBound(t *testing.T) {
	t.Parallel()

	const bound = 300 * time.Millisecond

	type testBundle struct {
		*projectionBundle
		stream, instance uuid.UUID
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		b := &testBundle{projectionBundle: setupProjection(t), stream: newUUID(t), instance: uuid.New()}
		ctx := t.Context()
		subscribe(t, b.testBundle, testPerspective)
		_, err := b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: b.stream, Events: newEvents(1), Now: base})
		require.NoError(t, err)
		_, err = b.backend.Claimer.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{InstanceID: b.instance, StaleThreshold: time.Minute, Now: base})
		require.NoError(t, err)
		_, err = b.backend.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
			InstanceID: b.instance, StreamIDs: []uuid.UUID{b.stream}, LeaseDuration: time.Minute, StaleThreshold: time.Minute, Now: base,
		})
		require.NoError(t, err)
		return b
	}
	// save returns a save of the stream's projection under the instance's
	// lease (so that it takes the lease fence) that inserts a row of
	// order_lines.
	save := func(t *testing.T, b *testBundle, idle time.Duration, apply func(ctx context.Context, tx ports.Tx) error) *ports.ModelSaveTxParams {
		return &ports.ModelSaveTxParams{
			Save: ports.ModelSaveParams{
				StreamID: b.stream, Perspective: "order_lines", Data: []byte(`{}`), LastEventID: newUUID(t), LastVersion: 1,
				InstanceID: b.instance, Now: base,
			},
			IdleTimeout: idle,
			Apply: func(ctx context.Context, tx ports.Tx) error {
				if _, err := postgres.TxOf(tx).Exec(ctx, `INSERT INTO `+b.table("order_lines")+` VALUES ($1, 'sku', 1)`, b.stream); err != nil {
					return err
				}
				return apply(ctx, tx)
			},
		}
	}
	// frozen returns an Apply that reports its connection's server process
	// on entered, then waits for release whatever its context says and,
	// with query, sends one more statement, as a process that resumes; and
	// the function that releases it, called in t.Cleanup too, so that a
	// failed test does not leave the save waiting.
	frozen := func(t *testing.T, entered chan<- uint32, query bool) (func(context.Context, ports.Tx) error, func()) {
		release := make(chan struct{})
		resume := sync.OnceFunc(func() { close(release) })
		t.Cleanup(resume)
		return func(_ context.Context, tx ports.Tx) error {
			entered <- postgres.TxOf(tx).Conn().PgConn().PID()
			<-release
			if !query {
				return nil
			}
			_, err := postgres.TxOf(tx).Exec(context.WithoutCancel(t.Context()), `SELECT 1`)
			return err
		}, resume
	}
	// requireFenceFreed checks that the save's transaction (of server
	// process pid) holds the stream's row, and that another connection can
	// lock the row FOR UPDATE once the server ended that transaction.
	requireFenceFreed := func(t *testing.T, b *testBundle, pid uint32) {
		t.Helper()
		ctx := t.Context()
		lock := `SELECT stream_id FROM ` + b.table("vantage_active_streams") + ` WHERE stream_id = $1 FOR UPDATE`
		tx, err := pgtest.Pool(t).Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
		_, err = tx.Exec(ctx, `SAVEPOINT probe`)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, lock+` NOWAIT`, b.stream)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "the save's transaction holds the stream's row")
		require.Equal(t, "55P03", pgErr.Code)
		_, err = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT probe`)
		require.NoError(t, err)
		// The lock waits for the save's transaction to end: the server
		// ends it at the bound. lock_timeout fails the test, rather than
		// hang it, should the bound not hold.
		_, err = tx.Exec(ctx, `SET LOCAL lock_timeout = '10s'`)
		require.NoError(t, err)
		var locked uuid.UUID
		require.NoError(t, tx.QueryRow(ctx, lock, b.stream).Scan(&locked), "the row is free once the save idled past its bound")
		require.NoError(t, tx.Commit(ctx))
		// The server releases the locks when it aborts the transaction and
		// removes the session from pg_stat_activity when its process exits,
		// an instant later.
		require.Eventually(t, func() bool {
			var alive bool
			require.NoError(t, pgtest.Pool(t).QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive))
			return !alive
		}, 10*time.Second, 5*time.Millisecond, "the server ended the save's session")
	}
	// requireSavesAgain checks that the next save commits: the pool
	// dropped the connection the server closed.
	requireSavesAgain := func(t *testing.T, b *testBundle) {
		t.Helper()
		require.Zero(t, rowCount(t, b.testBundle, "order_lines"), "the ended transaction stored nothing")
		require.NoError(t, b.store.ModelSaveTx(t.Context(), save(t, b, bound, func(context.Context, ports.Tx) error { return nil })))
		require.Equal(t, 1, rowCount(t, b.testBundle, "order_lines"))
	}

	t.Run("ContextDeadline", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithTimeout(t.Context(), bound)
		t.Cleanup(cancel)
		entered, done := make(chan uint32), make(chan error, 1)
		apply, resume := frozen(t, entered, false)
		go func() { done <- b.store.ModelSaveTx(ctx, save(t, b, 0, apply)) }()
		requireFenceFreed(t, b, wait(t, entered, "the save's Apply"))
		resume()
		err := wait(t, done, "the save")
		require.ErrorIs(t, err, context.DeadlineExceeded, "the commit comes past the context's deadline")
		requireSavesAgain(t, b)
	})

	// The resumed save finds the session ended at Apply's next statement,
	// or at its commit when Apply sends none: the backend's failure,
	// charged to no event.
	for _, c := range []struct {
		name  string
		query bool
		msg   string
	}{
		{"ApplyStatement", true, "Apply's statement found the session ended: the backend's failure, charged to no event: %v"},
		{"Commit", false, "the commit found the session ended: the backend's failure: %v"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			entered, done := make(chan uint32), make(chan error, 1)
			apply, resume := frozen(t, entered, c.query)
			go func() { done <- b.store.ModelSaveTx(t.Context(), save(t, b, bound, apply)) }()
			requireFenceFreed(t, b, wait(t, entered, "the save's Apply"))
			resume()
			err := wait(t, done, "the save")
			require.ErrorIs(t, err, ports.ErrTransient, c.msg, err)
			requireSavesAgain(t, b)
		})
	}

	t.Run("ModelSaveTxMany", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		other := newUUID(t)
		entered, done := make(chan uint32), make(chan error, 1)
		apply, resume := frozen(t, entered, false)
		go func() {
			_, err := b.store.ModelSaveTxMany(t.Context(), &ports.ModelSaveTxManyParams{Saves: []*ports.ModelSaveTxParams{
				save(t, b, bound, apply),
				{
					Save:        ports.ModelSaveParams{StreamID: other, Perspective: "order_lines", Data: []byte(`{}`), LastEventID: newUUID(t), LastVersion: 1, Now: base},
					IdleTimeout: bound / 2, // the largest bounds the transaction
					Apply:       func(context.Context, ports.Tx) error { return nil },
				},
			}})
			done <- err
		}()
		requireFenceFreed(t, b, wait(t, entered, "the save's Apply"))
		resume()
		err := wait(t, done, "the saves")
		require.ErrorIs(t, err, ports.ErrTransient, "the next entry's save found the session ended: the backend's failure: %v", err)
		requireSavesAgain(t, b)
	})
}

// TestTxIdleBoundEndsWithTransaction checks that the bound a save sets is
// its transaction's only: the connection goes back to the pool with the
// server's setting.
func TestTxIdleBoundEndsWithTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newStoreWith(t, pgtest.PoolOptions{MaxConns: 1}, postgres.Options{Schema: pgtest.Schema(t)})
	var inside string
	require.NoError(t, b.store.ModelSaveTx(ctx, &ports.ModelSaveTxParams{
		Save:        ports.ModelSaveParams{StreamID: newUUID(t), Perspective: "p", Data: []byte(`{}`), LastEventID: newUUID(t), LastVersion: 1, Now: base},
		IdleTimeout: 1500 * time.Millisecond,
		Apply: func(ctx context.Context, tx ports.Tx) error {
			return postgres.TxOf(tx).QueryRow(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&inside)
		},
	}))
	require.Equal(t, "1500ms", inside)
	var after, server string
	require.NoError(t, b.pool.QueryRow(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&after))
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&server))
	require.Equal(t, server, after, "the pool's only connection is back to the server's setting")
}
