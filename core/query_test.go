package core

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// fakeQuery is a ModelQuery that records its calls and answers with res,
// or fails with err.
type fakeQuery struct {
	mu     sync.Mutex
	finds  []ports.ModelsFindParams
	res    ports.ModelsFindResult
	err    error
	ensure func(params *ports.ModelIndexesEnsureParams) error
}

func (f *fakeQuery) ModelsFind(_ context.Context, params *ports.ModelsFindParams) (ports.ModelsFindResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.finds = append(f.finds, *params)
	return f.res, f.err
}

func (f *fakeQuery) ModelIndexesEnsure(_ context.Context, params *ports.ModelIndexesEnsureParams) error {
	return f.ensure(params)
}

// lastFind returns the params of the latest ModelsFind.
func (f *fakeQuery) lastFind(t *testing.T) ports.ModelsFindParams {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.finds, "ModelsFind was called")
	return f.finds[len(f.finds)-1]
}

func TestPerspectiveFind(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		p *Perspective[counter]
		q *fakeQuery
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		p := NewPerspective[counter]("counts")
		require.NoError(t, p.Index(TextField("status"), TimeField("created.at")))
		require.NoError(t, p.Index(NumberField("n")))
		return &testBundle{p: p, q: &fakeQuery{}}
	}
	stream, last := uuid.New(), uuid.New()
	stored := ports.StoredModel{
		StreamID: stream, Perspective: "counts", Data: []byte(`{"n": 3, "seen": ["a"]}`),
		LastEventID: last, LastVersion: 7, UpdatedAt: time.Unix(100, 0).UTC(),
	}

	t.Run("TranslatesTheQuery", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.p.Find(t.Context(), b.q, Query{
			Where: []Filter{
				Eq("status", "open"), Eq("customer.id", 42), Eq("note", nil),
				Contains(map[string]any{"tags": []string{"vip"}}),
			},
			OrderBy: ByField("created.at").Desc(),
			Limit:   20,
		})
		require.NoError(t, err)

		require.Equal(t, ports.ModelsFindParams{
			Perspective: "counts",
			Filters: []ports.ModelFilter{
				{Op: ports.ModelFilterEqual, Path: []string{"status"}, Value: []byte(`"open"`)},
				{Op: ports.ModelFilterEqual, Path: []string{"customer", "id"}, Value: []byte(`42`)},
				{Op: ports.ModelFilterEqual, Path: []string{"note"}, Value: []byte(`null`)},
				{Op: ports.ModelFilterContains, Value: []byte(`{"tags":["vip"]}`)},
			},
			Order: ports.ModelOrder{
				By: ports.ModelOrderField, Field: ports.ModelField{Path: []string{"created", "at"}, Kind: ports.ModelFieldTime}, Desc: true,
			},
			Limit: 20,
		}, b.q.lastFind(t))
	})

	t.Run("ZeroQueryListsByStreamID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.q.res = ports.ModelsFindResult{Models: []ports.StoredModel{stored}}

		page, err := b.p.Find(t.Context(), b.q, Query{})
		require.NoError(t, err)

		require.Equal(t, ports.ModelsFindParams{Perspective: "counts", Filters: []ports.ModelFilter{}, Limit: QueryLimitDefault}, b.q.lastFind(t))
		require.Equal(t, []Model[counter]{{
			StreamID: stream, Value: counter{N: 3, Seen: []string{"a"}}, LastEventID: last, LastVersion: 7, UpdatedAt: time.Unix(100, 0).UTC(),
		}}, page.Models)
		require.Empty(t, page.Next, "no next page")
		for _, o := range []Order{ByUpdatedAt(), ByUpdatedAt().Desc(), ByStreamID().Desc()} {
			_, err := b.p.Find(t.Context(), b.q, Query{OrderBy: o})
			require.NoError(t, err)
			require.Equal(t, ports.ModelOrder{By: o.by, Desc: o.desc}, b.q.lastFind(t).Order)
		}
	})

	t.Run("NextContinuesTheSameQuery", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		next := &ports.ModelCursor{StreamID: stream, Key: "2026-01-01T00:00:00.5Z"}
		b.q.res = ports.ModelsFindResult{Models: []ports.StoredModel{stored}, Next: next}
		q := Query{Where: []Filter{Eq("status", "open")}, OrderBy: ByField("created.at"), Limit: 1}

		page, err := b.p.Find(t.Context(), b.q, q)
		require.NoError(t, err)
		require.NotEmpty(t, page.Next)

		q.After, q.Limit = page.Next, 50 // the page size may change
		_, err = b.p.Find(t.Context(), b.q, q)
		require.NoError(t, err)
		require.Equal(t, next, b.q.lastFind(t).After, "the cursor carries the place of the last model")

		b.q.res.Next = &ports.ModelCursor{StreamID: stream, UpdatedAt: time.Date(2026, 1, 1, 0, 0, 0, 1500, time.UTC)}
		page, err = b.p.Find(t.Context(), b.q, Query{OrderBy: ByUpdatedAt()})
		require.NoError(t, err)
		_, err = b.p.Find(t.Context(), b.q, Query{OrderBy: ByUpdatedAt(), After: page.Next})
		require.NoError(t, err)
		require.True(t, b.q.res.Next.UpdatedAt.Equal(b.q.lastFind(t).After.UpdatedAt), "to the nanosecond")
	})

	t.Run("RejectsBadQueries", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.q.res = ports.ModelsFindResult{Models: []ports.StoredModel{stored}, Next: &ports.ModelCursor{StreamID: stream}}
		page, err := b.p.Find(t.Context(), b.q, Query{Where: []Filter{Eq("status", "open")}})
		require.NoError(t, err)
		cursor := page.Next
		other := NewPerspective[counter]("other")
		otherPage, err := other.Find(t.Context(), b.q, Query{Where: []Filter{Eq("status", "open")}})
		require.NoError(t, err)
		b.q.finds = nil

		for name, q := range map[string]Query{
			"NegativeLimit":            {Limit: -1},
			"LimitAboveMax":            {Limit: QueryLimitMax + 1},
			"EmptyField":               {Where: []Filter{Eq("", 1)}},
			"EmptyKey":                 {Where: []Filter{Eq("customer..id", 1)}},
			"FieldWithSpace":           {Where: []Filter{Eq("customer id", 1)}},
			"ValueNotJSON":             {Where: []Filter{Eq("status", make(chan int))}},
			"ContainedNotJSON":         {Where: []Filter{Contains(func() {})}},
			"ZeroFilter":               {Where: []Filter{{}}},
			"UndeclaredOrderField":     {OrderBy: ByField("total")},
			"MalformedCursor":          {Where: []Filter{Eq("status", "open")}, After: "not a cursor!"},
			"CursorNotJSON":            {Where: []Filter{Eq("status", "open")}, After: base64.RawURLEncoding.EncodeToString([]byte("{"))},
			"CursorOfOtherVersion":     {Where: []Filter{Eq("status", "open")}, After: base64.RawURLEncoding.EncodeToString([]byte(`{"v":2}`))},
			"CursorOfOtherFilter":      {Where: []Filter{Eq("status", "closed")}, After: cursor},
			"CursorOfOtherOrder":       {Where: []Filter{Eq("status", "open")}, OrderBy: ByStreamID().Desc(), After: cursor},
			"CursorOfOtherPerspective": {Where: []Filter{Eq("status", "open")}, After: otherPage.Next},
		} {
			_, err := b.p.Find(t.Context(), b.q, q)
			require.ErrorIs(t, err, ports.ErrInvalidArgument, name)
			require.ErrorContains(t, err, `perspective "counts"`, name)
		}
		require.Empty(t, b.q.finds, "a bad query never reaches the backend")

		_, err = b.p.Find(t.Context(), b.q, Query{Where: []Filter{Eq("status", "open")}, After: cursor})
		require.NoError(t, err, "the cursor of the same query")
	})

	t.Run("NoPortIsUnsupported", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.p.Find(t.Context(), nil, Query{})
		require.ErrorIs(t, err, errors.ErrUnsupported)
		require.ErrorIs(t, b.p.EnsureIndexes(t.Context(), nil), errors.ErrUnsupported)
	})

	t.Run("BackendErrorIsWrapped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.q.err = ports.ErrTransient
		_, err := b.p.Find(t.Context(), b.q, Query{})
		require.ErrorIs(t, err, ports.ErrTransient)
	})

	t.Run("UndecodableModel", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		bad := stored
		bad.Data = []byte(`{"n": "three"}`)
		b.q.res = ports.ModelsFindResult{Models: []ports.StoredModel{bad}}
		_, err := b.p.Find(t.Context(), b.q, Query{})
		require.ErrorContains(t, err, `decoding model of perspective "counts"`)
		require.ErrorContains(t, err, stream.String())
	})
}

