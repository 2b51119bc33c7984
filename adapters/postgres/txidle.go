package postgres

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Bounds on the idle time of the transactions the Store opens.
//
// A transaction stays open while its process sends nothing, and so do its
// locks. A process frozen in the middle of one (a long pause of its
// runtime, a suspended virtual machine, SIGSTOP) holds them until it
// resumes, however long that takes. A table projection's save holds its
// stream's row of vantage_active_streams FOR KEY SHARE (the lease fence),
// and abandonment passes over a locked stream row and keeps the instance
// registered while it holds one (see sqlAbandonLeases), so such a process
// would keep the instances taking over from it off that stream for the
// whole pause. Each transaction therefore sets
// idle_in_transaction_session_timeout for itself as it begins: past it the
// server ends the session, which releases the locks, and the process finds
// its connection closed once it resumes (pgx then drops the connection
// from the pool, and the call fails with ports.ErrTransient, charged to no
// event).
//
// Only transactions that idle between statements need it. A batch sent as
// one implicit transaction (claims, fetches, completions, heartbeats,
// appends) reaches the server whole, with its Sync, and the server runs
// and commits it whether or not the client reads the answer, as long as
// the answer fits the socket buffers between them (a fetch of large
// events may not): a process frozen with one in flight holds nothing once
// it ran. The Migrator is left out: it may run in the caller's
// transaction, whose settings are not its to change.
const (
	// txIdleMargin is added to the time left to a context's deadline when
	// that deadline bounds a transaction's idle time (see idleBound), so
	// that the server never ends a session the client still counts as
	// within its deadline: the client's error then says the deadline
	// passed.
	txIdleMargin = 250 * time.Millisecond

	// ownTxIdleTimeout bounds the idle time of the transactions that run
	// the adapter's statements only (a retirement, a lock probe), which
	// idle only between two round trips of one call.
	ownTxIdleTimeout = 10 * time.Second
)

// idleBound returns how long a transaction opened under ctx may stay idle
// before the server ends it: limit when positive, lowered to the time left
// to ctx's deadline plus txIdleMargin when that is sooner (the transaction
// is of no use past the deadline: pgx sends nothing on a context that is
// done, its COMMIT included, and the rollback follows). 0 when neither
// bounds it: the server's idle_in_transaction_session_timeout applies.
func idleBound(ctx context.Context, limit time.Duration) time.Duration {
	if deadline, ok := ctx.Deadline(); ok {
		if left := max(time.Until(deadline), 0) + txIdleMargin; limit <= 0 || left < limit {
			limit = left
		}
	}
	return max(limit, 0)
}

// beginIdleBounded returns the BEGIN of a transaction whose idle time the
// server bounds at idle (a positive duration), in one round trip: a
// statement with no arguments goes through the simple protocol, which
// runs both commands of the string. SET LOCAL ends with the transaction,
// so the pooled connection keeps the server's setting. The timeout is in
// whole milliseconds, rounded up.
func beginIdleBounded(idle time.Duration) string {
	ms := min(max((idle+time.Millisecond-1)/time.Millisecond, 1), math.MaxInt32)
	return fmt.Sprintf("BEGIN; SET LOCAL idle_in_transaction_session_timeout = %d", ms)
}

// idleBounded begins transactions on pool with the BEGIN of
// beginIdleBounded.
type idleBounded struct {
	pool  *pgxpool.Pool
	begin string
}

func (b idleBounded) Begin(ctx context.Context) (pgx.Tx, error) {
	return b.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: b.begin})
}

// txBeginner returns what withTx begins a transaction of the Store with,
// under ctx: on the pool, its idle time bounded by idleBound(ctx, limit).
func (s *Store) txBeginner(ctx context.Context, limit time.Duration) Beginner {
	idle := idleBound(ctx, limit)
	if idle <= 0 {
		return s.pool
	}
	return idleBounded{pool: s.pool, begin: beginIdleBounded(idle)}
}
