package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vantage-go/vantage/ports"
)

// ErrPollOnly is returned by NotifierListen on a Store made with
// Options.PollOnly, which has no listener. Compare with errors.Is.
var ErrPollOnly = errors.New("the Store has no listener (Options.PollOnly)")

// Defaults of Options.
const (
	ListenerMinReconnectDefault = 100 * time.Millisecond
	ListenerMaxReconnectDefault = 10 * time.Second
)

// Options configures a Store. The zero value is valid.
type Options struct {
	// ConnString is the connection string the notification listener dials
	// (lib/pq syntax: URL or key=value), on a connection of its own, apart
	// from the pool. Defaults to the pool's connection string without
	// pgx-only parameters (pool_*, statement_cache_capacity, ...) and with
	// sslmode=prefer when it names none (pgx's default; lib/pq would
	// otherwise require TLS). Set it when the pool's configuration was
	// built in code rather than parsed from a string, when the pool's
	// string lists several hosts, and when the pool goes through a
	// connection pooler in transaction mode, such as PgBouncer: LISTEN is
	// state of a server session, which such a pooler lends a client for
	// one transaction only, so the listener must reach the server directly
	// (or through a pooler in session mode); without such a route, set
	// PollOnly instead. Must parse with lib/pq and name a single host: the
	// one the pool commits to, since NOTIFY reaches only listeners on the
	// server that commits it. Must be empty when PollOnly is set.
	ConnString string
	// Gate holds every SQL call until the schema is migrated. Defaults to an
	// open gate: the host migrated the schema before using the Store.
	Gate *Gate
	// ListenerMinReconnect is the listener's first reconnect delay after a
	// lost connection; it doubles up to ListenerMaxReconnect. Defaults to
	// ListenerMinReconnectDefault. Must be positive.
	ListenerMinReconnect time.Duration
	// ListenerMaxReconnect caps the reconnect delay. Defaults to
	// ListenerMaxReconnectDefault. Must be at least ListenerMinReconnect.
	ListenerMaxReconnect time.Duration
	// Logger receives the listener's connection events while no
	// subscription brought a logger of its own: a worker hands its
	// logger to NotifierListen (ports.NotifierListenParams.Logger), so
	// that the listener's lines join the engine's. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// PollOnly makes a Store without a notification listener: Backend
	// leaves Notifier nil, so the engine polls (at core's PollingInterval
	// and Claims.Interval) and logs once, when it starts, that it polls
	// only, and NotifierListen returns ErrPollOnly. Set it when the pool
	// goes through a connection pooler in transaction mode and the server
	// cannot be reached directly for ConnString: a listener dialing the
	// pooler would LISTEN on a server connection lent to it for one
	// transaction, and miss the notifications without an error. Appends
	// still NOTIFY, which wakes the instances that listen. Defaults to
	// false.
	PollOnly bool
	// Schema holds the adapter's tables. Defaults to SchemaDefault. Must
	// satisfy ValidateSchema.
	Schema string
}

// Store is the PostgreSQL implementation of every Vantage port, the optional
// ones included. Create it with
// New; it is safe for concurrent use by many goroutines, and several Stores
// (engine instances, in several processes) may share one schema.
//
// The caller owns the pool and must close it only after Close returned.
type Store struct {
	pool     *pgxpool.Pool
	opts     Options
	channel  string   // NOTIFY channel of the schema
	rendered sync.Map // query text -> text with the schema filled in
	// subscribed holds the subscriptions AppendTx recorded or found
	// recorded, with the time until which it trusts them to be (see
	// recordSubscriptions).
	subscribed sync.Map // ports.Subscription -> time.Time

	notifier *notifier

	closed    atomic.Bool
	closeOnce sync.Once
}

var (
	_ ports.WorkClaimer     = (*Store)(nil)
	_ ports.EventFetcher    = (*Store)(nil)
	_ ports.CursorStore     = (*Store)(nil)
	_ ports.Notifier        = (*Store)(nil)
	_ ports.DeadLetterStore = (*Store)(nil)
	_ ports.EventStore      = (*Store)(nil)
	_ ports.ModelStore      = (*Store)(nil)
	_ ports.ModelBatchStore = (*Store)(nil)
	_ ports.TxModelStore    = (*Store)(nil)
)

