package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/conformance"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	t.Parallel()

	// The store's own clock is the real one, as a database's is: the port
	// contracts pass explicit times, and the engine scenarios drive time
	// through the engine's clock.
	conformance.Run(t, func(t *testing.T) conformance.Opener {
		store := memory.New(memory.Options{})
		t.Cleanup(func() { _ = store.Close() })
		return func(*testing.T) ports.Backend { return store.Backend() }
	}, conformance.Features{})
}

// TestConformanceRequiredPortsOnly runs the suite on a backend that leaves
// every optional port nil: the suite skips their cases, and the engine
// scenarios run on what the engine cannot do without.
func TestConformanceRequiredPortsOnly(t *testing.T) {
	t.Parallel()

	conformance.Run(t, func(t *testing.T) conformance.Opener {
		store := memory.New(memory.Options{})
		t.Cleanup(func() { _ = store.Close() })
		return func(*testing.T) ports.Backend {
			b := store.Backend()
			b.Notifier, b.ModelBatch, b.ModelQuery, b.Lifecycle, b.Rewind, b.Snapshots, b.Admin, b.Stats, b.Rebuilds = nil, nil, nil, nil, nil, nil, nil, nil, nil
			require.NoError(t, b.Validate())
			return b
		}
	}, conformance.Features{})
}

// testBundle is one memory-only test's store and the clock behind it.
type testBundle struct {
	clock *clocktest.Fake
	store *memory.Store
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	clock := clocktest.NewFake()
	store := memory.New(memory.Options{Clock: clock})
	t.Cleanup(func() { _ = store.Close() })
	return &testBundle{clock: clock, store: store}
}

func TestBackendValidates(t *testing.T) {
	t.Parallel()

	require.NoError(t, setup(t).store.Backend().Validate())
}

func TestClose(t *testing.T) {
	t.Parallel()

	t.Run("ClosesListenersAndRejectsCalls", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		wakes, err := tb.store.NotifierListen(t.Context(), nil)
		require.NoError(t, err)

		require.NoError(t, tb.store.Close())

		_, open := <-wakes
		require.False(t, open, "Close closes listener channels")
		require.False(t, tb.store.NotifierHealthy())
		_, err = tb.store.InstancesList(t.Context())
		require.ErrorIs(t, err, ports.ErrClosed)
		_, err = tb.store.EventsAppend(t.Context(), &ports.EventsAppendParams{
			StreamID: uuid.New(), Events: []ports.NewEvent{{Type: "T", Data: []byte(`{}`)}},
		})
		require.ErrorIs(t, err, ports.ErrClosed)
		_, err = tb.store.NotifierListen(t.Context(), nil)
		require.ErrorIs(t, err, ports.ErrClosed)
		require.ErrorIs(t, tb.store.NotifierPublish(t.Context()), ports.ErrClosed)
	})

	t.Run("Idempotent", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)

		require.NoError(t, tb.store.Close())
		require.NoError(t, tb.store.Close())
	})

	t.Run("ListenerContextEndingAfterClose", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		ctx, cancel := context.WithCancel(t.Context())
		wakes, err := tb.store.NotifierListen(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, tb.store.Close())

		cancel() // must not close the channel a second time

		_, open := <-wakes
		require.False(t, open)
	})
}

func TestCanceledContext(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	_, err := tb.store.InstancesList(ctx)
	require.ErrorIs(t, err, context.Canceled)
	_, err = tb.store.NotifierListen(ctx, nil)
	require.ErrorIs(t, err, context.Canceled)
}

func TestInjectedClock(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.clock.Advance(time.Hour)

	res, err := tb.store.EventsAppend(t.Context(), &ports.EventsAppendParams{
		StreamID: uuid.New(), Events: []ports.NewEvent{{Type: "T", Data: []byte(`{}`)}},
	})

	require.NoError(t, err)
	require.Equal(t, clocktest.Start.Add(time.Hour), res.Events[0].CreatedAt, "a zero Now reads the injected clock")
}

