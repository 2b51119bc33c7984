package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// Events of the table projection tests: an order line is set (inserted or
// its quantity replaced) or removed.
type (
	lineSet struct {
		SKU string
		Qty int
	}
	lineRemoved struct{ SKU string }
)

// projectionBundle is a schema with the application's tables, order_lines
// (the projection's rows) and line_effects (one row per write an apply
// made, so a double apply shows), and a registry with the order_lines
// projection.
type projectionBundle struct {
	*testBundle
	reg *core.Registry
	// fail, when set, runs in the apply of lineSet after its writes; an
	// error it returns (or a panic in it) fails the event.
	fail func(ctx context.Context, tx ports.Tx, e lineSet) error
	// resetFailures is how many more resets fail.
	resetFailures atomic.Int32
	// applies counts the applies of each SKU, failed ones included.
	mu      sync.Mutex
	applies map[string]int
}

func setupProjection(t *testing.T) *projectionBundle {
	t.Helper()
	b := &projectionBundle{testBundle: setup(t), reg: core.NewRegistry(), applies: map[string]int{}}
	_, err := b.pool.Exec(t.Context(), `
CREATE TABLE `+b.table("order_lines")+` (stream_id uuid, sku text, qty int NOT NULL, PRIMARY KEY (stream_id, sku));
CREATE TABLE `+b.table("line_effects")+` (stream_id uuid NOT NULL, version bigint NOT NULL)`)
	require.NoError(t, err)
	require.NoError(t, core.RegisterEvent[lineSet](b.reg, "line.set"))
	require.NoError(t, core.RegisterEvent[lineRemoved](b.reg, "line.removed"))

	p := core.NewProjection("order_lines", func(ctx context.Context, tx ports.Tx, stream uuid.UUID) error {
		if b.resetFailures.Add(-1) >= 0 {
			return errors.New("order_lines reset refused")
		}
		_, err := postgres.TxOf(tx).Exec(ctx, `DELETE FROM `+b.table("order_lines")+` WHERE stream_id = $1;`, stream)
		if err == nil {
			_, err = postgres.TxOf(tx).Exec(ctx, `DELETE FROM `+b.table("line_effects")+` WHERE stream_id = $1`, stream)
		}
		return err
	})
	core.MustHandleTx(p, func(ctx context.Context, tx ports.Tx, e lineSet) error {
		b.mu.Lock()
		b.applies[e.SKU]++
		b.mu.Unlock()
		ev, _ := core.EventFromContext(ctx)
		if err := b.effect(ctx, tx, ev); err != nil {
			return err
		}
		_, err := postgres.TxOf(tx).Exec(ctx, `INSERT INTO `+b.table("order_lines")+` VALUES ($1, $2, $3)
ON CONFLICT (stream_id, sku) DO UPDATE SET qty = excluded.qty`, ev.StreamID, e.SKU, e.Qty)
		if err == nil && b.fail != nil {
			err = b.fail(ctx, tx, e)
		}
		return err
	})
	core.MustHandleTx(p, func(ctx context.Context, tx ports.Tx, e lineRemoved) error {
		ev, _ := core.EventFromContext(ctx)
		if err := b.effect(ctx, tx, ev); err != nil {
			return err
		}
		_, err := postgres.TxOf(tx).Exec(ctx, `DELETE FROM `+b.table("order_lines")+` WHERE stream_id = $1 AND sku = $2`, ev.StreamID, e.SKU)
		return err
	})
	require.NoError(t, b.reg.AddPerspective(p))
	return b
}

func (b *projectionBundle) table(name string) string {
	return pgx.Identifier{b.schema, name}.Sanitize()
}

func (b *projectionBundle) effect(ctx context.Context, tx ports.Tx, ev ports.Event) error {
	_, err := postgres.TxOf(tx).Exec(ctx, `INSERT INTO `+b.table("line_effects")+` VALUES ($1, $2)`, ev.StreamID, ev.Version)
	return err
}

// appendLines appends events to stream, at explicit versions when
// versions is not nil.
func (b *projectionBundle) appendLines(t *testing.T, stream uuid.UUID, versions []int64, events ...any) {
	t.Helper()
	require.NoError(t, b.reg.RegisterSubscriptions(t.Context(), b.backend.Events))
	news := make([]ports.NewEvent, len(events))
	for i, e := range events {
		ne, err := b.reg.Encode(e)
		require.NoError(t, err)
		if versions != nil {
			ne.Version = versions[i]
		}
		news[i] = ne
	}
	_, err := b.backend.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{StreamID: stream, Events: news, Now: time.Now()})
	require.NoError(t, err)
}

