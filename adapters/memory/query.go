package memory

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

var _ ports.ModelQuery = (*Store)(nil)

// ModelsFind implements ports.ModelQuery. It takes the perspective's models
// under the lock (stored models are never changed in place, only replaced,
// so the pointers are a consistent snapshot), then decodes, filters and
// sorts them without it: a call costs O(n log n) in the perspective's
// models n, whatever the filters, since the store keeps no index of
// fields.
func (s *Store) ModelsFind(ctx context.Context, params *ports.ModelsFindParams) (ports.ModelsFindResult, error) {
	if err := params.Validate(); err != nil {
		return ports.ModelsFindResult{}, fmt.Errorf("finding models: %w", err)
	}
	filters, err := decodeFilters(params.Filters)
	if err != nil {
		return ports.ModelsFindResult{}, fmt.Errorf("finding models: %w", err)
	}
	order := params.Order
	var after *modelKey
	if params.After != nil {
		k, ok := cursorKey(order, params.After)
		if !ok {
			return ports.ModelsFindResult{}, fmt.Errorf("finding models: ModelsFindParams.After.Key %q: %w", params.After.Key, ports.ErrInvalidArgument)
		}
		after = &k
	}
	if err := s.lock(ctx); err != nil {
		return ports.ModelsFindResult{}, err
	}
	var stored []*ports.StoredModel
	for _, st := range s.streams {
		if m := st.models[params.Perspective]; m != nil {
			stored = append(stored, m)
		}
	}
	s.mu.Unlock()

	type found struct {
		m   *ports.StoredModel
		key modelKey
	}
	var matches []found
	for _, m := range stored {
		doc, err := decodeJSON(m.Data)
		if err != nil {
			return ports.ModelsFindResult{}, fmt.Errorf("finding models: decoding the model of stream %s: %w", m.StreamID, err)
		}
		if !matchesAll(doc, filters) {
			continue
		}
		k, ok := keyOf(order, m, doc)
		if !ok || after != nil && compareKeys(order, k, *after) <= 0 {
			continue
		}
		matches = append(matches, found{m: m, key: k})
	}
	slices.SortFunc(matches, func(a, b found) int { return compareKeys(order, a.key, b.key) })

	limit := cmp.Or(params.Limit, ports.ModelsFindLimitDefault)
	res := ports.ModelsFindResult{Models: make([]ports.StoredModel, 0, min(limit, len(matches)))}
	for _, f := range matches[:min(limit, len(matches))] {
		res.Models = append(res.Models, copyModel(f.m))
	}
	if len(matches) > limit {
		next := matches[limit-1].key.cursor(order)
		res.Next = &next
	}
	return res, nil
}