func TestPerspectiveIndex(t *testing.T) {
	t.Parallel()

	t.Run("DeclaresFieldsAndKinds", func(t *testing.T) {
		t.Parallel()
		p := NewPerspective[counter]("counts")
		require.NoError(t, p.Index(TextField("customer.id")))
		require.NoError(t, p.Index(TextField("status"), TimeField("created_at")))
		require.NoError(t, p.Index(TextField("status"), TimeField("created_at")), "again: no change")
		require.NoError(t, p.Index(NumberField("total"), TextField("status")))
		require.NoError(t, p.Index(UpdatedAt()))
		require.NoError(t, p.Index(TextField("status"), UpdatedAt()))
		require.NoError(t, p.Index(TextField("status"), UpdatedAt()), "again: no change")

		got := p.Indexes()
		require.Equal(t, []ports.ModelIndex{
			{Fields: []ports.ModelField{{Path: []string{"customer", "id"}, Kind: ports.ModelFieldText}}},
			{Fields: []ports.ModelField{{Path: []string{"status"}, Kind: ports.ModelFieldText}, {Path: []string{"created_at"}, Kind: ports.ModelFieldTime}}},
			{Fields: []ports.ModelField{{Path: []string{"total"}, Kind: ports.ModelFieldNumber}, {Path: []string{"status"}, Kind: ports.ModelFieldText}}},
			{UpdatedAt: true},
			{Fields: []ports.ModelField{{Path: []string{"status"}, Kind: ports.ModelFieldText}}, UpdatedAt: true},
		}, got)
		got[0].Fields[0].Path[0] = "changed"
		require.Equal(t, []string{"customer", "id"}, p.Indexes()[0].Fields[0].Path, "a copy")
	})

	t.Run("RejectsBadDeclarations", func(t *testing.T) {
		t.Parallel()
		p := NewPerspective[counter]("counts")
		require.NoError(t, p.Index(TextField("status")))
		for name, fields := range map[string][]IndexField{
			"NoField":           nil,
			"TooMany":           {TextField("a"), TextField("b"), TextField("c"), TextField("d"), TextField("e"), TextField("f"), TextField("g"), TextField("h"), TextField("i")},
			"BadName":           {TextField("a b")},
			"EmptyKey":          {TextField("a.")},
			"ZeroField":         {{}},
			"Twice":             {TextField("a"), NumberField("a")},
			"OtherKind":         {NumberField("status")},
			"OtherKindToo":      {TextField("x"), TimeField("status")},
			"UpdatedFirst":      {UpdatedAt(), TextField("a")},
			"UpdatedTwice":      {UpdatedAt(), UpdatedAt()},
			"TooManyAndUpdated": {TextField("a"), TextField("b"), TextField("c"), TextField("d"), TextField("e"), TextField("f"), TextField("g"), TextField("h"), TextField("i"), UpdatedAt()},
		} {
			require.Error(t, p.Index(fields...), name)
		}
		require.Len(t, p.Indexes(), 1, "a rejected declaration adds nothing")
	})

	t.Run("NotAfterRegistration", func(t *testing.T) {
		t.Parallel()
		p := NewPerspective[counter]("counts")
		MustHandle(p, func(_ context.Context, m counter, _ placed) (counter, error) { return m, nil })
		require.NoError(t, newTestRegistry(t).AddPerspective(p))
		require.ErrorContains(t, p.Index(TextField("status")), "after the perspective was registered")
	})
}

