package core

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// Limits of Query.Limit.
const (
	// QueryLimitDefault is the page size of a Query whose Limit is zero.
	QueryLimitDefault = ports.ModelsFindLimitDefault
	// QueryLimitMax is the largest Query.Limit.
	QueryLimitMax = ports.ModelsFindLimitMax
)

// Query selects models of a perspective for Perspective.Find: those that
// match every filter of Where, in the order of OrderBy, one page at a
// time. The zero Query lists every model by stream id, QueryLimitDefault
// at a time.
//
//	page, err := summary.Find(ctx, backend.ModelQuery, core.Query{
//		Where:   []core.Filter{core.Eq("customer_id", customerID), core.Eq("status", "open")},
//		OrderBy: core.ByField("created_at").Desc(),
//		Limit:   20,
//	})
type Query struct {
	// Where keeps the models that match every filter (Eq, Contains); none
	// keeps them all.
	Where []Filter
	// OrderBy orders the models, ties broken by stream id. Defaults to
	// ByStreamID.
	OrderBy Order
	// Limit bounds the models of a page. Defaults to QueryLimitDefault;
	// must be from 0 to QueryLimitMax.
	Limit int
	// After continues a listing: the Page.Next of the previous page, of a
	// Query with the same Where and OrderBy on the same perspective (Limit
	// may change). Empty for the first page.
	After string
}

// Filter is a condition of a Query, made by Eq or Contains.
type Filter struct {
	op    ports.ModelFilterOp
	field string
	value any
}

// Eq keeps the models whose field equals value. field names the field by
// its JSON keys from the top of the model, joined by dots ("status",
// "customer.id"); each key holds letters, digits, '_' and '-' only. value
// is encoded as JSON (encoding/json), and compared with the field as
// decoded JSON values: strings by their bytes, numbers by value (1 equals
// 1.0, not "1"), objects and arrays by their contents. A model without the
// field matches no Eq, not even Eq(field, nil), which matches a field that
// holds null. A time.Time compares as the string encoding/json makes of it,
// so only the same instant written with the same offset equals it.
//
// On PostgreSQL, an Eq on a string or a number uses the index of the
// field that the perspective declares with Index, if any; without one it
// checks each model of the perspective (see Perspective.Find).
func Eq(field string, value any) Filter {
	return Filter{op: ports.ModelFilterEqual, field: field, value: value}
}

// Contains keeps the models whose JSON document contains value, encoded as
// JSON, as PostgreSQL's jsonb @> operator defines it: an object contains
// the keys of value's objects with values that contain theirs, an array
// the elements of value's arrays in any order, a scalar an equal scalar
// (numbers by value). Contains(map[string]any{"tags": []string{"vip"}})
// keeps the models tagged "vip" among others. It uses no declared index.
func Contains(value any) Filter {
	return Filter{op: ports.ModelFilterContains, value: value}
}

// Order is the order of a Query, made by ByStreamID, ByUpdatedAt or
// ByField, ascending unless Desc. The zero Order is ByStreamID().
type Order struct {
	by    ports.ModelOrderBy
	field string
	desc  bool
}

// ByStreamID orders models by their stream id (by its bytes; UUIDv7 ids
// sort by creation).
func ByStreamID() Order { return Order{} }

// ByUpdatedAt orders models by the time they were last saved, then by
// stream id. Declare an index ending in UpdatedAt for it (see
// Perspective.Index): without one, each query reads all of the
// perspective's models.
func ByUpdatedAt() Order { return Order{by: ports.ModelOrderUpdatedAt} }

// ByField orders models by their value of field, a field the perspective
// declared with Index (its kind tells how values compare: TextField,
// NumberField, TimeField), then by stream id. The models without a value
// of the field's kind (no field, null, another JSON type, a string that is
// no time for a TimeField) are left out of such a listing.
func ByField(field string) Order { return Order{by: ports.ModelOrderField, field: field} }

// Desc returns the order reversed: from the largest key down, ties by
// stream id from the largest down.
func (o Order) Desc() Order {
	o.desc = true
	return o
}

// Page is one page of the models a Query finds.
type Page[M any] struct {
	// Models are the models of the page, in the query's order.
	Models []Model[M]
	// Next continues the listing after the page's last model: pass it as
	// Query.After. Empty when no model follows.
	Next string
}

