package enginetest_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// The claim of a rebuild request in these tests lasts 21s and is renewed
// every 7s; requests are looked for every 30s.
const (
	rebuildClaimDuration = 21 * time.Second
	rebuildKeepAlive     = 7 * time.Second
	rebuildPollInterval  = 30 * time.Second
)

// A running rebuild request records its progress at most once a second,
// when it moved on, and otherwise renews its claim every Rewind.KeepAlive.
func TestRebuildRequestReportsProgressOncePerSecond(t *testing.T) {
	t.Parallel()
	f := setupRebuildQueue(t)
	f.start(t)

	waitFor(t, f.entered, "the rebuild reaching the second stream")
	waitFor(t, f.timers.armed, "the progress timer")
	f.tick(t)
	first := waitFor(t, f.progress, "the first report")
	require.Equal(t, ports.RebuildFigures{StreamsTotal: 3, StreamsDone: 1, EventsReplayed: 1, ResumeAfter: f.streams[0]}, first.RebuildFigures)
	require.Equal(t, rebuildClaimDuration, first.ClaimDuration)
	require.False(t, first.Release)
	for i := range 6 {
		f.tick(t)
		require.Empty(t, f.progress, "%ds after the report: nothing moved on, and the claim is not due for renewal", i+1)
	}
	f.tick(t)
	renewal := waitFor(t, f.progress, "the renewal")
	require.Equal(t, first.RebuildFigures, renewal.RebuildFigures)

	close(f.release)
	done := waitFor(t, f.done, "the request done")
	require.Equal(t, ports.RebuildFigures{StreamsTotal: 3, StreamsDone: 3, EventsReplayed: 3, ResumeAfter: f.streams[2]}, done.RebuildFigures)
	require.Empty(t, f.progress, "its end is recorded by RebuildFinish")
}

// A rebuild request whose progress cannot be recorded is stopped a
// Rewind.KeepAlive before its claim expires, rather than run on while
// another instance may take it over; it is claimed anew once its claim
// expired.
func TestRebuildRequestStopsBeforeItsClaimExpires(t *testing.T) {
	t.Parallel()
	f := setupRebuildQueue(t)
	f.failReports.Store(true)
	f.start(t)
	require.Equal(t, 1, waitFor(t, f.claims, "the first claim").Attempt)

	waitFor(t, f.entered, "the rebuild reaching the second stream")
	waitFor(t, f.timers.armed, "the progress timer")
	stopAt := rebuildClaimDuration - rebuildKeepAlive
	for i := range int(stopAt/time.Second) - 1 {
		f.tick(t)
		require.ErrorIs(t, waitFor(t, f.failures, fmt.Sprintf("report %d", i+1)), ports.ErrTransient)
	}
	require.Empty(t, f.cancelled, "the run goes on")
	f.clock.Advance(time.Second)
	require.ErrorIs(t, waitFor(t, f.failures, "the last report"), ports.ErrTransient)
	require.ErrorIs(t, waitFor(t, f.cancelled, "the run stopped"), context.Canceled)

	f.failReports.Store(false)
	f.clock.Advance(rebuildPollInterval) // the claim expired meanwhile
	again := waitFor(t, f.claims, "the request claimed anew")
	require.Equal(t, 2, again.Attempt)
	require.Equal(t, ports.RebuildFigures{}, again.RebuildFigures, "nothing was recorded")
}

// rebuildQueueFixture is a memory store on a fake clock whose three streams
// hold one event each and a model of the perspective "total" at it, with
// no pending work, and a request to rebuild "total": a worker started on it
// claims the request at once, rebuilds the first stream and blocks in the
// apply of the second until release is closed.
type rebuildQueueFixture struct {
	clock   *clocktest.Fake
	timers  *exactTimers
	backend ports.Backend
	reg     *core.Registry
	streams []uuid.UUID // in byte order
	request ports.RebuildRequest

	entered   chan struct{}
	release   chan struct{}
	cancelled chan error // the blocked apply's context ended
	// progress receives the reports that were recorded, failures the
	// errors of those that were refused; failReports refuses them with
	// ports.ErrTransient.
	progress    chan ports.RebuildProgressParams
	failures    chan error
	failReports atomic.Bool
	// claims and done receive what OnRebuildRequest reports of claims and
	// of requests done.
	claims chan ports.RebuildRequest
	done   chan ports.RebuildRequest
}

