package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/vantage-go/vantage/internal/pgtest"
)

// TestMain checks that stopping the application left no goroutine behind:
// the engine's, and on PostgreSQL the pool and listener the module owns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.WrapMain(m))
}

const wantCart = "cart: apple=2 pear=1 plum=2 (4 events applied)"

func TestRunOnMemory(t *testing.T) {
	t.Parallel()

	var out bytes.Buffer
	// -postgres= keeps the test in memory when DATABASE_URL is set.
	err := run(t.Context(), []string{"-postgres="}, &out)
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), "on the memory backend")
	require.Contains(t, out.String(), wantCart)
}

func TestRunOnPostgres(t *testing.T) {
	t.Parallel()

	cs := pgtest.ConnString(t) // skips without a database
	schema := pgtest.NewSchemaName(t)
	t.Cleanup(func() {
		_, err := pgtest.Pool(t).Exec(context.WithoutCancel(t.Context()), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
		require.NoError(t, err)
	})
	var out bytes.Buffer
	err := run(t.Context(), []string{"-postgres", cs, "-schema", schema}, &out)
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), "on PostgreSQL")
	require.Contains(t, out.String(), wantCart)
}

func TestRunRejectsBadFlags(t *testing.T) {
	t.Parallel()

	var out bytes.Buffer
	require.ErrorContains(t, run(t.Context(), []string{"-timeout", "0s"}, &out), "-timeout must be positive")
	require.Error(t, run(t.Context(), []string{"-nope"}, &out))
}
