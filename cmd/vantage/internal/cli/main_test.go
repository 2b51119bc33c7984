package cli_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/cmd/vantage/internal/cli"
	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/ports"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the output of the commands")

// TestMain checks for leaked goroutines once the tests ran: every command
// closes its pool before Run returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.WrapMain(m))
}

// result is what one run of the command printed and returned.
type result struct {
	stdout, stderr string
	code           int
}

// run runs the command line args in process, as the vantage binary would
// with env, and returns what it printed and its exit code.
func run(t *testing.T, env cli.Env, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Run(t.Context(), args, &stdout, &stderr, env)
	t.Logf("vantage %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// db is a schema of the test database the commands run against.
type db struct {
	url    string
	schema string
	env    cli.Env
}

// args prepends the global flags that name the database and the schema.
func (d *db) args(args ...string) []string {
	return append([]string{"--database", d.url, "--schema", d.schema}, args...)
}

// run runs a command on the schema.
func (d *db) run(t *testing.T, args ...string) result {
	t.Helper()
	return run(t, d.env, d.args(args...)...)
}

// migratedDB returns a migrated, empty schema for the test's own use.
func migratedDB(t *testing.T) *db {
	t.Helper()
	return &db{url: pgtest.ConnString(t), schema: pgtest.Schema(t)}
}

// freshDB returns the name of a schema that does not exist yet, dropped
// after the test.
func freshDB(t *testing.T) *db {
	t.Helper()
	schema := pgtest.NewSchemaName(t)
	t.Cleanup(func() {
		_, err := pgtest.Pool(t).Exec(context.WithoutCancel(t.Context()), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
		require.NoError(t, err)
	})
	return &db{url: pgtest.ConnString(t), schema: schema}
}

// backend opens the adapter on the schema, for the tests' own fixtures and
// checks.
func (d *db) backend(t *testing.T) ports.Backend {
	t.Helper()
	store, err := postgres.New(pgtest.NewPool(t, 4), postgres.Options{Schema: d.schema, ConnString: pgtest.ConnString(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	return store.Backend()
}

// version returns the schema's version.
func (d *db) version(t *testing.T) int {
	t.Helper()
	m, err := postgres.NewMigrator(nil, d.schema)
	require.NoError(t, err)
	v, err := m.Version(t.Context(), pgtest.Pool(t))
	require.NoError(t, err)
	return v
}

var (
	uuidPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	timePattern = regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z`)
)

// mask replaces what changes from run to run by placeholders of the same
// width, so that table columns stay aligned: the schema's name, times, and
// every UUID but those of keep.
func mask(s, schema string, keep ...string) string {
	s = timePattern.ReplaceAllString(s, "YYYY-MM-DDThh:mm:ssZ")
	return maskIDs(s, schema, keep...)
}

// maskIDs is mask for output whose times are fixed: it keeps them.
func maskIDs(s, schema string, keep ...string) string {
	s = strings.ReplaceAll(s, schema, "SCHEMA")
	return uuidPattern.ReplaceAllStringFunc(s, func(id string) string {
		for _, k := range keep {
			if id == k {
				return id
			}
		}
		return "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
	})
}

// golden compares got with testdata/name.golden, or rewrites the file
// with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test with -update to create %s", path)
	require.Equal(t, string(want), got, "output differs from %s (go test -update rewrites it)", path)
}

// fixedNow is the clock of the tests whose output shows ages.
var fixedNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// writes is a writer that hands each write to the test, so that it sees
// the output of a command that runs on as it comes.
type writes chan string

func (w writes) Write(p []byte) (int, error) {
	w <- string(p)
	return len(p), nil
}

// started is a command running in the background: its writes to stdout
// arrive on stdout, its exit code on code; stderr is complete once the
// code arrived.
type started struct {
	stdout writes
	stderr *bytes.Buffer
	code   chan int
	cancel context.CancelFunc
}

// start runs the command line args on the schema in the background. The
// test ends it by cancelling it or letting it end, and waits for its code.
func (d *db) start(t *testing.T, args ...string) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	s := &started{stdout: make(writes, 64), stderr: &bytes.Buffer{}, code: make(chan int, 1), cancel: cancel}
	go func() {
		s.code <- cli.Run(ctx, d.args(args...), s.stdout, s.stderr, d.env)
	}()
	t.Cleanup(cancel)
	return s
}

// wait waits for the command to end and returns its code and all it wrote
// to stdout since the test last read.
func (s *started) wait(t *testing.T) (code int, stdout string) {
	t.Helper()
	code = waitFor(t, s.code, "the command to end")
	for {
		select {
		case w := <-s.stdout:
			stdout += w
		default:
			t.Logf("exit %d\nstdout (the rest):\n%s\nstderr:\n%s", code, stdout, s.stderr.String())
			return code, stdout
		}
	}
}
