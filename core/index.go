package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/vantage-go/vantage/ports"
)

// IndexField is a field of an index a perspective declares with
// Perspective.Index: its name, as Eq takes it ("status", "customer.id"),
// and the kind its values compare as, or the models' update time. Make it
// with TextField, NumberField, TimeField or UpdatedAt.
type IndexField struct {
	field   string
	kind    ports.ModelFieldKind
	updated bool
}

// UpdatedAt is the time a model was last saved, the key of ByUpdatedAt:
// the last field of an index, after those that Eq fixes.
func UpdatedAt() IndexField { return IndexField{updated: true} }

// TextField is a field of JSON strings, ordered by their UTF-8 bytes ("B"
// before "a").
func TextField(field string) IndexField { return IndexField{field: field, kind: ports.ModelFieldText} }

// NumberField is a field of JSON numbers, ordered by value.
func NumberField(field string) IndexField {
	return IndexField{field: field, kind: ports.ModelFieldNumber}
}

// TimeField is a field of times as encoding/json writes a time.Time (RFC
// 3339 strings with a UTC offset), ordered by instant to the microsecond,
// whatever their offsets.
func TimeField(field string) IndexField { return IndexField{field: field, kind: ports.ModelFieldTime} }

// Index declares an index of the perspective's models by fields, in order,
// then by stream id: the fields it is queried by (Find), as a composite
// index in SQL. It serves a Query whose Eq filters fix the first fields
// (to strings for a TextField, numbers for a NumberField) and whose order
// is ByField of the next one (ByUpdatedAt when it is UpdatedAt), or
// ByStreamID once all are fixed; and it declares each field's kind, which
// ByField needs:
//
//	summary.Index(core.TextField("customer_id"))                       // a customer's orders
//	summary.Index(core.TextField("status"), core.TimeField("created_at")) // the newest shipped ones
//	summary.Index(core.UpdatedAt())                                     // the ones saved last
//
// Orders by stream id need no index. An order by update time without one
// reads all of the perspective's models; with one, every save of a model
// writes an index entry (a save otherwise rewrites the model in place,
// without touching any index, when it can: see the PostgreSQL adapter).
//
// A Worker hands the declarations to the backend when it starts (see
// ports.ModelQuery.ModelIndexesEnsure): on PostgreSQL each becomes a
// partial expression index of vantage_models, built in the background
// without blocking writes. Declaring an index never changes what a query
// returns, only what it costs; an index no longer declared is left in
// place (drop it with DROP INDEX CONCURRENTLY).
//
// Declare indexes before the perspective is registered, like its apply
// functions. Index returns an error for no fields or more than
// ports.ModelIndexFieldsMax besides UpdatedAt, UpdatedAt anywhere but
// last, an invalid field name, a field twice, a field declared before with
// another kind, or a registered perspective. Declaring the same index
// again changes nothing.
func (p *Perspective[M]) Index(fields ...IndexField) error {
	var idx ports.ModelIndex
	if n := len(fields); n > 0 && fields[n-1].updated {
		idx.UpdatedAt, fields = true, fields[:n-1]
	}
	if n := len(fields); (n == 0 && !idx.UpdatedAt) || n > ports.ModelIndexFieldsMax {
		return fmt.Errorf("perspective %q: an index has from 1 to %d fields besides UpdatedAt, got %d", p.name, ports.ModelIndexFieldsMax, n)
	}
	if len(fields) > 0 {
		idx.Fields = make([]ports.ModelField, len(fields))
	}
	for i, f := range fields {
		if f.updated {
			return fmt.Errorf("perspective %q: index field %d: UpdatedAt comes last in an index", p.name, i)
		}
		path, err := fieldPath(f.field)
		if err == nil && f.kind == "" {
			err = errors.New("make index fields with TextField, NumberField or TimeField")
		}
		if err != nil {
			return fmt.Errorf("perspective %q: index field %d: %w", p.name, i, err)
		}
		idx.Fields[i] = ports.ModelField{Path: path, Kind: f.kind}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byName != nil {
		return fmt.Errorf("perspective %q: indexes cannot be declared after the perspective was registered", p.name)
	}
	for i, f := range fields {
		if slices.ContainsFunc(fields[:i], func(g IndexField) bool { return g.field == f.field }) {
			return fmt.Errorf("perspective %q: index field %q is there twice", p.name, f.field)
		}
		if kind, ok := p.kindLocked(f.field); ok && kind != f.kind {
			return fmt.Errorf("perspective %q: index field %q is declared %s already, not %s", p.name, f.field, kind, f.kind)
		}
	}
	if slices.ContainsFunc(p.indexes, func(d ports.ModelIndex) bool { return sameIndex(d, idx) }) {
		return nil
	}
	p.indexes = append(p.indexes, idx)
	return nil
}

// Indexes returns the indexes the perspective declares, in the order of
// their declarations.
func (p *Perspective[M]) Indexes() []ports.ModelIndex {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ports.ModelIndex, len(p.indexes))
	for i, idx := range p.indexes {
		var fields []ports.ModelField
		if len(idx.Fields) > 0 {
			fields = make([]ports.ModelField, len(idx.Fields))
		}
		for j, f := range idx.Fields {
			fields[j] = ports.ModelField{Path: slices.Clone(f.Path), Kind: f.Kind}
		}
		out[i] = ports.ModelIndex{Fields: fields, UpdatedAt: idx.UpdatedAt}
	}
	return out
}

// EnsureIndexes makes sure that the indexes the perspective declares exist
// in the backend of models (a ports.Backend's ModelQuery), building the
// missing ones, and returns once they do. A Worker does it when it starts,
// for its registered perspectives, without waiting: call it from a reader
// process that runs no Worker, or to wait for the indexes (a build takes a
// time that grows with the perspective's models). It returns an error
// wrapping errors.ErrUnsupported when models is nil.
func (p *Perspective[M]) EnsureIndexes(ctx context.Context, models ports.ModelQuery) error {
	return ensureIndexes(ctx, models, p.name, p.Indexes())
}

func ensureIndexes(ctx context.Context, models ports.ModelQuery, perspective string, indexes []ports.ModelIndex) error {
	if len(indexes) == 0 {
		return nil
	}
	if models == nil {
		return fmt.Errorf("ensuring the indexes of perspective %q: the backend has no ModelQuery port: %w", perspective, errors.ErrUnsupported)
	}
	err := models.ModelIndexesEnsure(ctx, &ports.ModelIndexesEnsureParams{Perspective: perspective, Indexes: indexes})
	if err != nil {
		return fmt.Errorf("ensuring the indexes of perspective %q: %w", perspective, err)
	}
	return nil
}

// declaredField returns the field of a declared index named field.
func (p *Perspective[M]) declaredField(field string) (ports.ModelField, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	kind, ok := p.kindLocked(field)
	if !ok {
		return ports.ModelField{}, false
	}
	return ports.ModelField{Path: strings.Split(field, "."), Kind: kind}, true
}

// kindLocked returns the kind field is declared with, with p.mu held.
func (p *Perspective[M]) kindLocked(field string) (ports.ModelFieldKind, bool) {
	path := strings.Split(field, ".")
	for _, idx := range p.indexes {
		for _, f := range idx.Fields {
			if slices.Equal(f.Path, path) {
				return f.Kind, true
			}
		}
	}
	return "", false
}

func sameIndex(a, b ports.ModelIndex) bool {
	return a.UpdatedAt == b.UpdatedAt && slices.EqualFunc(a.Fields, b.Fields, func(x, y ports.ModelField) bool {
		return x.Kind == y.Kind && slices.Equal(x.Path, y.Path)
	})
}
