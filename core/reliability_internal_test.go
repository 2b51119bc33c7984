package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core/internal/monitor"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/internal/logtest"
	"github.com/vantage-go/vantage/ports"
)

func TestFailureReason(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		err  error
		want string
	}{
		{errors.New("boom"), ports.ReasonFailed},
		{fmt.Errorf("%w of 1m0s", monitor.ErrDeadline), ports.ReasonTimedOut},
		{fmt.Errorf("wrapped: %w", monitor.ErrAbandoned), ports.ReasonTimedOut},
		{fmt.Errorf("%w: decoding x", ErrUndecodable), ports.ReasonUndecodable},
		{fmt.Errorf("%w: \"x\"", ErrUnknownEventType), ports.ReasonUnknownType},
		{fmt.Errorf("perspective p: %w", ErrNoHandler), ports.ReasonUnknownType},
	} {
		require.Equal(t, tc.want, failureReason(tc.err), tc.err.Error())
	}
}

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
	_, _, err = w.drain.fetch(stopped, []uuid.UUID{uuid.New()})
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"heartbeat": false, "fetch": false}, spy.done)
}

// downRewind fails the rewinds' backend calls while down is set.
type downRewind struct {
	ports.RewindStore
	ports.SnapshotStore
	ports.CursorStore
	down *atomic.Bool
}

var errDown = fmt.Errorf("connection refused: %w", ports.ErrTransient)

func (d downRewind) StreamLockAcquire(ctx context.Context, p *ports.StreamLockParams) (bool, error) {
	if d.down.Load() {
		return false, errDown
	}
	return d.RewindStore.StreamLockAcquire(ctx, p)
}

func (d downRewind) StreamLockRelease(ctx context.Context, p *ports.StreamLockParams) error {
	if d.down.Load() {
		return errDown
	}
	return d.RewindStore.StreamLockRelease(ctx, p)
}

func (d downRewind) SnapshotSave(ctx context.Context, p *ports.SnapshotSaveParams) error {
	if d.down.Load() {
		return errDown
	}
	return d.SnapshotStore.SnapshotSave(ctx, p)
}

func (d downRewind) CursorsGet(ctx context.Context, p *ports.CursorsGetParams) ([]ports.Cursor, error) {
	if d.down.Load() {
		return nil, errDown
	}
	return d.CursorStore.CursorsGet(ctx, p)
}

// The rewinds' backend calls (their locks, the cursor reads of the
// start-up repair, snapshots) log an outage like any background
// operation: its first failure, then its recovery, not a line per call.
func TestRewindFailuresLoggedOncePerOutage(t *testing.T) {
	t.Parallel()

	mem := memory.New(memory.Options{}).Backend()
	var down atomic.Bool
	d := downRewind{RewindStore: mem.Rewind, SnapshotStore: mem.Snapshots, down: &down}
	b := mem
	b.Rewind, b.Snapshots = d, d
	recs := &logtest.Records{}
	bb := setupBatchNamed(t, &Options{Logger: slog.New(recs), Rewind: RewindOptions{SnapshotEvery: 1}}, b, "c")
	d.CursorStore = bb.backend.Cursors
	bb.w.backend.Cursors = d
	rw := bb.w.rewind
	ctx := t.Context()
	key := pair.Key{Stream: uuid.New(), Perspective: "c"}
	event := ports.Event{ID: uuid.New(), StreamID: key.Stream, Version: 1}

	outage := func(n int, call func()) {
		down.Store(true)
		for range n {
			call()
		}
		down.Store(false)
	}
	lock := func() {
		if unlock, ok := rw.lockPair(ctx, key, lockReasonRewind); ok {
			unlock()
		}
	}
	outage(10, func() {
		lock()
		rw.cursorsOf(ctx, []uuid.UUID{key.Stream})
		rw.maybeSnapshot(ctx, key, 0, event, 0, []byte(`{}`))
	})
	lock()
	rw.cursorsOf(ctx, []uuid.UUID{key.Stream})
	rw.maybeSnapshot(ctx, key, 0, event, 0, []byte(`{}`))
	for range 10 { // the releases fail
		unlock, ok := rw.lockPair(ctx, key, lockReasonRewind)
		require.True(t, ok)
		outage(1, unlock)
	}
	lock()

	var lines []string
	for _, l := range recs.Lines() {
		if !strings.HasPrefix(l, "DEBUG") {
			lines = append(lines, l)
		}
	}
	require.Equal(t, []string{
		"WARN acquiring stream locks failed; retrying",
		"WARN reading cursors for rewinds failed; retrying",
		"WARN saving snapshots failed; retrying",
		"INFO acquiring stream locks recovered",
		"INFO reading cursors for rewinds recovered",
		"INFO saving snapshots recovered",
		"WARN releasing stream locks failed; retrying",
		"INFO releasing stream locks recovered",
	}, lines)
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
		bb.w.drain.processBatch(ctx, streams)
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
