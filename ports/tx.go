package ports

import (
	"context"
	"time"
)

// TxEventStore is implemented by event stores that can append inside a
// transaction the caller owns, so that the caller's business writes and its
// events commit or roll back together. Tx is the driver's transaction type
// (pgx.Tx for the PostgreSQL adapter); ports stays free of any driver by
// leaving it a type parameter. core.AppendTx appends through it.
type TxEventStore[Tx any] interface {
	// AppendTx is EventStore.EventsAppend inside tx: the events, their work
	// rows and the carried subscriptions are written in tx, and the wake
	// notification is published when tx commits; if tx rolls back, nothing
	// is stored and nobody is woken. The contract of EventsAppend holds
	// otherwise, with one difference: an error may leave tx aborted (a
	// taken version is a constraint violation in most databases), so the
	// caller cannot assume it may go on with tx after an error, and retries
	// the whole transaction rather than this call.
	AppendTx(ctx context.Context, tx Tx, params *EventsAppendParams) (*EventsAppendResult, error)
}

// Tx is an open transaction of a TxModelStore, handed to the apply of a
// table projection while the projection's cursor moves in it. It is opaque
// to ports and core: the adapter that opens it documents what Unwrap
// returns and offers a typed accessor (postgres.TxOf returns its pgx.Tx).
// A Tx is valid only during the call it is passed to; whoever receives it
// must not commit or roll it back.
type Tx interface {
	// Unwrap returns the driver's transaction value.
	Unwrap() any
}

// TxModelStore is an optional port next to ModelStore, on the same models
// and cursors: it moves a pair's cursor and runs the caller's writes in one
// transaction, so that the writes of a table projection commit or roll
// back with the position they bring the projection to. Backend.ModelTx
// holds it; core refuses to run table projections without it.
type TxModelStore interface {
	// ModelSaveTx opens a transaction, saves params.Save in it exactly as
	// ModelSave would, its version and epoch check and its lease fence
	// included (the cursor is
	// moved first, so its row lock makes a concurrent save of the same pair
	// wait, and then fail the check, before it writes anything), then
	// calls params.Apply with the transaction, and commits. A rewind or a
	// rebuild of a table projection sets Save.Rebase, as a model's does. If
	// the save fails its check, Apply is not called and it returns an error
	// wrapping ErrVersionConflict (or ErrLeaseLost, or ErrInvalidArgument);
	// if Apply returns
	// an error, it rolls back and returns an error wrapping Apply's. When
	// Apply failed because the backend did rather than Apply's own code
	// (the transaction's connection was lost, the backend ended the
	// transaction once it idled past params.IdleTimeout, or the database
	// refused a statement for a reason a retry may not meet again: a
	// serialization failure, a deadlock), the error wraps ErrTransient too,
	// and so does a commit that failed for one of those reasons, so that the
	// engine retries without charging the event; the adapter tells by
	// Apply's error (the driver's error in its chain) and by the
	// transaction (a rollback that finds the connection lost). Apply's own
	// cancellation (its context ended) never is ErrTransient. In every
	// error case nothing is stored: neither the cursor move, nor the model,
	// nor Apply's writes.
	ModelSaveTx(ctx context.Context, params *ModelSaveTxParams) error
	// ModelSaveTxMany saves each entry of Saves exactly as ModelSaveTx
	// would, in one transaction (one commit for all): each entry runs in a
	// savepoint of it, so an entry whose save check fails or whose Apply
	// returns an error stores nothing and does not affect the others. The
	// result holds one error per entry, as ModelSaveTx would return it (nil
	// when saved). A call error means nothing was stored; when an entry's
	// Apply left the transaction unusable (a cancelled statement may close
	// the connection, and a lost one is lost to every entry), the call
	// error wraps that Apply's error, and ErrTransient when the backend
	// failed it as ModelSaveTx says, so the caller can tell whose it was
	// and send the others again. The engine groups the saves of table
	// projections it drains concurrently into it.
	ModelSaveTxMany(ctx context.Context, params *ModelSaveTxManyParams) ([]error, error)
}

// ModelSaveTxManyParams are the inputs of ModelSaveTxMany.
type ModelSaveTxManyParams struct {
	// Saves are the saves to run, each as ModelSaveTx would.
	Saves []*ModelSaveTxParams
}

// ModelSaveTxParams are the inputs of ModelSaveTx.
type ModelSaveTxParams struct {
	// Apply runs the caller's writes in the transaction, after the save.
	// It must not be nil.
	Apply func(ctx context.Context, tx Tx) error
	// Save is the model and cursor move, as ModelSave takes them.
	Save ModelSaveParams
	// IdleTimeout, when positive, bounds how long the transaction may stay
	// idle, the caller sending it nothing (while Apply runs code of its own
	// between statements, say): past it the backend may end the
	// transaction, which releases its locks, and the call then fails as
	// after a lost connection, wrapping ErrTransient. It bounds what a
	// process frozen in the middle of the call (a long pause of its
	// runtime, a suspended virtual machine, SIGSTOP) costs others: its
	// transaction holds the stream's lease fence, which keeps the instances
	// taking over from it off the stream until it resumes. It must exceed
	// the longest Apply may go without a statement; the engine sets it to
	// Options.Drain.ApplyTimeout plus ApplyAbandonGrace. Zero leaves the
	// backend's own bound, if any. ModelSaveTxMany bounds its transaction
	// by the largest IdleTimeout of its entries, and not at all when one
	// of them is zero.
	IdleTimeout time.Duration
}
