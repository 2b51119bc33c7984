package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRunChecksOut(t *testing.T) {
	t.Parallel()

	var out bytes.Buffer
	err := run(t.Context(), []string{"-customers", "40", "-orders", "2", "-items", "2", "-instances", "2"}, &out)
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), "check: appended=320 order_summary=320 customer_stats=320 OK")
}

func TestRunRejectsBadFlags(t *testing.T) {
	t.Parallel()

	var out bytes.Buffer
	require.ErrorContains(t, run(t.Context(), []string{"-customers", "0"}, &out), "-customers must be at least 1, got 0")
	require.ErrorContains(t, run(t.Context(), []string{"-timeout", "-1s"}, &out), "-timeout must be positive")
	require.Error(t, run(t.Context(), []string{"-nope"}, &out))
}