// lines returns the order lines of stream, SKU to quantity.
func (b *projectionBundle) lines(t *testing.T, stream uuid.UUID) map[string]int {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT sku, qty FROM `+b.table("order_lines")+` WHERE stream_id = $1`, stream)
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var (
			sku string
			qty int
		)
		require.NoError(t, rows.Scan(&sku, &qty))
		out[sku] = qty
	}
	require.NoError(t, rows.Err())
	return out
}

// effects returns the versions of stream whose writes are stored, in order.
func (b *projectionBundle) effects(t *testing.T, stream uuid.UUID) []int64 {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT version FROM `+b.table("line_effects")+` WHERE stream_id = $1 ORDER BY version`, stream)
	require.NoError(t, err)
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return vs
}

func (b *projectionBundle) appliesOf(sku string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.applies[sku]
}

// projectionOptions are quick options for one worker of the tests.
func projectionOptions(t *testing.T) core.Options {
	return core.Options{
		Logger: testLogger(t),
		Drain: core.DrainOptions{
			PollingInterval:              10 * time.Millisecond,
			NotifyHealthyPollingInterval: 10 * time.Millisecond,
			Batcher:                      core.DrainBatcherOptions{SlidingWindow: time.Millisecond, MaxWait: 5 * time.Millisecond},
		},
		Claims: core.ClaimOptions{
			Interval:              10 * time.Millisecond,
			NotifyHealthyInterval: 10 * time.Millisecond,
			HeartbeatInterval:     100 * time.Millisecond,
		},
		Retries: core.RetryOptions{
			Event: core.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 1},
		},
		Rewind: core.RewindOptions{Debounce: 20 * time.Millisecond, MaxDebounce: 100 * time.Millisecond, LockTimeout: 5 * time.Second, KeepAlive: time.Second},
	}
}

func startProjectionWorker(t *testing.T, backend ports.Backend, reg *core.Registry, opts core.Options) *core.Worker {
	t.Helper()
	w, err := core.New(backend, reg, &opts)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 20*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})
	return w
}

func waitForStream(t *testing.T, w *core.Worker, stream uuid.UUID, version int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, w.WaitForStream(ctx, stream, version))
}

