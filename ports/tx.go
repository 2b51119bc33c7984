package ports

import "context"

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