// New returns a Store on pool. It does not touch the database: SQL calls wait
// on opts.Gate, and the notification listener starts on the first
// NotifierListen. It fails, naming the option to set, when an option is
// invalid or the listener's connection string (opts.ConnString, or the one
// derived from the pool, unless opts.PollOnly) is one lib/pq cannot dial,
// or lists several hosts.
func New(pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		return nil, errors.New("postgres.New: pool is nil")
	}
	o := Options{
		ConnString:           opts.ConnString,
		Gate:                 opts.Gate,
		ListenerMinReconnect: cmp.Or(opts.ListenerMinReconnect, ListenerMinReconnectDefault),
		ListenerMaxReconnect: cmp.Or(opts.ListenerMaxReconnect, ListenerMaxReconnectDefault),
		Logger:               cmp.Or(opts.Logger, slog.Default()),
		PollOnly:             opts.PollOnly,
		Schema:               cmp.Or(opts.Schema, SchemaDefault),
	}
	if err := ValidateSchema(o.Schema); err != nil {
		return nil, fmt.Errorf("Options.Schema: %w", err)
	}
	if o.ListenerMinReconnect < 0 {
		return nil, fmt.Errorf("Options.ListenerMinReconnect must be positive, got %s", o.ListenerMinReconnect)
	}
	if o.ListenerMaxReconnect < o.ListenerMinReconnect {
		return nil, fmt.Errorf("Options.ListenerMaxReconnect must be at least ListenerMinReconnect (%s), got %s", o.ListenerMinReconnect, o.ListenerMaxReconnect)
	}
	if o.Gate == nil {
		o.Gate = openGate()
	}
	switch {
	case o.PollOnly && o.ConnString != "":
		return nil, errors.New("Options.ConnString is the listener's and Options.PollOnly makes a Store without one: set one of them")
	case o.PollOnly: // no listener to dial
	case o.ConnString == "":
		cs, err := listenerConnString(pool.Config().ConnConfig.ConnString())
		if err == nil {
			err = checkListenerConnString(cs)
		}
		if err != nil {
			return nil, fmt.Errorf("deriving Options.ConnString from the pool's connection string: %w; set Options.ConnString", err)
		}
		o.ConnString = cs
	default:
		if err := checkListenerConnString(o.ConnString); err != nil {
			return nil, fmt.Errorf("Options.ConnString: %w", err)
		}
	}
	s := &Store{
		pool:    pool,
		opts:    o,
		channel: notifyChannel(o.Schema),
	}
	s.notifier = newNotifier(s)
	return s, nil
}

// Backend returns the ports the Store implements. Notifier is nil when
// Options.PollOnly is set: the engine then polls only, by design.
func (s *Store) Backend() ports.Backend {
	b := ports.Backend{
		Claimer:     s,
		Fetcher:     s,
		Cursors:     s,
		Notifier:    s,
		DeadLetters: s,
		Events:      s,
		Models:      s,
		ModelBatch:  s,
		ModelTx:     s,
		ModelQuery:  s,
		Lifecycle:   s,
		Rewind:      s,
		Snapshots:   s,
		Admin:       s,
		Stats:       s,
		Rebuilds:    s,
	}
	if s.opts.PollOnly {
		b.Notifier = nil
	}
	return b
}

// Schema returns the schema the Store works in.
func (s *Store) Schema() string { return s.opts.Schema }

// Channel returns the NOTIFY channel of the Store's schema: appends, requeues
// and NotifierPublish notify it, and NotifierListen listens on it. It is
// vantage_<schema>_work, or vantage_work_<hash of the schema> when that
// would exceed PostgreSQL's 63-byte identifier limit.
func (s *Store) Channel() string { return s.channel }

// Close stops the notification listener, closes every subscription channel
// and makes every later port call return ports.ErrClosed. It does not close
// the pool. Idempotent; later calls return nil.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		err = s.notifier.close()
	})
	return err
}

// notifyChannel is the schema's NOTIFY channel. Channel names are identifiers
// (at most 63 bytes), so a long schema name is replaced by its hash.
func notifyChannel(schema string) string {
	name := "vantage_" + schema + "_work"
	if len(name) <= 63 {
		return name
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(schema))
	return fmt.Sprintf("vantage_work_%016x", h.Sum64())
}

// ready fails once the Store is closed, then waits on the schema gate.
func (s *Store) ready(ctx context.Context) error {
	if s.closed.Load() {
		return ports.ErrClosed
	}
	if err := s.opts.Gate.Wait(ctx); err != nil {
		return fmt.Errorf("waiting for schema %q: %w", s.opts.Schema, err)
	}
	return nil
}

// batchSender sends batches: the pool, a connection, or the caller's
// transaction (AppendTx).
type batchSender interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}

// sendBatch sends b as one implicit transaction (one round trip; an error in
// any statement rolls back all of them) and hands the results to read, which
// must consume them in queue order.
func sendBatch(ctx context.Context, db batchSender, b *pgx.Batch, read func(pgx.BatchResults) error) (err error) {
	br := db.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	return read(br)
}

