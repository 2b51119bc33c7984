package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// connectError returns a real *pgconn.ConnectError (its cause is unexported):
// a connection refused by a port nothing listens on.
func connectError(t *testing.T) error {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().(*net.TCPAddr)
	require.NoError(t, l.Close())
	_, err = pgconn.Connect(t.Context(), fmt.Sprintf("postgres://u@127.0.0.1:%d/db?sslmode=disable&connect_timeout=5", addr.Port))
	var connectErr *pgconn.ConnectError
	require.ErrorAs(t, err, &connectErr)
	return err
}

func TestTranslate(t *testing.T) {
	t.Parallel()

	pgError := func(code string) error {
		return fmt.Errorf("running statement: %w", &pgconn.PgError{Code: code, Message: "m", ConstraintName: "c"})
	}
	opErr := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}

	for name, c := range map[string]struct {
		err  error
		want error // nil: returned unchanged
	}{
		"no rows":                  {pgx.ErrNoRows, ports.ErrNotFound},
		"closed pool":              {puddle.ErrClosedPool, ports.ErrClosed},
		"unique violation":         {pgError("23505"), ports.ErrVersionConflict},
		"check violation":          {pgError("23514"), ports.ErrInvalidArgument},
		"invalid json":             {pgError("22032"), ports.ErrInvalidArgument},
		"syntax error":             {pgError("42601"), nil},
		"query canceled by server": {pgError("57014"), nil},
		"connection failure":       {pgError("08006"), ports.ErrTransient},
		"connection exception":     {pgError("08000"), ports.ErrTransient},
		"serialization failure":    {pgError("40001"), ports.ErrTransient},
		"deadlock":                 {pgError("40P01"), ports.ErrTransient},
		"admin shutdown":           {pgError("57P01"), ports.ErrTransient},
		"crash shutdown":           {pgError("57P02"), ports.ErrTransient},
		"cannot connect now":       {pgError("57P03"), ports.ErrTransient},
		"too many connections":     {pgError("53300"), ports.ErrTransient},
		"lock not available":       {pgError("55P03"), ports.ErrTransient},
		"idle in transaction":      {pgError("25P03"), ports.ErrTransient},
		"transaction timeout":      {pgError("25P04"), ports.ErrTransient},
		"idle session":             {pgError("57P05"), ports.ErrTransient},
		"eof":                      {fmt.Errorf("reading: %w", io.EOF), ports.ErrTransient},
		"unexpected eof":           {fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), ports.ErrTransient},
		"connection reset":         {opErr, ports.ErrTransient},
		"conn closed":              {fmt.Errorf("sending batch: %w", pgconn.ErrConnClosed), ports.ErrTransient},
		"connect error":            {connectError(t), ports.ErrTransient},
		"plain error":              {errors.New("boom"), nil},
	} {
		got := translate(c.err)
		if c.want == nil {
			require.Equal(t, c.err, got, name)
			continue
		}
		require.ErrorIs(t, got, c.want, name)
		if c.want == ports.ErrTransient {
			require.ErrorIs(t, got, c.err, "%s: the driver's error stays in the chain", name)
		} else {
			require.NotErrorIs(t, got, ports.ErrTransient, name)
		}
	}
	require.NoError(t, translate(nil))
}

// TestTranslateKeepsContextErrors checks that the caller's cancellation or
// deadline stays what it is, although pgx reports a context that ended
// during a call as a timeout that is safe to retry.
func TestTranslateKeepsContextErrors(t *testing.T) {
	t.Parallel()

	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancelExpired := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancelExpired()
	for _, ctx := range []context.Context{canceled, expired} {
		_, err := pgconn.Connect(ctx, "postgres://u@127.0.0.1:1/db?sslmode=disable")
		require.Error(t, err)
		got := translate(err)
		require.ErrorIs(t, got, ctx.Err())
		require.NotErrorIs(t, got, ports.ErrTransient, "%v", got)
	}
	for _, err := range []error{context.Canceled, context.DeadlineExceeded, fmt.Errorf("querying: %w", context.DeadlineExceeded)} {
		got := translate(err)
		require.Equal(t, err, got)
	}
}
