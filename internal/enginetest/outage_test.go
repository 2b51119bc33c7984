package enginetest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/core/completion"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/internal/logtest"
	"github.com/vantage-go/vantage/ports"
)

// outage fails the engine's coordination calls while down is set, as an
// unreachable database would: claims, heartbeats, lease renewals, fetches,
// completions, failures, cursor reads, lifecycle stages and dead-letter
// requeues. The models stay reachable (they may live elsewhere), so the
// events applied during the outage pile up outcomes that cannot be sent.
// It counts the failed calls by the operation of the engine that makes
// them, as the engine's log names it.
type outage struct {
	down atomic.Bool
	// stagesBack ends the outage of the lifecycle records before the
	// rest: the completions a failing PostPerspective claim held back are
	// sent then, and fail.
	stagesBack atomic.Bool
	// completing and failing name the operations that send outcomes:
	// the flushers' or, with instant completions, the reports'.
	completing, failing string
	// alsoLogged names, per operation counted here, the other operations
	// of the engine's log whose calls it counts too: with instant
	// completions, an outcome whose report failed is kept and sent again
	// by a flusher, through the same backend method.
	alsoLogged map[string][]string

	mu     sync.Mutex
	failed map[string]int
}

func (o *outage) err(op string) error {
	if !o.down.Load() {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failed == nil {
		o.failed = map[string]int{}
	}
	o.failed[op]++
	return fmt.Errorf("dial tcp 10.0.0.5:5432: connect: connection refused: %w", ports.ErrTransient)
}

// failedOps returns the operations that failed at least once, with how
// many of their calls failed.
func (o *outage) failedOps() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.failed)
}

// outageClaimer also reports the streams of every claim that went
// through to claimed.
type outageClaimer struct {
	ports.WorkClaimer
	o       *outage
	claimed func([]uuid.UUID)
}

func (c outageClaimer) WorkClaim(ctx context.Context, p *ports.WorkClaimParams) (*ports.WorkClaimResult, error) {
	if err := c.o.err("claiming work"); err != nil {
		return nil, err
	}
	res, err := c.WorkClaimer.WorkClaim(ctx, p)
	if err == nil {
		c.claimed(res.StreamIDs)
	}
	return res, err
}

func (c outageClaimer) InstanceHeartbeat(ctx context.Context, p *ports.InstanceHeartbeatParams) (*ports.InstanceHeartbeatResult, error) {
	if err := c.o.err("heartbeat"); err != nil {
		return nil, err
	}
	return c.WorkClaimer.InstanceHeartbeat(ctx, p)
}

func (c outageClaimer) WorkRenewLeases(ctx context.Context, p *ports.WorkRenewLeasesParams) (int, error) {
	if err := c.o.err("renewing leases"); err != nil {
		return 0, err
	}
	return c.WorkClaimer.WorkRenewLeases(ctx, p)
}

type outageFetcher struct {
	ports.EventFetcher
	o *outage
}

func (f outageFetcher) EventsFetchPending(ctx context.Context, p *ports.EventsFetchPendingParams) (*ports.EventsFetchPendingResult, error) {
	if err := f.o.err("fetching pending events"); err != nil {
		return nil, err
	}
	return f.EventFetcher.EventsFetchPending(ctx, p)
}

type outageCursors struct {
	ports.CursorStore
	o *outage
}

func (c outageCursors) WorkComplete(ctx context.Context, p *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	if err := c.o.err(c.o.completing); err != nil {
		return nil, err
	}
	return c.CursorStore.WorkComplete(ctx, p)
}

func (c outageCursors) WorkFail(ctx context.Context, p *ports.WorkFailParams) error {
	if err := c.o.err(c.o.failing); err != nil {
		return err
	}
	return c.CursorStore.WorkFail(ctx, p)
}

func (c outageCursors) CursorsGet(ctx context.Context, p *ports.CursorsGetParams) ([]ports.Cursor, error) {
	if err := c.o.err("reading cursors for rewinds"); err != nil {
		return nil, err
	}
	return c.CursorStore.CursorsGet(ctx, p)
}

type outageDeadLetters struct {
	ports.DeadLetterStore
	o *outage
}