// Find returns a page of the models of the perspective that q selects,
// from models (a ports.Backend's ModelQuery), decoded into M the way the
// engine stored them. Pass the page's Next as q.After for the next page:
// pages never repeat nor skip a model that is not saved in between, even
// while others are; a model saved between two pages is found at the place
// its new values give it, so it may come again, or not at all, in an
// order it moved in (an order by update time, or by a field it changed).
//
// It returns an error wrapping ports.ErrInvalidArgument for a bad query:
// a Limit out of range, an invalid field name, a value that does not
// encode as JSON, an order by a field the perspective did not declare, an
// After that is no cursor or one of another query; one wrapping
// errors.ErrUnsupported when models is nil (a backend without the
// ModelQuery port). The perspective need not be registered, so a reader
// process that runs no Worker can call it.
//
// Its cost on PostgreSQL depends on the indexes the perspective declares
// with Index: a query whose order, and whose Eq filters on leading fields,
// match an index reads about as many models as it returns; any other
// filter is checked on each model the index (or the perspective's range
// of the table) yields, so a filter on an undeclared field of a large
// perspective reads all of its models.
func (p *Perspective[M]) Find(ctx context.Context, models ports.ModelQuery, q Query) (Page[M], error) {
	params, fp, err := p.findParams(q)
	if err != nil {
		return Page[M]{}, fmt.Errorf("finding models of perspective %q: %w", p.name, err)
	}
	if models == nil {
		return Page[M]{}, fmt.Errorf("finding models of perspective %q: the backend has no ModelQuery port: %w", p.name, errors.ErrUnsupported)
	}
	res, err := models.ModelsFind(ctx, params)
	if err != nil {
		return Page[M]{}, fmt.Errorf("finding models of perspective %q: %w", p.name, err)
	}
	page := Page[M]{Models: make([]Model[M], 0, len(res.Models))}
	for _, stored := range res.Models {
		m, err := p.model(stored)
		if err != nil {
			return Page[M]{}, fmt.Errorf("finding models of perspective %q: %w", p.name, err)
		}
		page.Models = append(page.Models, m)
	}
	if res.Next != nil {
		page.Next = encodeCursor(fp, res.Next)
	}
	return page, nil
}

// findParams translates q for the port, and returns the fingerprint of
// its selection, which its cursors carry.
func (p *Perspective[M]) findParams(q Query) (*ports.ModelsFindParams, string, error) {
	if q.Limit < 0 || q.Limit > QueryLimitMax {
		return nil, "", invalidQuery("Query.Limit", "must be from 0 to %d, got %d", QueryLimitMax, q.Limit)
	}
	params := &ports.ModelsFindParams{
		Perspective: p.name,
		Filters:     make([]ports.ModelFilter, len(q.Where)),
		Order:       ports.ModelOrder{By: q.OrderBy.by, Desc: q.OrderBy.desc},
		Limit:       cmp.Or(q.Limit, QueryLimitDefault),
	}
	for i, f := range q.Where {
		at := fmt.Sprintf("Query.Where[%d]", i)
		if f.op == "" {
			return nil, "", invalidQuery(at, "must be made by Eq or Contains")
		}
		filter := ports.ModelFilter{Op: f.op}
		if f.op == ports.ModelFilterEqual {
			path, err := fieldPath(f.field)
			if err != nil {
				return nil, "", invalidQuery(at, "%v", err)
			}
			filter.Path = path
		}
		value, err := json.Marshal(f.value)
		if err != nil {
			return nil, "", invalidQuery(at, "value does not encode as JSON: %v", err)
		}
		filter.Value = value
		params.Filters[i] = filter
	}
	if q.OrderBy.by == ports.ModelOrderField {
		field, ok := p.declaredField(q.OrderBy.field)
		if !ok {
			return nil, "", invalidQuery("Query.OrderBy", "orders by field %q, which the perspective does not declare: declare it with Perspective.Index", q.OrderBy.field)
		}
		params.Order.Field = field
	}
	fp := fingerprint(params)
	if q.After != "" {
		after, err := decodeCursor(fp, q.After)
		if err != nil {
			return nil, "", invalidQuery("Query.After", "%v", err)
		}
		params.After = after
	}
	return params, fp, nil
}

