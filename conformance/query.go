package conformance

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// runModelQuery verifies the optional ports.ModelQuery.
func runModelQuery(t *testing.T, newBackend NewBackendFunc, implemented bool) {
	t.Helper()
	const port = "ModelQuery"

	optionalGroup(t, "ModelsFind", port, implemented, map[string]func(t *testing.T){
		"ContainsAsJSONB": func(t *testing.T) {
			f := setupQuery(t, newBackend)
			contains := func(doc string) []uuid.UUID {
				t.Helper()
				return f.streams(t, ports.ModelsFindParams{Filters: []ports.ModelFilter{{Op: ports.ModelFilterContains, Value: []byte(doc)}}})
			}

			require.Equal(t, f.ids("a", "b"), contains(`{"tags": ["vip"]}`), "an array contains the elements named, in any order")
			require.Equal(t, f.ids("a"), contains(`{"tags": ["new", "vip"]}`))
			require.Equal(t, f.ids("a", "c"), contains(`{"customer": {"tier": "gold"}}`), "an object contains the keys named")
			require.Equal(t, f.ids("c", "d"), contains(`{"total": 10, "status": "open"}`), "numbers compare by value")
			require.Empty(t, contains(`{"tags": "vip"}`), "only at the top does an array contain a scalar")
			require.Empty(t, contains(`{"status": ["open"]}`), "a scalar contains no array")
			require.Equal(t, f.ids("a", "b", "c", "d", "e"), contains(`{}`), "every object contains the empty one")
			require.Equal(t, f.ids("e"), contains(`{"note": null}`), "null is a value")

			// A model that is an array, and one that is a scalar.
			two := newIDs(t, 2)
			list, scalar := two[0], two[1]
			storeModel(t, f.tb.backend, perspective2, list, 1, `["a", 2, {"c": [1, 2]}, [3]]`, at(time.Second))
			storeModel(t, f.tb.backend, perspective2, scalar, 1, `"a"`, at(time.Second))
			top := func(doc string) []uuid.UUID {
				t.Helper()
				return streamsOf(findAll(t, f.tb.backend, ports.ModelsFindParams{
					Perspective: perspective2, Filters: []ports.ModelFilter{{Op: ports.ModelFilterContains, Value: []byte(doc)}},
				}))
			}
			require.Equal(t, []uuid.UUID{list, scalar}, top(`"a"`), "the top array contains its scalar element; a scalar an equal one")
			require.Equal(t, []uuid.UUID{list}, top(`["a", 2.0]`))
			require.Equal(t, []uuid.UUID{list}, top(`[{"c": [2]}, [3]]`), "nested containers contain by structure")
			require.Empty(t, top(`[[2]]`), "an array element contains arrays only through an array")
			require.Empty(t, top(`{"c": [1]}`), "an array contains no object")
			require.Empty(t, top(`["a", "b"]`))
		},
		"EqualComparesDecodedJSON": func(t *testing.T) {
			f := setupQuery(t, newBackend)

			require.Equal(t, f.ids("b", "c", "d"), f.streams(t, equal(`10`, "total")), "10, 10.0 and 1e1 are one number")
			require.Equal(t, f.ids("e"), f.streams(t, equal(`"10"`, "total")), "a string is no number")
			require.Equal(t, f.ids("a", "c"), f.streams(t, equal(`{"tier": "gold", "id": "c1"}`, "customer")), "objects compare by keys and values, in any order")
			require.Empty(t, f.streams(t, equal(`["vip", "new"]`, "tags")), "arrays compare element by element")
			require.Equal(t, f.ids("a"), f.streams(t, equal(`["new", "vip"]`, "tags")))
			require.Equal(t, f.ids("c"), f.streams(t, equal(`true`, "rush")))
		},
		"EqualOnNestedPath": func(t *testing.T) {
			f := setupQuery(t, newBackend)

			require.Equal(t, f.ids("a", "c"), f.streams(t, equal(`"gold"`, "customer", "tier")))
			require.Equal(t, f.ids("b"), f.streams(t, equal(`"c2"`, "customer", "id")))
			require.Empty(t, f.streams(t, equal(`"open"`, "status", "x")), "a path goes through objects only")
			require.Empty(t, f.streams(t, equal(`"vip"`, "tags", "0")), "a path never enters an array")
		},
		"EqualOnTopLevelField": func(t *testing.T) {
			f := setupQuery(t, newBackend)

			require.Equal(t, f.ids("a", "c", "d"), f.streams(t, equal(`"open"`, "status")))
			require.Equal(t, f.ids("a", "c"), f.streams(t, equal(`"open"`, "status"), equal(`"gold"`, "customer", "tier")),
				"a model matches every filter")
			require.Empty(t, f.streams(t, equal(`"OPEN"`, "status")), "strings compare by their bytes")
		},
		"FindsOnlyThePerspective": func(t *testing.T) {
			f := setupQuery(t, newBackend)
			other := newID(t)
			storeModel(t, f.tb.backend, perspective2, other, 1, `{"status": "open"}`, at(time.Second))

			require.Equal(t, f.ids("a", "c", "d"), f.streams(t, equal(`"open"`, "status")))
			res := find(t, f.tb.backend, ports.ModelsFindParams{Perspective: perspective2})
			require.Equal(t, []uuid.UUID{other}, streamsOf(res.Models))
			res = find(t, f.tb.backend, ports.ModelsFindParams{Perspective: "nobody"})
			require.Empty(t, res.Models, "a perspective without models has none")
			require.Nil(t, res.Next)
		},
		"MissingFieldEqualsNothing": func(t *testing.T) {
			f := setupQuery(t, newBackend)

			require.Equal(t, f.ids("e"), f.streams(t, equal(`null`, "note")), "null matches a null field, not a missing one")
			require.Empty(t, f.streams(t, equal(`null`, "nowhere")))
		},
		"OrderByFieldOfEachKind": func(t *testing.T) {
			tb := setup(t, newBackend)
			ids := newIDs(t, 7)
			docs := []string{
				`{"name": "b", "n": 10, "at": "2026-01-01T12:00:00+01:00"}`,
				`{"name": "B", "n": 9.5, "at": "2026-01-01T11:30:00Z"}`,
				`{"name": "é", "n": 1e1, "at": "2026-01-01T10:59:59.999999Z"}`,
				`{"name": "a", "n": -3, "at": "2026-01-01T11:00:00.5Z"}`,
				`{"name": 7, "n": "11", "at": "2026-02-30T00:00:00Z"}`,
				`{"name": null, "n": null, "at": "yesterday"}`,
				`{"other": true}`,
			}
			for i, doc := range docs {
				storeModel(t, tb.backend, perspective, ids[i], 1, doc, at(time.Second))
			}
			order := func(path string, kind ports.ModelFieldKind, desc bool) []uuid.UUID {
				t.Helper()
				return streamsOf(findAll(t, tb.backend, ports.ModelsFindParams{
					Perspective: perspective, Limit: 2,
					Order: ports.ModelOrder{By: ports.ModelOrderField, Field: ports.ModelField{Path: []string{path}, Kind: kind}, Desc: desc},
				}))
			}
			pick := func(idx ...int) []uuid.UUID {
				out := make([]uuid.UUID, len(idx))
				for i, j := range idx {
					out[i] = ids[j]
				}
				return out
			}

			require.Equal(t, pick(1, 3, 0, 2), order("name", ports.ModelFieldText, false), "text by its bytes; other types left out")
			require.Equal(t, pick(2, 0, 3, 1), order("name", ports.ModelFieldText, true))
			require.Equal(t, pick(3, 1, 0, 2), order("n", ports.ModelFieldNumber, false), "numbers by value, equal ones by stream id; strings left out")
			require.Equal(t, pick(2, 0, 1, 3), order("n", ports.ModelFieldNumber, true), "ties by stream id, descending too")
			require.Equal(t, pick(2, 0, 3, 1), order("at", ports.ModelFieldTime, false), "times by instant, whatever their offset; no date, no time")
			require.Equal(t, pick(1, 3, 0, 2), order("at", ports.ModelFieldTime, true))
		},
		"OrderByStreamID": func(t *testing.T) {
			f := setupQuery(t, newBackend)

			require.Equal(t, f.ids("a", "b", "c", "d", "e"), f.streams(t), "ascending by default")
			desc := f.streams(t, ports.ModelsFindParams{Order: ports.ModelOrder{Desc: true}})
			require.Equal(t, f.ids("e", "d", "c", "b", "a"), desc)
		},
		"OrderByUpdatedAtBreaksTiesByStreamID": func(t *testing.T) {
			tb := setup(t, newBackend)
			ids := newIDs(t, 5)
			// Saved at 3s, 1s, 2s, 1s, 3s.
			for i, d := range []time.Duration{3, 1, 2, 1, 3} {
				storeModel(t, tb.backend, perspective, ids[i], 1, `{}`, at(d*time.Second))
			}
			byTime := func(desc bool) []ports.StoredModel {
				t.Helper()
				return findAll(t, tb.backend, ports.ModelsFindParams{
					Perspective: perspective, Limit: 2, Order: ports.ModelOrder{By: ports.ModelOrderUpdatedAt, Desc: desc},
				})
			}

			asc := byTime(false)
			require.Equal(t, []uuid.UUID{ids[1], ids[3], ids[2], ids[0], ids[4]}, streamsOf(asc))
			requireTime(t, at(time.Second), asc[0].UpdatedAt, "UpdatedAt")
			require.Equal(t, []uuid.UUID{ids[4], ids[0], ids[2], ids[3], ids[1]}, streamsOf(byTime(true)))
		},
		"PagesThroughWithoutRepeatsOrSkips": func(t *testing.T) {
			testPaging(t, newBackend, false)
		},
		"PagesThroughWithIndexes": func(t *testing.T) {
			testPaging(t, newBackend, true)
		},
		"PagesEndWithoutNext": func(t *testing.T) {
			tb := setup(t, newBackend)
			ids := newIDs(t, 4)
			for _, id := range ids {
				storeModel(t, tb.backend, perspective, id, 1, `{}`, at(time.Second))
			}

			res := find(t, tb.backend, ports.ModelsFindParams{Perspective: perspective, Limit: 4})
			require.Len(t, res.Models, 4)
			require.Nil(t, res.Next, "a page that holds the last model has no next")
			res = find(t, tb.backend, ports.ModelsFindParams{Perspective: perspective, Limit: 3})
			require.Equal(t, ids[:3], streamsOf(res.Models))
			require.NotNil(t, res.Next)
			require.Equal(t, ids[2], res.Next.StreamID, "the next page starts after the last model")
			res = find(t, tb.backend, ports.ModelsFindParams{Perspective: perspective, Limit: 3, After: res.Next})
			require.Equal(t, ids[3:], streamsOf(res.Models))
			require.Nil(t, res.Next)
		},
		"LimitDefaults": func(t *testing.T) {
			tb := setup(t, newBackend)
			ids := newIDs(t, ports.ModelsFindLimitDefault+1)
			for _, id := range ids {
				storeModel(t, tb.backend, perspective, id, 1, `{}`, at(time.Second))
			}

			res := find(t, tb.backend, ports.ModelsFindParams{Perspective: perspective})
			require.Equal(t, ids[:ports.ModelsFindLimitDefault], streamsOf(res.Models))
			require.NotNil(t, res.Next)
		},
		"ModelSavedBetweenPagesMovesToItsNewPlace": func(t *testing.T) {
			tb := setup(t, newBackend)
			ids := newIDs(t, 6)
			for i, id := range ids {
				storeModel(t, tb.backend, perspective, id, 1, fmt.Sprintf(`{"n": %d}`, i), at(time.Duration(i+1)*time.Second))
			}
			byTime := ports.ModelsFindParams{Perspective: perspective, Limit: 2, Order: ports.ModelOrder{By: ports.ModelOrderUpdatedAt}}
			byStream := ports.ModelsFindParams{Perspective: perspective, Limit: 2}
			first := find(t, tb.backend, byTime)
			require.Equal(t, ids[:2], streamsOf(first.Models))
			firstByStream := find(t, tb.backend, byStream)

			// ids[0] was read, ids[3] not yet: both are saved again, later
			// than every other model.
			storeModel(t, tb.backend, perspective, ids[0], 2, `{"n": 10}`, at(time.Minute))
			storeModel(t, tb.backend, perspective, ids[3], 2, `{"n": 13}`, at(time.Minute+time.Second))

			byTime.After = first.Next
			rest := findAll(t, tb.backend, byTime)
			require.Equal(t, []uuid.UUID{ids[2], ids[4], ids[5], ids[0], ids[3]}, streamsOf(rest),
				"the unchanged models once each; the saved ones at their new place, ids[0] again")
			require.Equal(t, int64(2), rest[3].LastVersion)
			require.JSONEq(t, `{"n": 13}`, string(rest[4].Data))

			byStream.After = firstByStream.Next
			rest = findAll(t, tb.backend, byStream)
			require.Equal(t, ids[2:], streamsOf(rest), "by stream id a saved model keeps its place")
			require.JSONEq(t, `{"n": 13}`, string(rest[1].Data), "and is returned as saved")
		},
		"RejectsInvalidParams": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream := newID(t)
			storeModel(t, tb.backend, perspective, stream, 1, `{}`, at(time.Second))
			number := ports.ModelOrder{By: ports.ModelOrderField, Field: ports.ModelField{Path: []string{"n"}, Kind: ports.ModelFieldNumber}}
			byTime := ports.ModelOrder{By: ports.ModelOrderUpdatedAt}
			for name, p := range map[string]ports.ModelsFindParams{
				"EmptyPerspective":      {},
				"NegativeLimit":         {Limit: -1},
				"LimitAboveMax":         {Limit: ports.ModelsFindLimitMax + 1},
				"TooManyFilters":        {Filters: make([]ports.ModelFilter, ports.ModelsFindFiltersMax+1)},
				"UnknownOp":             {Filters: []ports.ModelFilter{{Op: "like", Path: []string{"a"}, Value: []byte(`1`)}}},
				"EqualWithoutPath":      {Filters: []ports.ModelFilter{{Op: ports.ModelFilterEqual, Value: []byte(`1`)}}},
				"EqualWithEmptyKey":     {Filters: []ports.ModelFilter{{Op: ports.ModelFilterEqual, Path: []string{"a", ""}, Value: []byte(`1`)}}},
				"EqualWithQuotedKey":    {Filters: []ports.ModelFilter{{Op: ports.ModelFilterEqual, Path: []string{"a'b"}, Value: []byte(`1`)}}},
				"EqualWithDottedKey":    {Filters: []ports.ModelFilter{{Op: ports.ModelFilterEqual, Path: []string{"a.b"}, Value: []byte(`1`)}}},
				"ContainsWithPath":      {Filters: []ports.ModelFilter{{Op: ports.ModelFilterContains, Path: []string{"a"}, Value: []byte(`{}`)}}},
				"ValueNotJSON":          {Filters: []ports.ModelFilter{{Op: ports.ModelFilterEqual, Path: []string{"a"}, Value: []byte(`open`)}}},
				"UnknownOrder":          {Order: ports.ModelOrder{By: "size"}},
				"FieldWithoutKind":      {Order: ports.ModelOrder{By: ports.ModelOrderField, Field: ports.ModelField{Path: []string{"n"}}}},
				"FieldWithoutPath":      {Order: ports.ModelOrder{By: ports.ModelOrderField, Field: ports.ModelField{Kind: ports.ModelFieldText}}},
				"FieldOfAnotherOrder":   {Order: ports.ModelOrder{Field: number.Field}},
				"AfterNilStream":        {After: &ports.ModelCursor{}},
				"AfterWithTimeByStream": {After: &ports.ModelCursor{StreamID: stream, UpdatedAt: at(time.Second)}},
				"AfterWithKeyByStream":  {After: &ports.ModelCursor{StreamID: stream, Key: "1"}},
				"AfterWithoutTime":      {Order: byTime, After: &ports.ModelCursor{StreamID: stream}},
				"AfterKeyNotANumber":    {Order: number, After: &ports.ModelCursor{StreamID: stream, Key: "ten"}},
				"AfterKeyNotATime": {
					Order: ports.ModelOrder{By: ports.ModelOrderField, Field: ports.ModelField{Path: []string{"at"}, Kind: ports.ModelFieldTime}},
					After: &ports.ModelCursor{StreamID: stream, Key: "2026-01-01"},
				},
			} {
				if name != "EmptyPerspective" {
					p.Perspective = perspective
				}
				_, err := tb.backend.ModelQuery.ModelsFind(t.Context(), &p)
				require.ErrorIs(t, err, ports.ErrInvalidArgument, name)
			}
		},
		"ReturnsTheStoredModels": func(t *testing.T) {
			tb := setup(t, newBackend)
			stream, last := newID(t), newID(t)
			require.NoError(t, tb.backend.Models.ModelSave(t.Context(), modelParams(stream, perspective, 0, last, 3, `{"lines": ["a"], "total": 4.5}`)))

			res := find(t, tb.backend, ports.ModelsFindParams{Perspective: perspective})
			require.Len(t, res.Models, 1)
			m := res.Models[0]
			require.Equal(t, stream, m.StreamID)
			require.Equal(t, perspective, m.Perspective)
			require.JSONEq(t, `{"lines": ["a"], "total": 4.5}`, string(m.Data))
			require.Equal(t, last, m.LastEventID)
			require.Equal(t, int64(3), m.LastVersion)
			requireTime(t, at(time.Second), m.UpdatedAt, "UpdatedAt")
			require.Nil(t, res.Next)
		},
	})

	optionalGroup(t, "ModelIndexesEnsure", port, implemented, map[string]func(t *testing.T){
		"ChangesNoResult": func(t *testing.T) {
			f := setupQuery(t, newBackend)
			queries := []ports.ModelsFindParams{
				equal(`"open"`, "status"),
				equal(`10`, "total"),
				equal(`"gold"`, "customer", "tier"),
				{Filters: equal(`"open"`, "status").Filters, Order: ports.ModelOrder{
					By: ports.ModelOrderField, Field: ports.ModelField{Path: []string{"total"}, Kind: ports.ModelFieldNumber}, Desc: true,
				}},
				{Order: ports.ModelOrder{By: ports.ModelOrderUpdatedAt, Desc: true}},
				{Filters: equal(`"open"`, "status").Filters, Order: ports.ModelOrder{By: ports.ModelOrderUpdatedAt}},
			}
			before := make([][]uuid.UUID, len(queries))
			for i, q := range queries {
				before[i] = f.streams(t, q)
			}

			ensureIndexes(t, f.tb.backend, perspective, queryIndexes)
			ensureIndexes(t, f.tb.backend, perspective, queryIndexes) // idempotent

			for i, q := range queries {
				require.Equal(t, before[i], f.streams(t, q), "query %d", i)
			}
		},
		"ConcurrentCallsAllSucceed": func(t *testing.T) {
			tb := setup(t, newBackend)
			for _, id := range newIDs(t, 20) {
				storeModel(t, tb.backend, perspective, id, 1, `{"status": "open", "total": 1}`, at(time.Second))
			}
			handles := []ports.Backend{tb.backend, tb.open(t), tb.open(t)}
			errs := make([]error, len(handles))
			var wg sync.WaitGroup
			for i, b := range handles {
				wg.Go(func() {
					errs[i] = b.ModelQuery.ModelIndexesEnsure(t.Context(), &ports.ModelIndexesEnsureParams{Perspective: perspective, Indexes: queryIndexes})
				})
			}
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "instance %d", i)
			}
			q := equal(`"open"`, "status")
			q.Perspective = perspective
			require.Len(t, find(t, tb.backend, q).Models, 20)
		},
		"PerspectiveOfAnyName": func(t *testing.T) {
			tb := setup(t, newBackend)
			const name = `it's a "back\slash"; --`
			ids := newIDs(t, 3)
			for i, doc := range []string{`{"k": "x", "n": 2}`, `{"k": "y", "n": 1}`, `{"k": "x", "n": 3}`} {
				storeModel(t, tb.backend, name, ids[i], 1, doc, at(time.Second))
			}
			ensureIndexes(t, tb.backend, name, []ports.ModelIndex{{Fields: []ports.ModelField{
				{Path: []string{"k"}, Kind: ports.ModelFieldText}, {Path: []string{"n"}, Kind: ports.ModelFieldNumber},
			}}})

			q := equal(`"x"`, "k")
			q.Perspective = name
			q.Order = ports.ModelOrder{By: ports.ModelOrderField, Field: ports.ModelField{Path: []string{"n"}, Kind: ports.ModelFieldNumber}, Desc: true}
			require.Equal(t, []uuid.UUID{ids[2], ids[0]}, streamsOf(findAll(t, tb.backend, q)))
		},
		"SavesNeverFail": func(t *testing.T) {
			tb := setup(t, newBackend)
			ensureIndexes(t, tb.backend, perspective, queryIndexes)
			ids := newIDs(t, 5)

			// Values of other kinds, or none, in the indexed fields.
			for i, doc := range []string{
				`{"status": 1, "total": "many", "created": "2026-02-30T00:00:00Z"}`,
				`{"status": null, "total": {"n": 1}, "created": "0000-01-01T00:00:00Z", "customer": "c1"}`,
				`{"status": ["open"], "total": true, "created": 20260101, "customer": {"tier": 2}}`,
				`{"created": "2026-01-01T00:00:00+16:00"}`,
				`[1, 2, 3]`,
			} {
				storeModel(t, tb.backend, perspective, ids[i], 1, doc, at(time.Second))
			}

			require.Len(t, find(t, tb.backend, ports.ModelsFindParams{Perspective: perspective}).Models, 5)
			byTime := ports.ModelsFindParams{Perspective: perspective, Order: ports.ModelOrder{
				By: ports.ModelOrderField, Field: ports.ModelField{Path: []string{"created"}, Kind: ports.ModelFieldTime},
			}}
			require.Empty(t, find(t, tb.backend, byTime).Models, "none holds a time")
		},
		"RejectsInvalidParams": func(t *testing.T) {
			tb := setup(t, newBackend)
			text := func(path ...string) ports.ModelField { return ports.ModelField{Path: path, Kind: ports.ModelFieldText} }
			for name, p := range map[string]ports.ModelIndexesEnsureParams{
				"EmptyPerspective": {Indexes: []ports.ModelIndex{{Fields: []ports.ModelField{text("a")}}}},
				"NoFields":         {Perspective: perspective, Indexes: []ports.ModelIndex{{}}},
				"TooManyFields": {Perspective: perspective, Indexes: []ports.ModelIndex{{Fields: []ports.ModelField{
					text("a"), text("b"), text("c"), text("d"), text("e"), text("f"), text("g"), text("h"), text("i"),
				}}}},
				"TooManyFieldsAndUpdatedAt": {Perspective: perspective, Indexes: []ports.ModelIndex{{Fields: []ports.ModelField{
					text("a"), text("b"), text("c"), text("d"), text("e"), text("f"), text("g"), text("h"), text("i"),
				}, UpdatedAt: true}}},
				"FieldTwice":   {Perspective: perspective, Indexes: []ports.ModelIndex{{Fields: []ports.ModelField{text("a", "b"), text("a", "b")}}}},
				"UnknownKind":  {Perspective: perspective, Indexes: []ports.ModelIndex{{Fields: []ports.ModelField{{Path: []string{"a"}, Kind: "date"}}}}},
				"InvalidPath":  {Perspective: perspective, Indexes: []ports.ModelIndex{{Fields: []ports.ModelField{text("a b")}}}},
				"PathTooDeep":  {Perspective: perspective, Indexes: []ports.ModelIndex{{Fields: []ports.ModelField{text(make([]string, ports.ModelFieldPathMax+1)...)}}}},
				"EmptyPathKey": {Perspective: perspective, Indexes: []ports.ModelIndex{{Fields: []ports.ModelField{text("")}}}},
			} {
				err := tb.backend.ModelQuery.ModelIndexesEnsure(t.Context(), &p)
				require.ErrorIs(t, err, ports.ErrInvalidArgument, name)
			}
		},
	})
}