func (d outageDeadLetters) DeadLettersRecover(ctx context.Context, p *ports.DeadLettersRecoverParams) ([]ports.DeadLetter, error) {
	if err := d.o.err("requeueing dead letters for the new generation"); err != nil {
		return nil, err
	}
	return d.DeadLetterStore.DeadLettersRecover(ctx, p)
}

type outageLifecycle struct {
	ports.LifecycleStore
	o *outage
}

func (l outageLifecycle) err(op string) error {
	if l.o.stagesBack.Load() {
		return nil
	}
	return l.o.err(op)
}

func (l outageLifecycle) LifecycleClaim(ctx context.Context, p *ports.LifecycleClaimParams) ([]uuid.UUID, error) {
	if err := l.err("claiming lifecycle stages"); err != nil {
		return nil, err
	}
	return l.LifecycleStore.LifecycleClaim(ctx, p)
}

func (l outageLifecycle) LifecycleComplete(ctx context.Context, p *ports.LifecycleCompleteParams) error {
	if err := l.err("recording lifecycle stages"); err != nil {
		return err
	}
	return l.LifecycleStore.LifecycleComplete(ctx, p)
}

func (l outageLifecycle) LifecycleStages(ctx context.Context, p *ports.LifecycleStagesParams) (map[uuid.UUID]ports.LifecycleStage, error) {
	if err := l.err("reading lifecycle stages"); err != nil {
		return nil, err
	}
	return l.LifecycleStore.LifecycleStages(ctx, p)
}

func (l outageLifecycle) LifecycleReady(ctx context.Context, p *ports.LifecycleReadyParams) ([]uuid.UUID, error) {
	if err := l.err("checking which events every perspective applied"); err != nil {
		return nil, err
	}
	return l.LifecycleStore.LifecycleReady(ctx, p)
}

func (l outageLifecycle) LifecycleOrphans(ctx context.Context, p *ports.LifecycleOrphansParams) ([]ports.Event, error) {
	if err := l.err("finding interrupted lifecycles"); err != nil {
		return nil, err
	}
	return l.LifecycleStore.LifecycleOrphans(ctx, p)
}

// TestOutageLoggedOncePerOperation takes the backend's coordination calls
// down for 9 seconds of the worker's clock (a claim every 250ms, a
// heartbeat and a dead-letter requeue every second), while a stream is
// being drained (its leases need renewing), the outcomes and lifecycle
// stages of several streams are being sent (with batched completions each
// batch is retried and then dropped by its flusher; with instant ones each
// outcome is reported on its own, then kept and sent by the flushers;
// the lifecycle records come back first, since a PostPerspective whose
// claim fails holds its rows' completions back) and a stream that
// received events
// meanwhile is fetched again. Each background operation must log its
// first failure, at most one summary per 10s, and one Info line when it
// recovers (events appended after the outage give each one a success),
// saying how long it failed and how often: a few lines per operation, not
// one per claim tick, retry, batch or stream.
//
// The worker runs in a synctest bubble on a fake clock: after each tick
// of the clock, synctest.Wait returns once every goroutine of the worker
// is blocked again, so each loop has done its tick's work before the
// clock moves on, however slowly the machine schedules it.
func TestOutageLoggedOncePerOperation(t *testing.T) {
	t.Parallel()

	t.Run("Batched", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			testOutageLogged(t, completion.BatchedFactory, &outage{completing: "flushing completions", failing: "flushing failures"})
		})
	})
	t.Run("Instant", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			testOutageLogged(t, completion.InstantFactory, &outage{completing: "reporting completions", failing: "reporting failures", alsoLogged: map[string][]string{
				"reporting completions": {"flushing completions"},
				"reporting failures":    {"flushing failures"},
			}})
		})
	})
}