// TestProjection runs table projections on a worker: their rows commit
// with their cursor, exactly once, and a failed write leaves nothing.
func TestProjection(t *testing.T) {
	t.Parallel()

	t.Run("CatchUpWritesEachEventOnce", func(t *testing.T) {
		t.Parallel()
		b := setupProjection(t)
		streams := []uuid.UUID{newUUID(t), newUUID(t), newUUID(t)}
		const perStream = 20
		for _, s := range streams {
			events := make([]any, 0, perStream)
			for i := range perStream {
				events = append(events, lineSet{SKU: fmt.Sprintf("sku-%d", i%5), Qty: i})
			}
			events = append(events, lineRemoved{SKU: "sku-0"})
			b.appendLines(t, s, nil, events...)
		}
		opts := projectionOptions(t)
		opts.Drain.PerspectiveBatchSize = 3 // several transactions per stream
		w := startProjectionWorker(t, b.backend, b.reg, opts)

		for _, s := range streams {
			waitForStream(t, w, s, perStream+1)
			require.Equal(t, seq(1, perStream+1), b.effects(t, s), "one write per event")
			require.Equal(t, map[string]int{"sku-1": 16, "sku-2": 17, "sku-3": 18, "sku-4": 19}, b.lines(t, s))
		}
	})

	t.Run("RedeliveryWritesNothingAgain", func(t *testing.T) {
		t.Parallel()
		b := setupProjection(t)
		stream := newUUID(t)
		b.appendLines(t, stream, nil, lineSet{SKU: "a", Qty: 1}, lineSet{SKU: "b", Qty: 2}, lineSet{SKU: "a", Qty: 3})

		// The first worker writes and moves the cursor, but its completions
		// are lost: the work rows stay pending, as after a crash.
		first := b.backend
		first.Cursors = &lostCompletions{CursorStore: b.backend.Cursors}
		opts := projectionOptions(t)
		processed := make(chan core.PerspectiveEventProcessed, 8)
		opts.Hooks.OnPerspectiveEventProcessed = func(e core.PerspectiveEventProcessed) { processed <- e }
		w, err := core.New(first, b.reg, &opts)
		require.NoError(t, err)
		require.NoError(t, w.Start(t.Context()))
		for e := wait(t, processed, "the first worker's writes"); e.LastVersion < 3; e = wait(t, processed, "the first worker's writes") {
		}
		stopCtx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
		require.Equal(t, seq(1, 3), workVersions(t, b.testBundle, stream, "order_lines"), "the completions were lost")

		// A second worker gets the rows again and completes them unapplied.
		opts = projectionOptions(t)
		flushed := make(chan core.CompletionsFlushed, 8)
		opts.Hooks.OnCompletionsFlushed = func(f core.CompletionsFlushed) { flushed <- f }
		startProjectionWorker(t, b.backend, b.reg, opts)
		for len(workVersions(t, b.testBundle, stream, "order_lines")) > 0 {
			wait(t, flushed, "the second worker's completions")
		}
		require.Equal(t, seq(1, 3), b.effects(t, stream), "each event written once")
		require.Equal(t, map[string]int{"a": 3, "b": 2}, b.lines(t, stream))
	})

	for _, mode := range []struct {
		name string
		fail func() error
	}{
		{"ApplyErrorLeavesNoRows", func() error { return errors.New("refused") }},
		{"PanicBeforeCommitLeavesNoRows", func() error { panic("crash between the write and the commit") }},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			b := setupProjection(t)
			b.fail = func(_ context.Context, _ ports.Tx, e lineSet) error {
				if e.SKU == "poison" {
					return mode.fail()
				}
				return nil
			}
			stream := newUUID(t)
			// One batch: the poison event's failure rolls back the writes
			// of the events around it too, which are saved again without it.
			b.appendLines(t, stream, nil, lineSet{SKU: "a", Qty: 1}, lineSet{SKU: "b", Qty: 2},
				lineSet{SKU: "poison", Qty: 3}, lineSet{SKU: "c", Qty: 4})
			opts := projectionOptions(t)
			opts.Retries.MaxEventAttempts = 3
			failures := make(chan ports.Failure, 8)
			dead := make(chan ports.DeadLetter, 1)
			opts.Hooks.OnFailure = func(f ports.Failure) { failures <- f }
			opts.Hooks.OnDeadLettered = func(d ports.DeadLetter) { dead <- d }
			w := startProjectionWorker(t, b.backend, b.reg, opts)

			d := wait(t, dead, "the poison event dead-lettered")
			require.Equal(t, int64(3), d.EventVersion)
			require.Equal(t, 3, b.appliesOf("poison"), "every attempt applied it")
			f := wait(t, failures, "the first failure")
			require.Equal(t, int64(2), f.LastVersion, "the events before the poison one were saved without it")
			require.Len(t, f.FailedWorkIDs, 1)
			waitForStream(t, w, stream, 4)
			require.Equal(t, []int64{1, 2, 4}, b.effects(t, stream), "nothing of the poison event is stored")
			require.Equal(t, map[string]int{"a": 1, "b": 2, "c": 4}, b.lines(t, stream))
		})
	}

	// A write past ApplyTimeout is cancelled, which closes its
	// connection: its event counts a failed attempt, as a slow apply does,
	// and the writes grouped with it commit without it. Its first save,
	// shared with the others, is cut at the patience of shared saves
	// (ApplyTimeout/4), charging nothing; each attempt after it runs
	// alone, until ApplyTimeout.
	t.Run("SlowWriteTimesOut", func(t *testing.T) {
		t.Parallel()
		b := setupProjection(t)
		b.fail = func(ctx context.Context, tx ports.Tx, e lineSet) error {
			if e.SKU != "slow" {
				return nil
			}
			_, err := postgres.TxOf(tx).Exec(ctx, `SELECT pg_sleep(60)`)
			return err
		}
		slow, others := newUUID(t), []uuid.UUID{newUUID(t), newUUID(t), newUUID(t)}
		b.appendLines(t, slow, nil, lineSet{SKU: "a", Qty: 1}, lineSet{SKU: "slow", Qty: 2}, lineSet{SKU: "c", Qty: 3})
		for _, s := range others {
			b.appendLines(t, s, nil, lineSet{SKU: "x", Qty: 1}, lineSet{SKU: "y", Qty: 2})
		}
		opts := projectionOptions(t)
		opts.Drain.ApplyTimeout = 200 * time.Millisecond
		opts.Retries.MaxEventAttempts = 2
		dead := make(chan ports.DeadLetter, 1)
		opts.Hooks.OnDeadLettered = func(d ports.DeadLetter) { dead <- d }
		w := startProjectionWorker(t, b.backend, b.reg, opts)

		d := wait(t, dead, "the slow event dead-lettered")
		require.Equal(t, slow, d.StreamID)
		require.Equal(t, int64(2), d.EventVersion)
		require.Equal(t, ports.ReasonTimedOut, d.Reason)
		require.Contains(t, d.Error, "past its deadline (ApplyTimeout 200ms)")
		require.Equal(t, 3, b.appliesOf("slow"), "cut once, then each attempt timed out alone")
		waitForStream(t, w, slow, 3)
		require.Equal(t, map[string]int{"a": 1, "c": 3}, b.lines(t, slow))
		for _, s := range others {
			waitForStream(t, w, s, 2)
			require.Equal(t, map[string]int{"x": 1, "y": 2}, b.lines(t, s))
			require.Equal(t, seq(1, 2), b.effects(t, s))
		}
	})

	// A write slower than the patience of shared saves (ApplyTimeout/4)
	// and within ApplyTimeout costs its event nothing: cut from the save it
	// shared (pg_sleep cancelled, its connection closed), it is written
	// alone and saved, never charged (with one attempt allowed, a charge
	// would dead-letter it); the streams drained with it are saved too.
	t.Run("SlowWriteSavedAlone", func(t *testing.T) {
		t.Parallel()
		b := setupProjection(t)
		b.fail = func(ctx context.Context, tx ports.Tx, e lineSet) error {
			if e.SKU != "slow" {
				return nil
			}
			_, err := postgres.TxOf(tx).Exec(ctx, `SELECT pg_sleep(0.75)`)
			return err
		}
		slow, others := newUUID(t), []uuid.UUID{newUUID(t), newUUID(t), newUUID(t)}
		b.appendLines(t, slow, nil, lineSet{SKU: "a", Qty: 1}, lineSet{SKU: "slow", Qty: 2})
		for _, s := range others {
			b.appendLines(t, s, nil, lineSet{SKU: "x", Qty: 1}, lineSet{SKU: "y", Qty: 2})
		}
		opts := projectionOptions(t)
		opts.Drain.ApplyTimeout = 2 * time.Second // a patience of 500ms
		opts.Retries.MaxEventAttempts = 1
		failures := make(chan ports.Failure, 8)
		dead := make(chan ports.DeadLetter, 8)
		opts.Hooks.OnFailure = func(f ports.Failure) { failures <- f }
		opts.Hooks.OnDeadLettered = func(d ports.DeadLetter) { dead <- d }
		w := startProjectionWorker(t, b.backend, b.reg, opts)

		waitForStream(t, w, slow, 2)
		require.Equal(t, 2, b.appliesOf("slow"), "cut once, then written alone")
		require.Equal(t, map[string]int{"a": 1, "slow": 2}, b.lines(t, slow))
		require.Equal(t, seq(1, 2), b.effects(t, slow), "each event written once")
		for _, s := range others {
			waitForStream(t, w, s, 2)
			require.Equal(t, seq(1, 2), b.effects(t, s))
		}
		require.Empty(t, failures, "no event was charged")
		require.Empty(t, dead, "no event was dead-lettered")
	})

	// A connection lost under a write is the backend's failure: the
	// transaction rolls back, the pair is retried after the infrastructure
	// backoff, and the event is written once, never charged (with one
	// attempt allowed, a charge would dead-letter it). The streams drained
	// with it are saved too, whether or not their writes shared its
	// transaction.
	t.Run("LostConnectionIsNotCharged", func(t *testing.T) {
		t.Parallel()
		b := setupProjection(t)
		var cut atomic.Bool
		b.fail = func(ctx context.Context, tx ports.Tx, e lineSet) error {
			if e.SKU != "cut" || !cut.CompareAndSwap(false, true) {
				return nil
			}
			terminateTx(ctx, t, tx)
			_, err := postgres.TxOf(tx).Exec(ctx, `SELECT 1`)
			return err
		}
		streams := []uuid.UUID{newUUID(t), newUUID(t), newUUID(t), newUUID(t)}
		b.appendLines(t, streams[0], nil, lineSet{SKU: "a", Qty: 1}, lineSet{SKU: "cut", Qty: 2}, lineSet{SKU: "c", Qty: 3})
		for _, s := range streams[1:] {
			b.appendLines(t, s, nil, lineSet{SKU: "x", Qty: 1}, lineSet{SKU: "y", Qty: 2})
		}
		opts := projectionOptions(t)
		opts.Retries.MaxEventAttempts = 1
		failures := make(chan ports.Failure, 8)
		dead := make(chan ports.DeadLetter, 8)
		opts.Hooks.OnFailure = func(f ports.Failure) { failures <- f }
		opts.Hooks.OnDeadLettered = func(d ports.DeadLetter) { dead <- d }
		w := startProjectionWorker(t, b.backend, b.reg, opts)

		waitForStream(t, w, streams[0], 3)
		require.True(t, cut.Load(), "the write's connection was cut")
		require.Equal(t, 2, b.appliesOf("cut"), "written again after the lost connection")
		require.Equal(t, seq(1, 3), b.effects(t, streams[0]), "each event written once")
		require.Equal(t, map[string]int{"a": 1, "cut": 2, "c": 3}, b.lines(t, streams[0]))
		for _, s := range streams[1:] {
			waitForStream(t, w, s, 2)
			require.Equal(t, seq(1, 2), b.effects(t, s))
		}
		require.Empty(t, failures, "no event was charged")
		require.Empty(t, dead, "no event was dead-lettered")
	})

	// A connection lost under a rewind's writes is the backend's failure
	// too: the rewind is retried and ends as a clean replay, and the late
	// event is never charged.
	t.Run("LostConnectionInRewindIsNotCharged", func(t *testing.T) {
		t.Parallel()
		b := setupProjection(t)
		stream := newUUID(t)
		b.appendLines(t, stream, []int64{1, 3}, lineSet{SKU: "a", Qty: 1}, lineSet{SKU: "a", Qty: 3})
		var rewinding, cut atomic.Bool
		b.fail = func(ctx context.Context, tx ports.Tx, e lineSet) error {
			if e.SKU != "b" || !rewinding.Load() || !cut.CompareAndSwap(false, true) {
				return nil
			}
			terminateTx(ctx, t, tx)
			_, err := postgres.TxOf(tx).Exec(ctx, `SELECT 1`)
			return err
		}
		opts := projectionOptions(t)
		opts.Retries.MaxEventAttempts = 1
		failures := make(chan ports.Failure, 8)
		dead := make(chan ports.DeadLetter, 8)
		opts.Hooks.OnFailure = func(f ports.Failure) { failures <- f }
		opts.Hooks.OnDeadLettered = func(d ports.DeadLetter) { dead <- d }
		rewinds := make(chan core.RewindInfo, 4)
		opts.Hooks.OnRewind = func(i core.RewindInfo) { rewinds <- i }
		w := startProjectionWorker(t, b.backend, b.reg, opts)
		waitForStream(t, w, stream, 3)

		rewinding.Store(true)
		b.appendLines(t, stream, []int64{2}, lineSet{SKU: "b", Qty: 2})
		info := wait(t, rewinds, "the rewind")
		require.Equal(t, 3, info.Replayed)
		require.True(t, cut.Load(), "the rewind's connection was cut")
		require.Equal(t, map[string]int{"a": 3, "b": 2}, b.lines(t, stream))
		require.Equal(t, seq(1, 3), b.effects(t, stream), "a clean replay's writes, once each")
		require.Empty(t, failures, "no event was charged")
		require.Empty(t, dead, "no event was dead-lettered")
	})

	// A reset that fails is the projection's fault, not the backend's: the
	// late event whose rewind needs it is retried, then dead-lettered with
	// the reset's error; requeued once the reset works, it is rewound in.
	t.Run("FailingResetDeadLettersTheLateEvent", func(t *testing.T) {
		t.Parallel()
		b := setupProjection(t)
		stream := newUUID(t)
		b.appendLines(t, stream, []int64{1, 3}, lineSet{SKU: "a", Qty: 1}, lineSet{SKU: "a", Qty: 3})
		opts := projectionOptions(t)
		opts.Retries.MaxEventAttempts = 2
		dead := make(chan ports.DeadLetter, 1)
		opts.Hooks.OnDeadLettered = func(d ports.DeadLetter) { dead <- d }
		rewinds := make(chan core.RewindInfo, 4)
		opts.Hooks.OnRewind = func(i core.RewindInfo) { rewinds <- i }
		w := startProjectionWorker(t, b.backend, b.reg, opts)
		waitForStream(t, w, stream, 3)

		// Each attempt of the rewind fails; once the event is
		// dead-lettered, the rewind goes on without it.
		b.resetFailures.Store(int32(opts.Retries.MaxEventAttempts))
		b.appendLines(t, stream, []int64{2}, lineSet{SKU: "b", Qty: 2})
		d := wait(t, dead, "the late event dead-lettered")
		require.Equal(t, int64(2), d.EventVersion)
		require.Contains(t, d.Error, "order_lines reset refused")
		info := wait(t, rewinds, "the rewind without the late event")
		require.Equal(t, 2, info.Replayed, "the dead-lettered event left out")
		require.Equal(t, map[string]int{"a": 3}, b.lines(t, stream))

		require.NoError(t, b.backend.Admin.DeadLetterRequeue(t.Context(), &ports.DeadLetterRequeueParams{ID: d.ID, Generation: "test", Now: time.Now()}))
		w.RequestImmediatePoll()
		info = wait(t, rewinds, "the requeued event's rewind")
		require.Equal(t, int64(2), info.TriggerVersion)
		require.Equal(t, 3, info.Replayed)
		require.Equal(t, map[string]int{"a": 3, "b": 2}, b.lines(t, stream))
		require.Equal(t, seq(1, 3), b.effects(t, stream))

		// A rebuild with a failing reset ends with the reset's error.
		b.resetFailures.Store(1 << 20)
		_, err := w.Rebuild(t.Context(), "order_lines", stream)
		require.ErrorContains(t, err, "order_lines reset refused")
		require.Equal(t, map[string]int{"a": 3, "b": 2}, b.lines(t, stream))
	})

	t.Run("RewindAndRebuildEqualCleanReplay", func(t *testing.T) {
		t.Parallel()
		b := setupProjection(t)
		stream := newUUID(t)
		b.appendLines(t, stream, []int64{1, 3}, lineSet{SKU: "a", Qty: 1}, lineSet{SKU: "a", Qty: 3})
		opts := projectionOptions(t)
		rewinds := make(chan core.RewindInfo, 4)
		opts.Hooks.OnRewind = func(i core.RewindInfo) { rewinds <- i }
		w := startProjectionWorker(t, b.backend, b.reg, opts)
		waitForStream(t, w, stream, 3)
		require.Equal(t, map[string]int{"a": 3}, b.lines(t, stream))

		// A late event at version 2: applied in its place, it would set a
		// to 2; the rewind resets the rows and replays 1, 2, 3.
		b.appendLines(t, stream, []int64{2}, lineSet{SKU: "b", Qty: 2})
		b.appendLines(t, stream, []int64{4}, lineSet{SKU: "a", Qty: 4}) // unrelated to the late one
		info := wait(t, rewinds, "the rewind")
		require.False(t, info.Rebuild)
		waitForStream(t, w, stream, 4)
		clean := map[string]int{"a": 4, "b": 2}
		require.Equal(t, clean, b.lines(t, stream))
		require.Equal(t, seq(1, 4), b.effects(t, stream), "a clean replay's writes, once each")

		// A rebuild starts from the reset too, whatever the tables hold.
		_, err := b.pool.Exec(t.Context(), `INSERT INTO `+b.table("order_lines")+` VALUES ($1, 'junk', 0)`, stream)
		require.NoError(t, err)
		n, err := w.Rebuild(t.Context(), "order_lines", stream)
		require.NoError(t, err)
		require.Equal(t, 1, n, "one stream rebuilt")
		require.Equal(t, clean, b.lines(t, stream))
		require.Equal(t, seq(1, 4), b.effects(t, stream))
	})
}

