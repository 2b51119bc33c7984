package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

// Backend names.
const (
	Memory   = "memory"
	Postgres = "postgres"
)

// kit is one run's backend: a handle per engine instance, the
// simulator's own handle (its reads and operator actions), and the table
// projection's table.
type kit interface {
	// handle returns a new handle for an instance and what closes it.
	handle() (ports.Backend, func(), error)
	// direct is the simulator's own handle, never faulty.
	direct() ports.Backend
	table() table
	// appendTx appends each batch in a transaction of its own, the
	// transactions opened in order and committed in reverse order (rolled
	// back where rollback says), and returns the stored events of those
	// committed. ok is false on a backend without transactions.
	appendTx(ctx context.Context, reg *core.Registry, batches []txBatch) ([][]ports.Event, bool, error)
	close()
}

// txBatch is the append of one transaction of kit.appendTx.
type txBatch struct {
	stream   uuid.UUID
	events   []any
	rollback bool
}

// memKit is one memory.Store shared by every instance, each seeing it
// through its own wrapper, with memTxStore as its TxModelStore.
type memKit struct {
	store *memory.Store
	tx    *memTxStore
}

func newMemKit(clock ports.Clock) *memKit {
	s := memory.New(memory.Options{Clock: clock})
	b := s.Backend()
	return &memKit{store: s, tx: newMemTxStore(b.Models, b.Cursors)}
}

func (k *memKit) handle() (ports.Backend, func(), error) {
	return k.direct(), func() {}, nil
}

func (k *memKit) direct() ports.Backend {
	b := k.store.Backend()
	b.ModelTx = k.tx
	return b
}

func (k *memKit) table() table { return k.tx }

func (k *memKit) appendTx(context.Context, *core.Registry, []txBatch) ([][]ports.Event, bool, error) {
	return nil, false, nil
}

func (k *memKit) close() { _ = k.store.Close() }

// pgKit is one migrated schema of the test database; every instance gets
// a Store on a pool of its own.
type pgKit struct {
	tb     testing.TB
	schema string
	logger *slog.Logger
	app    *pgxpool.Pool // the simulator's: its reads, actions and transactional appends
	store  *postgres.Store
	rows   *pgTable
}

func newPgKit(t testing.TB, logger *slog.Logger) (*pgKit, error) {
	schema := pgtest.Schema(t)
	app := pgtest.NewPool(t, 8)
	store, err := postgres.New(app, postgres.Options{Schema: schema, PollOnly: true, Logger: logger})
	if err != nil {
		return nil, err
	}
	name := pgx.Identifier{schema, "sim_rows"}.Sanitize()
	if _, err := app.Exec(t.Context(), `CREATE TABLE `+name+` (
		seq bigserial PRIMARY KEY, stream_id uuid NOT NULL, version bigint NOT NULL, k bigint NOT NULL, stamp bigint NOT NULL)`); err != nil {
		return nil, fmt.Errorf("creating the projection's table: %w", err)
	}
	return &pgKit{tb: t, schema: schema, logger: logger, app: app, store: store, rows: &pgTable{pool: app, name: name}}, nil
}

func (k *pgKit) handle() (ports.Backend, func(), error) {
	pool := pgtest.NewPoolWith(k.tb, pgtest.PoolOptions{MaxConns: 6})
	s, err := postgres.New(pool, postgres.Options{
		Schema: k.schema, ConnString: pgtest.ConnString(k.tb), Logger: k.logger,
		ListenerMinReconnect: 10 * time.Millisecond, ListenerMaxReconnect: 200 * time.Millisecond,
	})
	if err != nil {
		return ports.Backend{}, nil, err
	}
	return s.Backend(), func() { _ = s.Close(); pool.Close() }, nil
}

func (k *pgKit) direct() ports.Backend { return k.store.Backend() }

func (k *pgKit) table() table { return k.rows }

func (k *pgKit) appendTx(ctx context.Context, reg *core.Registry, batches []txBatch) ([][]ports.Event, bool, error) {
	txs := make([]pgx.Tx, 0, len(batches))
	results := make([]*ports.EventsAppendResult, len(batches))
	defer func() {
		for _, tx := range txs {
			_ = tx.Rollback(context.WithoutCancel(ctx)) // a no-op once committed
		}
	}()
	for i, b := range batches {
		tx, err := k.app.Begin(ctx)
		if err != nil {
			return nil, true, fmt.Errorf("beginning transaction: %w", err)
		}
		txs = append(txs, tx)
		if results[i], err = core.AppendTx(ctx, reg, k.store, tx, b.stream, 0, b.events...); err != nil {
			return nil, true, fmt.Errorf("appending in a transaction: %w", err)
		}
	}
	out := make([][]ports.Event, len(batches))
	var errs []error
	for i := len(batches) - 1; i >= 0; i-- {
		if batches[i].rollback {
			errs = append(errs, txs[i].Rollback(ctx))
			continue
		}
		if err := txs[i].Commit(ctx); err != nil {
			errs = append(errs, fmt.Errorf("committing transaction %d: %w", i, err))
			continue
		}
		out[i] = results[i].Events
	}
	return out, true, errors.Join(errs...)
}

func (k *pgKit) close() { _ = k.store.Close() }

// pgTable is the table projection's table in the run's schema.
type pgTable struct {
	pool *pgxpool.Pool
	name string
}

func (t *pgTable) insert(ctx context.Context, tx ports.Tx, r Row) error {
	_, err := postgres.TxOf(tx).Exec(ctx, `INSERT INTO `+t.name+` (stream_id, version, k, stamp) VALUES ($1, $2, $3, $4)`,
		r.Stream, r.Version, r.K, r.Stamp)
	if err != nil {
		return fmt.Errorf("writing row: %w", err)
	}
	return nil
}

func (t *pgTable) reset(ctx context.Context, tx ports.Tx, stream uuid.UUID) error {
	if _, err := postgres.TxOf(tx).Exec(ctx, `DELETE FROM `+t.name+` WHERE stream_id = $1`, stream); err != nil {
		return fmt.Errorf("resetting rows: %w", err)
	}
	return nil
}

// breakConn terminates the server process of tx's connection, as an
// operator or a failover does: the write fails as a lost connection does.
func (t *pgTable) breakConn(ctx context.Context, tx ports.Tx) error {
	_, err := postgres.TxOf(tx).Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
	if err == nil {
		return errors.New("writing row: sim: the connection survived its termination")
	}
	return fmt.Errorf("writing row: %w", err)
}

func (t *pgTable) rows(ctx context.Context) (map[uuid.UUID][]Row, error) {
	q, err := t.pool.Query(ctx, `SELECT seq, stream_id, version, k, stamp FROM `+t.name+` ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	rows, err := pgx.CollectRows(q, func(row pgx.CollectableRow) (Row, error) {
		var r Row
		err := row.Scan(&r.Seq, &r.Stream, &r.Version, &r.K, &r.Stamp)
		return r, err
	})
	if err != nil {
		return nil, err
	}
	out := map[uuid.UUID][]Row{}
	for _, r := range rows {
		out[r.Stream] = append(out[r.Stream], r)
	}
	return out, nil
}
