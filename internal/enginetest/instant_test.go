package enginetest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/core/completion"
	"github.com/vantage-go/vantage/ports"
)

// failingReports fails the first calls of WorkComplete (completes of them)
// and of WorkFail (fails of them) with err, and tells each failed call on
// failed, as a connection dropped under the call, or a backend refusing
// the call, would.
type failingReports struct {
	ports.CursorStore
	err              error
	completes, fails atomic.Int64 // calls left to fail
	failed           chan string  // "complete" or "fail", per failed call
}

func newFailingReports(c ports.CursorStore, err error) *failingReports {
	return &failingReports{CursorStore: c, err: err, failed: make(chan string, 10)}
}

// tell reports a failed call on failed, unless its buffer is full.
func (c *failingReports) tell(call string) {
	select {
	case c.failed <- call:
	default:
	}
}

func (c *failingReports) WorkComplete(ctx context.Context, p *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	if c.completes.Add(-1) >= 0 {
		c.tell("complete")
		return nil, c.err
	}
	return c.CursorStore.WorkComplete(ctx, p)
}

func (c *failingReports) WorkFail(ctx context.Context, p *ports.WorkFailParams) error {
	if c.fails.Add(-1) >= 0 {
		c.tell("fail")
		return c.err
	}
	return c.CursorStore.WorkFail(ctx, p)
}

var (
	errReportTransient = fmt.Errorf("completing work: connection reset by peer: %w", ports.ErrTransient)
	errReportRefused   = fmt.Errorf("completing work: refused: %w", ports.ErrInvalidArgument)
)

// reportBundle is a worker on the memory backend whose reports meet
// failingReports, with the "total" perspective and a PostLifecycle
// receptor that tells the events it saw.
type reportBundle struct {
	mem, b     ports.Backend
	reg        *core.Registry
	cursors    *failingReports
	lifecycled chan uuid.UUID
	failures   chan ports.Failure
	progress   chan struct{} // poked by every acknowledged report and batch
	w          *core.Worker
}

func setupReports(t *testing.T, err error, apply func(context.Context, total, added) (total, error)) *reportBundle {
	t.Helper()
	mem := memory.New(memory.Options{}).Backend()
	rb := &reportBundle{mem: mem, b: mem, cursors: newFailingReports(mem.Cursors, err), lifecycled: make(chan uuid.UUID, 100), failures: make(chan ports.Failure, 10), progress: make(chan struct{}, 1)}
	rb.b.Cursors = rb.cursors
	if apply == nil {
		rb.reg = testRegistry(t)
	} else {
		rb.reg = registryWith(t, apply)
	}
	require.NoError(t, core.AddReceptor(rb.reg, core.PostLifecycle, core.Inline, func(_ context.Context, _ added, info core.StageInfo) error {
		rb.lifecycled <- info.Event.ID
		return nil
	}))
	return rb
}

func (rb *reportBundle) start(t *testing.T, mode completion.Factory, edit func(*core.Options)) {
	t.Helper()
	opts := quietOptions(t)
	opts.Completion = mode
	opts.Retries.Event = core.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}
	opts.Hooks.OnFailure = func(f ports.Failure) { rb.failures <- f }
	opts.Hooks.OnCompletionsFlushed = func(core.CompletionsFlushed) { rb.poke() }
	opts.Hooks.OnBatchCycleComplete = func(core.BatchCycle) { rb.poke() }
	if edit != nil {
		edit(&opts)
	}
	rb.w = startWorker(t, rb.b, rb.reg, opts)
}

func (rb *reportBundle) poke() {
	select {
	case rb.progress <- struct{}{}:
	default:
	}
}

