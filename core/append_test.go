package core

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/vantage-go/vantage/core/internal/telemetry"
	"github.com/vantage-go/vantage/ports"
)

// fakeTx stands for a driver's transaction.
type fakeTx struct{ name string }

// txStore is a ports.TxEventStore[*fakeTx] that records its calls and
// fails each with err.
type txStore struct {
	err   error
	txs   []*fakeTx
	calls []*ports.EventsAppendParams
}

func (s *txStore) AppendTx(_ context.Context, tx *fakeTx, p *ports.EventsAppendParams) (*ports.EventsAppendResult, error) {
	s.txs = append(s.txs, tx)
	s.calls = append(s.calls, p)
	if s.err != nil {
		return nil, s.err
	}
	res := &ports.EventsAppendResult{}
	for i, ne := range p.Events {
		res.Events = append(res.Events, ports.Event{ID: ne.ID, StreamID: p.StreamID, Type: ne.Type, Version: int64(i + 1), Data: ne.Data, Metadata: ne.Metadata})
	}
	return res, nil
}

// subscribedRegistry is newTestRegistry with a perspective applying placed.
func subscribedRegistry(t *testing.T) *Registry {
	t.Helper()
	r := newTestRegistry(t)
	p := NewPerspective[counter]("c")
	MustHandle(p, func(_ context.Context, m counter, _ placed) (counter, error) { return m, nil })
	require.NoError(t, r.AddPerspective(p))
	return r
}

func TestAppendTx(t *testing.T) {
	t.Parallel()

	t.Run("CarriesWhatAppendCarries", func(t *testing.T) {
		t.Parallel()
		r := subscribedRegistry(t)
		correlation := uuid.New()
		ctx := WithScope(t.Context(), ports.Scope{TenantID: "acme", UserID: "ann"})
		ctx = WithHeaders(WithCorrelationID(ctx, correlation), map[string]string{"source": "checkout"})
		stream := uuid.New()
		tx := &fakeTx{name: "caller's"}

		store := &txStore{}
		res, err := AppendTx(ctx, r, store, tx, stream, ports.ExpectNoStream, placed{ID: "a"}, shipped{By: "b"})
		require.NoError(t, err)
		plain := &flakyStore{}
		_, err = r.Append(ctx, plain, stream, ports.ExpectNoStream, placed{ID: "a"}, shipped{By: "b"})
		require.NoError(t, err)

		require.Equal(t, []*fakeTx{tx}, store.txs, "the caller's transaction")
		require.Len(t, store.calls, 1)
		got, want := store.calls[0], plain.calls[0]
		require.Equal(t, stream, got.StreamID)
		require.Equal(t, ports.ExpectNoStream, got.ExpectedVersion)
		require.Equal(t, []ports.Subscription{{EventType: "placed", Perspective: "c"}}, got.Subscriptions)
		require.Equal(t, want.Subscriptions, got.Subscriptions)
		require.Len(t, got.Events, 2)
		md := ports.Metadata{
			CorrelationID: correlation,
			Scope:         &ports.Scope{TenantID: "acme", UserID: "ann"},
			Headers:       map[string]string{"source": "checkout"},
		}
		for i, ne := range got.Events {
			require.Equal(t, uuid.Version(7), ne.ID.Version(), "ids are given before the call")
			require.Equal(t, res.Events[i].ID, ne.ID)
			require.Equal(t, want.Events[i].Type, ne.Type)
			require.JSONEq(t, string(want.Events[i].Data), string(ne.Data))
			require.Equal(t, md, ne.Metadata)
			require.Equal(t, want.Events[i].Metadata, ne.Metadata, "Append stores the same metadata")
		}
		got.Events[0].Metadata.Headers["source"] = "changed"
		require.Equal(t, "checkout", got.Events[1].Metadata.Headers["source"], "every event has maps of its own")
	})

	t.Run("DoesNotRetry", func(t *testing.T) {
		t.Parallel()
		r := subscribedRegistry(t)
		for _, failure := range []error{
			fmt.Errorf("appending: connection reset: %w", ports.ErrTransient),
			fmt.Errorf("appending: %w", ports.ErrVersionConflict),
		} {
			store := &txStore{err: failure}
			_, err := AppendTx(t.Context(), r, store, &fakeTx{}, uuid.New(), 0, placed{ID: "a"})
			require.ErrorIs(t, err, failure)
			require.Len(t, store.calls, 1, "%v is the caller's to retry, with its transaction", failure)
		}
	})

	t.Run("RejectsBeforeCallingTheStore", func(t *testing.T) {
		t.Parallel()
		r := subscribedRegistry(t)
		store := &txStore{}
		_, err := AppendTx(t.Context(), r, store, &fakeTx{}, uuid.New(), 0)
		require.ErrorIs(t, err, ports.ErrInvalidArgument)
		_, err = AppendTx(t.Context(), r, store, &fakeTx{}, uuid.New(), 0, unregistered{})
		require.ErrorIs(t, err, ErrUnknownEventType)
		require.Empty(t, store.calls)
	})
}

