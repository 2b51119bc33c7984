package ports

import (
	"context"
	"fmt"
	"regexp"
	"time"
	"unicode"

	"github.com/google/uuid"
)

// ModelQuery is the optional port of model queries: it finds the models of
// a perspective by the values of their fields, in a stable order, page by
// page, and keeps the indexes that make such queries cheap. The engine
// calls ModelIndexesEnsure when it starts, for the perspectives that
// declare indexes, and never ModelsFind: that is for the application's
// reads (core.Perspective.Find). Without it, a perspective's models can be
// loaded one by one only (ModelStore.ModelLoad).
//
// # Fields
//
// A field is named by a path: the keys that lead to it from the top of the
// model's JSON document, through objects only (a path never enters an
// array). A model has the field when every key of the path is there; a
// field that is present holds a value, JSON null included.
//
// A field compares as one of three kinds ([ModelFieldKind]) when the
// models are ordered by it: text (strings, by their UTF-8 bytes), number
// (JSON numbers, by value: 1, 1.0 and 1e0 are equal) and time (strings in
// RFC 3339 format, with seconds, an optional fraction of up to nine digits
// and a UTC offset of Z or ±hh:mm below 16 hours, as encoding/json writes a
// time.Time; by instant, to the microsecond). A value of another type, or
// a string that is no such time, has no value of the kind.
type ModelQuery interface {
	// ModelsFind returns the models of params.Perspective that match every
	// filter of params.Filters, in params.Order, after params.After, at
	// most params.Limit of them (ModelsFindLimitDefault when zero), with
	// Next set when more follow.
	//
	// Filters: an Equal filter keeps the models whose field at Path holds
	// a value equal to Value, compared as decoded JSON values: strings by
	// their bytes, numbers by value, objects by their keys and values
	// (in any order), arrays element by element; a model without the field
	// never matches, not even a null Value. A Contains filter keeps the
	// models whose document contains Value as PostgreSQL's jsonb @>
	// operator defines it: an object contains another when it has each of
	// its keys with a value that contains the other's; an array contains
	// another when each of the other's elements is contained in one of its
	// elements (order and repeats aside); a scalar contains an equal scalar
	// only; and, at the top of the document only, an array contains a
	// scalar it has as an element.
	//
	// Order: models are ordered by their key (stream id; update time, then
	// stream id; or the value of Order.Field of its kind, then stream id),
	// ascending unless Order.Desc. Ordered by a field, the models without a
	// value of the field's kind are left out. Stream ids compare by their
	// bytes.
	//
	// Paging: After is the Next of the previous page, with the same
	// perspective, filters and order. The page holds the models whose key
	// comes after it (a keyset, not an offset), so a listing returns
	// exactly once each model that is not saved while it runs, however many
	// others are. A model saved meanwhile is found at the place its new key
	// gives it: once more if that place is after the cursor, not again if
	// it is before.
	//
	// Each call reads one consistent snapshot and changes nothing. It
	// returns ErrInvalidArgument for params that ModelsFindParams.Validate
	// rejects.
	//
	// Its cost depends on the indexes: a query whose order, and whose
	// filters that lead an index, match an index declared with
	// ModelIndexesEnsure reads about as many models as it returns; any other
	// filter is checked model by model, which on a large perspective means
	// reading all of its models. Declaring an index never changes a result.
	ModelsFind(ctx context.Context, params *ModelsFindParams) (ModelsFindResult, error)

	// ModelIndexesEnsure makes sure that each of params.Indexes exists over
	// the models of params.Perspective. An index orders the models by its
	// fields, then by stream id, as a composite index in SQL does: it serves
	// a ModelsFind whose Equal filters fix its first fields (to values of
	// their kinds) and that is ordered by the next field, or by stream id
	// once every field is fixed. It builds the missing indexes without
	// blocking saves of models (which take a time that grows with the
	// perspective's models), rebuilds one whose earlier build was
	// interrupted, and returns once every one is usable. Idempotent, and
	// safe to call from several instances at once: an index is built once.
	// Indexes no longer declared are left in place. A backend that needs no
	// indexes (one in memory) checks the params only. Returns
	// ErrInvalidArgument for params that ModelIndexesEnsureParams.Validate
	// rejects.
	ModelIndexesEnsure(ctx context.Context, params *ModelIndexesEnsureParams) error
}

