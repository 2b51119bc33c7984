package postgres

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/vantage-go/vantage/ports"
)

var _ ports.ModelQuery = (*Store)(nil)

// Model queries and the indexes perspectives declare.
//
// Every perspective's models share vantage_models; their documents are the
// data column. A declared index is a partial expression index, one per
// (perspective, fields, update time or not):
//
//	CREATE INDEX vantage_model_<name>_<hash> ON vantage_models
//	    (<field expression>, ..., [updated_at,] stream_id) WHERE perspective = '<perspective>'
//
// The table has no index of its own on a column a save changes, so that a
// save of a model is a heap-only update while no perspective declares an
// index (see migration 015).
//
// The planner uses an index on an expression only for a query that holds
// the very same expression, and a partial index only for a query whose
// condition implies the index's: so a query is written as text, with the
// perspective and the field paths as literals, each field by the
// expression its index would hold (fieldExpr), and only the values to
// compare with as parameters. A parameter in place of the perspective would
// match the index in a custom plan and not in the generic plan that a
// statement prepared by pgx ends up with. The texts depend on the query's
// shape, not its values, so pgx's statement cache holds one per shape.
//
// A field's expression yields its value of the field's kind or NULL: the
// string (compared in the "C" collation, by bytes) for text, the number as
// numeric for number, vantage_json_time of it for time (migration 008).
// Equality on a string or a number is equality of that expression, which
// for these values is the equality of JSON values and lets an index of
// the field serve it; equality on another value (null, a boolean, an
// object, an array) compares jsonb values, without an index.

// modelIndexPrefix starts the name of every index ModelIndexesEnsure
// builds.
const modelIndexPrefix = "vantage_model_"

// modelIndexVersion names the form of the expressions of the indexes: a
// change of fieldExpr must change it, so that new indexes get new names
// instead of being taken for the old ones.
const modelIndexVersion = "1"

// quoteLiteral returns s as an SQL string literal, read alike whatever
// standard_conforming_strings says.
func quoteLiteral(s string) string {
	if strings.Contains(s, `\`) {
		return `E'` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `'`, `''`) + `'`
	}
	return `'` + strings.ReplaceAll(s, `'`, `''`) + `'`
}

// jsonPath is the jsonb value at path in the model's document; with text,
// the last step reads it as text (->>).
func jsonPath(path []string, text bool) string {
	var b strings.Builder
	b.WriteString("data")
	for i, key := range path {
		if text && i == len(path)-1 {
			b.WriteString(" ->> ")
		} else {
			b.WriteString(" -> ")
		}
		b.WriteString(quoteLiteral(key))
	}
	return b.String()
}

// fieldExpr is the expression of field: its value of its kind, or NULL.
// Indexes and queries must use this text and no other.
func (s *Store) fieldExpr(f ports.ModelField) string {
	value := jsonPath(f.Path, false)
	switch f.Kind {
	case ports.ModelFieldNumber:
		return fmt.Sprintf(`(CASE WHEN jsonb_typeof(%s) = 'number' THEN (%s)::numeric END)`, value, jsonPath(f.Path, true))
	case ports.ModelFieldTime:
		return fmt.Sprintf(`%s.vantage_json_time(%s)`, quoteSchema(s.opts.Schema), value)
	default:
		return fmt.Sprintf(`(CASE WHEN jsonb_typeof(%s) = 'string' THEN (%s) COLLATE "C" END)`, value, jsonPath(f.Path, true))
	}
}

// findQuery builds the text and arguments of a ModelsFind.
type findQuery struct {
	s    *Store
	args []any
	cond []string
}

// arg adds a parameter and returns its placeholder.
func (q *findQuery) arg(v any) string {
	q.args = append(q.args, v)
	return "$" + strconv.Itoa(len(q.args))
}

