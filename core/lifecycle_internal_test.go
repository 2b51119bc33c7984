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
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// outageLifecycle fails the first failures claims of stage with a
// transient error, and sends on claimed after each failed claim.
type outageLifecycle struct {
	ports.LifecycleStore
	stage    ports.LifecycleStage
	failures atomic.Int64
	claimed  chan struct{}
}

func (l *outageLifecycle) LifecycleClaim(ctx context.Context, p *ports.LifecycleClaimParams) ([]uuid.UUID, error) {
	if p.Stage == l.stage && l.failures.Add(-1) >= 0 {
		l.claimed <- struct{}{}
		return nil, fmt.Errorf("claiming: connection refused: %w", ports.ErrTransient)
	}
	return l.LifecycleStore.LifecycleClaim(ctx, p)
}

// A PostPerspective stage whose claim keeps failing with transient errors
// for longer than a few retries still runs once the backend answers:
// nothing else would run it (the events' rows complete).
func TestPostPerspectiveOutlastsAnOutage(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	b := memory.New(memory.Options{Clock: clock}).Backend()
	outage := &outageLifecycle{LifecycleStore: b.Lifecycle, stage: ports.StagePostPerspective, claimed: make(chan struct{})}
	const failures = 12
	outage.failures.Store(failures)
	b.Lifecycle = outage
	bb := setupBatchNamed(t, &Options{Clock: clock}, b, "c")
	var fired atomic.Int64
	require.NoError(t, AddReceptor(bb.w.reg, PostPerspective, Inline, func(context.Context, placed, StageInfo) error {
		fired.Add(1)
		return nil
	}))
	stream := bb.appendStreams(t, 1, placed{ID: "a"})[0]
	events, err := b.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream})
	require.NoError(t, err)

	baseline := clock.Timers()
	done := make(chan struct{})
	var ranErr error
	go func() {
		defer close(done)
		ranErr = bb.w.lifecycle.PostPerspective(t.Context(), "c", events)
	}()
	for range failures {
		recv(t, outage.claimed, "a failed claim")
		select {
		case <-clock.WaitTimers(baseline + 1):
		case <-done:
			t.Fatalf("the stage gave up after %d failed claims", failures-outage.failures.Load())
		case <-time.After(10 * time.Second):
			t.Fatal("no retry of the claim armed")
		}
		clock.Advance(time.Hour)
	}
	recv(t, done, "the stage to run")
	require.NoError(t, ranErr, "the rows may be reported")
	require.Equal(t, int64(1), fired.Load(), "PostPerspective fired once the backend answered")
}

// A PostPerspective whose claim keeps failing holds its rows' report back
// only as long as its caller's context: once that ends (the worker
// stops), the stage has not run, the caller is told so and drops the
// report, and the rows come back to run it. The first try runs although
// the context ended already.
func TestPostPerspectiveHeldReportEndsWithItsContext(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	b := memory.New(memory.Options{Clock: clock}).Backend()
	outage := &outageLifecycle{LifecycleStore: b.Lifecycle, stage: ports.StagePostPerspective, claimed: make(chan struct{}, 1)}
	outage.failures.Store(1 << 30)
	b.Lifecycle = outage
	bb := setupBatchNamed(t, &Options{Clock: clock}, b, "c")
	var fired atomic.Int64
	require.NoError(t, AddReceptor(bb.w.reg, PostPerspective, Inline, func(context.Context, placed, StageInfo) error {
		fired.Add(1)
		return nil
	}))
	bb.w.lifecycle.Start(t.Context())
	stream := bb.appendStreams(t, 1, placed{ID: "a"})[0]
	events, err := b.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream})
	require.NoError(t, err)

	ctx, cancel := context.WithCancelCause(t.Context())
	stopping := errors.New("stopping")
	cancel(stopping)
	err = bb.w.lifecycle.PostPerspective(ctx, "c", events)
	require.ErrorIs(t, err, stopping, "the report is held back: the stage did not run")
	recv(t, outage.claimed, "the first try, made although ctx ended")
	require.Zero(t, fired.Load())
	stages, err := b.Lifecycle.LifecycleStages(t.Context(), &ports.LifecycleStagesParams{EventIDs: []uuid.UUID{events[0].ID}, Perspective: "c"})
	require.NoError(t, err)
	require.Zero(t, stages[events[0].ID]&ports.StagePostPerspective, "nothing recorded")
}

// lostClaimAck records the first claim of stage and then fails it with a
// transient error, as a connection lost before the acknowledgement does.
type lostClaimAck struct {
	ports.LifecycleStore
	stage ports.LifecycleStage
	lost  atomic.Bool
}

func (l *lostClaimAck) LifecycleClaim(ctx context.Context, p *ports.LifecycleClaimParams) ([]uuid.UUID, error) {
	won, err := l.LifecycleStore.LifecycleClaim(ctx, p)
	if err == nil && p.Stage == l.stage && l.lost.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("claiming: connection reset: %w", ports.ErrTransient)
	}
	return won, err
}

// A PrePerspective claim recorded although the call failed is settled by
// the instance that made it, even if it never drains the stream again:
// another instance would wait for that claim as long as this one lives.
// The stage runs here, once, and is recorded.
func TestPrePerspectiveClaimWithLostAckSettled(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	lost := &lostClaimAck{LifecycleStore: b.Lifecycle, stage: ports.StagePrePerspective}
	b.Lifecycle = lost
	bb := setupBatchNamed(t, &Options{}, b, "c")
	var fired atomic.Int64
	require.NoError(t, AddReceptor(bb.w.reg, PrePerspective, Inline, func(context.Context, placed, StageInfo) error {
		fired.Add(1)
		return nil
	}))
	bb.w.lifecycle.Start(t.Context()) // as Start does: stages outlive their callers' contexts
	stream := bb.appendStreams(t, 1, placed{ID: "a"})[0]

	bb.w.drain.processBatch(t.Context(), bb.take(t, stream))
	require.True(t, lost.lost.Load(), "the claim's acknowledgement was lost")
	require.Zero(t, bb.applied.Load(), "nothing applied before the stage ran")
	require.NoError(t, bb.w.lifecycle.Wait(t.Context()))
	require.Equal(t, int64(1), fired.Load(), "the stage ran once")
	events, err := b.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream})
	require.NoError(t, err)
	stages, err := b.Lifecycle.LifecycleStages(t.Context(), &ports.LifecycleStagesParams{EventIDs: []uuid.UUID{events[0].ID}})
	require.NoError(t, err)
	require.Equal(t, ports.StagePrePerspective, stages[events[0].ID], "the stage is recorded")
}