// model decodes a stored model.
func (p *Perspective[M]) model(stored ports.StoredModel) (Model[M], error) {
	v, err := p.decodeModel(stored.Data)
	if err != nil {
		return Model[M]{}, fmt.Errorf("model of stream %s: %w", stored.StreamID, err)
	}
	m, _ := v.(M) // a nil interface M decodes to nil, which asserts to nothing
	return Model[M]{
		StreamID:    stored.StreamID,
		Value:       m,
		LastEventID: stored.LastEventID,
		LastVersion: stored.LastVersion,
		UpdatedAt:   stored.UpdatedAt,
	}, nil
}

// invalidQuery returns an error wrapping ports.ErrInvalidArgument that
// names the field of the Query at fault.
func invalidQuery(field, format string, args ...any) error {
	return fmt.Errorf("core: %s %s: %w", field, fmt.Sprintf(format, args...), ports.ErrInvalidArgument)
}

// fieldPath splits a dotted field name into its keys and checks them.
func fieldPath(field string) ([]string, error) {
	path := strings.Split(field, ".")
	if err := ports.ValidateModelPath(path); err != nil {
		return nil, fmt.Errorf("field %q: keys joined by dots, each of letters, digits, '_' and '-'", field)
	}
	return path, nil
}

// cursorVersion is the version of the encoding of cursors: a change of it
// makes older cursors malformed rather than misread.
const cursorVersion = 1

// cursor is the content of a Page.Next, encoded as JSON, then base64url.
type cursor struct {
	Version     int       `json:"v"`
	Fingerprint string    `json:"q"`
	StreamID    uuid.UUID `json:"s"`
	UpdatedAt   time.Time `json:"u,omitzero"`
	Key         string    `json:"k,omitempty"`
}

// fingerprint identifies the selection and order of params (not its
// limit or place), so that a cursor is used with the query it came from.
func fingerprint(params *ports.ModelsFindParams) string {
	sel, _ := json.Marshal(struct {
		Perspective string
		Filters     []ports.ModelFilter
		Order       ports.ModelOrder
	}{params.Perspective, params.Filters, params.Order})
	sum := sha256.Sum256(sel)
	return hex.EncodeToString(sum[:8])
}

func encodeCursor(fp string, c *ports.ModelCursor) string {
	data, _ := json.Marshal(cursor{ // plain values: never fails
		Version: cursorVersion, Fingerprint: fp, StreamID: c.StreamID, UpdatedAt: c.UpdatedAt, Key: c.Key,
	})
	return base64.RawURLEncoding.EncodeToString(data)
}

func decodeCursor(fp, s string) (*ports.ModelCursor, error) {
	data, err := base64.RawURLEncoding.DecodeString(s)
	var c cursor
	if err == nil {
		err = json.Unmarshal(data, &c)
	}
	if err != nil || c.Version != cursorVersion || c.StreamID == uuid.Nil {
		return nil, errors.New("is no cursor of Page.Next")
	}
	if c.Fingerprint != fp {
		return nil, errors.New("is the cursor of another query (its perspective, filters or order differ)")
	}
	return &ports.ModelCursor{StreamID: c.StreamID, UpdatedAt: c.UpdatedAt, Key: c.Key}, nil
}

// Model is a perspective's stored model of one stream, decoded: what
// Perspective.Load and Perspective.Find return.
type Model[M any] struct {
	// StreamID is the stream the model folds.
	StreamID uuid.UUID
	// Value is the model, decoded as the engine encoded it.
	Value M
	// LastEventID and LastVersion are the last event reflected in Value:
	// Value is the fold of the stream's events up to LastVersion (the
	// dead-lettered ones excepted).
	LastEventID uuid.UUID
	LastVersion int64
	// UpdatedAt is when the model was last saved, on the backend's clock.
	UpdatedAt time.Time
}

// Load reads the perspective's model of a stream from models (a
// ports.Backend's Models) and decodes it into M the way the engine stored
// it. It returns an error wrapping ports.ErrNotFound when the stream has no
// model yet: no event of it was applied by this perspective. The
// perspective need not be registered, so a reader process that runs no
// Worker can call it.
//
// The model may lag the stream's latest events; Worker.WaitForStream waits
// until it reflects a given version.
func (p *Perspective[M]) Load(ctx context.Context, models ports.ModelStore, streamID uuid.UUID) (Model[M], error) {
	stored, err := models.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: streamID, Perspective: p.name})
	if err != nil {
		return Model[M]{}, fmt.Errorf("loading model of perspective %q for stream %s: %w", p.name, streamID, err)
	}
	m, err := p.model(stored)
	if err != nil {
		return Model[M]{}, fmt.Errorf("loading %w", err)
	}
	return m, nil
}
