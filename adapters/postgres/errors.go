package postgres

import (
	"errors"
	"fmt"

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
)

// translate maps driver errors to ports sentinels at the adapter's edge; the
// original error stays in the chain for detail. Callers wrap the result with
// what they were doing.
func translate(err error) error {
	if err == nil {
		return nil
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
	return err
}
