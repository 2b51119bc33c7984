package core

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/ports"
)

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

	bb.w.drain.ProcessBatch(t.Context(), bb.take(t, stream))
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
