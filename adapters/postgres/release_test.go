package postgres_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// TestReleaseNeverLosesAStreamWithWork races appends with the completions
// that drain their streams: per stream, one goroutine appends events one at
// a time while another fetches and completes whatever it finds, so that the
// completion that empties a stream and releases it (deletes its row in
// vantage_active_streams) keeps meeting an append that stores the stream's
// next row. A release that decided "no pending row" on a snapshot taken
// before such an append committed would delete the row under it, and
// claims, which walk stream rows, would never find that work again. A
// checker reads, all along, the pending rows whose stream has no row: there
// must never be one. At the end a claim finds every stream with work, and
// draining them leaves nothing pending.
func TestReleaseNeverLosesAStreamWithWork(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const (
		streams = 8
		appends = 150
	)
	b := setup(t)
	subscribe(t, b, testPerspective)
	s := pgx.Identifier{b.schema}.Sanitize()
	appender, completer := newStore(t, b.schema), newStore(t, b.schema)
	instance := uuid.New()
	lease := time.Hour
	_, err := completer.backend.Claimer.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{InstanceID: instance, StaleThreshold: lease})
	require.NoError(t, err)

	// drain fetches the streams and completes every row it got, and
	// returns how many rows it completed.
	drain := func(ids ...uuid.UUID) (int, error) {
		res, err := completer.backend.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
			InstanceID: instance, StreamIDs: ids, LeaseDuration: lease, StaleThreshold: lease,
		})
		if err != nil || len(res.Work) == 0 {
			return 0, err
		}
		byPair := map[pairOf][]ports.WorkItem{}
		for _, w := range res.Work {
			k := pairOf{w.StreamID, w.Perspective}
			byPair[k] = append(byPair[k], w)
		}
		var completions []ports.Completion
		for k, work := range byPair {
			last := work[len(work)-1]
			c := ports.Completion{StreamID: k.stream, Perspective: k.perspective, LastEventID: last.EventID, LastVersion: last.EventVersion}
			for _, w := range work {
				c.WorkIDs = append(c.WorkIDs, w.WorkID)
			}
			completions = append(completions, c)
		}
		res2, err := completer.backend.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{InstanceID: instance, Completions: completions})
		if err != nil {
			return 0, err
		}
		return res2.Completed, nil
	}
	orphans := func(ctx context.Context) (int, error) {
		var n int
		err := b.pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.vantage_work w
WHERE w.processed_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM `+s+`.vantage_active_streams a WHERE a.stream_id = w.stream_id)`).Scan(&n)
		return n, err
	}

	ids := make([]uuid.UUID, streams)
	for i := range ids {
		ids[i] = newUUID(t)
	}
	var (
		wg         sync.WaitGroup
		done       atomic.Int32
		errs       = make(chan error, 2*streams+1)
		completed  atomic.Int64
		maxOrphans atomic.Int64
	)
	for _, id := range ids {
		wg.Go(func() {
			defer done.Add(1)
			for range appends {
				if _, err := appender.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: id, Events: newEvents(1)}); err != nil {
					errs <- err
					return
				}
			}
		})
		wg.Go(func() {
			for done.Load() < streams {
				n, err := drain(id)
				if err != nil {
					errs <- err
					return
				}
				completed.Add(int64(n))
			}
		})
	}
	checkCtx, stopChecking := context.WithCancel(ctx)
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		for checkCtx.Err() == nil {
			n, err := orphans(checkCtx)
			if err != nil {
				if !errors.Is(checkCtx.Err(), context.Canceled) {
					errs <- err
				}
				return
			}
			if int64(n) > maxOrphans.Load() {
				maxOrphans.Store(int64(n))
			}
		}
	}()
	wg.Wait()
	stopChecking()
	<-checked
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, maxOrphans.Load(), "a pending row whose stream had no row: a release deleted it under an append")
	n, err := orphans(ctx)
	require.NoError(t, err)
	require.Zero(t, n)

	// Whatever is left is found by a claim and drains.
	res, err := completer.backend.Claimer.WorkClaim(ctx, &ports.WorkClaimParams{
		InstanceID: instance, MaxStreams: streams, LeaseDuration: lease, StaleThreshold: lease,
	})
	require.NoError(t, err)
	for {
		n, err := drain(res.StreamIDs...)
		require.NoError(t, err)
		completed.Add(int64(n))
		if n == 0 {
			break
		}
	}
	require.Equal(t, int64(streams*appends), completed.Load(), "every appended row was completed once")
	var pending, rows int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+s+`.vantage_work WHERE processed_at IS NULL),
       (SELECT count(*) FROM `+s+`.vantage_active_streams)`).Scan(&pending, &rows))
	require.Zero(t, pending)
	require.Zero(t, rows, "drained streams are released")
}

// pairOf names one (stream, perspective).
type pairOf struct {
	stream      uuid.UUID
	perspective string
}
