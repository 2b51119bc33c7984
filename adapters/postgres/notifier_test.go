package postgres_test

import (
	"context"
	"log/slog"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/logtest"
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
		wakes, err := b.store.NotifierListen(ctx, nil)
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
		role := loginRole(t)
		admin := pgtest.Pool(t)
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

		wakes, err := store.NotifierListen(ctx, nil)
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

	t.Run("ListenReturnsWhileListenerCannotConnect", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		role := loginRole(t)
		admin := pgtest.Pool(t)
		_, err := admin.Exec(ctx, `ALTER ROLE `+role+` NOLOGIN`)
		require.NoError(t, err)
		u, err := url.Parse(pgtest.ConnString(t))
		require.NoError(t, err)
		u.User = url.User(role)
		logs := newLogRecorder(t)
		store, err := postgres.New(pgtest.NewPool(t, 2), postgres.Options{
			Schema:               pgtest.Schema(t),
			ConnString:           u.String(),
			ListenerMinReconnect: 5 * time.Millisecond,
			ListenerMaxReconnect: 20 * time.Millisecond,
			Logger:               slog.New(logs),
		})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, store.Close()) })

		// The listener cannot log in: NotifierListen returns once its first
		// attempt failed, well before it would have given up waiting (5s).
		started := time.Now()
		wakes, err := store.NotifierListen(ctx, nil)
		require.NoError(t, err)
		require.Less(t, time.Since(started), 4*time.Second, "NotifierListen waited for a listener that cannot connect")
		require.False(t, store.NotifierHealthy())
		again, err := store.NotifierListen(ctx, nil)
		require.NoError(t, err, "a second subscriber does not wait either")

		logs.waitFor(t, "at least three failed attempts", func(rs []slog.Record) bool {
			return len(withMessage(rs, "listener connection attempt failed")) >= 3
		})
		_, err = admin.Exec(ctx, `ALTER ROLE `+role+` LOGIN`)
		require.NoError(t, err)
		for _, ch := range []<-chan ports.Wake{wakes, again} {
			require.True(t, wait(t, ch, "the wake of the listener's connection").Reconnected,
				"notifications committed before the listener was up were missed")
		}
		require.True(t, store.NotifierHealthy())
		require.NoError(t, store.NotifierPublish(ctx))
		require.False(t, wait(t, wakes, "a wake once connected").Reconnected)

		logs.waitFor(t, "the reconnection log", func(rs []slog.Record) bool {
			return len(withMessage(rs, "listener reconnected")) == 1
		})
		rs := logs.all()
		warned := withMessage(rs, "listener disconnected; relying on polling until it reconnects")
		require.Len(t, warned, 1, "one warning per outage, not one per failed attempt")
		require.Equal(t, slog.LevelWarn, warned[0].Level)
		require.Contains(t, attrs(warned[0]), "error")
		back := withMessage(rs, "listener reconnected")[0]
		require.Equal(t, slog.LevelInfo, back.Level)
		failed := attrs(back)["failed_attempts"].Int64()
		require.GreaterOrEqual(t, failed, int64(3))
		require.Equal(t, int64(len(withMessage(rs, "listener connection attempt failed"))), failed)
		require.Positive(t, attrs(back)["down_for"].Duration())
	})

	t.Run("CloseClosesSubscriptionsAndIsIdempotent", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(t)
		wakes, err := b.store.NotifierListen(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, b.store.Close())
		_, open := <-wakes
		require.False(t, open)
		require.NoError(t, b.store.Close())
		require.False(t, b.store.NotifierHealthy())
		_, err = b.store.NotifierListen(ctx, nil)
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
		wakes, err := b.store.NotifierListen(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, b.store.NotifierPublish(ctx))
		// Wait until the plain wake is buffered: a second subscriber
		// receiving it proves the listener dispatched it.
		probe, err := b.store.NotifierListen(ctx, nil)
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
		wakes, err := store.NotifierListen(ctx, nil)
		require.NoError(t, err)
		require.True(t, store.NotifierHealthy(), "pq accepted the derived connection string")
		require.NoError(t, store.NotifierPublish(ctx))
		wait(t, wakes, "a wake")
	})
}

// loginRole creates a role that may log in, dropped in t.Cleanup: tests
// forbid it to log in to keep a listener that uses it disconnected.
func loginRole(t *testing.T) string {
	t.Helper()
	role := pgtest.NewSchemaName(t)
	admin := pgtest.Pool(t)
	if _, err := admin.Exec(t.Context(), `CREATE ROLE `+role+` LOGIN`); err != nil {
		t.Skipf("cannot create a role on the test server: %v", err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.WithoutCancel(t.Context()), `DROP ROLE IF EXISTS `+role)
	})
	return role
}

// logRecorder is a slog.Handler that keeps every record (and writes it to
// the test's output), so tests can wait for the logs of the listener's
// goroutine.
type logRecorder struct {
	slog.Handler
	shared *recorded
}