// Limits of ModelsFind.
const (
	// ModelsFindLimitDefault is the page size of a ModelsFind whose Limit
	// is zero.
	ModelsFindLimitDefault = 100
	// ModelsFindLimitMax is the largest Limit of a ModelsFind.
	ModelsFindLimitMax = 1000
	// ModelsFindFiltersMax is the most filters a ModelsFind takes.
	ModelsFindFiltersMax = 32
	// ModelFieldPathMax is the most keys of a field's path.
	ModelFieldPathMax = 16
	// ModelIndexFieldsMax is the most fields of one index.
	ModelIndexFieldsMax = 8
)

// ModelsFindParams are the inputs of ModelsFind.
type ModelsFindParams struct {
	// Perspective names the models to find. Required.
	Perspective string
	// Filters keep the models that match every one of them; none keeps
	// every model of the perspective. At most ModelsFindFiltersMax.
	Filters []ModelFilter
	// Order is the order of the models: by stream id, ascending, when
	// zero.
	Order ModelOrder
	// After, when set, continues a listing: only the models whose key
	// comes after it in Order are returned. Set it to the Next of the
	// previous page.
	After *ModelCursor
	// Limit bounds the models returned. Defaults to
	// ModelsFindLimitDefault; must be at most ModelsFindLimitMax.
	Limit int
}

// ModelFilterOp is how a ModelFilter compares.
type ModelFilterOp string

// Filter operators (see ModelQuery.ModelsFind).
const (
	// ModelFilterEqual keeps the models whose field at Path equals Value.
	ModelFilterEqual ModelFilterOp = "equal"
	// ModelFilterContains keeps the models whose document contains Value.
	ModelFilterContains ModelFilterOp = "contains"
)

// ModelFilter is one condition of a ModelsFind.
type ModelFilter struct {
	Op ModelFilterOp
	// Path names the field an Equal filter compares. Empty for Contains,
	// which applies to the whole document.
	Path []string
	// Value is a JSON document: the value of an Equal filter, the
	// contained document of a Contains filter.
	Value []byte
}

// ModelOrderBy is the key models are ordered by.
type ModelOrderBy string

// Keys of ModelOrder.By.
const (
	// ModelOrderStreamID orders models by their stream id, the zero
	// ModelOrder.
	ModelOrderStreamID ModelOrderBy = ""
	// ModelOrderUpdatedAt orders models by the time they were last saved,
	// then by stream id.
	ModelOrderUpdatedAt ModelOrderBy = "updated_at"
	// ModelOrderField orders models by the value of ModelOrder.Field, then
	// by stream id, and leaves out those without a value of its kind.
	ModelOrderField ModelOrderBy = "field"
)

// ModelOrder is the order of a ModelsFind.
type ModelOrder struct {
	By ModelOrderBy
	// Field is the field of ModelOrderField; zero otherwise.
	Field ModelField
	// Desc orders from the largest key down.
	Desc bool
}

// ModelFieldKind is how the values of a field compare (see ModelQuery).
type ModelFieldKind string

// Field kinds.
const (
	// ModelFieldText: JSON strings, by their UTF-8 bytes.
	ModelFieldText ModelFieldKind = "text"
	// ModelFieldNumber: JSON numbers, by value.
	ModelFieldNumber ModelFieldKind = "number"
	// ModelFieldTime: RFC 3339 strings, by instant.
	ModelFieldTime ModelFieldKind = "time"
)

// ModelField names a field of the models and the kind it compares as.
type ModelField struct {
	Path []string
	Kind ModelFieldKind
}

