package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/vantage-go/vantage/ports"
)

// tx is the ports.Tx this adapter hands to the apply of a table
// projection: the transaction that moves the projection's cursor.
type tx struct{ pgx.Tx }

// Unwrap implements ports.Tx: it returns the pgx.Tx.
func (t tx) Unwrap() any { return t.Tx }

// TxOf returns the pgx.Tx inside a ports.Tx this adapter opened, for a
// table projection's apply to write the application's tables with. The
// caller must not commit or roll it back, nor keep it past the apply. TxOf
// panics when t did not come from this adapter, a programming error (the
// engine then charges the panic to the event being applied).
func TxOf(t ports.Tx) pgx.Tx {
	if pt, ok := t.(tx); ok {
		return pt.Tx
	}
	panic(fmt.Sprintf("postgres.TxOf: %T is not a transaction of the PostgreSQL adapter", t))
}

// ModelSaveTx implements ports.TxModelStore: sqlModelSave, then
// params.Apply, in one transaction. The cursor moves first, so a
// concurrent save of the same pair (an instance that lost its lease, say)
// waits on the cursor's row lock and then fails the version check before
// its Apply writes anything.
func (s *Store) ModelSaveTx(ctx context.Context, params *ports.ModelSaveTxParams) error {
	save := &params.Save
	if params.Apply == nil {
		return fmt.Errorf("saving model in a transaction: %w: ModelSaveTxParams.Apply is nil", ports.ErrInvalidArgument)
	}
	if err := save.Validate(); err != nil {
		return fmt.Errorf("saving model: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	var conflict, applyErr error
	err := withTx(ctx, s.pool, func(t pgx.Tx) error {
		var (
			saved  int
			stored pgtype.Int8
		)
		if err := t.QueryRow(ctx, s.sql(sqlModelSave), modelSaveArgs(save)...).Scan(&saved, &stored); err != nil {
			return fmt.Errorf("saving model %q of stream %s: %w", save.Perspective, save.StreamID, translate(err))
		}
		if conflict = modelSaveResult(save, saved, stored); conflict != nil {
			return conflict
		}
		if applyErr = params.Apply(ctx, tx{t}); applyErr != nil {
			return applyErr
		}
		return nil
	})
	switch {
	case err == nil:
		return nil
	case conflict != nil || applyErr != nil && errors.Is(err, applyErr):
		return err // the caller's own error, or a conflict, as it came
	}
	return fmt.Errorf("saving model %q of stream %s in a transaction: %w", save.Perspective, save.StreamID, translate(err))
}