func TestMetadataFromContext(t *testing.T) {
	t.Parallel()

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, ports.Metadata{}, MetadataFromContext(t.Context()))
	})

	t.Run("HeadersMergeAndAreCopied", func(t *testing.T) {
		t.Parallel()
		h := map[string]string{"a": "1", "b": "2"}
		ctx := WithHeaders(t.Context(), h)
		h["a"] = "changed"
		outer := ctx
		ctx = WithHeaders(ctx, map[string]string{"b": "3", "c": ""})
		require.Equal(t, map[string]string{"a": "1", "b": "3", "c": ""}, MetadataFromContext(ctx).Headers)
		require.Equal(t, map[string]string{"a": "1", "b": "2"}, MetadataFromContext(outer).Headers, "the outer context is unchanged")

		md := MetadataFromContext(ctx)
		md.Headers["a"] = "changed"
		require.Equal(t, "1", MetadataFromContext(ctx).Headers["a"], "the result shares no map with ctx")
		require.Nil(t, MetadataFromContext(WithHeaders(t.Context(), map[string]string{})).Headers, "no headers: nil")
	})

	t.Run("CorrelationID", func(t *testing.T) {
		t.Parallel()
		id := uuid.New()
		ctx := WithCorrelationID(t.Context(), id)
		require.Equal(t, id, MetadataFromContext(ctx).CorrelationID)
		require.Equal(t, uuid.Nil, MetadataFromContext(WithCorrelationID(ctx, uuid.Nil)).CorrelationID, "uuid.Nil restores the default")
	})

	t.Run("TraceContext", func(t *testing.T) {
		t.Parallel()
		sc := testSpanContext(t, trace.FlagsSampled)
		md := MetadataFromContext(trace.ContextWithSpanContext(t.Context(), sc))
		require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", md.TraceParent)
		require.Equal(t, "vendor=opaque", md.TraceState)
		got, ok := telemetry.AppendedSpanContext(&md)
		require.True(t, ok)
		require.Equal(t, sc.WithRemote(true), got, "the stored context reads back as the append's")

		unsampled := MetadataFromContext(trace.ContextWithSpanContext(t.Context(), testSpanContext(t, 0)))
		require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", unsampled.TraceParent, "an unsampled trace is linked to as well")

		set := ports.Metadata{TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
		telemetry.InjectTraceContext(trace.ContextWithSpanContext(t.Context(), sc), &set)
		require.Equal(t, ports.Metadata{TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, set, "a trace context already set is kept")

		invalid := trace.ContextWithSpanContext(t.Context(), trace.SpanContext{})
		require.Equal(t, ports.Metadata{}, MetadataFromContext(invalid), "no valid span: no trace context")
		_, ok = telemetry.AppendedSpanContext(&ports.Metadata{TraceParent: "garbage"})
		require.False(t, ok, "an unreadable trace context links to nothing")
	})

	t.Run("InsideAHandler", func(t *testing.T) {
		t.Parallel()
		root := ports.Event{ID: uuid.New()}
		handled := ports.Event{ID: uuid.New(), Metadata: ports.Metadata{
			CorrelationID: uuid.New(),
			Scope:         &ports.Scope{TenantID: "acme"},
			Headers:       map[string]string{"from": "handled"},
		}}
		// Values set on the context the worker was started with do not
		// reach the events its handlers append.
		outer := WithHeaders(WithCorrelationID(t.Context(), uuid.New()), map[string]string{"outer": "x"})
		contexts := map[string]func(ports.Event) context.Context{
			"Scoped":   func(e ports.Event) context.Context { return withEvent(outer, &e) },
			"Unscoped": func(e ports.Event) context.Context { return &unscopedEventContext{Context: outer, event: &e} },
		}
		for name, handlerContext := range contexts {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				require.Equal(t, ports.Metadata{CausationID: root.ID, CorrelationID: root.ID},
					MetadataFromContext(handlerContext(root)), "a root event correlates its descendants")

				ctx := handlerContext(handled)
				md := MetadataFromContext(ctx)
				require.Equal(t, handled.ID, md.CausationID)
				require.Equal(t, handled.Metadata.CorrelationID, md.CorrelationID, "inherited")
				require.Nil(t, md.Headers, "headers are not inherited")
				if name == "Scoped" {
					require.Equal(t, &ports.Scope{TenantID: "acme"}, md.Scope, "the handled event's scope")
				}

				own := uuid.New()
				ctx = WithHeaders(WithCorrelationID(ctx, own), map[string]string{"inner": "y"})
				md = MetadataFromContext(ctx)
				require.Equal(t, own, md.CorrelationID, "set in the handler")
				require.Equal(t, handled.ID, md.CausationID)
				require.Equal(t, map[string]string{"inner": "y"}, md.Headers, "set in the handler, without the outer ones")
			})
		}
	})
}

