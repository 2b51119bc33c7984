package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// TestPollOnly checks a Store made with Options.PollOnly: it offers the
// engine no Notifier and has no listener, while its appends still wake the
// Stores that listen.
func TestPollOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	schema := pgtest.Schema(t)
	b := newStoreWith(t, pgtest.PoolOptions{}, postgres.Options{Schema: schema, PollOnly: true})

	require.Nil(t, b.backend.Notifier, "the engine polls only")
	require.NoError(t, b.backend.Validate())
	_, err := b.store.NotifierListen(ctx, nil)
	require.ErrorIs(t, err, postgres.ErrPollOnly)
	_, err = b.store.NotifierListen(ctx, nil)
	require.ErrorIs(t, err, postgres.ErrPollOnly, "every call")
	require.False(t, b.store.NotifierHealthy())

	listening := newStore(t, schema)
	wakes, err := listening.store.NotifierListen(ctx, nil)
	require.NoError(t, err)
	subscribe(t, b, testPerspective)
	_, err = b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: newUUID(t), Events: newEvents(1), Now: base})
	require.NoError(t, err)
	w := wait(t, wakes, "the wake of the poll-only Store's append")
	require.False(t, w.Reconnected)
}

// TestNewPollOnlyOptions checks that PollOnly excludes a listener
// connection string, and that it needs none: a pool whose connection
// string the listener could not use is fine.
func TestNewPollOnlyOptions(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	_, err := postgres.New(pool, postgres.Options{PollOnly: true, ConnString: pgtest.ConnString(t)})
	require.ErrorContains(t, err, "Options.ConnString")
	require.ErrorContains(t, err, "Options.PollOnly")

	cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:5432,127.0.0.2:5432/test?sslmode=disable")
	require.NoError(t, err)
	multi, err := pgxpool.NewWithConfig(t.Context(), cfg) // connects lazily
	require.NoError(t, err)
	t.Cleanup(multi.Close)
	s, err := postgres.New(multi, postgres.Options{PollOnly: true})
	require.NoError(t, err, "no listener string is derived")
	require.NoError(t, s.Close())
}
