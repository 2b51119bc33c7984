package enginetest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/core/completion"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

func resetNothing(context.Context, ports.Tx, uuid.UUID) error { return nil }

func writeNothing(context.Context, ports.Tx, added) error { return nil }

// A table projection needs a backend with a ports.TxModelStore: on the
// memory adapter, New refuses it, and so does Start when it was added
// after New, with an error wrapping errors.ErrUnsupported that says why.
func TestProjectionNeedsTxModelStore(t *testing.T) {
	t.Parallel()

	t.Run("New", func(t *testing.T) {
		t.Parallel()
		reg := testRegistry(t)
		p := core.NewProjection("order_lines", resetNothing)
		core.MustHandleTx(p, writeNothing)
		require.NoError(t, reg.AddPerspective(p))
		opts := quietOptions(t)

		_, err := core.New(memory.New(memory.Options{}).Backend(), reg, &opts)
		require.ErrorIs(t, err, errors.ErrUnsupported)
		require.ErrorContains(t, err, `perspective "order_lines" is a table projection`)
	})

	t.Run("Start", func(t *testing.T) {
		t.Parallel()
		reg := testRegistry(t)
		opts := quietOptions(t)
		w, err := core.New(memory.New(memory.Options{}).Backend(), reg, &opts)
		require.NoError(t, err, "models alone run on the memory adapter")
		p := core.NewProjection("order_lines", resetNothing)
		core.MustHandleTx(p, writeNothing)
		require.NoError(t, reg.AddPerspective(p))

		require.ErrorIs(t, w.Start(t.Context()), errors.ErrUnsupported)
	})
}

// A table projection without a reset function or apply functions, or with
// one for an unregistered event type, is refused at registration.
func TestProjectionRegistration(t *testing.T) {
	t.Parallel()

	reg := testRegistry(t)
	noReset := core.NewProjection("no_reset", nil)
	core.MustHandleTx(noReset, writeNothing)
	require.ErrorContains(t, reg.AddPerspective(noReset), "no reset function")

	require.ErrorContains(t, reg.AddPerspective(core.NewProjection("no_apply", resetNothing)), "no apply functions")

	unknown := core.NewProjection("unknown", resetNothing)
	core.MustHandleTx(unknown, func(context.Context, ports.Tx, removed) error { return nil })
	require.ErrorIs(t, reg.AddPerspective(unknown), core.ErrUnknownEventType)

	dup := core.NewProjection("dup", resetNothing)
	core.MustHandleTx(dup, writeNothing)
	require.ErrorIs(t, core.HandleTx(dup, writeNothing), core.ErrDuplicate)
	require.Error(t, core.HandleTx[added](nil, writeNothing))
}

// errConnLost is the error a table projection's write gets when the
// connection to its database is lost under it.
var errConnLost = errors.New("connection lost")

// txTable is a ports.TxModelStore over the memory adapter's models, so that
// table projections run on the fake clock: a transaction collects the
// versions its writes wrote and commits them with the cursor move, or
// drops them. As the PostgreSQL adapter does, it reports an Apply that
// failed because the connection was lost (errConnLost) as
// ports.ErrTransient, with Apply's error in the chain. A grouped call runs
// its entries in order, as the adapter does, and fails as a whole, storing
// nothing, when an entry's Apply broke its transaction: the connection was
// lost, or the Apply was cancelled (cancelling a statement closes its
// connection); the call's error wraps that Apply's, so the engine can tell
// whose it was.
type txTable struct {
	models ports.ModelStore

	mu      sync.Mutex
	written map[uuid.UUID][]int64 // versions written, by stream, in commit order
}

// txWrites is the transaction txTable hands to Apply: whether the
// projection's reset ran in it, and the versions its writes wrote.
type txWrites struct {
	reset    bool
	versions []int64
}

func (w *txWrites) Unwrap() any { return w }

func newTxTable(models ports.ModelStore) *txTable {
	return &txTable{models: models, written: map[uuid.UUID][]int64{}}
}

