package enginetest_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

type ordered struct {
	N int `json:"n"`
}

type followed struct {
	N int `json:"n"`
}

// TestAppendMetadata appends events under a correlation id, headers and a
// scope, and has a handler append follow-up events: the follow-ups inherit
// the correlation id and the scope and name the handled event as causation,
// unless the handler sets a correlation id of its own; headers are the
// handler's own, and nothing set on the worker's context reaches them.
func TestAppendMetadata(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	reg := core.NewRegistry()
	require.NoError(t, core.RegisterEvent[ordered](reg, "ordered"))
	require.NoError(t, core.RegisterEvent[followed](reg, "followed"))
	handlerCorrelation := uuid.New()
	followUps := map[int]uuid.UUID{1: uuid.New(), 2: uuid.New(), 3: uuid.New()}
	handledEvents := make(chan ports.Event, len(followUps))
	p := core.NewPerspective[seen]("orders")
	core.MustHandle(p, func(ctx context.Context, m seen, e ordered) (seen, error) {
		ev, _ := core.EventFromContext(ctx)
		handledEvents <- ev
		if e.N == 2 {
			ctx = core.WithHeaders(core.WithCorrelationID(ctx, handlerCorrelation), map[string]string{"step": "2"})
		}
		_, err := reg.Append(ctx, b.Events, followUps[e.N], ports.ExpectNoStream, followed(e))
		m.Count++
		return m, err
	})
	require.NoError(t, reg.AddPerspective(p))

	// The worker's context carries a correlation id and headers of its own.
	workerCtx := core.WithHeaders(core.WithCorrelationID(t.Context(), uuid.New()), map[string]string{"worker": "w-1"})
	w, err := core.New(b, reg, ptr(quietOptions(t)))
	require.NoError(t, err)
	require.NoError(t, w.Start(workerCtx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})

	request := uuid.New()
	scope := ports.Scope{TenantID: "acme", UserID: "ann"}
	ctx := core.WithScope(t.Context(), scope)
	ctx = core.WithHeaders(core.WithCorrelationID(ctx, request), map[string]string{"request": "r-1"})
	roots := map[int]ports.Event{}
	for n, appendCtx := range map[int]context.Context{1: ctx, 2: ctx, 3: t.Context()} {
		res, err := reg.Append(appendCtx, b.Events, uuid.New(), ports.ExpectNoStream, ordered{N: n})
		require.NoError(t, err)
		roots[n] = res.Events[0]
	}
	for _, n := range []int{1, 2, 3} {
		waitCtx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		require.NoError(t, w.WaitForStream(waitCtx, roots[n].StreamID, 1))
		cancel()
	}

	stored := func(stream uuid.UUID) ports.Event {
		t.Helper()
		events, err := b.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream})
		require.NoError(t, err)
		require.Len(t, events, 1)
		return events[0]
	}
	requested := ports.Metadata{CorrelationID: request, Scope: &scope, Headers: map[string]string{"request": "r-1"}}
	require.Equal(t, requested, stored(roots[1].StreamID).Metadata)
	require.Equal(t, requested, roots[1].Metadata, "the append returns what it stored")
	require.Equal(t, ports.Metadata{}, stored(roots[3].StreamID).Metadata)
	handled := map[uuid.UUID]ports.Metadata{}
	for range roots {
		e := waitFor(t, handledEvents, "the handler")
		handled[e.ID] = e.Metadata
	}
	require.Equal(t, requested, handled[roots[1].ID], "the handler reads the metadata")

	require.Equal(t, ports.Metadata{CorrelationID: request, CausationID: roots[1].ID, Scope: &scope},
		stored(followUps[1]).Metadata, "correlation and scope inherited, headers not")
	require.Equal(t, ports.Metadata{
		CorrelationID: handlerCorrelation, CausationID: roots[2].ID, Scope: &scope,
		Headers: map[string]string{"step": "2"},
	}, stored(followUps[2]).Metadata, "the handler's own correlation id and headers")
	require.Equal(t, ports.Metadata{CorrelationID: roots[3].ID, CausationID: roots[3].ID},
		stored(followUps[3]).Metadata, "an event without a correlation id starts one")
}