// filter adds the condition of f.
func (q *findQuery) filter(f ports.ModelFilter) error {
	dec := json.NewDecoder(bytes.NewReader(f.Value))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	if hasNUL(v) {
		// PostgreSQL stores no NUL character in a document, so no model
		// holds the value, and none contains it.
		q.cond = append(q.cond, "FALSE")
		return nil
	}
	if f.Op == ports.ModelFilterContains {
		q.cond = append(q.cond, "data @> "+q.arg(string(f.Value))+"::jsonb")
		return nil
	}
	switch v := v.(type) {
	case string:
		q.cond = append(q.cond, q.s.fieldExpr(ports.ModelField{Path: f.Path, Kind: ports.ModelFieldText})+" = "+q.arg(v)+"::text")
	case json.Number:
		q.cond = append(q.cond, q.s.fieldExpr(ports.ModelField{Path: f.Path, Kind: ports.ModelFieldNumber})+" = "+q.arg(v.String())+"::text::numeric")
	default:
		q.cond = append(q.cond, jsonPath(f.Path, false)+" = "+q.arg(string(f.Value))+"::jsonb")
	}
	return nil
}

// hasNUL reports whether a decoded JSON value holds a NUL character in a
// string or a key.
func hasNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, 0)
	case []any:
		for _, e := range v {
			if hasNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, 0) || hasNUL(e) {
				return true
			}
		}
	}
	return false
}

// ModelsFind implements ports.ModelQuery in one statement (see the top of
// this file for its form). Filters on fields that no declared index covers
// are checked row by row, over the perspective's models or the rows an
// index narrowed them to.
func (s *Store) ModelsFind(ctx context.Context, params *ports.ModelsFindParams) (ports.ModelsFindResult, error) {
	if err := params.Validate(); err != nil {
		return ports.ModelsFindResult{}, fmt.Errorf("finding models: %w", err)
	}
	text, args, err := s.findStatement(params)
	if err != nil {
		return ports.ModelsFindResult{}, fmt.Errorf("finding models: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return ports.ModelsFindResult{}, err
	}
	rows, err := s.pool.Query(ctx, text, args...)
	if err != nil {
		return ports.ModelsFindResult{}, fmt.Errorf("finding models of perspective %q: %w", params.Perspective, translate(err))
	}
	type found struct {
		m   ports.StoredModel
		key any
	}
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (found, error) {
		var (
			f         = found{m: ports.StoredModel{Perspective: params.Perspective}}
			lastEvent pgtype.UUID
			updated   pgtype.Timestamptz
		)
		err := row.Scan(uuidDest(&f.m.StreamID), &f.m.Data, &lastEvent, &f.m.LastVersion, &updated, &f.key)
		f.m.LastEventID, f.m.UpdatedAt = fromUUID(lastEvent), fromTime(updated)
		return f, err
	})
	if err != nil {
		return ports.ModelsFindResult{}, fmt.Errorf("finding models of perspective %q: %w", params.Perspective, translate(err))
	}
	limit := cmp.Or(params.Limit, ports.ModelsFindLimitDefault)
	res := ports.ModelsFindResult{Models: make([]ports.StoredModel, 0, min(limit, len(all)))}
	for _, f := range all[:min(limit, len(all))] {
		res.Models = append(res.Models, f.m)
	}
	if len(all) > limit {
		last := all[limit-1]
		next := ports.ModelCursor{StreamID: last.m.StreamID}
		switch k := last.key.(type) {
		case string:
			next.Key = k
		case time.Time:
			next.Key = k.UTC().Format(time.RFC3339Nano)
		}
		if params.Order.By == ports.ModelOrderUpdatedAt {
			next.UpdatedAt = last.m.UpdatedAt
		}
		res.Next = &next
	}
	return res, nil
}