// queryIndexes are indexes over the models of queryFixture.
var queryIndexes = []ports.ModelIndex{
	{Fields: []ports.ModelField{{Path: []string{"status"}, Kind: ports.ModelFieldText}, {Path: []string{"total"}, Kind: ports.ModelFieldNumber}}},
	{Fields: []ports.ModelField{{Path: []string{"customer", "tier"}, Kind: ports.ModelFieldText}}},
	{Fields: []ports.ModelField{{Path: []string{"created"}, Kind: ports.ModelFieldTime}}},
	{UpdatedAt: true},
	{Fields: []ports.ModelField{{Path: []string{"status"}, Kind: ports.ModelFieldText}}, UpdatedAt: true},
}

// queryFixture holds five models of perspective, named a to e in the
// order of their stream ids, with fields of every JSON type.
type queryFixture struct {
	tb     *testBundle
	byName map[string]uuid.UUID
}

// setupQuery stores the models of a queryFixture on a fresh backend.
func setupQuery(t *testing.T, newBackend NewBackendFunc) *queryFixture {
	t.Helper()
	f := &queryFixture{tb: setup(t, newBackend), byName: map[string]uuid.UUID{}}
	docs := []struct{ name, doc string }{
		{"a", `{"status": "open", "total": 3, "customer": {"id": "c1", "tier": "gold"}, "tags": ["new", "vip"]}`},
		{"b", `{"status": "shipped", "total": 10, "customer": {"id": "c2", "tier": "silver"}, "tags": ["vip"]}`},
		{"c", `{"status": "open", "total": 10.0, "customer": {"tier": "gold", "id": "c1"}, "tags": [], "rush": true}`},
		{"d", `{"status": "open", "total": 1e1, "customer": {"id": "c3"}}`},
		{"e", `{"status": "closed", "total": "10", "note": null}`},
	}
	ids := newIDs(t, len(docs))
	for i, d := range docs {
		f.byName[d.name] = ids[i]
		storeModel(t, f.tb.backend, perspective, ids[i], 1, d.doc, at(time.Duration(i+1)*time.Second))
	}
	return f
}