func (s *txTable) ModelSaveTx(ctx context.Context, p *ports.ModelSaveTxParams) error {
	tx, err := s.apply(ctx, p)
	if err != nil {
		return err
	}
	return s.commit(ctx, p, tx)
}

func (s *txTable) ModelSaveTxMany(ctx context.Context, p *ports.ModelSaveTxManyParams) ([]error, error) {
	txs := make([]*txWrites, len(p.Saves))
	errs := make([]error, len(p.Saves))
	for i, e := range p.Saves {
		txs[i], errs[i] = s.apply(ctx, e)
		if errors.Is(errs[i], ports.ErrTransient) || errors.Is(errs[i], context.Canceled) {
			return nil, fmt.Errorf("rolling back to the savepoint after %w: %w", errs[i], errConnLost)
		}
	}
	for i, e := range p.Saves {
		if errs[i] == nil {
			errs[i] = s.commit(ctx, e, txs[i])
		}
	}
	return errs, nil
}

// apply runs p's Apply in a new transaction.
func (s *txTable) apply(ctx context.Context, p *ports.ModelSaveTxParams) (*txWrites, error) {
	tx := &txWrites{}
	if err := p.Apply(ctx, tx); err != nil {
		if errors.Is(err, errConnLost) {
			return nil, fmt.Errorf("%w: %w", ports.ErrTransient, err)
		}
		return nil, err
	}
	return tx, nil
}

// commit saves p and, when the save passes its check, tx's writes.
func (s *txTable) commit(ctx context.Context, p *ports.ModelSaveTxParams, tx *txWrites) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.models.ModelSave(ctx, &p.Save); err != nil {
		return err
	}
	if tx.reset {
		delete(s.written, p.Save.StreamID)
	}
	s.written[p.Save.StreamID] = append(s.written[p.Save.StreamID], tx.versions...)
	return nil
}

// writtenOf returns the versions written for stream, in commit order.
func (s *txTable) writtenOf(stream uuid.UUID) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.written[stream])
}

// tableProjection registers added and a table projection "lines" on a
// txTable, whose apply of an event calls write first: an error it returns
// fails the write. A reset drops what was written for the stream.
func tableProjection(t *testing.T, write func(ctx context.Context, ev ports.Event) error) *core.Registry {
	t.Helper()
	reg := core.NewRegistry()
	require.NoError(t, core.RegisterEvent[added](reg, "added"))
	p := core.NewProjection("lines", func(_ context.Context, tx ports.Tx, _ uuid.UUID) error {
		tx.Unwrap().(*txWrites).reset = true
		return nil
	})
	core.MustHandleTx(p, func(ctx context.Context, tx ports.Tx, _ added) error {
		ev, _ := core.EventFromContext(ctx)
		if err := write(ctx, ev); err != nil {
			return err
		}
		w := tx.Unwrap().(*txWrites)
		w.versions = append(w.versions, ev.Version)
		return nil
	})
	require.NoError(t, reg.AddPerspective(p))
	return reg
}