func setupRebuildQueue(t *testing.T) *rebuildQueueFixture {
	t.Helper()
	ctx := t.Context()
	clock := clocktest.NewFake()
	store := memory.New(memory.Options{Clock: clock})
	t.Cleanup(func() { _ = store.Close() })
	f := &rebuildQueueFixture{
		clock:     clock,
		timers:    &exactTimers{Fake: clock, d: time.Second, armed: make(chan time.Time, 64)},
		entered:   make(chan struct{}, 1),
		cancelled: make(chan error, 1),
		release:   make(chan struct{}),
		progress:  make(chan ports.RebuildProgressParams, 64),
		failures:  make(chan error, 64),
		claims:    make(chan ports.RebuildRequest, 64),
		done:      make(chan ports.RebuildRequest, 64),
	}
	for range 3 {
		f.streams = append(f.streams, uuid.New())
	}
	slices.SortFunc(f.streams, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	f.reg = registryWith(t, func(ctx context.Context, m total, e added) (total, error) {
		ev, _ := core.EventFromContext(ctx)
		if ev.StreamID == f.streams[1] {
			select {
			case f.entered <- struct{}{}:
			default:
			}
			select {
			case <-f.release:
			case <-ctx.Done():
				select {
				case f.cancelled <- ctx.Err():
				default:
				}
				return m, ctx.Err()
			}
		}
		m.Sum += e.N
		m.Events++
		return m, nil
	})
	b := store.Backend()
	// No subscription yet: the appends store no work, so only the rebuild
	// applies anything.
	for _, s := range f.streams {
		res, err := b.Events.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: s, Events: []ports.NewEvent{{Type: "added", Data: []byte(`{"n":1}`)}}})
		require.NoError(t, err)
		require.NoError(t, b.Models.ModelSave(ctx, &ports.ModelSaveParams{
			StreamID: s, Perspective: "total", Data: []byte(`{}`), LastEventID: res.Events[0].ID, LastVersion: 1,
		}))
	}
	var err error
	f.request, err = b.Admin.RebuildRequest(ctx, &ports.RebuildRequestParams{Perspective: "total"})
	require.NoError(t, err)
	b.Notifier = silentNotifier{}
	b.Rebuilds = progressWatcher{RebuildQueue: b.Rebuilds, f: f}
	f.backend = b
	return f
}

// start starts a worker whose every loop but the rebuild requests' waits
// an hour or a minute.
func (f *rebuildQueueFixture) start(t *testing.T) *core.Worker {
	t.Helper()
	opts := wakeOnlyOptions(t)
	opts.Clock = f.timers
	opts.Rewind.RebuildPollInterval = rebuildPollInterval
	opts.Rewind.LockTimeout, opts.Rewind.KeepAlive = rebuildClaimDuration, rebuildKeepAlive
	opts.Retries.CompletionResend = core.Backoff{Initial: 3 * time.Second, Max: 3 * time.Second}
	opts.Hooks.OnRebuildRequest = func(r ports.RebuildRequest) {
		switch {
		case r.Status == ports.RebuildRunning && r.StreamsDone == 0:
			f.claims <- r
		case r.Status == ports.RebuildDone:
			f.done <- r
		}
	}
	return startWorker(t, f.backend, f.reg, opts)
}

// tick moves the clock a second on, and waits until the progress timer is
// armed again: the tick was handled.
func (f *rebuildQueueFixture) tick(t *testing.T) {
	t.Helper()
	f.clock.Advance(time.Second)
	waitFor(t, f.timers.armed, "the progress timer armed again")
}

// progressWatcher reports the rebuild progress calls of the fixture, and
// refuses them while it says so.
type progressWatcher struct {
	ports.RebuildQueue
	f *rebuildQueueFixture
}

func (w progressWatcher) RebuildProgress(ctx context.Context, params *ports.RebuildProgressParams) error {
	if w.f.failReports.Load() {
		err := fmt.Errorf("recording rebuild progress: %w", ports.ErrTransient)
		w.f.failures <- err
		return err
	}
	if err := w.RebuildQueue.RebuildProgress(ctx, params); err != nil {
		return err
	}
	w.f.progress <- *params
	return nil
}

// exactTimers is a fake clock that reports the deadline of every timer armed
// for exactly d, once it is armed.
type exactTimers struct {
	*clocktest.Fake
	d     time.Duration
	armed chan time.Time
}

func (c *exactTimers) NewTimer(d time.Duration) ports.Timer {
	t := &exactTimer{Timer: c.Fake.NewTimer(d), clock: c}
	c.report(d)
	return t
}

func (c *exactTimers) report(d time.Duration) {
	if d == c.d {
		c.armed <- c.Now().Add(d)
	}
}

type exactTimer struct {
	ports.Timer
	clock *exactTimers
}

func (t *exactTimer) Reset(d time.Duration) {
	t.Timer.Reset(d)
	t.clock.report(d)
}