// execN reads the next n results of br as statements without rows.
func execN(br pgx.BatchResults, n int) error {
	for range n {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return nil
}

// sqlWorkSettings sets three planner settings for the rest of a batch's
// implicit transaction. JIT compilation goes off: the work statements run in
// milliseconds, but the planner's estimates for their per-pair probes
// (recursive CTEs, LATERAL joins) pass jit_above_cost once the work table
// holds a few thousand rows, and compiling a claim took one to two seconds,
// a hundred times its run time. random_page_cost goes to 1.1, the usual
// value for data in memory or on SSDs: the work tables are hot, and with the
// default of 4 the planner deleted a completion's few thousand rows by
// reading the whole work table and hashing it (30 sequential scans of
// 400,000 rows in a 200,000-event catch-up; 5 of 4 rows with it).
// plan_cache_mode goes to force_generic_plan: a prepared statement is
// otherwise planned again for every call while the plan for the call's
// values looks cheaper than the generic one, which it does for the small
// arrays of live traffic, and planning a fetch cost four times its run
// (0.67 against 0.15 ms). Each work statement is written to probe per
// stream or pair by index whatever the arrays hold, and the plan tests
// check it under both kinds of plan. It is
// set_config(..., true), the function form of SET LOCAL, which does not
// warn (in the server log, on every call) that an implicit transaction is
// no transaction block.
const sqlWorkSettings = `SELECT set_config('jit', 'off', true), set_config('random_page_cost', '1.1', true), set_config('plan_cache_mode', 'force_generic_plan', true)`

// sendWork is sendBatch on the Store's pool for the work statements: b runs
// after sqlWorkSettings, in the same implicit transaction, so the settings
// end with it. Not for batches in a caller's transaction (AppendTx), where
// they would outlive the call.
func (s *Store) sendWork(ctx context.Context, b *pgx.Batch, read func(pgx.BatchResults) error) error {
	wb := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, b.Len()+1)}
	wb.Queue(sqlWorkSettings)
	wb.QueuedQueries = append(wb.QueuedQueries, b.QueuedQueries...)
	return sendBatch(ctx, s.pool, wb, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		return read(br)
	})
}

// Parameter helpers. A zero time or UUID is stored as NULL, so the database
// clock (now()) applies and no all-zero id is ever written.

// nowArg is params.Now for SQL: NULL when zero (the query uses now()), else
// truncated to the microseconds PostgreSQL keeps.
func nowArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.Truncate(time.Microsecond)
}

// UUID parameters are pgtype.UUID values, which pgx encodes in every query
// exec mode. A uuid.UUID goes through its driver.Valuer, to text and parsed
// back, with the encoding of each array element planned anew, which
// dominated the engine's CPU in a catch-up, where completions carry every
// work id (see BENCHMARKS.md). A bare [16]byte pgx encodes directly only
// when the server told it the parameter's type: under QueryExecModeExec and
// QueryExecModeSimpleProtocol, the modes for a pool behind PgBouncer in
// transaction pooling mode, parameters are sent as text of no declared
// type, pgx finds their encoding by their Go type, and it knows none for
// [16]byte. A pgtype.UUID is the uuid type in every mode, encoded from its
// bytes. Every uuid parameter of the package's statements is cast
// ($1::uuid, $2::uuid[]) or compared with a uuid column, so that the server
// reads the untyped text as a uuid.

// uuidsArg converts ids for a uuid[] parameter. nil stays nil (a NULL
// array); uuid.Nil elements stay all-zero uuids, as uuid.UUID encodes them.
func uuidsArg(ids []uuid.UUID) []pgtype.UUID {
	if ids == nil {
		return nil
	}
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = uuidElem(id)
	}
	return out
}

// uuidElem is id as an element of a uuid[] parameter, never NULL.
func uuidElem(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

// uuidDest is a scan target for a uuid column that pgx fills directly; into
// a *uuid.UUID it goes through sql.Scanner, by way of text.
func uuidDest(u *uuid.UUID) *[16]byte { return (*[16]byte)(u) }

// uuidArg is id for a uuid parameter, NULL when nil.
func uuidArg(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: id != uuid.Nil} }

// Scan helpers: NULL becomes the zero value, times come back in UTC.

func fromUUID(u pgtype.UUID) uuid.UUID {
	if !u.Valid {
		return uuid.Nil
	}
	return u.Bytes
}

func fromTime(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

func fromText(t pgtype.Text) string {
	if !t.Valid {
		return ""
	}
	return t.String
}

func fromInt8(i pgtype.Int8) int64 {
	if !i.Valid {
		return 0
	}
	return i.Int64
}

// sql returns text (a query constant of this package) with the schema marker
// replaced by the Store's quoted schema. Rendered texts are cached, so pgx
// sees the same string every time and its statement cache works.
func (s *Store) sql(text string) string {
	if r, ok := s.rendered.Load(text); ok {
		return r.(string)
	}
	r := renderSchema(text, s.opts.Schema)
	s.rendered.Store(text, r)
	return r
}

// queryRows runs query (a query constant of this package) on the pool and
// collects its rows with scan. Errors are translated; the caller wraps them
// with what it was doing.
func queryRows[T any](ctx context.Context, s *Store, query string, scan pgx.RowToFunc[T], args ...any) ([]T, error) {
	rows, err := s.pool.Query(ctx, s.sql(query), args...)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, translate(err)
	}
	return out, nil
}

// queryWorkRows is queryRows for a work statement: query runs after
// sqlWorkSettings, in one batch (see sendWork).
func queryWorkRows[T any](ctx context.Context, s *Store, query string, scan pgx.RowToFunc[T], args ...any) ([]T, error) {
	b := &pgx.Batch{}
	b.Queue(s.sql(query), args...)
	var out []T
	err := s.sendWork(ctx, b, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, scan)
		return err
	})
	if err != nil {
		return nil, translate(err)
	}
	return out, nil
}

// textArg is s for SQL, NULL when empty.
func textArg(s string) any {
	if s == "" {
		return nil
	}
	return s
}
