package enginetest_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

type whoami struct {
	Tenant string `json:"tenant"`
	User   string `json:"user"`
}

type seen struct {
	Mismatches int `json:"mismatches"`
	Count      int `json:"count"`
}

// Batches that mix tenants and users, across many streams processed in
// parallel, never leak one event's identity into another's handler.
func TestSecurityContextPerEvent(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	reg := core.NewRegistry()
	require.NoError(t, core.RegisterEvent[whoami](reg, "whoami"))
	var mismatches, calls atomic.Int64
	p := core.NewPerspective[seen]("seen")
	core.MustHandle(p, func(ctx context.Context, m seen, e whoami) (seen, error) {
		calls.Add(1)
		if core.TenantID(ctx) != e.Tenant || core.UserID(ctx) != e.User {
			mismatches.Add(1)
			m.Mismatches++
		}
		m.Count++
		return m, nil
	})
	require.NoError(t, reg.AddPerspective(p))

	const streams, perStream = 40, 10
	done := make(chan struct{})
	var applied atomic.Int64
	opts := quietOptions(t)
	opts.Drain.MaxConcurrentStreams = 30
	opts.Hooks.OnPerspectiveEventProcessed = func(e core.PerspectiveEventProcessed) {
		if applied.Add(int64(e.EventCount)) == streams*perStream {
			close(done)
		}
	}
	startWorker(t, b, reg, opts)
	var wg sync.WaitGroup
	for s := range streams {
		wg.Go(func() {
			stream := uuid.New()
			for i := range perStream {
				who := whoami{Tenant: fmt.Sprintf("tenant-%d", (s+i)%7), User: fmt.Sprintf("user-%d-%d", s, i)}
				if i%5 == 4 {
					who = whoami{} // no scope at all: processing continues
					_, err := reg.Append(context.Background(), b.Events, stream, 0, who)
					if err != nil {
						t.Errorf("append: %v", err)
					}
					continue
				}
				ctx := core.WithScope(context.Background(), ports.Scope{TenantID: who.Tenant, UserID: who.User})
				if _, err := reg.Append(ctx, b.Events, stream, 0, who); err != nil {
					t.Errorf("append: %v", err)
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, done, "every event applied")
	require.Equal(t, int64(streams*perStream), calls.Load())
	require.Zero(t, mismatches.Load())
}

type note struct {
	Text string `json:"text"`
}

type echoed struct {
	Text string `json:"text"`
}

func TestSecurityProviderAndCallbacks(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	reg := core.NewRegistry()
	require.NoError(t, core.RegisterEvent[note](reg, "note"))
	require.NoError(t, core.RegisterEvent[echoed](reg, "echoed"))
	type obs struct {
		text, tenant, user, source string
		propagating                bool
	}
	observed := make(chan obs, 10)
	echoStream := uuid.New()
	p := core.NewPerspective[seen]("notes")
	core.MustHandle(p, func(ctx context.Context, m seen, e note) (seen, error) {
		sc, _ := core.SecurityFromContext(ctx)
		observed <- obs{e.Text, core.TenantID(ctx), core.UserID(ctx), sc.Source, sc.Propagating}
		if e.Text == "echo" {
			// Events appended from a handler inherit its scope.
			if _, err := reg.Append(ctx, b.Events, echoStream, 0, echoed(e)); err != nil {
				return m, err
			}
		}
		return m, nil
	})
	require.NoError(t, reg.AddPerspective(p))

	var callbacks sync.Map // event id -> count
	opts := quietOptions(t)
	opts.Security = core.SecurityOptions{
		Provider: core.SecurityProviderFunc(func(_ context.Context, e ports.Event) (*ports.Scope, error) {
			if token := e.Metadata.Headers["token"]; token != "" {
				return &ports.Scope{TenantID: "from-token", UserID: token}, nil
			}
			return nil, nil
		}),
		Callbacks: []core.SecurityCallback{func(_ context.Context, sc core.SecurityContext, e ports.Event) error {
			n, _ := callbacks.LoadOrStore(e.ID, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			return nil
		}},
	}
	startWorker(t, b, reg, opts)

	stream := uuid.New()
	tokenEvent, err := reg.Encode(note{Text: "token"})
	require.NoError(t, err)
	tokenEvent.Metadata.Headers = map[string]string{"token": "alice"}
	tokenEvent.Metadata.Scope = &ports.Scope{TenantID: "ignored", UserID: "ignored"}
	scoped, err := reg.Encode(note{Text: "echo"})
	require.NoError(t, err)
	scoped.Metadata.Scope = &ports.Scope{TenantID: "acme", UserID: "bob"}
	bare, err := reg.Encode(note{Text: "bare"})
	require.NoError(t, err)
	res, err := b.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{StreamID: stream, Events: []ports.NewEvent{tokenEvent, scoped, bare}})
	require.NoError(t, err)

	got := map[string]obs{}
	for range 3 {
		o := waitFor(t, observed, "the handler")
		got[o.text] = o
	}
	require.Equal(t, obs{"token", "from-token", "alice", core.ScopeFromProvider, false}, got["token"])
	require.Equal(t, obs{"echo", "acme", "bob", core.ScopeFromEvent, true}, got["echo"])
	require.Equal(t, obs{"bare", "", "", "", false}, got["bare"])

	_, providerCalled := callbacks.Load(res.Events[0].ID)
	require.False(t, providerCalled, "callbacks do not run for a provider scope")
	n, ok := callbacks.Load(res.Events[1].ID)
	require.True(t, ok)
	require.Equal(t, int64(1), n.(*atomic.Int64).Load(), "callbacks ran exactly once for the promoted scope")

	echoes, err := b.Fetcher.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: echoStream})
	require.NoError(t, err)
	require.Len(t, echoes, 1)
	require.Equal(t, &ports.Scope{TenantID: "acme", UserID: "bob"}, echoes[0].Metadata.Scope)
	require.Equal(t, res.Events[1].ID, echoes[0].Metadata.CausationID)
}