// findStatement returns the statement of a ModelsFind with valid params
// and its arguments. It selects the model's columns and its key in the
// order (NULL for stream id and update time, which are columns), one model
// past the limit to tell whether more follow.
func (s *Store) findStatement(params *ports.ModelsFindParams) (string, []any, error) {
	q := &findQuery{s: s, cond: []string{"perspective = " + quoteLiteral(params.Perspective)}}
	for i, f := range params.Filters {
		if err := q.filter(f); err != nil {
			return "", nil, fmt.Errorf("ModelsFindParams.Filters[%d].Value: %w: %w", i, err, ports.ErrInvalidArgument)
		}
	}
	order := params.Order
	dir, cmpOp := "", ">"
	if order.Desc {
		dir, cmpOp = " DESC", "<"
	}
	key, orderBy := "NULL", ""
	after := params.After
	switch order.By {
	case ports.ModelOrderUpdatedAt:
		orderBy = "updated_at" + dir + ", stream_id" + dir
		if after != nil {
			q.cond = append(q.cond, fmt.Sprintf("(updated_at, stream_id) %s (%s::timestamptz, %s::uuid)",
				cmpOp, q.arg(after.UpdatedAt.Truncate(time.Microsecond)), q.arg(uuidArg(after.StreamID))))
		}
	case ports.ModelOrderField:
		expr := s.fieldExpr(order.Field)
		key = expr
		if order.Field.Kind == ports.ModelFieldNumber {
			key = expr + "::text"
		}
		orderBy = expr + dir + ", stream_id" + dir
		q.cond = append(q.cond, expr+" IS NOT NULL")
		if after != nil {
			var k any = after.Key
			cast := "::text"
			switch order.Field.Kind {
			case ports.ModelFieldNumber:
				cast = "::text::numeric"
			case ports.ModelFieldTime:
				at, err := time.Parse(time.RFC3339Nano, after.Key)
				if err != nil {
					return "", nil, fmt.Errorf("ModelsFindParams.After.Key: %w: %w", err, ports.ErrInvalidArgument)
				}
				k, cast = at, "::timestamptz"
			}
			q.cond = append(q.cond, fmt.Sprintf("(%s, stream_id) %s (%s%s, %s::uuid)", expr, cmpOp, q.arg(k), cast, q.arg(uuidArg(after.StreamID))))
		}
	default:
		orderBy = "stream_id" + dir
		if after != nil {
			q.cond = append(q.cond, fmt.Sprintf("stream_id %s %s::uuid", cmpOp, q.arg(uuidArg(after.StreamID))))
		}
	}
	limit := cmp.Or(params.Limit, ports.ModelsFindLimitDefault)
	text := "SELECT stream_id, data, last_event_id, last_version, updated_at, " + key + `
FROM ` + quoteSchema(s.opts.Schema) + `.vantage_models
WHERE ` + strings.Join(q.cond, "\n  AND ") + `
ORDER BY ` + orderBy + `
LIMIT ` + q.arg(limit+1)
	return text, q.args, nil
}

// modelIndexName is the name of index idx over perspective's models: the
// prefix, what fits of a readable form of the perspective and the paths,
// and a hash of the whole definition, so that names are deterministic,
// distinct and at most 63 bytes (PostgreSQL's limit).
func modelIndexName(perspective string, idx ports.ModelIndex) string {
	h := fnv.New64a()
	parts := []string{modelIndexVersion, perspective}
	readable := []string{perspective}
	for _, f := range idx.Fields {
		parts = append(parts, string(f.Kind), strings.Join(f.Path, "\x1f"))
		readable = append(readable, strings.Join(f.Path, "_"))
	}
	if idx.UpdatedAt {
		// No path holds a NUL byte: this part is no field's.
		parts = append(parts, "\x00updated_at")
		readable = append(readable, "updated_at")
	}
	_, _ = h.Write([]byte(strings.Join(parts, "\x00")))
	suffix := fmt.Sprintf("_%016x", h.Sum64())
	slug := []byte(strings.ToLower(strings.Join(readable, "_")))
	for i, c := range slug {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			slug[i] = '_'
		}
	}
	if room := 63 - len(modelIndexPrefix) - len(suffix); len(slug) > room {
		slug = slug[:room]
	}
	return modelIndexPrefix + string(slug) + suffix
}

// modelIndexDDL is the statement that builds index idx over perspective's
// models, named name.
func (s *Store) modelIndexDDL(name, perspective string, idx ports.ModelIndex) string {
	exprs := make([]string, 0, len(idx.Fields)+2)
	for _, f := range idx.Fields {
		exprs = append(exprs, s.fieldExpr(f))
	}
	if idx.UpdatedAt {
		exprs = append(exprs, "updated_at")
	}
	exprs = append(exprs, "stream_id")
	return fmt.Sprintf(`CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s.vantage_models (%s) WHERE perspective = %s`,
		pgx.Identifier{name}.Sanitize(), quoteSchema(s.opts.Schema), strings.Join(exprs, ", "), quoteLiteral(perspective))
}

// ModelIndexDefinition returns the name of the index ModelIndexesEnsure
// builds for idx over perspective's models, and the statement that builds
// it (for review, or to build it by hand ahead of a deploy).
func (s *Store) ModelIndexDefinition(perspective string, idx ports.ModelIndex) (name, ddl string) {
	name = modelIndexName(perspective, idx)
	return name, s.modelIndexDDL(name, perspective, idx)
}

