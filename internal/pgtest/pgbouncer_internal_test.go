package pgtest

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStartPgBouncerWithoutBinary checks that a machine without pgbouncer
// gets an ErrNoPgBouncer that says how to install it, which
// RequirePgBouncer turns into a skip outside CI.
func TestStartPgBouncerWithoutBinary(t *testing.T) {
	// Not parallel: it changes PATH and pgBouncerFallback.
	t.Setenv("PATH", t.TempDir())
	saved := pgBouncerFallback
	pgBouncerFallback = filepath.Join(t.TempDir(), "pgbouncer")
	t.Cleanup(func() { pgBouncerFallback = saved })

	_, err := StartPgBouncer(t.Context(), "postgres://postgres@127.0.0.1:5432/test", PgBouncerOptions{})
	require.ErrorIs(t, err, ErrNoPgBouncer)
	require.ErrorContains(t, err, "apt-get install pgbouncer")
}
