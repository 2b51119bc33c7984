package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/internal/pgtest"
)

func TestRunChecksOut(t *testing.T) {
	t.Parallel()

	var out bytes.Buffer
	err := run(t.Context(), []string{"-customers", "40", "-orders", "2", "-items", "2", "-instances", "2"}, &out)
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), "check: appended=320 order_summary=320 customer_stats=320 OK")
	requireTopSpenders(t, out.String())
}

// requireTopSpenders checks the query the demo prints: three customers,
// largest spend first.
func requireTopSpenders(t *testing.T, out string) {
	t.Helper()
	_, top, ok := strings.Cut(out, "top 3 customers by spend (a query on customer_stats):\n")
	require.True(t, ok, "the demo prints its query")
	var spent []float64
	for line := range strings.Lines(top) {
		if !strings.HasPrefix(line, "  customer ") {
			break
		}
		var id string
		var amount float64
		_, err := fmt.Sscanf(strings.TrimSpace(line), "customer %s %f spent", &id, &amount)
		require.NoError(t, err, line)
		spent = append(spent, amount)
	}
	require.Len(t, spent, 3)
	require.True(t, slices.IsSortedFunc(spent, func(a, b float64) int { return cmp.Compare(b, a) }), "largest first: %v", spent)
}

func TestRunRejectsBadFlags(t *testing.T) {
	t.Parallel()

	var out bytes.Buffer
	require.ErrorContains(t, run(t.Context(), []string{"-customers", "0"}, &out), "-customers must be at least 1, got 0")
	require.ErrorContains(t, run(t.Context(), []string{"-timeout", "-1s"}, &out), "-timeout must be positive")
	require.ErrorContains(t, run(t.Context(), []string{"-wait"}, &out), "-wait needs -metrics")
	require.Error(t, run(t.Context(), []string{"-nope"}, &out))
}

func TestRunPrintsTheTraceOfOneOrder(t *testing.T) {
	t.Parallel()

	var out bytes.Buffer
	err := run(t.Context(), []string{"-customers", "10", "-orders", "1", "-items", "2", "-trace"}, &out)
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), `trace of one order: span "place order"`)
	// One order of 4 events (place, 2 items, ship), applied by both
	// perspectives, each apply in a batch.
	var applies int
	for line := range strings.Lines(out.String()) {
		if strings.Contains(line, "links to it: vantage.apply ") {
			require.Contains(t, line, "in vantage.batch ", line)
			applies++
		}
	}
	require.Equal(t, 8, applies, out.String())
}

func TestRunServesMetricsForPrometheus(t *testing.T) {
	t.Parallel()

	var out bytes.Buffer
	err := run(t.Context(), []string{"-customers", "40", "-orders", "2", "-items", "2", "-metrics", "127.0.0.1:0"}, &out)
	require.NoError(t, err, out.String())
	// The demo scrapes its own endpoint once it caught up: every event
	// applied by each perspective, and nothing left pending.
	for _, line := range []string{
		`vantage_perspective_events_total{vantage_outcome="applied",vantage_perspective="order_summary"} 320`,
		`vantage_perspective_events_total{vantage_outcome="applied",vantage_perspective="customer_stats"} 320`,
		`vantage_perspective_lag_pending{vantage_perspective="order_summary"} 0`,
		`vantage_instances_live 1`,
	} {
		require.Contains(t, out.String(), line)
	}
}

// On PostgreSQL the demo also projects the items into its order_lines
// table, one row per item, in the transaction of the projection's cursor.
func TestRunOnPostgres(t *testing.T) {
	t.Parallel()

	schema := pgtest.NewSchemaName(t)
	t.Cleanup(func() {
		_, err := pgtest.Pool(t).Exec(context.WithoutCancel(t.Context()), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
		require.NoError(t, err)
	})
	var out bytes.Buffer
	err := run(t.Context(), []string{"-postgres", pgtest.ConnString(t), "-schema", schema, "-customers", "20", "-orders", "2", "-items", "3", "-instances", "2"}, &out)
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), "check: appended=200 order_summary=200 customer_stats=200 OK")
	require.Contains(t, out.String(), "order_lines (a table projection): 120 rows for 120 items added OK")
	requireTopSpenders(t, out.String())
}

func TestRunReportsABadDatabaseOnce(t *testing.T) {
	t.Parallel()

	const unreachable = "postgres://nobody@127.0.0.1:1/x?connect_timeout=5"
	var out bytes.Buffer
	err := run(t.Context(), []string{"-postgres", unreachable, "-schema", "orders_unreachable"}, &out)
	require.ErrorContains(t, err, `migrating schema "orders_unreachable"`)
	require.Equal(t, 1, strings.Count(err.Error(), "migrating schema"), "the schema is named once: %v", err)

	err = run(t.Context(), []string{"-postgres", unreachable, "-schema", "Orders"}, &out)
	require.ErrorContains(t, err, `schema "Orders" must match`)
}