func testOutageLogged(t *testing.T, mode completion.Factory, down *outage) {
	const (
		tick      = 250 * time.Millisecond // the claim interval
		outageFor = 9 * time.Second
	)
	clock := clocktest.NewFake()
	mem := memory.New(memory.Options{Clock: clock}).Backend()
	b := mem
	b.Notifier = nil // claims every Claims.Interval
	b.Fetcher = outageFetcher{EventFetcher: mem.Fetcher, o: down}
	b.Cursors = outageCursors{CursorStore: mem.Cursors, o: down}
	b.DeadLetters = outageDeadLetters{DeadLetterStore: mem.DeadLetters, o: down}
	b.Lifecycle = outageLifecycle{LifecycleStore: mem.Lifecycle, o: down}

	// held is drained all along; sent and alsoSent are applied once the
	// outage began (their completions and stages cannot be sent, and sent
	// is fetched again since a claim saw an event appended to it
	// meanwhile) and refused fails then (its failure cannot be sent).
	// After the outage, later is applied and laterRefused fails.
	held, sent, refused, later, laterRefused := uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()
	alsoSent := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	var sentClaimed atomic.Bool
	b.Claimer = outageClaimer{WorkClaimer: mem.Claimer, o: down, claimed: func(ids []uuid.UUID) {
		sentClaimed.Store(sentClaimed.Load() || slices.Contains(ids, sent))
	}}
	releaseHeld, outageBegan := make(chan struct{}), make(chan struct{})
	release, begin := sync.OnceFunc(func() { close(releaseHeld) }), sync.OnceFunc(func() { close(outageBegan) })
	var (
		mu      sync.Mutex
		entered = map[uuid.UUID]bool{}
		tried   = map[uuid.UUID]bool{}
	)
	reg := registryWith(t, func(ctx context.Context, m total, e added) (total, error) {
		ev, _ := core.EventFromContext(ctx)
		mu.Lock()
		entered[ev.StreamID] = true
		first := !tried[ev.StreamID]
		tried[ev.StreamID] = true
		mu.Unlock()
		switch {
		case ev.StreamID == held:
			<-releaseHeld
		case ev.StreamID == sent || slices.Contains(alsoSent, ev.StreamID):
			<-outageBegan
		case ev.StreamID == refused:
			<-outageBegan
			if first {
				return m, errors.New("refused during the outage")
			}
		case ev.StreamID == laterRefused && first:
			return m, errors.New("refused after the outage")
		}
		m.Sum += e.N
		return m, nil
	})
	for _, stage := range []core.Stage{core.PostPerspective, core.PostLifecycle} {
		require.NoError(t, core.AddReceptor(reg, stage, core.Inline, func(context.Context, added, core.StageInfo) error { return nil }))
	}
	appendAdded(t, reg, mem, held, 1)
	appendAdded(t, reg, mem, sent, 1, 2) // enough for a refetch (Drain.LoopRefetchMinBatch)
	appendAdded(t, reg, mem, refused, 1)
	for _, s := range alsoSent {
		appendAdded(t, reg, mem, s, 1)
	}

	logger, logs := logtest.NewJSON(slog.LevelInfo)
	opts := quietOptions(t)
	opts.Logger = logger
	opts.Clock = clock
	opts.Completion = mode
	opts.Claims.Interval = tick
	opts.Claims.NotifyHealthyInterval = tick
	opts.Claims.HeartbeatInterval = time.Second
	opts.Drain.PollingInterval = time.Second
	opts.Drain.NotifyHealthyPollingInterval = time.Second
	opts.Claims.LeaseDuration = 20 * time.Second // renewed every 5s
	opts.Drain.ApplyTimeout = time.Hour
	opts.Generation = "v2"
	opts.DeadLetterRecovery = core.DeadLetterRecoveryOptions{Interval: time.Second}
	startWorker(t, b, reg, opts)
	t.Cleanup(func() { release(); begin() }) // runs before the worker's Stop
	step := func() {
		clock.Advance(tick)
		synctest.Wait()
	}
	synctest.Wait()
	ready := func() bool {
		mu.Lock()
		defer mu.Unlock()
		all := entered[held] && entered[sent] && entered[refused]
		for _, s := range alsoSent {
			all = all && entered[s]
		}
		return all
	}

	// Before the outage: the streams are claimed and being drained, and a
	// claim saw an event appended to sent while it was drained: it is to
	// be fetched again.
	for range 200 {
		if ready() {
			break
		}
		step()
	}
	require.True(t, ready(), "the streams were drained up to the outage")
	sentClaimed.Store(false)
	appendAdded(t, reg, mem, sent, 3)
	for range 200 {
		if sentClaimed.Load() {
			break
		}
		step()
	}
	require.True(t, sentClaimed.Load(), "a claim saw the event appended to sent")

	down.down.Store(true)
	began := clock.Now()
	begin()
	for clock.Now().Sub(began) < outageFor {
		if clock.Now().Sub(began) >= outageFor/4 {
			// The PostPerspective stages whose claims failed held their
			// rows' completions back: they run now, and the completions
			// are sent, and fail, in the rest of the outage.
			down.stagesBack.Store(true)
		}
		step()
	}
	down.down.Store(false)
	appendAdded(t, reg, mem, later, 1)
	appendAdded(t, reg, mem, laterRefused, 1)

	// The outage reached every loop that calls the backend on its own
	// cadence, the outcomes of the applies it interrupted and the refetch
	// of sent.
	failed := down.failedOps()
	for _, op := range []string{
		"claiming work",
		"heartbeat",
		"renewing leases",
		"fetching pending events",
		down.completing,
		down.failing,
		"claiming lifecycle stages",
		"requeueing dead letters for the new generation",
	} {
		require.Contains(t, failed, op, "the outage failed %s", op)
	}

	// Each operation that failed logs its recovery at its next success.
	// Renewals need a stream being drained: held is released only once
	// they recovered.
	var ops []string
	for _, op := range slices.Sorted(maps.Keys(failed)) {
		ops = append(append(ops, op), down.alsoLogged[op]...)
	}
	recovered := func(op string) bool { return len(logtest.WithMsg(logs.Lines(t), op+" recovered")) > 0 }
	for range 400 { // 100s
		if !slices.ContainsFunc(ops, func(op string) bool { return !recovered(op) }) {
			break
		}
		if recovered("renewing leases") {
			release()
		}
		step()
	}
	release()
	// The PostPerspective stages whose claims failed during the outage are
	// retried until they run, the last retry up to 3.2s of the worker's
	// clock after the outage: let that pass, so that Stop finds them done.
	for range 16 {
		step()
	}

	lines := logs.Lines(t)
	for counted, calls := range failed {
		logged := 0.0
		for _, op := range append([]string{counted}, down.alsoLogged[counted]...) {
			first := logtest.WithMsg(lines, op+" failed; retrying")
			require.Len(t, first, 1, "%s: its first failure is logged once", op)
			require.Equal(t, "WARN", first[0].Level(), "%s: the backend called the error transient", op)
			require.Empty(t, logtest.WithMsg(lines, op+" still failing; retrying"), "%s: no summary within its first 10s of failures", op)
			back := logtest.WithMsg(lines, op+" recovered")
			require.Len(t, back, 1, "%s: its recovery is logged once", op)
			require.Equal(t, "INFO", back[0].Level(), op)
			require.Positive(t, back[0]["failures"], op)
			require.Positive(t, back[0]["failed_for"], op)
			logged += back[0]["failures"].(float64)
		}
		require.Equal(t, float64(calls), logged, "%s: the recoveries count every failed call", counted)
	}
	// Nothing else repeats either: every message of every flusher comes
	// twice at most (the first and a summary, or what the recovery
	// tells), however many ticks, retries and batches failed.
	counts := map[string]int{}
	for _, l := range lines {
		counts[fmt.Sprint(l.Level(), " ", l.Msg(), " ", l["flusher"])]++
	}
	for line, n := range counts {
		require.LessOrEqual(t, n, 2, "logged %d times during a %s outage: %s", n, outageFor, line)
	}
	// The outcomes sent during the outage went through the flushers,
	// whichever strategy reported them.
	for _, flusher := range []string{"completions", "failures"} {
		var dropped float64
		for _, l := range logtest.WithMsg(lines, "dropping batch after its last flush attempt; its rows stay leased until their lease expires and are re-delivered") {
			if l["flusher"] == flusher {
				require.Equal(t, "ERROR", l.Level())
				dropped += l["dropped_items"].(float64)
			}
		}
		require.Positive(t, dropped, "the %s flusher dropped batches", flusher)
	}
}
