package sim

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// table is where the table projection writes its rows: a table of the
// run's schema on PostgreSQL, memTxStore's rows on the memory backend.
type table interface {
	// insert writes r in tx.
	insert(ctx context.Context, tx ports.Tx, r Row) error
	// reset deletes the rows of stream in tx.
	reset(ctx context.Context, tx ports.Tx, stream uuid.UUID) error
	// breakConn loses tx's connection, the way a dropped connection does
	// during a write, and returns the error the write meets.
	breakConn(ctx context.Context, tx ports.Tx) error
	// rows returns the committed rows by stream, in the order written.
	rows(ctx context.Context) (map[uuid.UUID][]Row, error)
}

// simTx is the ports.Tx the fault wrapper hands to a table projection's
// writes: the backend's transaction, and the versions written in it, so
// that the simulator knows when they committed.
type simTx struct {
	inner ports.Tx
	mu    sync.Mutex
	vers  []int64
}

// Unwrap implements ports.Tx.
func (t *simTx) Unwrap() any { return t.inner.Unwrap() }

func (t *simTx) wrote(v int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.vers = append(t.vers, v)
}

func (t *simTx) written() []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.vers)
}

// innerTx returns the backend's transaction inside tx.
func innerTx(tx ports.Tx) ports.Tx {
	if st, ok := tx.(*simTx); ok {
		return st.inner
	}
	return tx
}

// memTxStore is a ports.TxModelStore over the memory backend, which has
// none: it checks the cursor as ModelSave does, runs Apply against a
// buffered transaction (memTx), then, under one lock, saves the model
// (which checks the cursor again, atomically) and, only if the save went
// through, commits the buffered writes to its rows. Saves of other pairs
// never wait for an Apply, as with PostgreSQL, where a write holds only
// its own transaction. An Apply error is returned as it came and stores
// nothing, as the PostgreSQL adapter does; a write that lost its
// connection fails the whole ModelSaveTxMany call, as a broken PostgreSQL
// transaction does.
type memTxStore struct {
	models  ports.ModelStore
	cursors ports.CursorStore

	// mu guards the fields below, and serializes the commits.
	mu   sync.Mutex
	seq  int64
	data map[uuid.UUID][]Row
}

var (
	_ ports.TxModelStore = (*memTxStore)(nil)
	_ table              = (*memTxStore)(nil)
)

func newMemTxStore(models ports.ModelStore, cursors ports.CursorStore) *memTxStore {
	return &memTxStore{models: models, cursors: cursors, data: map[uuid.UUID][]Row{}}
}

// memTx is an open transaction of memTxStore: the writes it buffers.
type memTx struct {
	ops    []txOp
	broken error
}

type txOp struct {
	reset  bool
	stream uuid.UUID
	row    Row
}

// Unwrap implements ports.Tx.
func (t *memTx) Unwrap() any { return t }

func memTxOf(tx ports.Tx) (*memTx, error) {
	t, ok := tx.Unwrap().(*memTx)
	if !ok {
		return nil, fmt.Errorf("sim: %T is not a transaction of the memory table", tx.Unwrap())
	}
	return t, nil
}

func (s *memTxStore) insert(_ context.Context, tx ports.Tx, r Row) error {
	t, err := memTxOf(tx)
	if err != nil {
		return err
	}
	if t.broken != nil {
		return t.broken
	}
	t.ops = append(t.ops, txOp{stream: r.Stream, row: r})
	return nil
}

func (s *memTxStore) reset(_ context.Context, tx ports.Tx, stream uuid.UUID) error {
	t, err := memTxOf(tx)
	if err != nil {
		return err
	}
	if t.broken != nil {
		return t.broken
	}
	t.ops = append(t.ops, txOp{reset: true, stream: stream})
	return nil
}

func (s *memTxStore) breakConn(_ context.Context, tx ports.Tx) error {
	t, err := memTxOf(tx)
	if err != nil {
		return err
	}
	t.broken = fmt.Errorf("writing row: sim: connection lost: %w", ports.ErrTransient)
	return t.broken
}