// ModelCursor is a place in a listing of models: the key of the last model
// of a page. Only the parts of the key of the listing's order are set.
type ModelCursor struct {
	// StreamID is the model's stream: its key, or the part that orders the
	// models of equal UpdatedAt or Key.
	StreamID uuid.UUID
	// UpdatedAt is when the model was saved, in an order by update time.
	UpdatedAt time.Time
	// Key is the model's value of the order's field, in an order by a
	// field: the string of a text field, the JSON number of a number field,
	// the RFC 3339 time of a time field.
	Key string
}

// ModelsFindResult is the output of ModelsFind.
type ModelsFindResult struct {
	// Models are the models found, in order.
	Models []StoredModel
	// Next, when more models follow, is the place of the last one: the
	// After of the next page. Nil on the last page.
	Next *ModelCursor
}

// ModelIndexesEnsureParams are the inputs of ModelIndexesEnsure.
type ModelIndexesEnsureParams struct {
	// Perspective is the perspective whose models the indexes cover.
	// Required.
	Perspective string
	// Indexes are the indexes to make sure of.
	Indexes []ModelIndex
}

// ModelIndex is an index over the models of a perspective: by its fields
// in order, then by update time when UpdatedAt is set, then by stream id.
type ModelIndex struct {
	// Fields are up to ModelIndexFieldsMax fields, each at most once; at
	// least one unless UpdatedAt is set.
	Fields []ModelField
	// UpdatedAt orders the index by the time the models were saved after
	// its fields: it serves a ModelsFind ordered by ModelOrderUpdatedAt
	// whose Equal filters fix every field (any such query when there is
	// none).
	UpdatedAt bool
}

// Validate reports the first field every ModelQuery rejects with
// ErrInvalidArgument: an empty Perspective, a Limit below zero or above
// ModelsFindLimitMax, more than ModelsFindFiltersMax filters, a filter
// with an unknown Op, an invalid path (see ValidateModelPath) on an Equal
// filter or a path on a Contains filter, a Value that is not a JSON
// document, an Order with an unknown By or Field kind, a Field set outside
// ModelOrderField or invalid in it, and an After that does not fit the
// order: a nil StreamID, UpdatedAt set exactly when ordered by update
// time, and Key set only when ordered by a field and then of the field's
// kind.
func (p *ModelsFindParams) Validate() error {
	if err := checkName("ModelsFindParams.Perspective", p.Perspective); err != nil {
		return err
	}
	if p.Limit < 0 || p.Limit > ModelsFindLimitMax {
		return invalidParam("ModelsFindParams.Limit", "must be from 0 to %d, got %d", ModelsFindLimitMax, p.Limit)
	}
	if len(p.Filters) > ModelsFindFiltersMax {
		return invalidParam("ModelsFindParams.Filters", "must hold at most %d filters, got %d", ModelsFindFiltersMax, len(p.Filters))
	}
	for i, f := range p.Filters {
		at := fmt.Sprintf("ModelsFindParams.Filters[%d]", i)
		switch f.Op {
		case ModelFilterEqual:
			if err := checkPath(at+".Path", f.Path); err != nil {
				return err
			}
		case ModelFilterContains:
			if len(f.Path) > 0 {
				return invalidParam(at+".Path", "must be empty for a Contains filter")
			}
		default:
			return invalidParam(at+".Op", "must be a ModelFilterOp, got %q", f.Op)
		}
		if err := checkJSON(at+".Value", f.Value); err != nil {
			return err
		}
	}
	return p.validateOrder()
}