// terminateTx terminates the server process of tx's connection, as when
// the connection is lost under a write, and waits until it is gone.
func terminateTx(ctx context.Context, t *testing.T, tx ports.Tx) {
	t.Helper()
	pid := postgres.TxOf(tx).Conn().PgConn().PID()
	var terminated bool
	if err := pgtest.Pool(t).QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&terminated); err != nil || !terminated {
		t.Errorf("terminating the server process %d of a write: %v (terminated: %t)", pid, err, terminated)
	}
}

// lostCompletions is a CursorStore whose completions never reach the
// database, as when an instance crashes after saving.
type lostCompletions struct{ ports.CursorStore }

func (lostCompletions) WorkComplete(context.Context, *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	return &ports.WorkCompleteResult{}, nil
}

// TestModelSaveTxFencing checks that a save of a pair in a transaction
// waits for another one in flight and then fails its version check
// without running its writes: an instance that lost its lease cannot write
// the stream's rows at the same time as the new holder, nor after it.
func TestModelSaveTxFencing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	stream := newUUID(t)
	save := func(event uuid.UUID) ports.ModelSaveParams {
		return ports.ModelSaveParams{StreamID: stream, Perspective: "order_lines", Data: []byte(`{}`), LastEventID: event, LastVersion: 1, Now: base}
	}

	entered, release := make(chan uint32), make(chan struct{})
	firstDone := make(chan error, 1)
	go func() {
		firstDone <- b.store.ModelSaveTx(ctx, &ports.ModelSaveTxParams{Save: save(newUUID(t)), Apply: func(ctx context.Context, tx ports.Tx) error {
			entered <- postgres.TxOf(tx).Conn().PgConn().PID()
			<-release
			return nil
		}})
	}()
	pid := wait(t, entered, "the first transaction's writes")

	var secondApplied atomic.Bool
	secondDone := make(chan error, 1)
	go func() {
		secondDone <- b.store.ModelSaveTx(ctx, &ports.ModelSaveTxParams{Save: save(newUUID(t)), Apply: func(context.Context, ports.Tx) error {
			secondApplied.Store(true)
			return nil
		}})
	}()
	waitUntilBlockedBy(t, pid)
	require.False(t, secondApplied.Load(), "the second save waits before its writes")
	close(release)

	require.NoError(t, wait(t, firstDone, "the first save"))
	require.ErrorIs(t, wait(t, secondDone, "the second save"), ports.ErrVersionConflict)
	require.False(t, secondApplied.Load(), "a save that lost the race writes nothing")
}

