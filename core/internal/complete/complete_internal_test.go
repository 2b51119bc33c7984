package complete

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/completion"
	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/dedup"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/core/internal/retry"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// cursors records the completions and failures it acknowledges, and
// fails every call with err while it is set.
type cursors struct {
	ports.CursorStore

	mu        sync.Mutex
	err       error
	completed []ports.Completion
	failed    []ports.Failure
}

func (c *cursors) setErr(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

func (c *cursors) WorkComplete(_ context.Context, p *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, c.err
	}
	c.completed = append(c.completed, p.Completions...)
	n := 0
	for _, comp := range p.Completions {
		n += len(comp.WorkIDs)
	}
	return &ports.WorkCompleteResult{Completed: n}, nil
}

func (c *cursors) WorkFail(_ context.Context, p *ports.WorkFailParams) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	c.failed = append(c.failed, p.Failures...)
	return nil
}

// events records what the Completer tells through its callbacks.
type events struct {
	mu           sync.Mutex
	acknowledged []ports.Completion
	failures     []ports.Failure
	landed       []pair.Key
	failureAcked []pair.Key
	givenUp      []pair.Key
	completed    int
}

type harness struct {
	c       *Completer
	cursors *cursors
	cache   *dedup.Cache
	clock   *clocktest.Fake
	ev      *events
}

const resendAfter = time.Second

func newHarness(t *testing.T, strategy completion.Factory) *harness {
	t.Helper()
	clock := clocktest.NewFake()
	h := &harness{cursors: &cursors{}, clock: clock, ev: &events{}}
	h.cache = dedup.New(dedup.Options{Retention: time.Minute, Clock: clock})
	log := slog.New(slog.DiscardHandler)
	env := base.NewEnv(clock, true, log)
	ev := h.ev
	var err error
	h.c, err = New(env, h.cache, Config{
		Cursors:       h.cursors,
		InstanceID:    uuid.New(),
		Strategy:      strategy,
		Resend:        completion.BatchedOptions{BaseTimeout: resendAfter, Multiplier: 2, MaxTimeout: 4 * resendAfter},
		FlushAttempts: 1,
		FlushRetry:    retry.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 1},
		Metrics:       nopMetrics{},
		OnAcknowledged: func(cs []ports.Completion, fs []ports.Failure) {
			ev.mu.Lock()
			defer ev.mu.Unlock()
			ev.acknowledged = append(ev.acknowledged, cs...)
			ev.failures = append(ev.failures, fs...)
		},
		OnFailureAcked: func(k pair.Key) { ev.mu.Lock(); ev.failureAcked = append(ev.failureAcked, k); ev.mu.Unlock() },
		OnCompleted:    func() { ev.mu.Lock(); ev.completed++; ev.mu.Unlock() },
		OnGivenUp: func(k pair.Key) time.Duration {
			ev.mu.Lock()
			defer ev.mu.Unlock()
			ev.givenUp = append(ev.givenUp, k)
			return time.Second
		},
		OnLanded: func(k pair.Key) { ev.mu.Lock(); ev.landed = append(ev.landed, k); ev.mu.Unlock() },
	})
	require.NoError(t, err)
	require.NoError(t, h.c.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, h.c.Stop(context.Background())) })
	return h
}

type nopMetrics struct{}

func (nopMetrics) Flushed(context.Context, string, int, time.Duration, error) {}
func (nopMetrics) FlushRetried(string)                                        {}
func (nopMetrics) FlushGaveUp(string, int)                                    {}

// report hands a completion of rows of k to the Completer as a drain does:
// the rows enter the dedup cache in flight first.
func (h *harness) report(t *testing.T, k pair.Key, rows ...uuid.UUID) ports.Completion {
	t.Helper()
	c := ports.Completion{StreamID: k.Stream, Perspective: k.Perspective, LastEventID: uuid.New(), LastVersion: int64(len(rows)), WorkIDs: rows}
	h.cache.AddRange(k.Dedup(), rows)
	h.c.ReportCompletion(t.Context(), c)
	return c
}

// send moves what the strategy holds into the flushers and waits until
// they sent it.
func (h *harness) send(t *testing.T) error {
	t.Helper()
	h.c.FlushPending(t.Context())
	return h.c.Flush(t.Context())
}