// Waits between the attempts of ModelIndexesEnsure while another build
// holds vantage_models.
const (
	indexWaitMin = 50 * time.Millisecond
	indexWaitMax = 2 * time.Second
)

// ModelIndexesEnsure implements ports.ModelQuery with CREATE INDEX
// CONCURRENTLY, which lets models be saved while the index is built. It
// cannot run in a transaction, so each index is built by one statement on
// whatever pool connection, and instances coordinate through the table's
// lock instead of a lock of their own (a session lock would stay behind
// on a server connection of a transaction pooler such as PgBouncer).
//
// A concurrent build holds vantage_models in SHARE UPDATE EXCLUSIVE mode,
// and waits, before it ends, for every transaction whose snapshot is older
// than its last phase. Two builds on one table would deadlock: the second
// waits for the first's lock with a snapshot taken, and the first waits
// for that snapshot. So before each step it tries the lock without
// waiting, in a transaction that takes no snapshot (LOCK TABLE ... NOWAIT
// needs none), and while the lock is held, it waits a little and tries
// again. An index that exists but is not valid when nobody holds the lock
// was left by a build that failed (a cancelled call, a lost connection):
// it is dropped, concurrently too, and built again. A step that still
// collides with another instance's (a deadlock, a lock it could not take,
// a name created meanwhile) is tried again the same way.
//
// The build waits for the transactions open when it starts, and needs the
// role to own vantage_models, like the migrations.
func (s *Store) ModelIndexesEnsure(ctx context.Context, params *ports.ModelIndexesEnsureParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("ensuring model indexes: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	for _, idx := range params.Indexes {
		name, ddl := s.ModelIndexDefinition(params.Perspective, idx)
		if err := s.ensureIndex(ctx, name, ddl); err != nil {
			return fmt.Errorf("ensuring model index %s of perspective %q: %w", name, params.Perspective, translate(err))
		}
	}
	return nil
}

// indexState is what the catalog says of an index.
type indexState int

const (
	indexMissing indexState = iota
	indexInvalid
	indexValid
)

const sqlIndexState = `SELECT CASE WHEN NOT i.indisvalid THEN 1 ELSE 2 END
FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2`

func (s *Store) ensureIndex(ctx context.Context, name, ddl string) error {
	wait := indexWaitMin
	for {
		state, err := s.indexState(ctx, name)
		if err != nil || state == indexValid {
			return err
		}
		free, err := s.modelsUnlocked(ctx)
		if err != nil {
			return err
		}
		if free {
			// Nobody builds now: what the catalog says is final, unless a
			// build ended since the look above.
			if state, err = s.indexState(ctx, name); err != nil || state == indexValid {
				return err
			}
			if state == indexInvalid {
				_, err = s.pool.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+pgx.Identifier{s.opts.Schema, name}.Sanitize())
			} else {
				_, err = s.pool.Exec(ctx, ddl)
			}
			switch {
			case err == nil:
				wait = indexWaitMin
				continue // see what it left
			case !isIndexCollision(err):
				return err
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, indexWaitMax)
	}
}

func (s *Store) indexState(ctx context.Context, name string) (indexState, error) {
	var state indexState
	err := s.pool.QueryRow(ctx, sqlIndexState, s.opts.Schema, name).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return indexMissing, nil
	}
	return state, err
}

// modelsUnlocked reports whether vantage_models could be locked in SHARE
// UPDATE EXCLUSIVE mode just now: no index build (nor vacuum) holds it.
func (s *Store) modelsUnlocked(ctx context.Context) (bool, error) {
	err := withTx(ctx, s.txBeginner(ctx, ownTxIdleTimeout), func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `LOCK TABLE `+quoteSchema(s.opts.Schema)+`.vantage_models IN SHARE UPDATE EXCLUSIVE MODE NOWAIT`)
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgLockNotAvailable {
		return false, nil
	}
	return err == nil, err
}

// isIndexCollision reports whether a build or drop failed because another
// instance's ran at the same time: a deadlock between the two, a lock
// not available, the name taken meanwhile, or both updating the table's
// catalog row at once (an internal error, "tuple concurrently updated").
func isIndexCollision(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case pgDeadlockDetected, pgLockNotAvailable, pgUniqueViolation, pgDuplicateTable:
		return true
	case pgInternalError:
		return pgErr.Message == "tuple concurrently updated"
	}
	return false
}
