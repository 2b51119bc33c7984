package core

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core/completion"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// reportErrors fails WorkComplete and WorkFail with err while err is set.
type reportErrors struct {
	ports.CursorStore
	err atomic.Pointer[error]
}

func (c *reportErrors) fail(err error) { c.err.Store(&err) }

func (c *reportErrors) heal() { c.err.Store(nil) }

func (c *reportErrors) WorkComplete(ctx context.Context, p *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	if err := c.err.Load(); err != nil {
		return nil, *err
	}
	return c.CursorStore.WorkComplete(ctx, p)
}

func (c *reportErrors) WorkFail(ctx context.Context, p *ports.WorkFailParams) error {
	if err := c.err.Load(); err != nil {
		return *err
	}
	return c.CursorStore.WorkFail(ctx, p)
}

var (
	errRefusedReport   = fmt.Errorf("completing work: %w", ports.ErrInvalidArgument)
	errTransientReport = fmt.Errorf("completing work: connection reset: %w", ports.ErrTransient)
)

// reportBundle is a batch bundle on a fake clock whose reports meet
// reportErrors, with one stream of one event fetched and drained while
// they fail with err (when not nil).
type reportBundle struct {
	*batchBundle
	clock   *clocktest.Fake
	mem     ports.Backend
	reports *reportErrors
	key     pair.Key
	row     ports.WorkItem
}

func setupReports(t *testing.T, mode completion.Factory, err error) *reportBundle {
	t.Helper()
	clock := clocktest.NewFake()
	mem := memory.New(memory.Options{Clock: clock}).Backend()
	b := mem
	reports := &reportErrors{CursorStore: mem.Cursors}
	b.Cursors = reports
	bb := setupBatchNamed(t, &Options{Clock: clock, Completion: mode}, b, "c")
	stream := bb.appendStreams(t, 1, placed{ID: "a"})[0]
	res, seq, ferr := bb.w.fetcher.Fetch(t.Context(), []uuid.UUID{stream})
	require.NoError(t, ferr)
	require.Len(t, res.Work, 1)
	rb := &reportBundle{batchBundle: bb, clock: clock, mem: mem, reports: reports, key: pair.Key{Stream: stream, Perspective: "c"}, row: res.Work[0]}
	if err != nil {
		reports.fail(err)
	}
	require.Equal(t, 1, bb.drainFetched(t, res, seq))
	return rb
}

// held reports whether the dedup cache holds the bundle's row back.
func (rb *reportBundle) held() bool {
	return rb.w.cache.Contains(rb.key.Dedup(), rb.row.WorkID)
}

// kept returns how many outcomes the strategy keeps, Pending or Sent.
func (rb *reportBundle) kept() int {
	s := rb.w.completer.Strategy()
	s.ResetStale(rb.clock.Now().Add(time.Hour))
	return len(s.PendingCompletions()) + len(s.PendingFailures())
}

// pending returns the pending work rows of the bundle's perspective.
func (rb *reportBundle) pending(t *testing.T) int64 {
	t.Helper()
	lag, err := rb.mem.Stats.PerspectivesLag(t.Context(), &ports.PerspectivesLagParams{})
	require.NoError(t, err)
	if len(lag) == 0 {
		return 0
	}
	return lag[0].Pending
}

// A completion the backend refuses is given up on, whatever the strategy:
// the strategy keeps nothing to send again, its rows leave the dedup cache
// (which would skip their re-delivery for good) and the pair is drained
// again after the infrastructure backoff, where the row completes without
// being applied again.
func TestRefusedCompletionReleasesItsRows(t *testing.T) {
	t.Parallel()

	for name, mode := range map[string]completion.Factory{"Batched": completion.BatchedFactory, "Instant": completion.InstantFactory} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rb := setupReports(t, mode, errRefusedReport)
			if err := rb.w.completer.FlushNow(t.Context()); name == "Batched" {
				require.ErrorIs(t, err, ports.ErrInvalidArgument, "the flusher met the refusal")
			} else {
				require.NoError(t, err, "the report met the refusal: nothing to flush")
			}
			require.False(t, rb.held(), "the row is released from the dedup cache")
			require.Zero(t, rb.kept(), "nothing is sent again")
			require.True(t, rb.w.parking.IsParked(rb.key), "the pair waits for its backoff")

			rb.reports.heal()
			rb.clock.Advance(time.Second) // past the first backoff, jitter included
			require.False(t, rb.w.parking.IsParked(rb.key))
			res, seq, err := rb.w.fetcher.Fetch(t.Context(), []uuid.UUID{rb.key.Stream})
			require.NoError(t, err)
			require.Equal(t, []ports.WorkItem{rb.row}, res.Work, "the row is re-delivered")
			require.Zero(t, rb.drainFetched(t, res, seq), "it is not applied again")
			require.NoError(t, rb.w.completer.FlushNow(t.Context()))
			require.Zero(t, rb.pending(t), "it completed")
			require.Equal(t, int64(1), rb.applied.Load())
		})
	}
}