func TestPerspectivesLagReadsTheInjectedClock(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	_, err := tb.store.EventsAppend(t.Context(), &ports.EventsAppendParams{
		StreamID:      uuid.New(),
		Events:        []ports.NewEvent{{Type: "T", Data: []byte(`{}`)}},
		Subscriptions: []ports.Subscription{{EventType: "T", Perspective: "p"}},
	})
	require.NoError(t, err)
	tb.clock.Advance(time.Minute)

	lags, err := tb.store.PerspectivesLag(t.Context(), &ports.PerspectivesLagParams{})

	require.NoError(t, err)
	require.Equal(t, []ports.PerspectiveLag{{Perspective: "p", Pending: 1, OldestAge: time.Minute}}, lags,
		"rows are timed, and ages measured, by the injected clock when Now is zero")
}

func TestNoAliasing(t *testing.T) {
	t.Parallel()

	t.Run("Events", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		stream := uuid.New()
		data := []byte(`{"a":1}`)
		meta := ports.Metadata{Scope: &ports.Scope{Extras: map[string]string{"k": "v"}}, Headers: map[string]string{"h": "v"}}
		res, err := tb.store.EventsAppend(t.Context(), &ports.EventsAppendParams{
			StreamID: stream, Events: []ports.NewEvent{{Type: "T", Data: data, Metadata: meta}},
		})
		require.NoError(t, err)

		data[0] = 'X'
		meta.Scope.Extras["k"] = "changed"
		meta.Headers["h"] = "changed"
		res.Events[0].Data[0] = 'Y'
		res.Events[0].Metadata.Scope.Extras["k"] = "changed"

		read, err := tb.store.EventsReadStream(t.Context(), &ports.EventsReadStreamParams{StreamID: stream})
		require.NoError(t, err)
		require.Equal(t, `{"a":1}`, string(read[0].Data))
		require.Equal(t, "v", read[0].Metadata.Scope.Extras["k"])
		require.Equal(t, "v", read[0].Metadata.Headers["h"])
	})

	t.Run("Instances", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		meta := map[string]string{"zone": "a"}
		_, err := tb.store.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{
			InstanceID: uuid.New(), Metadata: meta, StaleThreshold: time.Minute,
		})
		require.NoError(t, err)
		meta["zone"] = "changed"

		list, err := tb.store.InstancesList(t.Context())
		require.NoError(t, err)
		list[0].Metadata["zone"] = "changed too"

		list, err = tb.store.InstancesList(t.Context())
		require.NoError(t, err)
		require.Equal(t, map[string]string{"zone": "a"}, list[0].Metadata)
	})

	t.Run("Models", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		stream := uuid.New()
		data := []byte(`{"n":1}`)
		require.NoError(t, tb.store.ModelSave(t.Context(), &ports.ModelSaveParams{
			StreamID: stream, Perspective: "p", Data: data, LastEventID: uuid.New(), LastVersion: 1,
		}))
		data[0] = 'X'

		model, err := tb.store.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: stream, Perspective: "p"})
		require.NoError(t, err)
		model.Data[0] = 'Y'

		model, err = tb.store.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: stream, Perspective: "p"})
		require.NoError(t, err)
		require.Equal(t, `{"n":1}`, string(model.Data))
	})
}

func TestNotifierCoalescesExactly(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	wakes, err := tb.store.NotifierListen(t.Context(), nil)
	require.NoError(t, err)

	for range 3 {
		require.NoError(t, tb.store.NotifierPublish(t.Context()))
	}

	require.Len(t, wakes, 1, "three publishes, one buffered wake")
	<-wakes
	select {
	case <-wakes:
		require.FailNow(t, "a second wake was delivered")
	default:
	}
}

func TestWorkClaimHasMoreOnlyWhenWorkRemains(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	instance := uuid.New()
	now := clocktest.Start
	require.NoError(t, tb.store.SubscriptionsRegister(t.Context(), &ports.SubscriptionsRegisterParams{Subscriptions: []ports.Subscription{{EventType: "T", Perspective: "p"}}}))
	for range 2 {
		_, err := tb.store.EventsAppend(t.Context(), &ports.EventsAppendParams{
			StreamID: uuid.New(), Events: []ports.NewEvent{{Type: "T", Data: []byte(`{}`)}}, Now: now,
		})
		require.NoError(t, err)
	}
	_, err := tb.store.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{InstanceID: instance, StaleThreshold: time.Minute, Now: now})
	require.NoError(t, err)

	res, err := tb.store.WorkClaim(t.Context(), &ports.WorkClaimParams{
		InstanceID: instance, MaxStreams: 2, LeaseDuration: time.Minute, StaleThreshold: time.Minute, Now: now,
	})

	require.NoError(t, err)
	require.Len(t, res.StreamIDs, 2)
	require.False(t, res.HasMore, "exactly MaxStreams streams and nothing else pending")
}

