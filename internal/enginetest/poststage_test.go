package enginetest_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/core/completion"
	"github.com/vantage-go/vantage/ports"
)

// reportOrder records, in call order, the work rows each WorkComplete and
// WorkFail lists and the events each recorded PostPerspective names.
type reportOrder struct {
	ports.CursorStore

	mu     sync.Mutex
	calls  []orderedCall
	events map[uuid.UUID]uuid.UUID // work id -> event id, from the fetches
}

type orderedCall struct {
	kind string // "complete" or "post"
	ids  []uuid.UUID
}

func (o *reportOrder) note(kind string, ids []uuid.UUID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, orderedCall{kind, append([]uuid.UUID(nil), ids...)})
}

func (o *reportOrder) WorkComplete(ctx context.Context, p *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	var ids []uuid.UUID
	for _, c := range p.Completions {
		ids = append(ids, c.WorkIDs...)
	}
	o.note("complete", ids)
	return o.CursorStore.WorkComplete(ctx, p)
}

func (o *reportOrder) WorkFail(ctx context.Context, p *ports.WorkFailParams) error {
	var ids []uuid.UUID
	for _, f := range p.Failures {
		ids = append(ids, f.AppliedWorkIDs...)
	}
	o.note("complete", ids)
	return o.CursorStore.WorkFail(ctx, p)
}

// EventsFetchPending notes which event each fetched row stands for.
type orderedFetcher struct {
	ports.EventFetcher
	o *reportOrder
}

func (f orderedFetcher) EventsFetchPending(ctx context.Context, p *ports.EventsFetchPendingParams) (*ports.EventsFetchPendingResult, error) {
	res, err := f.EventFetcher.EventsFetchPending(ctx, p)
	if err == nil {
		f.o.mu.Lock()
		for _, w := range res.Work {
			f.o.events[w.WorkID] = w.EventID
		}
		f.o.mu.Unlock()
	}
	return res, err
}

type orderedLifecycle struct {
	ports.LifecycleStore
	o *reportOrder
	// failClaims is how many PostPerspective claims fail with a transient
	// error before they go through (an outage of the lifecycle records).
	failClaims *atomic.Int64
}

func (l orderedLifecycle) LifecycleClaim(ctx context.Context, p *ports.LifecycleClaimParams) ([]uuid.UUID, error) {
	if p.Stage == ports.StagePostPerspective && l.failClaims != nil && l.failClaims.Add(-1) >= 0 {
		return nil, fmt.Errorf("claiming: connection refused: %w", ports.ErrTransient)
	}
	return l.LifecycleStore.LifecycleClaim(ctx, p)
}

func (l orderedLifecycle) LifecycleComplete(ctx context.Context, p *ports.LifecycleCompleteParams) error {
	err := l.LifecycleStore.LifecycleComplete(ctx, p)
	if err == nil && p.Stage == ports.StagePostPerspective {
		l.o.note("post", p.EventIDs)
	}
	return err
}

// An event's PostPerspective is recorded done before any report lists its
// row: a report that landed first, should the instance die before the
// stage ran, would leave no re-delivery to run it, and the stage would be
// lost. With Instant completions the report goes at once. A claim of the
// stage that fails (the backend's lifecycle records out for a moment)
// holds the report back until the stage is recorded: reported first, the
// rows would complete while the stage waits for its retry, and an
// instance that died meanwhile would lose it.
func TestPostPerspectiveRecordedBeforeTheRowsAreReported(t *testing.T) {
	t.Parallel()

	for name, mode := range map[string]completion.Factory{"Batched": completion.BatchedFactory, "Instant": completion.InstantFactory} {
		for _, failed := range []int64{0, 3} {
			t.Run(fmt.Sprintf("%s/failed_claims=%d", name, failed), func(t *testing.T) {
				t.Parallel()
				testPostPerspectiveBeforeReport(t, mode, failed)
			})
		}
	}
}

func testPostPerspectiveBeforeReport(t *testing.T, mode completion.Factory, failedClaims int64) {
	mem := memory.New(memory.Options{}).Backend()
	b := mem
	order := &reportOrder{CursorStore: mem.Cursors, events: map[uuid.UUID]uuid.UUID{}}
	b.Cursors = order
	b.Fetcher = orderedFetcher{mem.Fetcher, order}
	failing := &atomic.Int64{}
	failing.Store(failedClaims)
	b.Lifecycle = orderedLifecycle{mem.Lifecycle, order, failing}
	reg := testRegistry(t)
	require.NoError(t, core.AddReceptor(reg, core.PostPerspective, core.Inline, func(context.Context, added, core.StageInfo) error { return nil }))
	opts := quietOptions(t)
	opts.Completion = mode
	w := startWorker(t, b, reg, opts)
	stream := uuid.New()
	var events []ports.Event
	for i := range 5 {
		events = append(events, appendAdded(t, reg, b, stream, 2*i+1, 2*i+2).Events...)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, w.WaitForStream(ctx, stream, events[len(events)-1].Version))
	require.NoError(t, w.Stop(ctx))

	order.mu.Lock()
	defer order.mu.Unlock()
	posted := map[uuid.UUID]bool{}
	reported := 0
	for _, c := range order.calls {
		switch c.kind {
		case "post":
			for _, id := range c.ids {
				posted[id] = true
			}
		case "complete":
			for _, id := range c.ids {
				ev, ok := order.events[id]
				require.True(t, ok, "row %s was fetched", id)
				require.True(t, posted[ev], "the row of event %s reported before its PostPerspective was recorded", ev)
				reported++
			}
		}
	}
	require.GreaterOrEqual(t, reported, len(events), "every row reported")
	require.Len(t, posted, len(events), "every event's PostPerspective recorded")
	require.LessOrEqual(t, failing.Load(), int64(0), "every failing claim was made")
}