// waitUntil re-checks cond whenever the worker reports progress, until it
// holds or waitTimeout passed.
func (rb *reportBundle) waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-rb.progress:
		case <-deadline.C:
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// requireSettled checks that stream's events were applied once each, in
// order, and left nothing behind: the stream waited for returns, the
// cursor completes at the last event without a rewind pending, no work
// row is left pending and, when stages is set, every event's PostLifecycle
// ran.
func (rb *reportBundle) requireSettled(t *testing.T, stream uuid.UUID, events []ports.Event, stages bool) {
	t.Helper()
	last := events[len(events)-1].Version
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	require.NoError(t, rb.w.WaitForStream(ctx, stream, last), "the stream caught up")
	if stages {
		want := map[uuid.UUID]bool{}
		for _, e := range events {
			want[e.ID] = true
		}
		for len(want) > 0 {
			delete(want, waitFor(t, rb.lifecycled, "PostLifecycle of every event"))
		}
	}
	seen := make([]int64, len(events))
	for i, e := range events {
		seen[i] = e.Version
	}
	require.Equal(t, seen, loadTotal(t, rb.mem, stream).Seen, "every event applied once, in order")
	rb.waitUntil(t, "the stream's work completed", func() bool {
		cs, err := rb.mem.Cursors.CursorsGet(t.Context(), &ports.CursorsGetParams{StreamIDs: []uuid.UUID{stream}})
		require.NoError(t, err)
		lag, err := rb.mem.Stats.PerspectivesLag(t.Context(), &ports.PerspectivesLagParams{})
		require.NoError(t, err)
		return len(cs) == 1 && cs[0].Status == ports.CursorCompleted && cs[0].LastVersion == last && len(lag) == 0
	})
	dls, err := rb.mem.DeadLetters.DeadLettersList(t.Context(), &ports.DeadLettersListParams{})
	require.NoError(t, err)
	require.Empty(t, dls)
}

// With instant completions, a completion whose report fails once is kept
// and sent again: its rows complete, the later events of the stream do not
// leave them behind as stragglers, and the stream catches up with its
// terminal stages run.
func TestInstantCompletionRetriedAfterTransientError(t *testing.T) {
	t.Parallel()

	rb := setupReports(t, errReportTransient, nil)
	rb.cursors.completes.Store(1)
	rb.start(t, completion.InstantFactory, nil)
	stream := uuid.New()
	events := appendAdded(t, rb.reg, rb.b, stream, 1, 2).Events
	require.Equal(t, "complete", waitFor(t, rb.cursors.failed, "the first completion to fail"))
	// The next event completes on its own report, above the rows of the
	// failed one.
	events = append(events, appendAdded(t, rb.reg, rb.b, stream, 3).Events...)
	rb.requireSettled(t, stream, events, true)
}

// A failure whose report fails once is retried, whatever the strategy: its
// pair is not held back for good waiting for an acknowledgement, and the
// event is retried and applied, uncharged.
func TestFailureReportRetriedAfterTransientError(t *testing.T) {
	t.Parallel()

	for name, mode := range map[string]completion.Factory{"Batched": completion.BatchedFactory, "Instant": completion.InstantFactory} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var tries atomic.Int64
			rb := setupReports(t, errReportTransient, failFirstApply(&tries))
			rb.cursors.fails.Store(1)
			rb.start(t, mode, nil)
			stream := uuid.New()
			events := appendAdded(t, rb.reg, rb.b, stream, 1).Events
			waitFor(t, rb.failures, "the apply to fail")
			require.Equal(t, "fail", waitFor(t, rb.cursors.failed, "the failure report to fail"))
			rb.requireSettled(t, stream, events, true)
			require.Equal(t, int64(2), tries.Load(), "the failed event was applied again once")
		})
	}
}

// A report the backend refuses (an invalid argument, say) is not sent
// again, since it would be refused again, whatever the strategy: its rows
// are drained again after a backoff and complete, and a failed event's
// pair is not held back for good waiting for an acknowledgement that
// never comes. No event is charged for it. (The PostLifecycle of events
// whose completion was refused, and completed by a later drain, is left
// to the reconciliation that runs every minute.)
func TestRefusedReportDrainedAgain(t *testing.T) {
	t.Parallel()

	for name, mode := range map[string]completion.Factory{"Batched": completion.BatchedFactory, "Instant": completion.InstantFactory} {
		t.Run(name+"/Completion", func(t *testing.T) {
			t.Parallel()
			rb := setupReports(t, errReportRefused, nil)
			rb.cursors.completes.Store(1)
			rb.start(t, mode, nil)
			stream := uuid.New()
			events := appendAdded(t, rb.reg, rb.b, stream, 1, 2).Events
			require.Equal(t, "complete", waitFor(t, rb.cursors.failed, "the completion to be refused"))
			rb.requireSettled(t, stream, events, false)
		})
		t.Run(name+"/Failure", func(t *testing.T) {
			t.Parallel()
			var tries atomic.Int64
			rb := setupReports(t, errReportRefused, failFirstApply(&tries))
			rb.cursors.fails.Store(1000) // every failure report is refused
			rb.start(t, mode, func(o *core.Options) {
				// A charged attempt would dead-letter the event.
				o.Retries.MaxEventAttempts = 2
			})
			stream := uuid.New()
			events := appendAdded(t, rb.reg, rb.b, stream, 1).Events
			waitFor(t, rb.failures, "the apply to fail")
			require.Equal(t, "fail", waitFor(t, rb.cursors.failed, "the failure report to be refused"))
			rb.requireSettled(t, stream, events, true)
			require.Equal(t, int64(2), tries.Load(), "the failed event was applied again once")
		})
	}
}