// A table projection's write that fails because the backend did (its
// connection was lost) costs its event nothing: the pair is drained again
// after the infrastructure backoff, on the engine's clock, and every
// event is written once. With one attempt allowed, a charge would
// dead-letter the event.
func TestProjectionWriteBackendErrorNotCharged(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	mem := memory.New(memory.Options{Clock: clock}).Backend()
	table := newTxTable(mem.Models)
	b := mem
	b.ModelTx = table
	var cut atomic.Bool
	writes := make(chan int64, 10)
	reg := tableProjection(t, func(_ context.Context, ev ports.Event) error {
		writes <- ev.Version
		if ev.Version == 2 && cut.CompareAndSwap(false, true) {
			return fmt.Errorf("inserting line: %w", errConnLost)
		}
		return nil
	})
	stream := uuid.New()
	appendAdded(t, reg, mem, stream, 1, 2, 3) // the start-up claim takes them: the clock stands still
	opts := quietOptions(t)
	opts.Clock = clock
	opts.Retries.MaxEventAttempts = 1
	opts.Retries.Infra = core.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 1}
	failures := make(chan ports.Failure, 1)
	opts.Hooks.OnFailure = func(f ports.Failure) { failures <- f }
	dead := make(chan ports.DeadLetter, 1)
	opts.Hooks.OnDeadLettered = func(d ports.DeadLetter) { dead <- d }
	processed := reportProcessed(&opts, 10)
	batches := make(chan core.BatchCycle, 10)
	opts.Hooks.OnBatchCycleComplete = func(c core.BatchCycle) {
		if c.Streams > 0 {
			batches <- c
		}
	}
	startWorker(t, b, reg, opts)

	require.Zero(t, waitFor(t, batches, "the batch of the failed save").Applied)
	require.Equal(t, []int64{1, 2}, []int64{<-writes, <-writes}, "the write of version 2 lost its connection")
	require.Empty(t, table.writtenOf(stream), "nothing of the failed transaction was stored")
	clock.Advance(1500 * time.Millisecond) // the infrastructure backoff, with its jitter
	waitForVersion(t, processed, 3)
	require.Equal(t, []int64{1, 2, 3}, table.writtenOf(stream), "each event written once")
	require.Empty(t, failures, "no event failure was recorded")
	require.Empty(t, dead)
	dls, err := mem.DeadLetters.DeadLettersList(t.Context(), &ports.DeadLettersListParams{})
	require.NoError(t, err)
	require.Empty(t, dls)
}

// A rewind whose transaction loses its connection during a write is the
// backend's failure, not its event's: the rewind is retried and ends as a
// clean replay, the late event is never charged.
func TestProjectionReplayBackendErrorNotCharged(t *testing.T) {
	t.Parallel()

	mem := memory.New(memory.Options{}).Backend()
	table := newTxTable(mem.Models)
	b := mem
	b.ModelTx = table
	var rewinding, cut atomic.Bool
	reg := tableProjection(t, func(_ context.Context, ev ports.Event) error {
		if ev.Version == 2 && rewinding.Load() && cut.CompareAndSwap(false, true) {
			return fmt.Errorf("inserting line: %w", errConnLost)
		}
		return nil
	})
	opts := rewindOptions(t)
	opts.Retries.MaxEventAttempts = 1
	opts.Retries.Infra = core.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 1}
	failures := make(chan ports.Failure, 1)
	opts.Hooks.OnFailure = func(f ports.Failure) { failures <- f }
	dead := make(chan ports.DeadLetter, 1)
	opts.Hooks.OnDeadLettered = func(d ports.DeadLetter) { dead <- d }
	rewinds := make(chan core.RewindInfo, 4)
	opts.Hooks.OnRewind = func(i core.RewindInfo) { rewinds <- i }
	processed := reportProcessed(&opts, 10)
	startWorker(t, b, reg, opts)
	stream := uuid.New()
	appendAt(t, reg, b, stream, 1, 3)
	waitForVersion(t, processed, 3)

	rewinding.Store(true)
	appendAt(t, reg, b, stream, 2)
	info := waitFor(t, rewinds, "the rewind")
	require.Equal(t, 3, info.Replayed)
	require.True(t, cut.Load(), "the first replay lost its connection")
	require.Equal(t, []int64{1, 2, 3}, table.writtenOf(stream), "a clean replay's writes, once each")
	require.Empty(t, failures, "no event failure was recorded")
	require.Empty(t, dead)
}

