package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

const (
	testType        = "OrderPlaced"
	testPerspective = "orders"
)

func subscribe(t *testing.T, b *testBundle, perspectives ...string) {
	t.Helper()
	var subs []ports.Subscription
	for _, p := range perspectives {
		subs = append(subs, ports.Subscription{EventType: testType, Perspective: p})
	}
	require.NoError(t, b.backend.Events.SubscriptionsRegister(t.Context(), &ports.SubscriptionsRegisterParams{Subscriptions: subs}))
}

func newEvents(n int) []ports.NewEvent {
	events := make([]ports.NewEvent, n)
	for i := range events {
		events[i] = ports.NewEvent{Type: testType, Data: []byte(fmt.Sprintf(`{"i":%d}`, i))}
	}
	return events
}

// streamVersions returns the stored versions of stream in order.
func streamVersions(t *testing.T, b *testBundle, stream uuid.UUID) []int64 {
	t.Helper()
	events, err := b.backend.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream})
	require.NoError(t, err)
	versions := make([]int64, len(events))
	for i, e := range events {
		versions[i] = e.Version
	}
	return versions
}

// workVersions returns the versions of the stream's pending work rows of
// perspective, read directly from the table.
func workVersions(t *testing.T, b *testBundle, stream uuid.UUID, perspective string) []int64 {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT event_version FROM `+pgx.Identifier{b.schema}.Sanitize()+
		`.vantage_work WHERE stream_id = $1 AND perspective = $2 AND processed_at IS NULL ORDER BY event_version`,
		stream, perspective)
	require.NoError(t, err)
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return versions
}

func seq(from, to int64) []int64 {
	var out []int64
	for v := from; v <= to; v++ {
		out = append(out, v)
	}
	return out
}

// waitForLockWaiters waits until n backends wait for an advisory lock (an
// append blocked behind another transaction's stream lock). Polling the
// catalog is the only way to observe a blocked statement.
func waitForLockWaiters(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting int
		err := pgtest.Pool(t).QueryRow(t.Context(),
			`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&waiting)
		require.NoError(t, err)
		return waiting >= n
	}, 10*time.Second, 5*time.Millisecond)
}