// TestWorkerEnsuresDeclaredIndexes checks that the worker hands the
// indexes of its registered perspectives to the backend, in the
// background, and tries again every resubscribeEvery those it failed to
// ensure, until it succeeds.
func TestWorkerEnsuresDeclaredIndexes(t *testing.T) {
	t.Parallel()
	clock := clocktest.NewFake()
	backend := memory.New(memory.Options{Clock: clock}).Backend()
	calls := make(chan *ports.ModelIndexesEnsureParams, 10)
	failures := 1
	backend.ModelQuery = &fakeQuery{ensure: func(params *ports.ModelIndexesEnsureParams) error {
		calls <- params
		if params.Perspective == "counts" && failures > 0 {
			failures--
			return ports.ErrTransient
		}
		return nil
	}}
	reg := newTestRegistry(t)
	counts := NewPerspective[counter]("counts")
	require.NoError(t, counts.Index(TextField("status"), TimeField("created_at")))
	MustHandle(counts, func(_ context.Context, m counter, _ placed) (counter, error) { return m, nil })
	require.NoError(t, reg.AddPerspective(counts))
	plain := NewPerspective[counter]("plain")
	MustHandle(plain, func(_ context.Context, m counter, _ placed) (counter, error) { return m, nil })
	require.NoError(t, reg.AddPerspective(plain))
	w, err := New(backend, reg, &Options{Clock: clock, Logger: slog.New(slog.DiscardHandler), Claims: ClaimOptions{Disabled: true}})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.ensureIndexesLoop(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	next := func() *ports.ModelIndexesEnsureParams {
		t.Helper()
		select {
		case p := <-calls:
			return p
		case <-time.After(10 * time.Second):
			t.Fatal("no ModelIndexesEnsure")
			return nil
		}
	}

	want := &ports.ModelIndexesEnsureParams{Perspective: "counts", Indexes: counts.Indexes()}
	require.Equal(t, want, next(), "only the perspective that declares indexes")
	<-clock.WaitTimers(1)
	clock.Advance(resubscribeEvery)
	require.Equal(t, want, next(), "tried again after a failure")
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop goes on once every index is ensured")
	}
	require.Empty(t, calls)
}