func (s *memTxStore) rows(context.Context) (map[uuid.UUID][]Row, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[uuid.UUID][]Row, len(s.data))
	for k, v := range s.data {
		out[k] = slices.Clone(v)
	}
	return out, nil
}

// ModelSaveTx implements ports.TxModelStore.
func (s *memTxStore) ModelSaveTx(ctx context.Context, params *ports.ModelSaveTxParams) error {
	if err := checkSaveTx(params); err != nil {
		return err
	}
	t, err := s.prepare(ctx, params)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commit(ctx, params, t)
}

// ModelSaveTxMany implements ports.TxModelStore.
func (s *memTxStore) ModelSaveTxMany(ctx context.Context, p *ports.ModelSaveTxManyParams) ([]error, error) {
	errs := make([]error, len(p.Saves))
	txs := make([]*memTx, len(p.Saves))
	for i, params := range p.Saves {
		if errs[i] = checkSaveTx(params); errs[i] != nil {
			continue
		}
		txs[i], errs[i] = s.prepare(ctx, params)
		if txs[i] != nil && txs[i].broken != nil {
			// The connection is gone: the whole transaction is lost.
			return nil, fmt.Errorf("saving %d models in a transaction: %w", len(p.Saves), errs[i])
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, params := range p.Saves {
		if errs[i] == nil {
			errs[i] = s.commit(ctx, params, txs[i])
		}
	}
	return errs, nil
}

// checkSaveTx returns the ports.ErrInvalidArgument of a save that stores
// nothing.
func checkSaveTx(params *ports.ModelSaveTxParams) error {
	if params.Apply == nil {
		return fmt.Errorf("saving model in a transaction: %w: ModelSaveTxParams.Apply is nil", ports.ErrInvalidArgument)
	}
	if err := params.Save.Validate(); err != nil {
		return fmt.Errorf("saving model: %w", err)
	}
	return nil
}

// prepare checks the cursor as ModelSave does and runs Apply into a new
// transaction. A transaction whose connection broke is
// returned with the error.
func (s *memTxStore) prepare(ctx context.Context, params *ports.ModelSaveTxParams) (*memTx, error) {
	save := &params.Save
	cs, err := s.cursors.CursorsGet(ctx, &ports.CursorsGetParams{StreamIDs: []uuid.UUID{save.StreamID}, Perspective: save.Perspective})
	if err != nil {
		return nil, fmt.Errorf("saving model: %w", err)
	}
	var stored int64
	for _, c := range cs {
		if c.Perspective == save.Perspective {
			stored = c.LastVersion
		}
	}
	if stored != save.ExpectedVersion {
		return nil, fmt.Errorf("saving model %q of stream %s: expected version %d, cursor is at %d: %w",
			save.Perspective, save.StreamID, save.ExpectedVersion, stored, ports.ErrVersionConflict)
	}
	t := &memTx{}
	if err := params.Apply(ctx, t); err != nil {
		if t.broken != nil {
			return t, err
		}
		return nil, err
	}
	return t, nil
}

// commit saves the model (which checks the cursor again, atomically) and
// then applies t's writes, with s.mu held.
func (s *memTxStore) commit(ctx context.Context, params *ports.ModelSaveTxParams, t *memTx) error {
	if err := s.models.ModelSave(ctx, &params.Save); err != nil {
		return err
	}
	for _, op := range t.ops {
		if op.reset {
			delete(s.data, op.stream)
			continue
		}
		s.seq++
		r := op.row
		r.Seq = s.seq
		s.data[op.stream] = append(s.data[op.stream], r)
	}
	return nil
}

// sortRows orders rows by the sequence they were written in.
func sortRows(rows []Row) {
	slices.SortFunc(rows, func(a, b Row) int { return cmp.Compare(a.Seq, b.Seq) })
}
