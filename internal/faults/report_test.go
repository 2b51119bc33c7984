package faults

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReportMaxDelay(t *testing.T) {
	t.Parallel()
	r := Report{Runs: []RunResult{
		{Fault: "pause", Run: 1, Events: 10, Recovered: true, Recovery: 18500 * time.Millisecond, MaxDelay: 6200 * time.Millisecond,
			Failed: map[string]int{CheckRecovery: 1}},
		{Fault: "pause", Run: 2, Events: 10, Recovered: true, Recovery: 4 * time.Second, MaxDelay: 7100 * time.Millisecond, Passed: true},
	}}
	var table strings.Builder
	require.NoError(t, r.WriteTable(&table))
	lines := strings.Split(table.String(), "\n")
	require.Contains(t, lines[0], "healthy DL  max delay  recovery")
	require.Regexp(t, `^pause\s+2\s+20\s+0\s+0\s+0\s+0\s+7\.1s\s+18\.5s\s+FAIL: recovery`, lines[1], "the worst delay of the runs, next to the counts")

	b, err := json.Marshal(r.Runs[0])
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(b, &got))
	require.InDelta(t, 6.2, got["max_delay_s"], 1e-9)
	require.Contains(t, r.Runs[0].summary(), "max delay 6.2s")
}

func TestSlowWriteSeq(t *testing.T) {
	t.Parallel()
	seq, ok := slowWriteSeq(slowWriteSQL(42))
	require.True(t, ok)
	require.Equal(t, int64(42), seq)
	for _, q := range []string{
		`SELECT pid, query FROM pg_stat_activity WHERE starts_with(query, $1)`,
		`SELECT pg_sleep($1)`,
		slowWriteMarker + "x */ SELECT 1",
	} {
		_, ok := slowWriteSeq(q)
		require.False(t, ok, q)
	}
}
