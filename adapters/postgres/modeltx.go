package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

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
// waits on the cursor's row lock and then fails the version and epoch
// check before its Apply writes anything. Apply's error is classified by
// applyFailure, with the rollback's when the rollback failed too. The
// transaction's idle time is bounded by params.IdleTimeout and ctx's
// deadline (see idleBound); a transaction the server ended for idling
// fails the call with ports.ErrTransient.
func (s *Store) ModelSaveTx(ctx context.Context, params *ports.ModelSaveTxParams) error {
	save := &params.Save
	if err := checkSaveTx(params); err != nil {
		return err
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	var (
		stage    saveTxStage
		entryErr error
	)
	err := withTx(ctx, s.txBeginner(ctx, params.IdleTimeout), func(t pgx.Tx) error {
		stage, entryErr = s.saveTxIn(ctx, t, params)
		return entryErr
	})
	switch {
	case err == nil:
		return nil
	case entryErr != nil && errors.Is(err, entryErr) && stage == saveTxApply:
		return applyFailure(err)
	case entryErr != nil && errors.Is(err, entryErr):
		return err // a conflict, or a failed call translated already
	}
	return fmt.Errorf("saving model %q of stream %s in a transaction: %w", save.Perspective, save.StreamID, translate(err))
}

// checkSaveTx returns the ports.ErrInvalidArgument of a save that stores
// nothing: a nil Apply or a Save that ModelSave refuses.
func checkSaveTx(params *ports.ModelSaveTxParams) error {
	if params.Apply == nil {
		return fmt.Errorf("saving model in a transaction: %w: ModelSaveTxParams.Apply is nil", ports.ErrInvalidArgument)
	}
	if err := params.Save.Validate(); err != nil {
		return fmt.Errorf("saving model: %w", err)
	}
	return nil
}

// saveTxStage is the step of saveTxIn whose error it returns.
type saveTxStage int

const (
	// saveTxCall: the database call failed, which the transaction cannot
	// survive; the error is translated.
	saveTxCall saveTxStage = iota + 1
	// saveTxCheck: the save failed its check (a conflict); Apply did not
	// run.
	saveTxCheck
	// saveTxApply: Apply failed; its error is classified by applyFailure.
	saveTxApply
)

// saveTxIn runs sqlModelSave, then params.Apply, in t; first it sends
// the statements of prelude, in the same round trip. It returns the
// entry's error and the step that failed.
func (s *Store) saveTxIn(ctx context.Context, t pgx.Tx, params *ports.ModelSaveTxParams, prelude ...string) (saveTxStage, error) {
	save := &params.Save
	var r modelSaveRow
	batch := &pgx.Batch{}
	for _, sql := range prelude {
		batch.Queue(sql)
	}
	batch.Queue(s.sql(sqlModelSave), modelSaveArgs(save)...).QueryRow(func(row pgx.Row) error { return row.Scan(r.dest()...) })
	if err := t.SendBatch(ctx, batch).Close(); err != nil {
		return saveTxCall, fmt.Errorf("saving model %q of stream %s: %w", save.Perspective, save.StreamID, translate(err))
	}
	if err := r.result(save); err != nil {
		return saveTxCheck, err
	}
	if err := params.Apply(ctx, tx{t}); err != nil {
		return saveTxApply, applyFailure(err)
	}
	return 0, nil
}

// ModelSaveTxMany implements ports.TxModelStore: one transaction, a
// savepoint per valid entry, sent ordered by pair so concurrent calls lock
// cursors in the same order, as ModelSaveMany does. An entry that fails
// its check or whose Apply fails is rolled back to its savepoint; a failed
// database call fails the whole call, and so does an Apply that left the
// transaction unusable (applyFailure classifies its error with the
// rollback's). An entry's savepoint, the release of the one before it and
// its save go in one round trip. The transaction's idle time is bounded as
// ModelSaveTx's, by the largest IdleTimeout of the entries (none when one
// is zero).
func (s *Store) ModelSaveTxMany(ctx context.Context, p *ports.ModelSaveTxManyParams) ([]error, error) {
	params := p.Saves
	errs := make([]error, len(params))
	order := make([]int, 0, len(params))
	for i, p := range params {
		if errs[i] = checkSaveTx(p); errs[i] == nil {
			order = append(order, i)
		}
	}
	if len(order) == 0 {
		return errs, nil
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return comparePair(pairKey{params[a].Save.StreamID, params[a].Save.Perspective}, pairKey{params[b].Save.StreamID, params[b].Save.Perspective})
	})
	const savepoint, release, rollback = "SAVEPOINT vantage_save", "RELEASE SAVEPOINT vantage_save", "ROLLBACK TO SAVEPOINT vantage_save"
	var idle time.Duration
	for _, i := range order {
		if params[i].IdleTimeout <= 0 {
			idle = 0
			break
		}
		idle = max(idle, params[i].IdleTimeout)
	}
	var broken error // the error of an entry that left the transaction unusable
	err := withTx(ctx, s.txBeginner(ctx, idle), func(t pgx.Tx) error {
		prelude := []string{savepoint}
		for _, i := range order {
			stage, entryErr := s.saveTxIn(ctx, t, params[i], prelude...)
			if stage == saveTxCall {
				return entryErr
			}
			prelude = []string{release, savepoint}
			if entryErr != nil {
				errs[i] = entryErr
				if _, err := t.Exec(ctx, rollback); err != nil {
					if stage != saveTxApply {
						return fmt.Errorf("rolling back to the savepoint: %w", err)
					}
					// Apply left the transaction unusable (a cancelled
					// statement closes the connection, and so does a lost
					// one): say whose it was.
					broken = applyFailure(fmt.Errorf("rolling back to the savepoint after %w: %w", entryErr, err))
					return broken
				}
			}
		}
		return nil
	})
	switch {
	case err == nil:
		return errs, nil
	case broken != nil && errors.Is(err, broken):
		return nil, fmt.Errorf("saving %d models in a transaction: %w", len(order), err)
	}
	return nil, fmt.Errorf("saving %d models in a transaction: %w", len(order), translate(err))
}
