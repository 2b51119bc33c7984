package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// TestRetireWaitsForAppendsInProgress checks the lock that makes a
// retirement final: an append in progress that read the perspective's
// subscription (here in a transaction of AppendTx) holds PerspectiveRetire
// back until it commits, and the retirement then deletes the row it stored,
// so that no row of the perspective is left once PerspectiveRetire returned.
func TestRetireWaitsForAppendsInProgress(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	subscribe(t, b, testPerspective, "totals")
	stream := newUUID(t)

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
	var pid uint32
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	res, err := b.store.AppendTx(ctx, tx, &ports.EventsAppendParams{StreamID: stream, Events: newEvents(1), Now: base})
	require.NoError(t, err)
	require.Equal(t, 2, res.WorkRows)

	type outcome struct {
		res *ports.RetireResult
		err error
	}
	retired := make(chan outcome, 1)
	go func() {
		res, err := b.backend.Admin.PerspectiveRetire(ctx, &ports.PerspectiveRetireParams{Perspective: testPerspective})
		retired <- outcome{res, err}
	}()
	waitUntilBlockedBy(t, pid)
	require.NoError(t, tx.Commit(ctx))
	got := wait(t, retired, "the retirement")

	require.NoError(t, got.err)
	require.Equal(t, ports.RetireResult{Subscriptions: 1, Work: 1}, *got.res, "the row of the append it waited for is deleted")
	require.Empty(t, workVersions(t, b, stream, testPerspective))
	require.Equal(t, []int64{1}, workVersions(t, b, stream, "totals"))
	res, err = b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, Events: newEvents(1), Now: base})
	require.NoError(t, err)
	require.Equal(t, 1, res.WorkRows, "later appends store no row of the retired perspective")
}

// TestRetireHoldsNoAppendBehindIt checks that a retirement waiting for an
// append in progress does not make the other appends wait with it: its
// lock request would queue every append behind it, and an application
// that keeps one transaction open until another append returns would wait
// for ever. Each attempt to lock gives up quickly and tries again.
func TestRetireHoldsNoAppendBehindIt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	subscribe(t, b, testPerspective, "totals")

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
	var pid uint32
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	_, err = b.store.AppendTx(ctx, tx, &ports.EventsAppendParams{StreamID: newUUID(t), Events: newEvents(1), Now: base})
	require.NoError(t, err)

	retired := make(chan error, 1)
	go func() {
		_, err := b.backend.Admin.PerspectiveRetire(ctx, &ports.PerspectiveRetireParams{Perspective: testPerspective})
		retired <- err
	}()
	waitUntilBlockedBy(t, pid)

	// The transaction stays open until this append returns, as an
	// application's would that appends on two connections at once.
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := b.backend.Events.EventsAppend(actx, &ports.EventsAppendParams{StreamID: newUUID(t), Events: newEvents(1), Now: base})
	require.NoError(t, err, "an append while the retirement waits")
	require.Equal(t, 2, res.WorkRows, "the perspective is not retired yet")
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, wait(t, retired, "the retirement"))
}