// A table projection's write that hangs until its context is cancelled is
// cut at the patience of the save it shared, which charges nothing, and
// saved alone, where it times out at Options.Drain.ApplyTimeout: its event is
// dead-lettered as timed out (its one attempt allowed, which the cut did
// not take), with an error that says the write ran past ApplyTimeout,
// whatever the write returned, even an error the backend marks as
// transient (cancelling a statement may close its connection).
func TestProjectionHungWriteTimesOut(t *testing.T) {
	t.Parallel()

	for name, returned := range map[string]func(ctx context.Context) error{
		"ContextError":    func(ctx context.Context) error { return fmt.Errorf("inserting line: %w", ctx.Err()) },
		"ConnectionError": func(context.Context) error { return fmt.Errorf("inserting line: %w", errConnLost) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clock := clocktest.NewFake()
			mem := memory.New(memory.Options{Clock: clock}).Backend()
			table := newTxTable(mem.Models)
			b := mem
			b.ModelTx = table
			started := make(chan struct{}, 1)
			reg := tableProjection(t, func(ctx context.Context, ev ports.Event) error {
				if ev.Version != 2 {
					return nil
				}
				started <- struct{}{}
				<-ctx.Done()
				return returned(ctx)
			})
			stream := uuid.New()
			appendAdded(t, reg, mem, stream, 1, 2, 3) // the start-up claim takes them: the clock stands still
			opts := quietOptions(t)
			opts.Clock = clock
			opts.Drain.ApplyTimeout = time.Minute
			opts.Retries.MaxEventAttempts = 1
			dead := make(chan ports.DeadLetter, 1)
			opts.Hooks.OnDeadLettered = func(d ports.DeadLetter) { dead <- d }
			processed := reportProcessed(&opts, 10)
			startWorker(t, b, reg, opts)

			waitFor(t, started, "the hung write") // its patience's timer is armed
			clock.Advance(time.Second)            // min(ApplyTimeout/4, 1s)
			waitFor(t, started, "the hung write, cut and saved alone")
			require.Empty(t, dead, "the cut charged nothing")
			clock.Advance(time.Minute)
			d := waitFor(t, dead, "the hung write's dead letter")
			require.Equal(t, int64(2), d.EventVersion)
			require.Equal(t, ports.ReasonTimedOut, d.Reason)
			require.Contains(t, d.Error, "ApplyTimeout 1m0s")
			waitForVersion(t, processed, 3)
			require.Equal(t, []int64{1, 3}, table.writtenOf(stream), "the events around it written once")
		})
	}
}

// Options of the tests of slow projection writes: ApplyTimeout is a
// minute, so the patience of a save that shares its transaction or its
// sender with others is a second (min(ApplyTimeout/4, 1s)).
const (
	slowApplyTimeout = time.Minute
	slowPatience     = time.Second
)

// slowWriteBackend returns a memory backend on clock with a txTable as its
// TxModelStore, and the options of a worker on it, which stays live and
// keeps its leases while the clock jumps past ApplyTimeout.
func slowWriteBackend(t *testing.T, clock *clocktest.Fake) (ports.Backend, *txTable, core.Options) {
	t.Helper()
	b := memory.New(memory.Options{Clock: clock}).Backend()
	table := newTxTable(b.Models)
	b.ModelTx = table
	opts := quietOptions(t)
	opts.Clock = clock
	opts.Drain.ApplyTimeout = slowApplyTimeout
	opts.Claims.StaleInstanceThreshold = time.Hour
	opts.Claims.LeaseDuration = time.Hour
	return b, table, opts
}

