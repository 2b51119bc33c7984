package pgtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ErrNoCluster reports that no cluster can be made here: the PostgreSQL
// server binaries (initdb, pg_ctl) were not found, or the platform cannot
// run them. Compare with errors.Is.
var ErrNoCluster = errors.New("no local PostgreSQL cluster")

// ShutdownMode is how pg_ctl stops a server (its -m option).
type ShutdownMode string

// Shutdown modes of pg_ctl.
const (
	// ShutdownSmart waits for every client to disconnect.
	ShutdownSmart ShutdownMode = "smart"
	// ShutdownFast rolls back open transactions, disconnects the clients
	// and shuts down cleanly.
	ShutdownFast ShutdownMode = "fast"
	// ShutdownImmediate aborts every server process at once, as a crash
	// would; the next start runs crash recovery.
	ShutdownImmediate ShutdownMode = "immediate"
)

// clusterSettings are the server settings of every cluster: the data is
// thrown away, so nothing is flushed to disk, and parallel tests, each with
// their own pools and listeners, need many connections.
var clusterSettings = map[string]string{
	"listen_addresses":   "127.0.0.1",
	"fsync":              "off",
	"synchronous_commit": "off",
	"full_page_writes":   "off",
	"max_connections":    "300",
}

// ClusterOptions configure StartCluster. The zero value is valid.
type ClusterOptions struct {
	// Settings are server settings (name to value) passed as -c options
	// (quoted: values may hold spaces), over the defaults: listen_addresses 127.0.0.1, fsync,
	// synchronous_commit and full_page_writes off, max_connections 300.
	// A cluster that is crashed on purpose (ShutdownImmediate) needs
	// synchronous_commit on, or commits acknowledged just before the crash
	// are lost.
	Settings map[string]string
}

// Cluster is a private PostgreSQL server made with the local initdb and
// pg_ctl in a temporary directory, listening on a free port of 127.0.0.1,
// with user postgres and trust authentication. Unlike the shared test
// server it belongs to its caller, who may restart or crash it. As root it
// runs as the postgres user, since initdb refuses root. Its methods are
// safe for concurrent use.
type Cluster struct {
	dir   string // temporary directory: data, log and socket
	data  string
	log   string
	pgctl string
	port  int
	opts  string // the postgres command-line options (pg_ctl -o)
	user  clusterUser

	mu     sync.Mutex // serializes pg_ctl calls
	closed bool
}

// StartCluster creates and starts a cluster. ctx bounds the start only. The
// caller must Close it. It returns an error wrapping ErrNoCluster when the
// binaries cannot be found.
func StartCluster(ctx context.Context, opts ClusterOptions) (_ *Cluster, err error) {
	initdb, pgctl, err := findBinaries()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoCluster, err)
	}
	user, err := lookupClusterUser()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoCluster, err)
	}
	dir, err := os.MkdirTemp("", "vantage-pgtest-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	if err := user.own(dir); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	settings := maps.Clone(clusterSettings)
	maps.Copy(settings, opts.Settings)
	args := []string{"-p", strconv.Itoa(port), "-k", shellQuote(dir)}
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		args = append(args, "-c", shellQuote(name+"="+settings[name]))
	}
	c := &Cluster{
		dir:   dir,
		data:  filepath.Join(dir, "data"),
		log:   filepath.Join(dir, "log"),
		pgctl: pgctl,
		port:  port,
		opts:  strings.Join(args, " "),
		user:  user,
	}
	if err := c.run(ctx, initdb, "-D", c.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
		return nil, err
	}
	if err := c.run(ctx, pgctl, "-D", c.data, "-l", c.log, "-o", c.opts, "-w", "-t", "60", "start"); err != nil {
		return nil, err
	}
	return c, nil
}