// ids returns the stream ids of the named models.
func (f *queryFixture) ids(names ...string) []uuid.UUID {
	out := make([]uuid.UUID, len(names))
	for i, n := range names {
		out[i] = f.byName[n]
	}
	return out
}

// streams returns the stream ids of every model of perspective that the
// filters of queries match, all of them together, in the order of the
// first query (by stream id when none), reading pages of 2.
func (f *queryFixture) streams(t *testing.T, queries ...ports.ModelsFindParams) []uuid.UUID {
	t.Helper()
	p := ports.ModelsFindParams{Perspective: perspective, Limit: 2}
	for i, q := range queries {
		p.Filters = append(p.Filters, q.Filters...)
		if i == 0 {
			p.Order = q.Order
		}
	}
	return streamsOf(findAll(t, f.tb.backend, p))
}

// equal returns a query with an Equal filter on path.
func equal(value string, path ...string) ports.ModelsFindParams {
	return ports.ModelsFindParams{Filters: []ports.ModelFilter{{Op: ports.ModelFilterEqual, Path: path, Value: []byte(value)}}}
}

// testPaging pages through 250 models in pages of 100 in every order, both
// ways, and checks that each model comes exactly once, in order; with
// indexes, after declaring indexes of the fields ordered by.
func testPaging(t *testing.T, newBackend NewBackendFunc, indexed bool) {
	t.Helper()
	tb := setup(t, newBackend)
	const total = 250
	type model struct {
		id      uuid.UUID
		n       int
		created time.Time
		updated time.Duration
	}
	ids := newIDs(t, total)
	models := make([]model, total)
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range ids {
		// Equal keys in runs, so that pages end among ties.
		m := model{id: id, n: (i * 7) % 13, created: day.Add(time.Duration((i*11)%17) * time.Hour), updated: time.Duration((i*5)%9) * time.Second}
		models[i] = m
		doc := fmt.Sprintf(`{"n": %d, "created": %q, "kind": "k%02d"}`, m.n, m.created.Format(time.RFC3339Nano), m.n%4)
		storeModel(t, tb.backend, perspective, id, 1, doc, at(m.updated))
	}
	if indexed {
		ensureIndexes(t, tb.backend, perspective, []ports.ModelIndex{
			{Fields: []ports.ModelField{{Path: []string{"n"}, Kind: ports.ModelFieldNumber}}},
			{Fields: []ports.ModelField{{Path: []string{"created"}, Kind: ports.ModelFieldTime}}},
			{Fields: []ports.ModelField{{Path: []string{"kind"}, Kind: ports.ModelFieldText}}},
		})
	}
	byStream := func(a, b model) int { return bytes.Compare(a.id[:], b.id[:]) }
	orders := map[string]struct {
		order ports.ModelOrder
		cmp   func(a, b model) int
	}{
		"StreamID":  {ports.ModelOrder{}, byStream},
		"UpdatedAt": {ports.ModelOrder{By: ports.ModelOrderUpdatedAt}, func(a, b model) int { return cmp.Or(cmp.Compare(a.updated, b.updated), byStream(a, b)) }},
		"Number": {ports.ModelOrder{By: ports.ModelOrderField, Field: ports.ModelField{Path: []string{"n"}, Kind: ports.ModelFieldNumber}},
			func(a, b model) int { return cmp.Or(cmp.Compare(a.n, b.n), byStream(a, b)) }},
		"Time": {ports.ModelOrder{By: ports.ModelOrderField, Field: ports.ModelField{Path: []string{"created"}, Kind: ports.ModelFieldTime}},
			func(a, b model) int { return cmp.Or(a.created.Compare(b.created), byStream(a, b)) }},
		"Text": {ports.ModelOrder{By: ports.ModelOrderField, Field: ports.ModelField{Path: []string{"kind"}, Kind: ports.ModelFieldText}},
			func(a, b model) int { return cmp.Or(cmp.Compare(a.n%4, b.n%4), byStream(a, b)) }},
	}
	for _, name := range sortedKeys(orders) {
		o := orders[name]
		for _, desc := range []bool{false, true} {
			want := slices.Clone(models)
			slices.SortFunc(want, o.cmp)
			if desc {
				slices.Reverse(want)
			}
			wantIDs := make([]uuid.UUID, len(want))
			for i, m := range want {
				wantIDs[i] = m.id
			}
			order := o.order
			order.Desc = desc
			p := ports.ModelsFindParams{Perspective: perspective, Order: order, Limit: 100}
			var got []uuid.UUID
			var sizes []int
			for {
				res := find(t, tb.backend, p)
				got = append(got, streamsOf(res.Models)...)
				sizes = append(sizes, len(res.Models))
				if res.Next == nil {
					break
				}
				require.Less(t, len(sizes), 10, "%s desc=%t: paging ends", name, desc)
				p.After = res.Next
			}
			require.Equal(t, []int{100, 100, 50}, sizes, "%s desc=%t", name, desc)
			require.Equal(t, wantIDs, got, "%s desc=%t: every model once, in order", name, desc)
		}
	}
}