// failFirstApply returns an apply of the "total" perspective that fails
// its first call, counting the calls in tries.
func failFirstApply(tries *atomic.Int64) func(context.Context, total, added) (total, error) {
	return func(ctx context.Context, m total, e added) (total, error) {
		if tries.Add(1) == 1 {
			return m, errors.New("first apply fails")
		}
		ev, _ := core.EventFromContext(ctx)
		m.Sum += e.N
		m.Events++
		m.Seen = append(m.Seen, ev.Version)
		return m, nil
	}
}

// A completion whose reports failed for a while is overtaken by the
// completion of the stream's next event: that one lists the rows the
// drain passed over as applied, whose events its saved model holds, so
// the backend completes them with it instead of taking them for
// stragglers never applied (late rows, a rewind flagged, and, should this
// instance die before the first completion is sent again, its events
// applied again by the next holder as new).
func TestOvertakingCompletionCompletesTheRowsBelowIt(t *testing.T) {
	t.Parallel()

	rb := setupReports(t, errReportTransient, nil)
	rb.cursors.completes.Store(2) // the instant report and the flusher's only attempt
	rb.start(t, completion.InstantFactory, func(o *core.Options) {
		o.Retries.Flush.MaxAttempts = 1
		o.Retries.CompletionResend = core.Backoff{Initial: time.Hour, Max: time.Hour} // not sent again during the test
	})
	stream := uuid.New()
	events := appendAdded(t, rb.reg, rb.b, stream, 1).Events
	require.Equal(t, "complete", waitFor(t, rb.cursors.failed, "the instant report to fail"))
	require.Equal(t, "complete", waitFor(t, rb.cursors.failed, "the flusher's attempt to fail"))

	events = append(events, appendAdded(t, rb.reg, rb.b, stream, 2).Events...)

	rb.waitUntil(t, "the second event completed", func() bool {
		cs, err := rb.mem.Cursors.CursorsGet(t.Context(), &ports.CursorsGetParams{StreamIDs: []uuid.UUID{stream}})
		require.NoError(t, err)
		return len(cs) == 1 && cs[0].LastVersion == 2 && cs[0].Status.Has(ports.CursorCompleted)
	})
	late, err := rb.mem.Rewind.WorkLate(t.Context(), &ports.WorkLateParams{StreamID: stream, Perspective: "total"})
	require.NoError(t, err)
	require.Empty(t, late, "the first event's row, which the saved model holds, was taken for a straggler")
	cs, err := rb.mem.Cursors.CursorsGet(t.Context(), &ports.CursorsGetParams{StreamIDs: []uuid.UUID{stream}})
	require.NoError(t, err)
	require.False(t, cs[0].Status.Has(ports.CursorRewindRequired), "no rewind for an event applied in order")
	// The first event's stages wait for its own report, sent again in an
	// hour.
	rb.requireSettled(t, stream, events, false)
}

// Reports that go through list each row once: only the rows of a report
// that failed are listed again by a later one of their pair, so a healthy
// backend completes no row twice and no batch looks short.
func TestHealthyReportsListEachRowOnce(t *testing.T) {
	t.Parallel()

	for name, mode := range map[string]completion.Factory{"Batched": completion.BatchedFactory, "Instant": completion.InstantFactory} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rb := setupReports(t, errReportTransient, nil)
			var (
				mu     sync.Mutex
				listed = map[uuid.UUID]int{}
			)
			rb.start(t, mode, func(o *core.Options) {
				o.Hooks.OnCompletionsFlushed = func(f core.CompletionsFlushed) {
					mu.Lock()
					for _, c := range f.Completions {
						for _, id := range c.WorkIDs {
							listed[id]++
						}
					}
					mu.Unlock()
					rb.poke()
				}
			})
			stream := uuid.New()
			var events []ports.Event
			for i := range 20 {
				events = append(events, appendAdded(t, rb.reg, rb.b, stream, 3*i+1, 3*i+2, 3*i+3).Events...)
			}
			rb.requireSettled(t, stream, events, true)
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, listed, len(events), "every row completed")
			for id, n := range listed {
				require.Equal(t, 1, n, "row %s listed by %d reports", id, n)
			}
		})
	}
}