// A table projection's save shares its transaction, or the senders of
// grouped saves, with the saves of other pairs: its writes get the
// patience, not ApplyTimeout, before they are cut, so that the others
// wait for them that long at most. Two writes that block until their
// context is cancelled hold both senders; the healthy stream's save,
// queued behind them, is saved once the patience passed. The cut costs
// no attempt: the blocked pairs are drained again at once.
func TestProjectionSlowWriteCostsOthersThePatience(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	b, table, opts := slowWriteBackend(t, clock)
	blocked := []uuid.UUID{uuid.New(), uuid.New()}
	healthy := uuid.New()
	writing := make(chan uuid.UUID, 8)
	unblock := make(chan struct{}) // at the end, before the worker stops
	reg := tableProjection(t, func(ctx context.Context, ev ports.Event) error {
		if ev.StreamID == healthy {
			return nil
		}
		writing <- ev.StreamID
		select {
		case <-ctx.Done():
			return fmt.Errorf("inserting line: %w", ctx.Err())
		case <-unblock:
			return nil
		}
	})
	// The healthy stream is saved once both blocked writes hold a sender.
	sendersHeld := make(chan struct{})
	require.NoError(t, core.AddReceptor(reg, core.PrePerspective, core.Inline, func(ctx context.Context, _ added, info core.StageInfo) error {
		if info.Event.StreamID != healthy {
			return nil
		}
		select {
		case <-sendersHeld:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	for _, s := range append(slices.Clone(blocked), healthy) {
		appendAdded(t, reg, b, s, 1) // the start-up claim takes them: the clock stands still
	}
	failures := make(chan ports.Failure, 4)
	opts.Hooks.OnFailure = func(f ports.Failure) { failures <- f }
	processed := reportProcessed(&opts, 10)
	startWorker(t, b, reg, opts)
	t.Cleanup(func() { close(unblock) })

	require.ElementsMatch(t, blocked, []uuid.UUID{waitFor(t, writing, "a blocked write"), waitFor(t, writing, "the other blocked write")})
	close(sendersHeld)
	clock.Advance(slowPatience)
	e := waitFor(t, processed, "the healthy stream's save, once the patience passed")
	require.Equal(t, healthy, e.StreamID)
	require.Equal(t, []int64{1}, table.writtenOf(healthy))
	require.ElementsMatch(t, blocked, []uuid.UUID{waitFor(t, writing, "a cut write, again"), waitFor(t, writing, "the other cut write, again")},
		"the cut pairs are drained again at once")
	require.Empty(t, failures, "the cut charged no event")
}

// A write slower than the patience, within ApplyTimeout, costs its event
// nothing: cut from the save it shared, it is written alone, where no
// patience applies, and saved. As long as its saves alone stay slower than
// the patience, the pair's saves stay alone: the next write, which blocks,
// is never cut; it runs until ApplyTimeout and is charged.
func TestProjectionSlowWriteSavedAlone(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	b, table, opts := slowWriteBackend(t, clock)
	var (
		writing = make(chan int64, 8)
		done    = make(chan struct{}, 8) // one per slow write allowed to end
		cut     = make(chan int64, 8)
	)
	reg := tableProjection(t, func(ctx context.Context, ev ports.Event) error {
		writing <- ev.Version
		if ev.Version == 2 {
			<-ctx.Done()
			return fmt.Errorf("inserting line: %w", ctx.Err())
		}
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			cut <- ev.Version
			return fmt.Errorf("inserting line: %w", ctx.Err())
		}
	})
	stream := uuid.New()
	appendAdded(t, reg, b, stream, 1, 2) // the start-up claim takes them: the clock stands still
	opts.Drain.PerspectiveBatchSize = 1  // a save per event
	opts.Retries.MaxEventAttempts = 1
	failures := make(chan ports.Failure, 4)
	opts.Hooks.OnFailure = func(f ports.Failure) { failures <- f }
	dead := make(chan ports.DeadLetter, 1)
	opts.Hooks.OnDeadLettered = func(d ports.DeadLetter) { dead <- d }
	processed := reportProcessed(&opts, 10)
	startWorker(t, b, reg, opts)

	require.Equal(t, int64(1), waitFor(t, writing, "the slow write"))
	clock.Advance(slowPatience)
	require.Equal(t, int64(1), waitFor(t, cut, "the cut"))
	require.Equal(t, int64(1), waitFor(t, writing, "the slow write, alone"))
	clock.Advance(2 * slowPatience)
	done <- struct{}{}
	require.Equal(t, int64(2), waitFor(t, writing, "the next write, once the first was saved"))
	clock.Advance(2 * slowPatience)
	clock.Advance(slowApplyTimeout)
	d := waitFor(t, dead, "the blocked write, past ApplyTimeout")
	require.Equal(t, int64(2), d.EventVersion)
	require.Equal(t, ports.ReasonTimedOut, d.Reason)
	waitForVersion(t, processed, 1)
	require.Empty(t, writing, "each write ran once alone: nothing was cut again")
	require.Empty(t, cut)
	require.Empty(t, failures, "the slow write's event was not charged")
	require.Equal(t, []int64{1}, table.writtenOf(stream))
}

// An event that failed before is saved alone from its retry on, never
// shared: its writes may be the ones that hung. Here the write hangs on
// every attempt: cut at the patience of its first save, it is charged at
// ApplyTimeout alone (the events before it saved alone, quickly), and its
// retry goes alone again: never cut, it runs until ApplyTimeout and its
// event is dead-lettered as timed out.
func TestProjectionRetriedEventSavedAlone(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	b, table, opts := slowWriteBackend(t, clock)
	writing := make(chan struct{}, 8)
	reg := tableProjection(t, func(ctx context.Context, ev ports.Event) error {
		if ev.Version != 2 {
			return nil
		}
		writing <- struct{}{}
		<-ctx.Done()
		return fmt.Errorf("inserting line: %w", ctx.Err())
	})
	stream := uuid.New()
	appendAdded(t, reg, b, stream, 1, 2, 3) // the start-up claim takes them: the clock stands still
	opts.Retries.MaxEventAttempts = 2
	opts.Retries.Event = core.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 1}
	opts.Completion = completion.InstantFactory // the failure is reported without waiting on the clock
	failed := make(chan ports.Failure, 4)
	opts.Hooks.OnCompletionsFlushed = func(f core.CompletionsFlushed) {
		for _, x := range f.Failures {
			failed <- x
		}
	}
	dead := make(chan ports.DeadLetter, 1)
	opts.Hooks.OnDeadLettered = func(d ports.DeadLetter) { dead <- d }
	processed := reportProcessed(&opts, 10)
	startWorker(t, b, reg, opts)

	waitFor(t, writing, "the blocked write")
	clock.Advance(slowPatience)
	waitFor(t, writing, "the cut write, saved alone")
	clock.Advance(slowApplyTimeout)
	f := waitFor(t, failed, "the first attempt's failure, acknowledged")
	require.Contains(t, f.Error, "ApplyTimeout 1m0s")
	clock.Advance(time.Second) // its retry
	waitFor(t, writing, "the retried write")
	clock.Advance(2 * slowPatience)
	clock.Advance(slowApplyTimeout)
	d := waitFor(t, dead, "the retried write, past ApplyTimeout")
	require.Equal(t, int64(2), d.EventVersion)
	require.Equal(t, ports.ReasonTimedOut, d.Reason)
	waitForVersion(t, processed, 3)
	require.Empty(t, writing, "the retry was written alone once: never cut")
	require.Equal(t, []int64{1, 3}, table.writtenOf(stream))
}

// A rebuild's (or a rewind's) save of a table projection goes alone,
// never cut at the patience of shared saves (its writes are the reset and
// every event of the stream, which may take longer than the patience
// without being stuck): only ApplyTimeout bounds its writes.
func TestProjectionReplaySavedAlone(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	b, table, opts := slowWriteBackend(t, clock)
	var rebuilding atomic.Bool
	writing := make(chan struct{}, 4)
	reg := tableProjection(t, func(ctx context.Context, ev ports.Event) error {
		if !rebuilding.Load() || ev.Version != 2 {
			return nil
		}
		writing <- struct{}{}
		<-ctx.Done()
		return fmt.Errorf("inserting line: %w", ctx.Err())
	})
	stream := uuid.New()
	appendAdded(t, reg, b, stream, 1, 2) // the start-up claim takes them: the clock stands still
	processed := reportProcessed(&opts, 10)
	w := startWorker(t, b, reg, opts)
	waitForVersion(t, processed, 2)

	rebuilding.Store(true)
	rebuilt := make(chan error, 1)
	go func() {
		_, err := w.Rebuild(t.Context(), "lines", stream)
		rebuilt <- err
	}()
	waitFor(t, writing, "the rebuild's blocked write")
	clock.Advance(2 * slowPatience)
	clock.Advance(slowApplyTimeout)
	err := waitFor(t, rebuilt, "the rebuild")
	require.ErrorContains(t, err, "ApplyTimeout 1m0s", "the write ran until its deadline, not cut before")
	require.Empty(t, writing, "written once")
	require.Equal(t, []int64{1, 2}, table.writtenOf(stream), "the tables as before the rebuild")
}