// TestModelSaveTxRollsBack checks that an error of Apply stores nothing:
// neither its writes nor the cursor move.
func TestModelSaveTxRollsBack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	table := pgx.Identifier{b.schema, "rows"}.Sanitize()
	_, err := b.pool.Exec(ctx, `CREATE TABLE `+table+` (id int)`)
	require.NoError(t, err)
	stream := newUUID(t)
	refused := errors.New("refused")

	err = b.store.ModelSaveTx(ctx, &ports.ModelSaveTxParams{
		Save: ports.ModelSaveParams{StreamID: stream, Perspective: "p", Data: []byte(`{}`), LastEventID: newUUID(t), LastVersion: 1, Now: base},
		Apply: func(ctx context.Context, tx ports.Tx) error {
			if _, err := postgres.TxOf(tx).Exec(ctx, `INSERT INTO `+table+` VALUES (1)`); err != nil {
				return err
			}
			return refused
		},
	})
	require.ErrorIs(t, err, refused)
	require.Zero(t, rowCount(t, b, "rows"))
	_, err = b.store.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: stream, Perspective: "p"})
	require.ErrorIs(t, err, ports.ErrNotFound, "the cursor did not move")
}

// TestModelSaveTxManySavepoints checks that the entries of one
// ModelSaveTxMany commit together while an entry whose Apply fails loses
// its writes, and only its own (its savepoint is rolled back).
func TestModelSaveTxManySavepoints(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	table := pgx.Identifier{b.schema, "rows"}.Sanitize()
	_, err := b.pool.Exec(ctx, `CREATE TABLE `+table+` (id int PRIMARY KEY)`)
	require.NoError(t, err)
	entry := func(id int, fail bool) *ports.ModelSaveTxParams {
		return &ports.ModelSaveTxParams{
			Save: ports.ModelSaveParams{StreamID: newUUID(t), Perspective: "p", Data: []byte(`{}`), LastEventID: newUUID(t), LastVersion: 1, Now: base},
			Apply: func(ctx context.Context, tx ports.Tx) error {
				if _, err := postgres.TxOf(tx).Exec(ctx, `INSERT INTO `+table+` VALUES ($1)`, id); err != nil {
					return err
				}
				if fail {
					// A statement error aborts the savepoint, not the
					// transaction of the others.
					_, err := postgres.TxOf(tx).Exec(ctx, `INSERT INTO `+table+` VALUES ($1)`, id)
					return err
				}
				return nil
			},
		}
	}

	errs, err := b.store.ModelSaveTxMany(ctx, &ports.ModelSaveTxManyParams{Saves: []*ports.ModelSaveTxParams{entry(1, false), entry(2, true), entry(3, false)}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.Error(t, errs[1], "a duplicate key")
	require.NoError(t, errs[2])
	rows, err := b.pool.Query(ctx, `SELECT id FROM `+table+` ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	require.Equal(t, []int32{1, 3}, ids)
}

// TestModelSaveTxManyBrokenTransaction checks that when an entry's Apply
// leaves the transaction unusable (its statement was cancelled, which
// closes the connection), the call fails, stores nothing, and its error
// wraps that Apply's error: the caller can tell whose fault it was.
func TestModelSaveTxManyBrokenTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	table := pgx.Identifier{b.schema, "rows"}.Sanitize()
	_, err := b.pool.Exec(ctx, `CREATE TABLE `+table+` (id int PRIMARY KEY)`)
	require.NoError(t, err)
	errSlow := errors.New("slow write")
	entry := func(id int, slow bool) *ports.ModelSaveTxParams {
		return &ports.ModelSaveTxParams{
			Save: ports.ModelSaveParams{StreamID: newUUID(t), Perspective: "p", Data: []byte(`{}`), LastEventID: newUUID(t), LastVersion: 1, Now: base},
			Apply: func(ctx context.Context, tx ports.Tx) error {
				if _, err := postgres.TxOf(tx).Exec(ctx, `INSERT INTO `+table+` VALUES ($1)`, id); err != nil || !slow {
					return err
				}
				wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
				_, err := postgres.TxOf(tx).Exec(wctx, `SELECT pg_sleep(60)`)
				return fmt.Errorf("%w: %w", errSlow, err)
			},
		}
	}

	_, err = b.store.ModelSaveTxMany(ctx, &ports.ModelSaveTxManyParams{Saves: []*ports.ModelSaveTxParams{entry(1, false), entry(2, true), entry(3, false)}})
	require.ErrorIs(t, err, errSlow)
	require.NotErrorIs(t, err, ports.ErrTransient, "Apply's own deadline closed the connection: Apply failed, not the backend")
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n))
	require.Zero(t, n, "nothing stored")

	err = b.store.ModelSaveTx(ctx, entry(4, true))
	require.ErrorIs(t, err, errSlow, "alone, too")
	require.NotErrorIs(t, err, ports.ErrTransient)
}

// TestModelSaveTxTransientApplyErrors checks that an Apply whose statement
// the server refused for a reason a retry may not meet again (a
// serialization failure, a deadlock) fails with ports.ErrTransient and
// the server's error, stores nothing, and in ModelSaveTxMany costs the
// other entries nothing.
func TestModelSaveTxTransientApplyErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	raise := func(code string) func(ctx context.Context, tx ports.Tx) error {
		return func(ctx context.Context, tx ports.Tx) error {
			_, err := postgres.TxOf(tx).Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'lost to another transaction' USING ERRCODE = '`+code+`'; END $$`)
			return err
		}
	}
	entry := func(apply func(context.Context, ports.Tx) error) *ports.ModelSaveTxParams {
		return &ports.ModelSaveTxParams{
			Save:  ports.ModelSaveParams{StreamID: newUUID(t), Perspective: "p", Data: []byte(`{}`), LastEventID: newUUID(t), LastVersion: 1, Now: base},
			Apply: apply,
		}
	}
	stored := func(e *ports.ModelSaveTxParams) bool {
		_, err := b.store.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: e.Save.StreamID, Perspective: "p"})
		if errors.Is(err, ports.ErrNotFound) {
			return false
		}
		require.NoError(t, err)
		return true
	}

	for _, code := range []string{"40001", "40P01"} {
		e := entry(raise(code))
		err := b.store.ModelSaveTx(ctx, e)
		require.ErrorIs(t, err, ports.ErrTransient, code)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "the server's error stays in the chain")
		require.Equal(t, code, pgErr.Code)
		require.False(t, stored(e))
	}

	ok := func(context.Context, ports.Tx) error { return nil }
	entries := []*ports.ModelSaveTxParams{entry(ok), entry(raise("40P01")), entry(ok)}
	errs, err := b.store.ModelSaveTxMany(ctx, &ports.ModelSaveTxManyParams{Saves: entries})
	require.NoError(t, err, "a deadlock leaves the transaction usable once rolled back to the savepoint")
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], ports.ErrTransient)
	require.NoError(t, errs[2])
	require.Equal(t, []bool{true, false, true}, []bool{stored(entries[0]), stored(entries[1]), stored(entries[2])})
}