// ModelIndexesEnsure implements ports.ModelQuery: the store needs no
// index, so it checks params only.
func (s *Store) ModelIndexesEnsure(ctx context.Context, params *ports.ModelIndexesEnsureParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("ensuring model indexes: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	s.mu.Unlock()
	return nil
}

// filter is a ports.ModelFilter with its value decoded.
type filter struct {
	op    ports.ModelFilterOp
	path  []string
	value any
}

func decodeFilters(in []ports.ModelFilter) ([]filter, error) {
	out := make([]filter, len(in))
	for i, f := range in {
		v, err := decodeJSON(f.Value)
		if err != nil {
			return nil, fmt.Errorf("ModelsFindParams.Filters[%d].Value: %w: %w", i, err, ports.ErrInvalidArgument)
		}
		out[i] = filter{op: f.Op, path: f.Path, value: v}
	}
	return out, nil
}

// decodeJSON decodes one JSON document, keeping numbers as json.Number so
// that they compare by value, exactly.
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

func matchesAll(doc any, filters []filter) bool {
	for _, f := range filters {
		switch f.op {
		case ports.ModelFilterEqual:
			v, ok := lookup(doc, f.path)
			if !ok || !jsonEqual(v, f.value) {
				return false
			}
		case ports.ModelFilterContains:
			if !contains(doc, f.value, true) {
				return false
			}
		}
	}
	return true
}

// lookup returns the value at path in doc, through objects only.
func lookup(doc any, path []string) (any, bool) {
	for _, key := range path {
		obj, ok := doc.(map[string]any)
		if !ok {
			return nil, false
		}
		if doc, ok = obj[key]; !ok {
			return nil, false
		}
	}
	return doc, true
}

// jsonEqual reports whether two decoded JSON values are equal as jsonb's =
// has it: numbers by value, objects by keys and values, arrays element by
// element.
func jsonEqual(a, b any) bool {
	switch av := a.(type) {
	case json.Number:
		bv, ok := b.(json.Number)
		return ok && numberEqual(av, bv)
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for k, v := range av {
			w, ok := bv[k]
			if !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		bv, ok := b.([]any)
		return ok && slices.EqualFunc(av, bv, jsonEqual)
	default: // string, bool, nil
		return a == b
	}
}

// contains reports whether a contains b as jsonb's @> has it; top is set
// for the whole documents, where an array contains a scalar it has as an
// element.
func contains(a, b any, top bool) bool {
	switch bv := b.(type) {
	case map[string]any:
		av, ok := a.(map[string]any)
		if !ok {
			return false
		}
		for k, w := range bv {
			v, ok := av[k]
			if !ok || !containsValue(v, w) {
				return false
			}
		}
		return true
	case []any:
		av, ok := a.([]any)
		if !ok {
			return false
		}
		for _, w := range bv {
			if !slices.ContainsFunc(av, func(v any) bool { return containsValue(v, w) }) {
				return false
			}
		}
		return true
	default:
		if av, ok := a.([]any); ok && top {
			return slices.ContainsFunc(av, func(v any) bool { return isScalar(v) && jsonEqual(v, b) })
		}
		return isScalar(a) && jsonEqual(a, b)
	}
}

// containsValue is contains for the values of objects and the elements of
// arrays: containers of the same type contain by contains, scalars by
// equality.
func containsValue(v, w any) bool {
	if isScalar(w) {
		return isScalar(v) && jsonEqual(v, w)
	}
	return contains(v, w, false)
}

func isScalar(v any) bool {
	switch v.(type) {
	case map[string]any, []any:
		return false
	}
	return true
}

func numberEqual(a, b json.Number) bool {
	x, okx := new(big.Rat).SetString(string(a))
	y, oky := new(big.Rat).SetString(string(b))
	return okx && oky && x.Cmp(y) == 0
}

// modelKey is the place of a model in an order: its stream id, and its
// update time or its value of the order's field.
type modelKey struct {
	stream  uuid.UUID
	updated time.Time
	text    string   // a text field's value; a number's JSON text
	number  *big.Rat // a number field's value
	at      time.Time
}

// keyOf returns the key of m in order, or false when m has no value of
// the order's field.
func keyOf(order ports.ModelOrder, m *ports.StoredModel, doc any) (modelKey, bool) {
	k := modelKey{stream: m.StreamID, updated: m.UpdatedAt}
	if order.By != ports.ModelOrderField {
		return k, true
	}
	v, ok := lookup(doc, order.Field.Path)
	if !ok {
		return k, false
	}
	switch order.Field.Kind {
	case ports.ModelFieldNumber:
		n, ok := v.(json.Number)
		if !ok {
			return k, false
		}
		k.text = string(n)
		k.number, ok = new(big.Rat).SetString(string(n))
		return k, ok
	case ports.ModelFieldTime:
		s, ok := v.(string)
		if !ok {
			return k, false
		}
		k.at, ok = parseTime(s)
		return k, ok
	default:
		k.text, ok = v.(string)
		return k, ok
	}
}

// cursorKey returns the key a cursor names in order.
func cursorKey(order ports.ModelOrder, c *ports.ModelCursor) (modelKey, bool) {
	k := modelKey{stream: c.StreamID, updated: c.UpdatedAt}
	if order.By != ports.ModelOrderField {
		return k, true
	}
	var ok bool
	switch order.Field.Kind {
	case ports.ModelFieldNumber:
		k.text = c.Key
		k.number, ok = new(big.Rat).SetString(c.Key)
	case ports.ModelFieldTime:
		var err error
		k.at, err = time.Parse(time.RFC3339Nano, c.Key)
		ok = err == nil
	default:
		k.text, ok = c.Key, true
	}
	return k, ok
}

// cursor returns k as a cursor of order.
func (k modelKey) cursor(order ports.ModelOrder) ports.ModelCursor {
	c := ports.ModelCursor{StreamID: k.stream}
	switch {
	case order.By == ports.ModelOrderUpdatedAt:
		c.UpdatedAt = k.updated
	case order.By != ports.ModelOrderField:
	case order.Field.Kind == ports.ModelFieldTime:
		c.Key = k.at.UTC().Format(time.RFC3339Nano)
	default:
		c.Key = k.text
	}
	return c
}

// compareKeys orders two keys in order, its direction included.
func compareKeys(order ports.ModelOrder, a, b modelKey) int {
	c := 0
	switch order.By {
	case ports.ModelOrderUpdatedAt:
		c = a.updated.Compare(b.updated)
	case ports.ModelOrderField:
		switch order.Field.Kind {
		case ports.ModelFieldNumber:
			c = a.number.Cmp(b.number)
		case ports.ModelFieldTime:
			c = a.at.Compare(b.at)
		default:
			c = cmp.Compare(a.text, b.text)
		}
	}
	c = cmp.Or(c, bytes.Compare(a.stream[:], b.stream[:]))
	if order.Desc {
		return -c
	}
	return c
}

// timeFormat is the form of a time value (see ports.ModelQuery): RFC 3339
// with seconds, at most nine fraction digits, and an offset below 16 hours,
// upper case, the values PostgreSQL reads as timestamptz whatever its
// settings. The PostgreSQL adapter checks the same pattern (migration 008).
var timeFormat = regexp.MustCompile(`^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]([.][0-9]{1,9})?(Z|[+-](0[0-9]|1[0-5]):[0-5][0-9])$`)

// parseTime returns the instant of a time value, rounded to the
// microsecond (half to even) as PostgreSQL keeps it, or false when s is
// none: not of timeFormat, a date that does not exist, or year 0.
func parseTime(s string) (time.Time, bool) {
	if !timeFormat.MatchString(s) {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() < 1 {
		return time.Time{}, false
	}
	ns := t.Nanosecond()
	t = t.Add(-time.Duration(ns % 1000))
	if rem, us := ns%1000, ns/1000; rem > 500 || rem == 500 && us%2 == 1 {
		t = t.Add(time.Microsecond)
	}
	return t.UTC(), true
}