// testSpanContext returns a span context with fixed ids and a trace state,
// as a request's span would carry.
func testSpanContext(t *testing.T, flags trace.TraceFlags) trace.SpanContext {
	t.Helper()
	traceID, err := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	require.NoError(t, err)
	spanID, err := trace.SpanIDFromHex("00f067aa0ba902b7")
	require.NoError(t, err)
	state, err := trace.ParseTraceState("vendor=opaque")
	require.NoError(t, err)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID, TraceFlags: flags, TraceState: state})
}

// TestAppendStoresTraceContext appends under a span: Append and AppendTx
// store its W3C trace context with every event, so the spans of the
// events' applies can link to the request that appended them.
func TestAppendStoresTraceContext(t *testing.T) {
	t.Parallel()

	r := subscribedRegistry(t)
	ctx := trace.ContextWithSpanContext(t.Context(), testSpanContext(t, trace.FlagsSampled))
	plain, tx := &flakyStore{}, &txStore{}
	_, err := r.Append(ctx, plain, uuid.New(), 0, placed{ID: "a"}, shipped{By: "b"})
	require.NoError(t, err)
	_, err = AppendTx(ctx, r, tx, &fakeTx{}, uuid.New(), 0, placed{ID: "a"}, shipped{By: "b"})
	require.NoError(t, err)
	for name, call := range map[string]*ports.EventsAppendParams{"Append": plain.calls[0], "AppendTx": tx.calls[0]} {
		require.Len(t, call.Events, 2)
		for _, ne := range call.Events {
			require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ne.Metadata.TraceParent, name)
			require.Equal(t, "vendor=opaque", ne.Metadata.TraceState, name)
		}
	}

	_, err = r.Append(t.Context(), plain, uuid.New(), 0, placed{ID: "a"})
	require.NoError(t, err)
	require.Empty(t, plain.calls[1].Events[0].Metadata.TraceParent, "outside a trace")
}