// With instant completions, a completion whose report fails is kept: its
// rows stay held back by the dedup cache, and the flusher sends it again
// until the backend acknowledges it.
func TestInstantCompletionKeptUntilAcknowledged(t *testing.T) {
	t.Parallel()

	rb := setupReports(t, completion.InstantFactory, errTransientReport)
	require.True(t, rb.held(), "the row stays held back")
	require.Equal(t, 1, rb.kept(), "the completion is kept")
	require.Equal(t, int64(1), rb.pending(t))

	rb.reports.heal()
	require.NoError(t, rb.w.completer.FlushNow(t.Context()))
	require.Zero(t, rb.pending(t), "the kept completion was sent")
	require.Zero(t, rb.kept(), "and settled by its acknowledgement")
	require.True(t, rb.held(), "its row is retained, not released")
}

// A failure whose report is refused is given up on, whatever the strategy:
// the rows completed with it leave the dedup cache, and its pair, parked
// until the acknowledgement of the failure, is drained again after the
// infrastructure backoff instead of waiting for good.
func TestRefusedFailureUnparksItsPair(t *testing.T) {
	t.Parallel()

	for name, mode := range map[string]completion.Factory{"Batched": completion.BatchedFactory, "Instant": completion.InstantFactory} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rb := setupReports(t, mode, nil)
			require.NoError(t, rb.w.completer.FlushNow(t.Context()))
			require.Zero(t, rb.pending(t))
			k := pair.Key{Stream: uuid.New(), Perspective: "c"}
			applied := []uuid.UUID{uuid.New()}
			rb.reports.fail(errRefusedReport)
			retryAt := rb.clock.Now().Add(time.Hour)
			turn, err := rb.w.parking.Take(t.Context(), k)
			require.NoError(t, err)
			turn.End(t.Context(), rb.w.failures.Failed(t.Context(), k, ports.Failure{
				StreamID: k.Stream, Perspective: k.Perspective, AppliedWorkIDs: applied, FailedWorkIDs: []uuid.UUID{uuid.New()},
				Error: "boom", RetryAt: retryAt,
			}, 2, 1, errors.New("boom")))
			rb.w.completer.FlushPending(t.Context())
			if err := rb.w.completer.Flush(t.Context()); name == "Batched" {
				require.ErrorIs(t, err, ports.ErrInvalidArgument, "the flusher met the refusal")
			} else {
				require.NoError(t, err, "the report met the refusal: nothing to flush")
			}

			require.False(t, rb.w.cache.Contains(k.Dedup(), applied[0]), "the applied rows are released")
			require.Zero(t, rb.kept(), "nothing is sent again")
			until, acked, _ := rb.w.parking.Held(k)
			require.True(t, acked, "the pair no longer waits for an acknowledgement")
			require.True(t, until.Before(retryAt), "it is retried after the backoff, not the failure's delay")
			rb.clock.Advance(time.Second)
			require.False(t, rb.w.parking.IsParked(k))
		})
	}
}

// The wait of a pair whose reports are given up on grows with each one, as
// Retries.Infra's does, and starts anew once a report of the pair lands: the
// drains in between, which go through, do not reset it, so a backend that
// refuses every report of a pair is not asked again at the pace of the
// first wait.
func TestGivenUpReportsBackOff(t *testing.T) {
	t.Parallel()

	bb := setupBatchWith(t, &Options{Clock: clocktest.NewFake()})
	k := pair.Key{Stream: uuid.New(), Perspective: "c"}
	// Retries.Infra's first wait: 100ms, spread by half.
	require.LessOrEqual(t, bb.w.parking.ReportGivenUp(k), 150*time.Millisecond)
	var last time.Duration
	for range 6 {
		bb.w.parking.InfraRecovered(k) // a drain of the pair went through
		last = bb.w.parking.ReportGivenUp(k)
	}
	// The seventh: 100ms × 1.5^6, about 1.14s, spread by half.
	require.Greater(t, last, 500*time.Millisecond, "the wait grew")
	bb.w.parking.ReportLanded(k)
	require.LessOrEqual(t, bb.w.parking.ReportGivenUp(k), 150*time.Millisecond, "a report landed: the wait starts anew")
}