// RequireCluster starts a cluster closed in t.Cleanup. Without the binaries
// it skips the test, unless the CI environment variable is set: then it
// fails, like the shared server's tests.
func RequireCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	return requireStarted(t, "a cluster", ErrNoCluster, func() (*Cluster, error) { return StartCluster(t.Context(), opts) })
}

// requireStarted starts what start starts, closed in t.Cleanup. When start
// fails with missing (its binaries are not installed) it skips the test,
// unless the CI environment variable is set: then it fails, like the
// shared server's tests.
func requireStarted[T interface{ Close() error }](t testing.TB, what string, missing error, start func() (T, error)) T {
	t.Helper()
	v, err := start()
	if errors.Is(err, missing) && os.Getenv(EnvCI) == "" {
		t.Skipf("pgtest: %v", err)
	}
	if err != nil {
		t.Fatalf("pgtest: starting %s: %v", what, err)
	}
	t.Cleanup(func() {
		if err := v.Close(); err != nil {
			t.Errorf("pgtest: closing %s: %v", what, err)
		}
	})
	return v
}

// ConnString returns the URL of the cluster's postgres database.
func (c *Cluster) ConnString() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Port returns the TCP port the server listens on.
func (c *Cluster) Port() int { return c.port }

// DataDir returns the cluster's data directory.
func (c *Cluster) DataDir() string { return c.data }

// LogPath returns the server log file. Restarts append to it; Close
// removes it, so copy what must outlive the cluster.
func (c *Cluster) LogPath() string { return c.log }

// Restart stops the server in mode and starts it again on the same port
// and data, waiting (at most a minute each) until it stopped and until it
// accepts connections. Clients lose their connections.
func (c *Cluster) Restart(ctx context.Context, mode ShutdownMode) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("restarting a closed cluster")
	}
	// -l again: without it the new postmaster would write to pg_ctl's
	// output, which the caller's pipe would then wait on forever.
	return c.run(ctx, c.pgctl, "-D", c.data, "-l", c.log, "-o", c.opts, "-m", string(mode), "-w", "-t", "60", "restart")
}

// Close stops the server at once (ShutdownImmediate) and removes its
// directory. Idempotent.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.run(ctx, c.pgctl, "-D", c.data, "-m", string(ShutdownImmediate), "-w", "stop")
	return errors.Join(err, os.RemoveAll(c.dir))
}

// run runs a PostgreSQL binary in the cluster's directory, as the cluster's
// user.
func (c *Cluster) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = c.dir
	c.user.apply(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", filepath.Base(name), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// startCluster starts the ephemeral cluster of the shared server, stopped
// and removed by the server's stop.
func startCluster(ctx context.Context) (*server, error) {
	c, err := StartCluster(ctx, ClusterOptions{})
	if err != nil {
		return nil, err
	}
	s, err := connect(ctx, c.ConnString(), "ephemeral cluster in "+c.dir)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	s.stop = func() { _ = c.Close() }
	return s, nil
}

// shellQuote quotes s for the shell pg_ctl starts postgres with, which
// would split a setting such as log_line_prefix='%m [%p] ' at its spaces.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,:/=+-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// findBinaries returns initdb and pg_ctl from PATH, else from the newest
// /usr/lib/postgresql/*/bin that has both.
func findBinaries() (initdb, pgctl string, err error) {
	if i, err1 := exec.LookPath("initdb"); err1 == nil {
		if p, err2 := exec.LookPath("pg_ctl"); err2 == nil {
			return i, p, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(a, b int) bool { return majorOf(dirs[a]) > majorOf(dirs[b]) })
	for _, d := range dirs {
		i, p := filepath.Join(d, "initdb"), filepath.Join(d, "pg_ctl")
		if isExecutable(i) && isExecutable(p) {
			return i, p, nil
		}
	}
	return "", "", errors.New("initdb and pg_ctl not found on PATH or under /usr/lib/postgresql/*/bin")
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// freePort returns a TCP port free on 127.0.0.1 at the time of the call.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
