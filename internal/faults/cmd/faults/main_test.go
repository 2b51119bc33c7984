package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestList(t *testing.T) {
	t.Parallel()
	var out, errs bytes.Buffer
	require.Zero(t, run(t.Context(), []string{"-list"}, &out, &errs))
	for _, name := range []string{"kill", "terminate", "pg-restart-fast", "pg-restart-immediate", "hang-ctx", "hang", "poison", "undecodable", "requeue", "abandon", "pause", "lease-lock", "projection-cut"} {
		require.Contains(t, out.String(), name+" ")
	}
}

func TestBadFlags(t *testing.T) {
	t.Parallel()
	var out, errs bytes.Buffer
	require.Equal(t, 2, run(t.Context(), []string{"-nope"}, &out, &errs))
	errs.Reset()
	require.Equal(t, 2, run(t.Context(), []string{"-faults", "kill,nope", "-q"}, &out, &errs), "nothing runs")
	require.Contains(t, errs.String(), `unknown fault "nope"`)
}