// storeModel saves data as the model of (stream, name) at version, from
// version-1, at now.
func storeModel(t *testing.T, b ports.Backend, name string, stream uuid.UUID, version int64, data string, now time.Time) {
	t.Helper()
	require.NoError(t, b.Models.ModelSave(t.Context(), &ports.ModelSaveParams{
		StreamID: stream, Perspective: name, Data: []byte(data),
		LastEventID: newID(t), LastVersion: version, ExpectedVersion: version - 1, Now: now,
	}))
}

// find runs ModelsFind with p, failing t on error.
func find(t *testing.T, b ports.Backend, p ports.ModelsFindParams) ports.ModelsFindResult {
	t.Helper()
	res, err := b.ModelQuery.ModelsFind(t.Context(), &p)
	require.NoError(t, err)
	return res
}

// findAll pages through every model p finds, from p.After on.
func findAll(t *testing.T, b ports.Backend, p ports.ModelsFindParams) []ports.StoredModel {
	t.Helper()
	var out []ports.StoredModel
	for range 1000 {
		res := find(t, b, p)
		if p.Limit > 0 {
			require.LessOrEqual(t, len(res.Models), p.Limit)
		}
		out = append(out, res.Models...)
		if res.Next == nil {
			return out
		}
		require.NotEmpty(t, res.Models, "a page with a next holds models")
		p.After = res.Next
	}
	t.Fatal("paging does not end")
	return nil
}

// ensureIndexes makes sure of indexes for name's models, failing t on error.
func ensureIndexes(t *testing.T, b ports.Backend, name string, indexes []ports.ModelIndex) {
	t.Helper()
	require.NoError(t, b.ModelQuery.ModelIndexesEnsure(t.Context(), &ports.ModelIndexesEnsureParams{Perspective: name, Indexes: indexes}))
}

// streamsOf returns the stream ids of models, in order.
func streamsOf(models []ports.StoredModel) []uuid.UUID {
	out := make([]uuid.UUID, len(models))
	for i, m := range models {
		out[i] = m.StreamID
	}
	return out
}
