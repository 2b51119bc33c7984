package pair

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/queue"
	"github.com/vantage-go/vantage/internal/clocktest"
)

func TestSchedulePushesStreamsWhenDue(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	q := queue.New(queue.Hooks{})
	k := newSchedule(clock, q)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); k.run(ctx) }()
	t.Cleanup(func() { stop(); <-done })

	a, b := uuid.New(), uuid.New()
	k.at(a, clock.Now().Add(2*time.Second))
	k.at(b, clock.Now().Add(time.Second))
	k.at(a, clock.Now().Add(3*time.Second)) // later than its wake: ignored
	require.Eventually(t, func() bool {
		return k.armed(clock.Now().Add(time.Second))
	}, 10*time.Second, time.Millisecond, "the loop armed its timer for the first wake")
	require.Zero(t, q.Len())
	clock.Advance(time.Second)
	<-q.Signal()
	require.Equal(t, []uuid.UUID{b}, q.Take(10))
	<-clock.WaitTimers(1)
	clock.Advance(time.Second)
	<-q.Signal()
	require.Equal(t, []uuid.UUID{a}, q.Take(10))
	clock.Advance(time.Hour)
	require.Zero(t, q.Len(), "each stream woke once")
}