func TestInvalidArguments(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := t.Context()
	id := uuid.New()

	for name, call := range map[string]func() error{
		"HeartbeatNilInstance": func() error {
			_, err := tb.store.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{StaleThreshold: time.Minute})
			return err
		},
		"HeartbeatNoThreshold": func() error {
			_, err := tb.store.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{InstanceID: id})
			return err
		},
		"ClaimNoMaxStreams": func() error {
			_, err := tb.store.WorkClaim(ctx, &ports.WorkClaimParams{InstanceID: id, LeaseDuration: time.Minute, StaleThreshold: time.Minute})
			return err
		},
		"FetchNegativeMaxRows": func() error {
			_, err := tb.store.EventsFetchPending(ctx, &ports.EventsFetchPendingParams{InstanceID: id, LeaseDuration: time.Minute, StaleThreshold: time.Minute, MaxRows: -1})
			return err
		},
		"ReadNegativeLimit": func() error {
			_, err := tb.store.EventsReadStream(ctx, &ports.EventsReadStreamParams{StreamID: id, Limit: -1})
			return err
		},
		"CompleteEmptyPerspective": func() error {
			_, err := tb.store.WorkComplete(ctx, &ports.WorkCompleteParams{InstanceID: id, Completions: []ports.Completion{{StreamID: id}}})
			return err
		},
		"FailNilStream": func() error {
			return tb.store.WorkFail(ctx, &ports.WorkFailParams{InstanceID: id, Failures: []ports.Failure{{Perspective: "p"}}})
		},
		"FailUnknownFailedEvent": func() error {
			return tb.store.WorkFail(ctx, &ports.WorkFailParams{InstanceID: id, Failures: []ports.Failure{{
				StreamID: id, Perspective: "p", FailedEventID: uuid.New(), FailedEventVersion: 1,
			}}})
		},
		"ModelSaveMalformedData": func() error {
			return tb.store.ModelSave(ctx, &ports.ModelSaveParams{StreamID: id, Perspective: "p", Data: []byte(`{`)})
		},
		"AppendNoEvents": func() error {
			_, err := tb.store.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: id})
			return err
		},
		"ListNegativeLimit": func() error {
			_, err := tb.store.DeadLettersList(ctx, &ports.DeadLettersListParams{Limit: -1})
			return err
		},
	} {
		require.ErrorIs(t, call(), ports.ErrInvalidArgument, name)
	}
}

// BenchmarkWorkClaim measures a claim over 1,000 streams of 200 pending rows
// each, all already leased to the caller: the steady state of a busy
// instance, which must not walk every row.
func BenchmarkWorkClaim(b *testing.B) {
	store := memory.New(memory.Options{})
	b.Cleanup(func() { _ = store.Close() })
	ctx := b.Context()
	now := clocktest.Start
	instance := uuid.New()
	require.NoError(b, store.SubscriptionsRegister(ctx, &ports.SubscriptionsRegisterParams{Subscriptions: []ports.Subscription{{EventType: "T", Perspective: "p"}}}))
	events := make([]ports.NewEvent, 200)
	for i := range events {
		events[i] = ports.NewEvent{Type: "T", Data: fmt.Appendf(nil, `{"i":%d}`, i)}
	}
	for range 1000 {
		_, err := store.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: uuid.New(), Events: events, Now: now})
		require.NoError(b, err)
	}
	_, err := store.InstanceHeartbeat(ctx, &ports.InstanceHeartbeatParams{InstanceID: instance, StaleThreshold: time.Minute, Now: now})
	require.NoError(b, err)
	params := &ports.WorkClaimParams{InstanceID: instance, MaxStreams: 300, LeaseDuration: time.Hour, StaleThreshold: time.Minute, Now: now}
	res, err := store.WorkClaim(ctx, &ports.WorkClaimParams{InstanceID: instance, MaxStreams: 1000, LeaseDuration: time.Hour, StaleThreshold: time.Minute, Now: now})
	require.NoError(b, err)
	require.Len(b, res.StreamIDs, 1000)

	for b.Loop() {
		if _, err := store.WorkClaim(ctx, params); err != nil {
			b.Fatal(err)
		}
	}
}