func TestAppendTx(t *testing.T) {
	t.Parallel()

	t.Run("SameStreamCommitsInVersionOrder", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(t)
		subscribe(t, b, testPerspective)
		stream := newUUID(t)

		tx1, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		res1, err := b.store.AppendTx(ctx, tx1, &ports.EventsAppendParams{StreamID: stream, Events: newEvents(2), Now: base})
		require.NoError(t, err)
		require.Equal(t, []int64{1, 2}, []int64{res1.Events[0].Version, res1.Events[1].Version})

		// A second transaction appending to the stream waits for the first
		// to end, so it cannot commit a version below one still in flight.
		type outcome struct {
			res *ports.EventsAppendResult
			tx  pgx.Tx
			err error
		}
		second := make(chan outcome, 1)
		go func() {
			tx2, err := b.pool.Begin(ctx)
			if err != nil {
				second <- outcome{err: err}
				return
			}
			res, err := b.store.AppendTx(ctx, tx2, &ports.EventsAppendParams{StreamID: stream, Events: newEvents(2), Now: base})
			second <- outcome{res: res, tx: tx2, err: err}
		}()
		waitForLockWaiters(t, 1)
		select {
		case o := <-second:
			t.Fatalf("second append returned while the first transaction was open: %+v", o)
		default:
		}
		require.NoError(t, tx1.Commit(ctx))
		o := wait(t, second, "the second append")
		require.NoError(t, o.err)
		require.Equal(t, []int64{3, 4}, []int64{o.res.Events[0].Version, o.res.Events[1].Version})
		require.NoError(t, o.tx.Commit(ctx))

		require.Equal(t, seq(1, 4), streamVersions(t, b, stream))
		require.Equal(t, seq(1, 4), workVersions(t, b, stream, testPerspective))
	})

	t.Run("DifferentStreamsCommitInReverseOrder", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(t)
		subscribe(t, b, testPerspective)
		s1, s2 := newUUID(t), newUUID(t)

		tx1, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = b.store.AppendTx(ctx, tx1, &ports.EventsAppendParams{StreamID: s1, Events: newEvents(3), Now: base})
		require.NoError(t, err)
		tx2, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = b.store.AppendTx(ctx, tx2, &ports.EventsAppendParams{StreamID: s2, Events: newEvents(2), Now: base})
		require.NoError(t, err, "streams do not share a lock")
		require.NoError(t, tx2.Commit(ctx))
		require.NoError(t, tx1.Commit(ctx))

		require.Equal(t, seq(1, 3), streamVersions(t, b, s1))
		require.Equal(t, seq(1, 3), workVersions(t, b, s1, testPerspective))
		require.Equal(t, seq(1, 2), streamVersions(t, b, s2))
		require.Equal(t, seq(1, 2), workVersions(t, b, s2, testPerspective))
	})

	t.Run("RollbackLeavesNothing", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(t)
		subscribe(t, b, testPerspective, "totals")
		stream := newUUID(t)

		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		res, err := b.store.AppendTx(ctx, tx, &ports.EventsAppendParams{StreamID: stream, Events: newEvents(3), Now: base})
		require.NoError(t, err)
		require.Equal(t, 6, res.WorkRows)
		require.NoError(t, tx.Rollback(ctx))

		require.Empty(t, streamVersions(t, b, stream))
		var work int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM `+b.schema+`.vantage_work`).Scan(&work))
		require.Zero(t, work)

		// The stream starts over at version 1.
		res, err = b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, ExpectedVersion: ports.ExpectNoStream, Events: newEvents(1), Now: base})
		require.NoError(t, err)
		require.Equal(t, int64(1), res.Events[0].Version)
	})

	t.Run("CommitsWithBusinessWritesAndNotifiesOnCommit", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(t)
		subscribe(t, b, testPerspective)
		listener := newStore(t, b.schema)
		wakes, err := listener.backend.Notifier.NotifierListen(ctx, nil)
		require.NoError(t, err)

		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `CREATE TABLE `+b.schema+`.orders (id uuid PRIMARY KEY)`)
		require.NoError(t, err)
		stream := newUUID(t)
		_, err = tx.Exec(ctx, `INSERT INTO `+b.schema+`.orders VALUES ($1)`, stream)
		require.NoError(t, err)
		_, err = b.store.AppendTx(ctx, tx, &ports.EventsAppendParams{StreamID: stream, Events: newEvents(1), Now: base})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))

		w := wait(t, wakes, "the wake of the committed append")
		require.False(t, w.Reconnected)
		require.Equal(t, seq(1, 1), streamVersions(t, b, stream))
	})

	t.Run("ConflictInCallerTransaction", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(t)
		stream := newUUID(t)
		_, err := b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, Events: newEvents(1), Now: base})
		require.NoError(t, err)

		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		_, err = b.store.AppendTx(ctx, tx, &ports.EventsAppendParams{StreamID: stream, ExpectedVersion: ports.ExpectNoStream, Events: newEvents(1), Now: base})
		require.ErrorIs(t, err, ports.ErrVersionConflict)
		_, err = b.store.AppendTx(ctx, tx, &ports.EventsAppendParams{StreamID: stream, Events: []ports.NewEvent{{Type: testType, Version: 1, Data: []byte(`{}`)}}, Now: base})
		require.ErrorIs(t, err, ports.ErrVersionConflict, "a taken explicit version")
	})
}

// TestAppendNoGapsUnderContention has writers append to one stream in their
// own transactions, holding them open for a moment and rolling some back,
// while a consumer claims, fetches and completes. Every committed event must
// be applied exactly once, in version order, and versions must be
// contiguous.
func TestAppendNoGapsUnderContention(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	subscribe(t, b, testPerspective)
	stream := newUUID(t)
	const (
		writers = 4
		appends = 15
	)

	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		committed int
		writeErrs []error
	)
	for w := range writers {
		pool := pgtest.NewPool(t, 2)
		wg.Go(func() {
			for i := range appends {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := b.store.AppendTx(ctx, tx, &ports.EventsAppendParams{StreamID: stream, Events: newEvents(1 + i%2)}); err != nil {
						return err
					}
					// Keep the transaction (and the stream lock) open across
					// a round trip, so other writers queue behind it.
					if _, err := tx.Exec(ctx, `SELECT pg_sleep(0.001)`); err != nil {
						return err
					}
					if (w+i)%5 == 0 {
						return errRollback
					}
					return nil
				})
				mu.Lock()
				switch {
				case err == nil:
					committed += 1 + i%2
				case !errors.Is(err, errRollback):
					writeErrs = append(writeErrs, err)
				}
				mu.Unlock()
			}
		})
	}

	consumer := uuid.New()
	var applied []int64
	drain := func() {
		_, err := b.backend.Claimer.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{InstanceID: consumer, StaleThreshold: time.Minute})
		require.NoError(t, err)
		_, err = b.backend.Claimer.WorkClaim(ctx, &ports.WorkClaimParams{InstanceID: consumer, MaxStreams: 10, LeaseDuration: time.Minute, StaleThreshold: time.Minute})
		require.NoError(t, err)
		res, err := b.backend.Fetcher.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{
			InstanceID: consumer, StreamIDs: []uuid.UUID{stream}, LeaseDuration: time.Minute, StaleThreshold: time.Minute,
		})
		require.NoError(t, err)
		if len(res.Work) == 0 {
			return
		}
		var ids []uuid.UUID
		for i, w := range res.Work {
			require.Equal(t, int64(len(applied)+1), w.EventVersion, "applied in order without gaps")
			require.Equal(t, res.Events[i].ID, w.EventID)
			applied = append(applied, w.EventVersion)
			ids = append(ids, w.WorkID)
		}
		last := res.Events[len(res.Events)-1]
		_, err = b.backend.Cursors.WorkComplete(ctx, &ports.WorkCompleteParams{InstanceID: consumer, Completions: []ports.Completion{{
			StreamID: stream, Perspective: testPerspective, LastEventID: last.ID, LastVersion: last.Version, WorkIDs: ids,
		}}})
		require.NoError(t, err)
	}

	writersDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(writersDone)
	}()
	for running := true; running; {
		select {
		case <-writersDone:
			running = false
		default:
		}
		drain()
	}
	drain() // whatever committed after the last pass
	require.Empty(t, writeErrs)

	require.Equal(t, seq(1, int64(committed)), streamVersions(t, b, stream))
	require.Equal(t, seq(1, int64(committed)), applied)
	require.Empty(t, workVersions(t, b, stream, testPerspective))
	cursors, err := b.backend.Cursors.CursorsGet(ctx, &ports.CursorsGetParams{StreamIDs: []uuid.UUID{stream}})
	require.NoError(t, err)
	require.Len(t, cursors, 1)
	require.Equal(t, int64(committed), cursors[0].LastVersion)
	require.False(t, cursors[0].Status.Has(ports.CursorRewindRequired))
}

var errRollback = errors.New("rollback on purpose")

// TestSchemasAreIndependent runs two services on one database: they share
// no events, work, instances or notifications.
func TestSchemasAreIndependent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b := setup(t), setup(t)
	subscribe(t, a, testPerspective)
	subscribe(t, b, "other")
	stream := newUUID(t)

	aWakes, err := a.backend.Notifier.NotifierListen(ctx, nil)
	require.NoError(t, err)
	bWakes, err := b.backend.Notifier.NotifierListen(ctx, nil)
	require.NoError(t, err)

	for _, tb := range []*testBundle{a, b} {
		res, err := tb.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, ExpectedVersion: ports.ExpectNoStream, Events: newEvents(2), Now: base})
		require.NoError(t, err, "the same stream starts empty in each schema")
		require.Equal(t, 2, res.WorkRows)
		wait(t, map[*testBundle]<-chan ports.Wake{a: aWakes, b: bWakes}[tb], "the wake of its own schema")
	}
	require.Equal(t, seq(1, 2), workVersions(t, a, stream, testPerspective))
	require.Empty(t, workVersions(t, a, stream, "other"))
	require.Equal(t, seq(1, 2), workVersions(t, b, stream, "other"))

	inst := uuid.New()
	_, err = a.backend.Claimer.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{InstanceID: inst, StaleThreshold: time.Minute, Now: base})
	require.NoError(t, err)
	claim, err := a.backend.Claimer.WorkClaim(ctx, &ports.WorkClaimParams{InstanceID: inst, MaxStreams: 10, LeaseDuration: time.Minute, StaleThreshold: time.Minute, Now: base})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{stream}, claim.StreamIDs)
	_, err = b.backend.Claimer.WorkClaim(ctx, &ports.WorkClaimParams{InstanceID: inst, MaxStreams: 10, LeaseDuration: time.Minute, StaleThreshold: time.Minute, Now: base})
	require.ErrorIs(t, err, ports.ErrInstanceNotAlive, "instances are per schema")

	// A wake published on a's schema reaches a's listener, not b's. The
	// absence can only be checked for a while; a's wake arriving first
	// makes a late cross delivery unlikely.
	require.NoError(t, a.backend.Notifier.(ports.Publisher).NotifierPublish(ctx))
	wait(t, aWakes, "a's wake")
	select {
	case w := <-bWakes:
		t.Fatalf("b received a's wake: %+v", w)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestAppendRepeats checks that an append repeated with the same event ids,
// as after a commit whose acknowledgement was lost, returns the stored
// events and stores nothing, and that every other reuse of a stored id is a
// conflict that stores nothing either.
func TestAppendRepeats(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	subscribe(t, b, testPerspective)
	stream, other := newUUID(t), newUUID(t)
	events := newEvents(2)
	for i := range events {
		events[i].ID = newUUID(t)
		events[i].Metadata.Headers = map[string]string{"try": "first"}
	}
	appendAt := func(stream uuid.UUID, expected int64, events []ports.NewEvent, now time.Time) (*ports.EventsAppendResult, error) {
		return b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, ExpectedVersion: expected, Events: events, Now: now})
	}
	first, err := appendAt(stream, ports.ExpectNoStream, events, base)
	require.NoError(t, err)
	require.False(t, first.AlreadyStored)
	require.Equal(t, 2, first.WorkRows)

	retried := slices.Clone(events)
	for i := range retried {
		retried[i].Data = []byte(fmt.Sprintf(`{ "i" : %d }`, i)) // the same JSON, spelt differently
		retried[i].Metadata.Headers = map[string]string{"try": "second"}
	}
	for _, expected := range []int64{ports.ExpectNoStream, 0} {
		again, err := appendAt(stream, expected, retried, base.Add(time.Minute))
		require.NoError(t, err, "expected version %d", expected)
		require.True(t, again.AlreadyStored)
		require.Zero(t, again.WorkRows)
		for i, e := range again.Events {
			require.Equal(t, first.Events[i].ID, e.ID)
			require.Equal(t, first.Events[i].Version, e.Version)
			require.Equal(t, first.Events[i].CreatedAt, e.CreatedAt, "as stored then")
			require.Equal(t, "first", e.Metadata.Headers["try"], "the stored metadata")
		}
	}
	require.Equal(t, seq(1, 2), streamVersions(t, b, stream))
	require.Equal(t, seq(1, 2), workVersions(t, b, stream, testPerspective), "a repeat stores no work")

	// The stream moved on: the first append is still recognised by its ids.
	_, err = appendAt(stream, 2, newEvents(1), base.Add(2*time.Minute))
	require.NoError(t, err)
	again, err := appendAt(stream, ports.ExpectNoStream, events, base.Add(3*time.Minute))
	require.NoError(t, err)
	require.True(t, again.AlreadyStored)

	changed := slices.Clone(events)
	changed[1].Data = []byte(`{"i":99}`)
	partial := append(slices.Clone(events[:1]), ports.NewEvent{Type: testType, Data: []byte(`{}`)})
	for name, c := range map[string]struct {
		stream   uuid.UUID
		expected int64
		events   []ports.NewEvent
	}{
		"other data":              {stream, 0, changed},
		"other expected version":  {stream, 2, events},
		"other stream":            {other, 0, events},
		"some ids new":            {stream, 0, partial},
		"explicit version moved":  {stream, 0, []ports.NewEvent{{ID: events[0].ID, Type: testType, Version: 2, Data: events[0].Data}}},
		"other type":              {stream, 0, []ports.NewEvent{{ID: events[0].ID, Type: "Other", Data: events[0].Data}}},
		"expected after the head": {stream, 3, events},
	} {
		_, err := appendAt(c.stream, c.expected, c.events, base.Add(4*time.Minute))
		require.ErrorIs(t, err, ports.ErrVersionConflict, name)
	}
	require.Equal(t, seq(1, 3), streamVersions(t, b, stream), "conflicts store nothing")
	require.Empty(t, streamVersions(t, b, other))
}

// TestAppendTxRepeatKeepsTransaction checks that a repeated append, and a
// reused event id, leave the caller's transaction usable: both are found
// before anything is inserted, so no unique violation aborts it.
func TestAppendTxRepeatKeepsTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	subscribe(t, b, testPerspective)
	stream := newUUID(t)
	events := newEvents(2)
	for i := range events {
		events[i].ID = newUUID(t)
	}
	_, err := b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, ExpectedVersion: ports.ExpectNoStream, Events: events, Now: base})
	require.NoError(t, err)

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	res, err := b.store.AppendTx(ctx, tx, &ports.EventsAppendParams{StreamID: stream, ExpectedVersion: ports.ExpectNoStream, Events: events, Now: base})
	require.NoError(t, err)
	require.True(t, res.AlreadyStored)
	_, err = b.store.AppendTx(ctx, tx, &ports.EventsAppendParams{StreamID: newUUID(t), Events: events[:1], Now: base})
	require.ErrorIs(t, err, ports.ErrVersionConflict, "the id is stored in another stream")
	res, err = b.store.AppendTx(ctx, tx, &ports.EventsAppendParams{StreamID: stream, ExpectedVersion: 2, Events: newEvents(1), Now: base})
	require.NoError(t, err, "the transaction goes on")
	require.Equal(t, int64(3), res.Events[0].Version)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, seq(1, 3), streamVersions(t, b, stream))
}

// TestAppendConflictKeepsConnection checks that an append rejected by the
// database (a taken version aborts its transaction) or by its
// ExpectedVersion check ends its transaction before the connection returns
// to the pool, in every query execution mode: the next append runs on the
// same server process and succeeds.
func TestAppendConflictKeepsConnection(t *testing.T) {
	for name, mode := range map[string]pgx.QueryExecMode{
		"CacheStatement": pgx.QueryExecModeCacheStatement,
		"CacheDescribe":  pgx.QueryExecModeCacheDescribe,
		"DescribeExec":   pgx.QueryExecModeDescribeExec,
		"Exec":           pgx.QueryExecModeExec,
		"SimpleProtocol": pgx.QueryExecModeSimpleProtocol,
	} {
		t.Run(name, func(t *testing.T) {
			b := newStoreWith(t, pgtest.PoolOptions{MaxConns: 1, QueryExecMode: mode}, postgres.Options{Schema: pgtest.Schema(t)})
			subscribe(t, b, testPerspective)
			ctx := t.Context()
			pid := func() uint32 {
				conn, err := b.pool.Acquire(ctx)
				require.NoError(t, err)
				defer conn.Release()
				return conn.Conn().PgConn().PID()
			}
			stream := newUUID(t)
			first := pid()
			_, err := b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, Events: newEvents(1)})
			require.NoError(t, err)

			taken := newEvents(1)
			taken[0].Version = 1
			_, err = b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, Events: taken})
			require.ErrorIs(t, err, ports.ErrVersionConflict)
			require.Equal(t, first, pid(), "the connection survived the aborted transaction")

			_, err = b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, ExpectedVersion: 5, Events: newEvents(1)})
			require.ErrorIs(t, err, ports.ErrVersionConflict)
			require.Equal(t, first, pid(), "the connection survived the failed version check")

			res, err := b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: stream, ExpectedVersion: 1, Events: newEvents(1)})
			require.NoError(t, err)
			require.Equal(t, int64(2), res.Events[0].Version)
			require.Equal(t, []int64{1, 2}, streamVersions(t, b, stream))
			require.Equal(t, []int64{1, 2}, workVersions(t, b, stream, testPerspective))
		})
	}
}
