package core

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/internal/logtest"
	"github.com/vantage-go/vantage/ports"
)

// ctxSpy records whether the context of each lease-taking call was done.
type ctxSpy struct {
	ports.WorkClaimer
	ports.EventFetcher
	mu   sync.Mutex
	done map[string]bool
}

func (s *ctxSpy) note(call string, ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done[call] = ctx.Err() != nil
}

func (s *ctxSpy) InstanceHeartbeat(ctx context.Context, p *ports.InstanceHeartbeatParams) (*ports.InstanceHeartbeatResult, error) {
	s.note("heartbeat", ctx)
	return s.WorkClaimer.InstanceHeartbeat(ctx, p)
}

func (s *ctxSpy) WorkClaim(ctx context.Context, p *ports.WorkClaimParams) (*ports.WorkClaimResult, error) {
	s.note("claim", ctx)
	return s.WorkClaimer.WorkClaim(ctx, p)
}

func (s *ctxSpy) EventsFetchPending(ctx context.Context, p *ports.EventsFetchPendingParams) (*ports.EventsFetchPendingResult, error) {
	s.note("fetch", ctx)
	return s.EventFetcher.EventsFetchPending(ctx, p)
}

// A call that takes leases is never abandoned when the worker stops: given
// up on, it could still commit on the server after Stop deregistered the
// instance, leaving rows leased to an instance that is gone. (The claim's
// own test is in the claim package.)
func TestLeaseCallsOutliveCancellation(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	spy := &ctxSpy{WorkClaimer: b.Claimer, EventFetcher: b.Fetcher, done: map[string]bool{}}
	b.Claimer, b.Fetcher = spy, spy
	w, err := New(b, newTestRegistry(t), &Options{Logger: slog.New(&logtest.Records{})})
	require.NoError(t, err)
	stopped, cancel := context.WithCancel(t.Context())
	cancel()

	_, err = w.heartbeat.Beat(stopped)
	require.NoError(t, err)
	_, _, err = w.fetcher.Fetch(stopped, []uuid.UUID{uuid.New()})
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"heartbeat": false, "fetch": false}, spy.done)
}

// Work rows of a perspective this instance does not have (removed from the
// code, or not deployed here yet) are skipped and held back for 30s at a
// time, and never charged to their events. Logging each skip would log
// every 30s per stream, for as long as the rows stay: it is logged once per
// perspective and minute, with the events skipped since.
func TestUnknownPerspectiveLoggedOncePerInterval(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	clock := clocktest.NewFake()
	mem := memory.New(memory.Options{Clock: clock}).Backend()
	// The deploy before this one had a "gone" perspective: its
	// subscription stored work rows for it.
	previous := newTestRegistry(t)
	for _, name := range []string{"c", "gone"} {
		p := NewPerspective[counter](name)
		MustHandle(p, func(_ context.Context, m counter, _ placed) (counter, error) { return m, nil })
		require.NoError(t, previous.AddPerspective(p))
	}
	require.NoError(t, previous.RegisterSubscriptions(ctx, mem.Events))
	recs := &logtest.Records{}
	bb := setupBatchNamed(t, &Options{Clock: clock, Logger: slog.New(recs)}, mem, "c")
	streams := []uuid.UUID{uuid.New(), uuid.New()}
	for _, s := range streams {
		_, err := previous.Append(ctx, mem.Events, s, 0, placed{ID: "a"}, placed{ID: "b"}, placed{ID: "c"})
		require.NoError(t, err)
	}

	// Every 30s for 5 minutes the streams are drained again: each time
	// the 3 events of each stream are skipped for "gone".
	const rounds = 11
	for range rounds {
		bb.w.drain.ProcessBatch(ctx, streams)
		clock.Advance(pair.UnknownPerspectiveRetry)
	}

	var told []int64
	for i, line := range recs.Lines() {
		if recs.Attr(i, "perspective").String() != "gone" {
			continue
		}
		require.Equal(t, "WARN skipping the work of a perspective this instance does not have; it waits for an instance that has it", line)
		told = append(told, recs.Attr(i, "events_skipped").Int64())
	}
	// The first stream's skip is told at once; the next line, a minute
	// later, counts the second stream's skip at 0s, both at 30s and the
	// first stream's at 60s.
	require.Equal(t, []int64{3, 12, 12, 12, 12, 12}, told, "once at first, then once a minute with the events skipped since")
}