type recorded struct {
	mu      sync.Mutex
	records []slog.Record
	added   chan struct{} // a buffer of one: a record was added
}

func newLogRecorder(t *testing.T) *logRecorder {
	return &logRecorder{
		Handler: slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}),
		shared:  &recorded{added: make(chan struct{}, 1)},
	}
}

func (h *logRecorder) Handle(ctx context.Context, r slog.Record) error {
	h.shared.mu.Lock()
	h.shared.records = append(h.shared.records, r.Clone())
	h.shared.mu.Unlock()
	select {
	case h.shared.added <- struct{}{}:
	default:
	}
	return h.Handler.Handle(ctx, r)
}

func (h *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &logRecorder{Handler: h.Handler.WithAttrs(as), shared: h.shared}
}

func (h *logRecorder) WithGroup(name string) slog.Handler {
	return &logRecorder{Handler: h.Handler.WithGroup(name), shared: h.shared}
}

func (h *logRecorder) all() []slog.Record {
	h.shared.mu.Lock()
	defer h.shared.mu.Unlock()
	return append([]slog.Record(nil), h.shared.records...)
}

// waitFor waits until the records satisfy done.
func (h *logRecorder) waitFor(t *testing.T, what string, done func([]slog.Record) bool) {
	t.Helper()
	for !done(h.all()) {
		wait(t, h.shared.added, what)
	}
}

func withMessage(rs []slog.Record, msg string) []slog.Record {
	var out []slog.Record
	for _, r := range rs {
		if r.Message == msg {
			out = append(out, r)
		}
	}
	return out
}

// attrs returns the record's own attributes by key.
func attrs(r slog.Record) map[string]slog.Value {
	out := map[string]slog.Value{}
	r.Attrs(func(a slog.Attr) bool {
		out[a.Key] = a.Value
		return true
	})
	return out
}

// TestWorkerListenerLogsToWorkerLogger runs a worker on a Store that has no
// Logger of its own, with a JSON logger in core.Options, and makes its
// listener reconnect: the listener's lines must reach the worker's logger,
// as JSON with the worker's instance id, and not slog.Default, where they
// would come out as text in the middle of the application's JSON.
//
// Not parallel: it replaces slog.Default, which the parallel tests of the
// package only use once this test ended (they wait for every sequential
// test) and its Store was closed.
func TestWorkerListenerLogsToWorkerLogger(t *testing.T) {
	defaults := newLogRecorder(t)
	prev := slog.Default()
	slog.SetDefault(slog.New(defaults))
	t.Cleanup(func() { slog.SetDefault(prev) }) // after the Store's Close, registered below

	ctx := t.Context()
	store, err := postgres.New(pgtest.NewPool(t, 4), postgres.Options{
		Schema:               pgtest.Schema(t),
		ConnString:           pgtest.ConnString(t),
		ListenerMinReconnect: 10 * time.Millisecond,
		ListenerMaxReconnect: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })

	logger, logs := logtest.NewJSON(slog.LevelDebug)
	reg := core.NewRegistry()
	require.NoError(t, core.RegisterEvent[driftAdded](reg, "listener.added"))
	p := core.NewPerspective[driftTotal]("listener_totals")
	core.MustHandle(p, func(_ context.Context, m driftTotal, e driftAdded) (driftTotal, error) {
		m.Sum += e.N
		return m, nil
	})
	require.NoError(t, reg.AddPerspective(p))
	w, err := core.New(store.Backend(), reg, &core.Options{Logger: logger})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
	})
	require.True(t, store.NotifierHealthy(), "Start waits for the LISTEN")

	require.Equal(t, 1, terminateListener(t, store))
	logs.WaitFor(t, "the listener's reconnection in the worker's log", 10*time.Second, func(ls []logtest.Line) bool {
		return len(logtest.WithMsg(ls, "listener reconnected")) > 0
	})

	lines := logs.Lines(t) // fails on a repeated key
	for _, msg := range []string{"listener disconnected; relying on polling until it reconnects", "listener reconnected"} {
		got := logtest.WithMsg(lines, msg)
		require.Len(t, got, 1, "%q is logged once per outage", msg)
		require.Equal(t, "postgres.listener", got[0]["component"], msg)
		require.Equal(t, w.InstanceID().String(), got[0]["instance_id"], msg)
		require.Equal(t, store.Schema(), got[0]["schema"], msg)
	}
	require.Equal(t, "WARN", logtest.WithMsg(lines, "listener disconnected; relying on polling until it reconnects")[0].Level())
	require.Equal(t, "INFO", logtest.WithMsg(lines, "listener reconnected")[0].Level())
	for _, r := range defaults.all() {
		require.NotContains(t, r.Message, "listener", "a listener line went to slog.Default: %q", r.Message)
	}
}
