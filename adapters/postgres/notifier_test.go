package postgres_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// terminateListener kills the backend of the store's listener, found by the
// LISTEN on its channel, and returns how many backends it killed.
func terminateListener(t *testing.T, store *postgres.Store) int {
	t.Helper()
	var n int
	err := pgtest.Pool(t).QueryRow(t.Context(), `
		SELECT count(pg_terminate_backend(pid))
		FROM pg_stat_activity
		WHERE query LIKE 'LISTEN %' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`,
		store.Channel()).Scan(&n)
	require.NoError(t, err)
	return n
}

func TestNotifier(t *testing.T) {
	t.Parallel()

	t.Run("ReconnectsAfterBackendTerminated", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(t)
		require.False(t, b.store.NotifierHealthy(), "not healthy before the first Listen")
		wakes, err := b.store.NotifierListen(ctx)
		require.NoError(t, err)
		require.True(t, b.store.NotifierHealthy())

		require.Equal(t, 1, terminateListener(t, b.store))
		w := wait(t, wakes, "the reconnect wake")
		require.True(t, w.Reconnected, "a reconnect tells the receiver to poll")
		require.True(t, b.store.NotifierHealthy(), "healthy again once reconnected")

		// The listener recovered: a wake published now is delivered.
		require.NoError(t, b.store.NotifierPublish(ctx))
		w = wait(t, wakes, "a wake after the reconnect")
		require.False(t, w.Reconnected)
	})

	t.Run("UnhealthyWhileDisconnected", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		schema := pgtest.Schema(t)
		// The listener logs in as its own role, which the test forbids to
		// log in while the connection is down, so it stays disconnected.
		role := pgtest.NewSchemaName(t)
		admin := pgtest.Pool(t)
		if _, err := admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN`); err != nil {
			t.Skipf("cannot create a role on the test server: %v", err)
		}
		t.Cleanup(func() {
			_, _ = admin.Exec(context.WithoutCancel(ctx), `DROP ROLE IF EXISTS `+role)
		})
		u, err := url.Parse(pgtest.ConnString(t))
		require.NoError(t, err)
		u.User = url.User(role)
		store, err := postgres.New(pgtest.NewPool(t, 2), postgres.Options{
			Schema:               schema,
			ConnString:           u.String(),
			ListenerMinReconnect: 10 * time.Millisecond,
			ListenerMaxReconnect: 50 * time.Millisecond,
			Logger:               testLogger(t),
		})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, store.Close()) })

		wakes, err := store.NotifierListen(ctx)
		require.NoError(t, err)
		require.True(t, store.NotifierHealthy())

		_, err = admin.Exec(ctx, `ALTER ROLE `+role+` NOLOGIN`)
		require.NoError(t, err)
		require.Equal(t, 1, terminateListener(t, store))
		// Health follows the listener's event callback, which runs on its
		// goroutine: polling is the only way to observe it.
		require.Eventually(t, func() bool { return !store.NotifierHealthy() }, 10*time.Second, 5*time.Millisecond)

		_, err = admin.Exec(ctx, `ALTER ROLE `+role+` LOGIN`)
		require.NoError(t, err)
		w := wait(t, wakes, "the reconnect wake")
		require.True(t, w.Reconnected)
		require.True(t, store.NotifierHealthy())
	})

	t.Run("CloseClosesSubscriptionsAndIsIdempotent", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(t)
		wakes, err := b.store.NotifierListen(ctx)
		require.NoError(t, err)
		require.NoError(t, b.store.Close())
		_, open := <-wakes
		require.False(t, open)
		require.NoError(t, b.store.Close())
		require.False(t, b.store.NotifierHealthy())
		_, err = b.store.NotifierListen(ctx)
		require.ErrorIs(t, err, ports.ErrClosed)
		_, err = b.store.InstancesList(ctx)
		require.ErrorIs(t, err, ports.ErrClosed)
	})

	t.Run("CloseWithoutListenIsFine", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, b.store.Close())
	})

	t.Run("ReconnectWakeReplacesBufferedWake", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(t)
		wakes, err := b.store.NotifierListen(ctx)
		require.NoError(t, err)
		require.NoError(t, b.store.NotifierPublish(ctx))
		// Wait until the plain wake is buffered: a second subscriber
		// receiving it proves the listener dispatched it.
		probe, err := b.store.NotifierListen(ctx)
		require.NoError(t, err)
		require.NoError(t, b.store.NotifierPublish(ctx))
		wait(t, probe, "the probe's wake")

		require.Equal(t, 1, terminateListener(t, b.store))
		// The probe may still get a late plain wake (the first publish can
		// reach it after it subscribed); the reconnect wake comes after.
		for !wait(t, probe, "the probe's reconnect wake").Reconnected {
		}
		w := wait(t, wakes, "the buffered wake")
		require.True(t, w.Reconnected, "the reconnect wake must not be coalesced into a plain one")
	})

	t.Run("DerivesListenerConnStringFromPool", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		schema := pgtest.Schema(t)
		u, err := url.Parse(pgtest.ConnString(t))
		require.NoError(t, err)
		q := u.Query()
		q.Set("pool_max_conns", "3")
		q.Set("statement_cache_capacity", "64")
		u.RawQuery = q.Encode()
		pool, err := pgxpool.New(ctx, u.String())
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		require.Equal(t, int32(3), pool.Config().MaxConns)
		store, err := postgres.New(pool, postgres.Options{Schema: schema, ListenerMinReconnect: 10 * time.Millisecond, Logger: testLogger(t)})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, store.Close()) })
		wakes, err := store.NotifierListen(ctx)
		require.NoError(t, err)
		require.True(t, store.NotifierHealthy(), "pq accepted the derived connection string")
		require.NoError(t, store.NotifierPublish(ctx))
		wait(t, wakes, "a wake")
	})
}