// An acknowledged completion settles its rows: the dedup cache keeps them
// for its retention, the strategy keeps nothing, and the callbacks hear
// of it, the waiters of progress too.
func TestAcknowledgedCompletionSettlesItsRows(t *testing.T) {
	t.Parallel()

	h := newHarness(t, completion.BatchedFactory)
	k := pair.Key{Stream: uuid.New(), Perspective: "p"}
	progressed := h.c.Progressed()
	rows := []uuid.UUID{uuid.New(), uuid.New()}
	comp := h.report(t, k, rows...)
	require.NoError(t, h.send(t))

	require.Equal(t, []ports.Completion{comp}, h.cursors.completed)
	select {
	case <-progressed:
	default:
		t.Fatal("the waiters of progress were not woken")
	}
	h.ev.mu.Lock()
	require.Equal(t, []ports.Completion{comp}, h.ev.acknowledged)
	require.Equal(t, []pair.Key{k}, h.ev.landed)
	require.Equal(t, 1, h.ev.completed)
	require.Empty(t, h.ev.givenUp)
	h.ev.mu.Unlock()
	require.Empty(t, h.c.Strategy().PendingCompletions())
	require.True(t, h.cache.Contains(k.Dedup(), rows[0]), "retained after the acknowledgement")
	h.clock.Advance(2 * time.Minute)
	h.c.Sweep(t.Context())
	require.False(t, h.cache.Contains(k.Dedup(), rows[0]), "forgotten after the retention")
}

// With instant reports, a completion whose report fails is kept and sent
// again by the flushers; meanwhile its rows are listed as stalled, so that
// a later report of the pair lists them as applied.
func TestFailedInstantReportStallsItsRowsUntilAcknowledged(t *testing.T) {
	t.Parallel()

	h := newHarness(t, completion.InstantFactory)
	k := pair.Key{Stream: uuid.New(), Perspective: "p"}
	h.cursors.setErr(fmt.Errorf("connection refused: %w", ports.ErrTransient))
	rows := []uuid.UUID{uuid.New(), uuid.New()}
	comp := h.report(t, k, rows...)
	other := uuid.New()

	require.Equal(t, rows, h.c.StalledAmong(k.Dedup(), append([]uuid.UUID{other}, rows...)), "the failed report's rows, in order")
	require.Empty(t, h.c.StalledAmong(pair.Key{Stream: uuid.New(), Perspective: "p"}.Dedup(), rows), "another pair has none")
	require.Empty(t, h.cursors.completed)
	h.ev.mu.Lock()
	require.Empty(t, h.ev.landed)
	require.Empty(t, h.ev.givenUp, "kept, not given up on")
	h.ev.mu.Unlock()

	h.cursors.setErr(nil)
	require.NoError(t, h.send(t))
	require.Equal(t, []ports.Completion{comp}, h.cursors.completed, "sent again by the flushers")
	require.Empty(t, h.c.StalledAmong(k.Dedup(), rows), "settled")
	h.ev.mu.Lock()
	require.Equal(t, []pair.Key{k}, h.ev.landed)
	h.ev.mu.Unlock()
}

// A completion the backend refuses is given up on: the strategy keeps
// nothing to send again, its rows leave the dedup cache (which would hold
// their re-delivery back for good) and the pair's owner is told, to drain
// it again.
func TestRefusedCompletionGivenUp(t *testing.T) {
	t.Parallel()

	h := newHarness(t, completion.BatchedFactory)
	k := pair.Key{Stream: uuid.New(), Perspective: "p"}
	h.cursors.setErr(fmt.Errorf("no such perspective: %w", ports.ErrInvalidArgument))
	rows := []uuid.UUID{uuid.New()}
	h.report(t, k, rows...)
	require.ErrorIs(t, h.send(t), ports.ErrInvalidArgument)

	require.False(t, h.cache.Contains(k.Dedup(), rows[0]), "released from the dedup cache")
	h.ev.mu.Lock()
	require.Equal(t, []pair.Key{k}, h.ev.givenUp)
	require.Empty(t, h.ev.landed)
	h.ev.mu.Unlock()
	h.cursors.setErr(nil)
	h.clock.Advance(10 * resendAfter)
	require.NoError(t, h.send(t))
	require.Empty(t, h.cursors.completed, "never sent again")
}

// An acknowledged failure tells its pair's owner (who parked the pair
// until then) and settles the rows applied before it.
func TestAcknowledgedFailureUnparksItsPair(t *testing.T) {
	t.Parallel()

	h := newHarness(t, completion.BatchedFactory)
	k := pair.Key{Stream: uuid.New(), Perspective: "p"}
	applied := []uuid.UUID{uuid.New()}
	h.cache.AddRange(k.Dedup(), applied)
	f := ports.Failure{StreamID: k.Stream, Perspective: k.Perspective, AppliedWorkIDs: applied, FailedWorkIDs: []uuid.UUID{uuid.New()}, Error: "boom"}
	h.c.ReportFailure(t.Context(), f)
	require.NoError(t, h.send(t))

	require.Equal(t, []ports.Failure{f}, h.cursors.failed)
	h.ev.mu.Lock()
	require.Equal(t, []pair.Key{k}, h.ev.failureAcked)
	require.Equal(t, []ports.Failure{f}, h.ev.failures)
	require.Equal(t, []pair.Key{k}, h.ev.landed)
	h.ev.mu.Unlock()
	require.True(t, h.cache.Contains(k.Dedup(), applied[0]), "the applied rows are retained")
}
