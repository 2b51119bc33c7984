package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/vantage-go/vantage/ports"
)

// PostgreSQL error codes the adapter translates.
const (
	pgUniqueViolation           = "23505"
	pgCheckViolation            = "23514"
	pgNotNullViolation          = "23502"
	pgInvalidTextRepresentation = "22P02"
	pgInvalidJSONText           = "22032"
	pgDuplicateTable            = "42P07"
	// pgInternalError is raised, among others, by two sessions updating
	// one catalog row at once ("tuple concurrently updated").
	pgInternalError = "XX000"

	// Transient failures (see isTransientCode).
	pgConnectionExceptionClass = "08"
	pgSerializationFailure     = "40001"
	pgDeadlockDetected         = "40P01"
	pgAdminShutdown            = "57P01"
	pgCrashShutdown            = "57P02"
	pgCannotConnectNow         = "57P03"
	pgTooManyConnections       = "53300"
	pgLockNotAvailable         = "55P03"
	// The server ended the session for idling past
	// idle_in_transaction_session_timeout (see txidle.go), past
	// transaction_timeout (PostgreSQL 17), or, outside a transaction,
	// past idle_session_timeout.
	pgIdleInTransactionTimeout = "25P03"
	pgTransactionTimeout       = "25P04"
	pgIdleSessionTimeout       = "57P05"
)

// translate maps driver errors to ports sentinels at the adapter's edge; the
// original error stays in the chain for detail. Callers wrap the result with
// what they were doing.
//
// The caller's own cancellation or deadline comes back as it is (errors.Is
// context.Canceled or context.DeadlineExceeded), never as ports.ErrTransient:
// pgx reports a context that ended as a timeout that is safe to retry, but
// retrying on a context that is done cannot succeed, and the caller asked to
// stop.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %w", ports.ErrNotFound, err)
	case errors.Is(err, puddle.ErrClosedPool):
		return fmt.Errorf("%w: %w", ports.ErrClosed, err)
	case errors.As(err, &pgErr):
		switch pgErr.Code {
		case pgUniqueViolation:
			return fmt.Errorf("%w: %s", ports.ErrVersionConflict, pgErr.ConstraintName)
		case pgCheckViolation, pgNotNullViolation, pgInvalidTextRepresentation, pgInvalidJSONText:
			return fmt.Errorf("%w: %s", ports.ErrInvalidArgument, pgErr.Message)
		}
	}
	if isTransient(err) {
		return fmt.Errorf("%w: %w", ports.ErrTransient, err)
	}
	return err
}

// applyFailure classifies the error of a table projection's Apply (see
// ports.TxModelStore), joined with the error of the rollback that followed
// when that failed too: it wraps ports.ErrTransient around err when the
// backend failed Apply rather than Apply's own code, that is when err is
// transient (isTransient: the connection was lost, the statement lost a
// serialization check or a deadlock, the server is shutting down). The
// rollback's error counts: a connection lost under Apply fails the
// rollback too, whatever Apply made of the statement's error. Apply's own
// cancellation never is transient, as in translate: cancelling a statement
// closes its connection, and Apply failed by its own deadline.
func applyFailure(err error) error {
	switch {
	case errors.Is(err, ports.ErrTransient), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case isTransient(err):
		return fmt.Errorf("%w: %w", ports.ErrTransient, err)
	}
	return err
}

// isTransient reports whether err is a failure of the infrastructure that may
// pass (see ports.ErrTransient): the connection was lost (the server closed
// it, or pgx did after a failed read), refused or timed out, or the server
// refused the statement for a reason a retry may not meet again.
func isTransient(err error) bool {
	var (
		pgErr      *pgconn.PgError
		connectErr *pgconn.ConnectError
		netErr     net.Error
	)
	switch {
	case errors.As(err, &pgErr) && isTransientCode(pgErr.Code),
		errors.As(err, &connectErr),
		errors.As(err, &netErr),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, pgconn.ErrConnClosed),
		pgconn.Timeout(err),
		pgconn.SafeToRetry(err):
		return true
	}
	return false
}

// isTransientCode reports whether a server error code is transient: a
// connection exception (class 08), a serialization failure or deadlock (the
// transaction lost to another and may win when run again), the server
// shutting down, starting up or out of connection slots, a lock it could
// not take at once, or a session it ended for idling (the process that
// opened it went quiet, frozen perhaps: no statement of it failed).
func isTransientCode(code string) bool {
	switch code {
	case pgSerializationFailure, pgDeadlockDetected, pgAdminShutdown, pgCrashShutdown,
		pgCannotConnectNow, pgTooManyConnections, pgLockNotAvailable,
		pgIdleInTransactionTimeout, pgTransactionTimeout, pgIdleSessionTimeout:
		return true
	}
	return strings.HasPrefix(code, pgConnectionExceptionClass)
}
