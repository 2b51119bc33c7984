package lease

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/faultlog"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// renewSpy records lease renewals.
type renewSpy struct {
	ports.WorkClaimer
	mu    sync.Mutex
	calls []ports.WorkRenewLeasesParams
	fail  atomic.Bool
	seen  chan struct{}
}

func (s *renewSpy) WorkRenewLeases(_ context.Context, p *ports.WorkRenewLeasesParams) (int, error) {
	defer func() { s.seen <- struct{}{} }()
	if s.fail.Load() {
		return 0, fmt.Errorf("renewing: %w", ports.ErrTransient)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, *p)
	return len(p.StreamIDs), nil
}

func TestRenewsHeldStreamsEveryQuarterLease(t *testing.T) {
	t.Parallel()

	clock := clocktest.NewFake()
	spy := &renewSpy{seen: make(chan struct{}, 10)}
	r := New(&base.Env{Clock: clock, InjectedClock: true, Faults: faultlog.New(slog.New(slog.DiscardHandler), clock)},
		Config{Claimer: spy, InstanceID: uuid.New(), LeaseDuration: 4 * time.Minute})
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	timers := clock.Timers()
	go func() { defer close(done); r.run(ctx) }()
	t.Cleanup(func() { stop(); <-done })

	s1, s2, s3 := uuid.New(), uuid.New(), uuid.New()
	r.Hold(s1, clock.Now())
	r.Hold(s3, clock.Now())
	<-clock.WaitTimers(timers + 1)
	clock.Advance(30 * time.Second)
	r.Hold(s2, clock.Now())         // fetched later
	r.Hold(s1, clock.Now())         // fetched again: its lease dates from the first fetch
	clock.Advance(30 * time.Second) // one minute: a quarter lease
	<-spy.seen
	spy.mu.Lock()
	require.Len(t, spy.calls, 1)
	require.ElementsMatch(t, []uuid.UUID{s1, s3}, spy.calls[0].StreamIDs, "only the leases granted a quarter lease ago")
	require.Equal(t, 4*time.Minute, spy.calls[0].LeaseDuration)
	require.Equal(t, clock.Now(), spy.calls[0].Now)
	spy.mu.Unlock()

	// A failed renewal is tried again at the next tick; a dropped stream is
	// no longer renewed.
	r.Drop(s1)
	r.Drop(s3)
	spy.fail.Store(true)
	<-clock.WaitTimers(timers + 1)
	clock.Advance(time.Minute)
	<-spy.seen
	spy.fail.Store(false)
	<-clock.WaitTimers(timers + 1)
	clock.Advance(time.Minute)
	<-spy.seen
	spy.mu.Lock()
	defer spy.mu.Unlock()
	require.Len(t, spy.calls, 2)
	require.Equal(t, []uuid.UUID{s2}, spy.calls[1].StreamIDs, "only the stream still held")
}
