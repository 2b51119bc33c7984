package faults_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/vantage-go/vantage/internal/faults"
	"github.com/vantage-go/vantage/internal/pgtest"
)

// TestMain runs the worker processes: the suite starts this test binary
// again as its workers (see faults.SelfCommand).
func TestMain(m *testing.M) {
	if faults.IsWorker() {
		os.Exit(faults.WorkerMain(os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

// EnvFaults, when set, names the faults TestShortSuite runs (comma
// separated), to iterate on one fault.
const EnvFaults = "VANTAGE_FAULTS"

// TestShortSuite runs the short mode of the fault suite: every fault once,
// against a private PostgreSQL cluster and real worker processes. It takes
// about three minutes on two cores.
func TestShortSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault suite takes minutes; it runs without -short")
	}
	cfg := faults.ShortConfig()
	if only := os.Getenv(EnvFaults); only != "" {
		cfg.Faults = strings.Split(only, ",")
	}
	cfg.Progress = t.Output()
	report, err := faults.Run(t.Context(), cfg)
	if errors.Is(err, pgtest.ErrNoCluster) && os.Getenv(pgtest.EnvCI) == "" {
		t.Skipf("faults: %v (CI unset, so skipped)", err)
	}
	require.NoError(t, err)
	var table strings.Builder
	require.NoError(t, report.WriteTable(&table))
	t.Logf("fault suite, short mode, in %s:\n%s", report.Elapsed.Round(1e9), table.String())
	for _, run := range report.Runs {
		if !run.Passed {
			t.Errorf("%s run %d failed its checks: %v (details above; logs in %s)", run.Fault, run.Run, run.Failed, run.Dir)
		}
	}
}