func (p *ModelsFindParams) validateOrder() error {
	o := p.Order
	switch o.By {
	case ModelOrderStreamID, ModelOrderUpdatedAt:
		if len(o.Field.Path) > 0 || o.Field.Kind != "" {
			return invalidParam("ModelsFindParams.Order.Field", "must be zero unless ordered by ModelOrderField")
		}
	case ModelOrderField:
		if err := checkField("ModelsFindParams.Order.Field", o.Field); err != nil {
			return err
		}
	default:
		return invalidParam("ModelsFindParams.Order.By", "must be a ModelOrderBy, got %q", o.By)
	}
	a := p.After
	if a == nil {
		return nil
	}
	if err := checkID("ModelsFindParams.After.StreamID", a.StreamID); err != nil {
		return err
	}
	if a.UpdatedAt.IsZero() == (o.By == ModelOrderUpdatedAt) {
		return invalidParam("ModelsFindParams.After.UpdatedAt", "must be set exactly when ordered by ModelOrderUpdatedAt")
	}
	if o.By != ModelOrderField {
		if a.Key != "" {
			return invalidParam("ModelsFindParams.After.Key", "must be empty unless ordered by ModelOrderField")
		}
		return nil
	}
	if !validKey(o.Field.Kind, a.Key) {
		return invalidParam("ModelsFindParams.After.Key", "must be a value of kind %s, got %q", o.Field.Kind, a.Key)
	}
	return nil
}

// Validate reports the first field every ModelQuery rejects with
// ErrInvalidArgument: an empty Perspective, an index with neither fields
// nor UpdatedAt or with more than ModelIndexFieldsMax fields, a field with
// an invalid path (see ValidateModelPath) or an unknown kind, or a path
// twice in one index.
func (p *ModelIndexesEnsureParams) Validate() error {
	if err := checkName("ModelIndexesEnsureParams.Perspective", p.Perspective); err != nil {
		return err
	}
	for i, idx := range p.Indexes {
		at := fmt.Sprintf("ModelIndexesEnsureParams.Indexes[%d].Fields", i)
		if n := len(idx.Fields); n > ModelIndexFieldsMax || (n == 0 && !idx.UpdatedAt) {
			return invalidParam(at, "must hold from 1 to %d fields, or up to %d with UpdatedAt, got %d", ModelIndexFieldsMax, ModelIndexFieldsMax, n)
		}
		seen := map[string]bool{}
		for j, f := range idx.Fields {
			if err := checkField(fmt.Sprintf("%s[%d]", at, j), f); err != nil {
				return err
			}
			key := fmt.Sprintf("%q", f.Path)
			if seen[key] {
				return invalidParam(fmt.Sprintf("%s[%d].Path", at, j), "must not repeat a field of the index, got %q", f.Path)
			}
			seen[key] = true
		}
	}
	return nil
}

// ValidateModelPath returns an error wrapping ErrInvalidArgument unless
// path names a field as ModelQuery accepts it: from 1 to ModelFieldPathMax
// keys, each made of letters, digits, '_' and '-' only. The keys are
// limited so that a path reads the same in every index definition and
// query text an adapter writes.
func ValidateModelPath(path []string) error {
	return checkPath("path", path)
}

func checkPath(field string, path []string) error {
	if n := len(path); n == 0 || n > ModelFieldPathMax {
		return invalidParam(field, "must hold from 1 to %d keys, got %d", ModelFieldPathMax, n)
	}
	for i, key := range path {
		if key == "" {
			return invalidParam(fmt.Sprintf("%s[%d]", field, i), "must not be empty")
		}
		for _, r := range key {
			if !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' && r != '-' {
				return invalidParam(fmt.Sprintf("%s[%d]", field, i), "must hold letters, digits, '_' and '-' only, got %q", key)
			}
		}
	}
	return nil
}

func checkField(field string, f ModelField) error {
	if err := checkPath(field+".Path", f.Path); err != nil {
		return err
	}
	switch f.Kind {
	case ModelFieldText, ModelFieldNumber, ModelFieldTime:
		return nil
	}
	return invalidParam(field+".Kind", "must be a ModelFieldKind, got %q", f.Kind)
}

// jsonNumber is the grammar of a JSON number.
var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// validKey reports whether key is a value of kind, as a ModelCursor holds
// it.
func validKey(kind ModelFieldKind, key string) bool {
	switch kind {
	case ModelFieldNumber:
		return jsonNumber.MatchString(key)
	case ModelFieldTime:
		_, err := time.Parse(time.RFC3339Nano, key)
		return err == nil
	}
	return true
}
