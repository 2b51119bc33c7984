package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

type placed struct {
	ID string `json:"id"`
}

type shipped struct {
	By string `json:"by"`
}

type unregistered struct{}

type counter struct {
	N    int      `json:"n"`
	Seen []string `json:"seen"`
}

func newTestRegistry(t *testing.T) *Registry {
	t.Helper()
	r := NewRegistry()
	require.NoError(t, RegisterEvent[placed](r, "placed"))
	require.NoError(t, RegisterEvent[shipped](r, "shipped"))
	return r
}

func TestRegisterEvent(t *testing.T) {
	t.Parallel()

	r := newTestRegistry(t)
	require.ErrorIs(t, RegisterEvent[placed](r, "other"), ErrDuplicate, "same Go type twice")
	require.ErrorIs(t, RegisterEvent[unregistered](r, "placed"), ErrDuplicate, "same name twice")
	require.Error(t, RegisterEvent[unregistered](r, ""), "empty name")
	require.Error(t, RegisterEvent[unregistered](nil, "x"), "nil registry")

	ne, err := r.Encode(placed{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, "placed", ne.Type)
	require.JSONEq(t, `{"id":"o-1"}`, string(ne.Data))

	_, err = r.Encode(unregistered{})
	require.ErrorIs(t, err, ErrUnknownEventType)

	v, err := r.Decode(ports.Event{Type: "placed", Data: []byte(`{"id":"o-2"}`)})
	require.NoError(t, err)
	require.Equal(t, placed{ID: "o-2"}, v)

	_, err = r.Decode(ports.Event{Type: "nope", Data: []byte(`{}`)})
	require.ErrorIs(t, err, ErrUnknownEventType)
	_, err = r.Decode(ports.Event{Type: "placed", Data: []byte(`{"id":1}`)})
	require.ErrorContains(t, err, "decoding placed event")
}

// noted is an event registered as a pointer type, so that a nil one
// encodes as JSON null.
type noted struct {
	Text string `json:"text"`
}

// An event whose payload is JSON null (a nil pointer) carries nothing to
// apply: Append and AppendTx refuse it before calling the store, naming
// its type, and a null payload met in the store does not decode.
func TestNullPayloadRefused(t *testing.T) {
	t.Parallel()

	r := subscribedRegistry(t)
	require.NoError(t, RegisterEvent[*noted](r, "noted"))
	var nilNote *noted

	_, err := r.Encode(nilNote)
	require.ErrorIs(t, err, ports.ErrInvalidArgument)
	require.ErrorContains(t, err, `encoding noted: the payload is JSON null`)
	ne, err := r.Encode(&noted{Text: "hi"})
	require.NoError(t, err, "a pointer to an event is fine")
	require.JSONEq(t, `{"text":"hi"}`, string(ne.Data))

	store := &flakyStore{}
	_, err = r.Append(t.Context(), store, uuid.New(), 0, placed{ID: "a"}, nilNote)
	require.ErrorIs(t, err, ports.ErrInvalidArgument)
	require.ErrorContains(t, err, "noted")
	require.Empty(t, store.calls, "nothing is sent")
	txs := &txStore{}
	_, err = AppendTx(t.Context(), r, txs, &fakeTx{}, uuid.New(), 0, nilNote)
	require.ErrorIs(t, err, ports.ErrInvalidArgument)
	require.Empty(t, txs.calls, "nothing is sent")

	for _, typ := range []string{"placed", "noted"} {
		for _, data := range []string{`null`, " null\n"} {
			_, err := r.Decode(ports.Event{Type: typ, Data: []byte(data)})
			require.ErrorIs(t, err, ErrUndecodable, "%s %q", typ, data)
			require.ErrorContains(t, err, "JSON null")
		}
	}
}

func TestPerspectiveRegistration(t *testing.T) {
	t.Parallel()

	t.Run("HandlesOnlyRegisteredTypes", func(t *testing.T) {
		t.Parallel()
		r := newTestRegistry(t)
		p := NewPerspective[counter]("c")
		require.NoError(t, Handle(p, func(_ context.Context, m counter, _ unregistered) (counter, error) { return m, nil }))
		require.ErrorIs(t, r.AddPerspective(p), ErrUnknownEventType)
	})

	t.Run("DuplicateHandlerAndName", func(t *testing.T) {
		t.Parallel()
		r := newTestRegistry(t)
		p := NewPerspective[counter]("c")
		h := func(_ context.Context, m counter, _ placed) (counter, error) { return m, nil }
		require.NoError(t, Handle(p, h))
		require.ErrorIs(t, Handle(p, h), ErrDuplicate)
		require.NoError(t, r.AddPerspective(p))
		q := NewPerspective[counter]("c")
		require.NoError(t, Handle(q, h))
		require.ErrorIs(t, r.AddPerspective(q), ErrDuplicate)
		require.Error(t, Handle(p, func(_ context.Context, m counter, _ shipped) (counter, error) { return m, nil }), "no handlers after registration")
	})

	t.Run("NilAndEmpty", func(t *testing.T) {
		t.Parallel()
		r := newTestRegistry(t)
		var nilP *Perspective[counter]
		require.Error(t, r.AddPerspective(nilP))
		require.Error(t, r.AddPerspective(NewPerspective[counter]("")))
		require.ErrorContains(t, r.AddPerspective(NewPerspective[counter]("empty")), "no apply functions")
		require.Error(t, Handle[counter, placed](nil, nil))
	})

	t.Run("SubscriptionsAndApply", func(t *testing.T) {
		t.Parallel()
		r := newTestRegistry(t)
		p := NewPerspective[counter]("c")
		MustHandle(p, func(ctx context.Context, m counter, e placed) (counter, error) {
			ev, ok := EventFromContext(ctx)
			if !ok {
				return m, errors.New("no event in context")
			}
			m.N++
			m.Seen = append(m.Seen, e.ID+"@"+ev.Type)
			return m, nil
		})
		MustHandle(p, func(_ context.Context, m counter, _ shipped) (counter, error) {
			panic("boom")
		})
		require.NoError(t, r.AddPerspective(p))
		require.Equal(t, []ports.Subscription{{EventType: "placed", Perspective: "c"}, {EventType: "shipped", Perspective: "c"}}, r.Subscriptions())
		require.Equal(t, []string{"c"}, r.PerspectivesFor("placed"))

		rp, ok := r.perspective("c")
		require.True(t, ok)
		m, err := rp.decodeModel(nil)
		require.NoError(t, err)
		ev := ports.Event{ID: uuid.New(), Type: "placed"}
		m, err = rp.apply(withEvent(t.Context(), &ev), m, "placed", placed{ID: "x"})
		require.NoError(t, err)
		require.Equal(t, counter{N: 1, Seen: []string{"x@placed"}}, m)

		_, err = rp.apply(t.Context(), m, "shipped", shipped{})
		require.ErrorContains(t, err, "panicked")
		_, err = rp.apply(t.Context(), m, "other", nil)
		require.ErrorIs(t, err, ErrNoHandler)

		data, err := rp.encodeModel(m)
		require.NoError(t, err)
		back, err := rp.decodeModel(data)
		require.NoError(t, err)
		require.Equal(t, m, back)
		_, err = rp.decodeModel([]byte(`{"n":"x"}`))
		require.Error(t, err)
	})
}

func TestImmutable(t *testing.T) {
	t.Parallel()

	type flat struct {
		N  int64
		S  string
		At time.Time
		ID uuid.UUID
		A  [2]struct{ B bool }
	}
	type withSlice struct{ Items []string }
	type withMap struct{ M map[string]int }
	type withPointer struct{ P *int }
	type withInterface struct{ V any }
	type nested struct{ Inner withSlice }
	require.True(t, immutable(reflect.TypeFor[flat]()))
	require.True(t, immutable(reflect.TypeFor[placed]()))
	require.True(t, immutable(reflect.TypeFor[struct{}]()))
	for _, typ := range []reflect.Type{
		reflect.TypeFor[withSlice](), reflect.TypeFor[withMap](), reflect.TypeFor[withPointer](),
		reflect.TypeFor[withInterface](), reflect.TypeFor[nested](), reflect.TypeFor[json.RawMessage](),
	} {
		require.False(t, immutable(typ), typ.String())
	}
}

// flakyStore is an EventStore whose appends fail as scripted: each entry of
// errs is returned by one call, after the call took effect when stored is
// set for it.
type flakyStore struct {
	errs   []error
	stored []bool
	calls  []*ports.EventsAppendParams
	kept   []ports.Event
}

func (s *flakyStore) SubscriptionsRegister(context.Context, *ports.SubscriptionsRegisterParams) error {
	return nil
}

func (s *flakyStore) EventsAppend(_ context.Context, p *ports.EventsAppendParams) (*ports.EventsAppendResult, error) {
	i := len(s.calls)
	s.calls = append(s.calls, p)
	if len(s.kept) > 0 {
		return &ports.EventsAppendResult{Events: s.kept, AlreadyStored: true}, nil
	}
	if i < len(s.stored) && s.stored[i] {
		for j, ne := range p.Events {
			s.kept = append(s.kept, ports.Event{ID: ne.ID, StreamID: p.StreamID, Type: ne.Type, Version: int64(j + 1), Data: ne.Data})
		}
	}
	if i < len(s.errs) && s.errs[i] != nil {
		return nil, s.errs[i]
	}
	return &ports.EventsAppendResult{Events: s.kept}, nil
}

func TestAppendRetriesTransientFailuresWithTheSameIDs(t *testing.T) {
	t.Parallel()

	r := newTestRegistry(t)
	lost := fmt.Errorf("appending: connection reset: %w", ports.ErrTransient)
	// The first call fails before storing, the second stores and then loses
	// its connection, the third finds the events stored.
	store := &flakyStore{errs: []error{lost, lost}, stored: []bool{false, true}}
	res, err := r.Append(t.Context(), store, uuid.New(), ports.ExpectNoStream, placed{ID: "a"}, shipped{By: "b"})
	require.NoError(t, err)
	require.True(t, res.AlreadyStored)
	require.Len(t, store.calls, 3)
	for _, call := range store.calls {
		require.Equal(t, store.calls[0].Events, call.Events, "every retry carries the same events and ids")
	}
	require.NotEqual(t, uuid.Nil, store.calls[0].Events[0].ID, "ids are given before the first call")
	require.Equal(t, store.calls[0].Events[1].ID, res.Events[1].ID)
}

func TestAppendDoesNotRetryOtherErrors(t *testing.T) {
	t.Parallel()

	r := newTestRegistry(t)
	for _, failure := range []error{
		fmt.Errorf("appending: %w", ports.ErrVersionConflict),
		errors.New("permission denied"),
	} {
		store := &flakyStore{errs: []error{failure}}
		_, err := r.Append(t.Context(), store, uuid.New(), 0, placed{ID: "a"})
		require.ErrorIs(t, err, failure)
		require.Len(t, store.calls, 1, "%v is not retried", failure)
	}
}

func TestAppendGivesUpOnLastingTransientFailures(t *testing.T) {
	t.Parallel()

	r := newTestRegistry(t)
	down := fmt.Errorf("dial: connection refused: %w", ports.ErrTransient)
	store := &flakyStore{errs: []error{down, down, down, down, down, down, down}}
	_, err := r.Append(t.Context(), store, uuid.New(), 0, placed{ID: "a"})
	require.ErrorIs(t, err, ports.ErrTransient)
	require.Len(t, store.calls, 1+appendRetries)
}
