package pgtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNoPgBouncer reports that no pgbouncer can be started here: the binary
// was not found on PATH or in /usr/sbin, or, as root, there is no postgres
// user to run it as (pgbouncer refuses to run as root). Compare with
// errors.Is.
var ErrNoPgBouncer = errors.New("no pgbouncer")

// Pool modes of pgbouncer (its pool_mode setting).
const (
	// PoolModeTransaction lends a server connection to a client for one
	// transaction: the mode that breaks session state (prepared
	// statements, session settings and advisory locks, LISTEN), and the
	// one PgBouncer is mostly deployed in.
	PoolModeTransaction = "transaction"
	// PoolModeSession lends a server connection to a client until it
	// disconnects: every PostgreSQL feature works.
	PoolModeSession = "session"
)

// pgBouncerSettings are the [pgbouncer] settings of every PgBouncer. Clients
// are trusted, so the auth file only needs to name the user. The test pools
// send search_path (empty, see poolConfig) and lib/pq sends
// extra_float_digits at startup; pgbouncer 1.18 tracks neither and refuses a
// client that sends a parameter it neither tracks nor ignores, so both are
// ignored: through a PgBouncer the search_path is the server's default.
var pgBouncerSettings = map[string]string{
	"listen_addr":               "127.0.0.1",
	"unix_socket_dir":           "",
	"auth_type":                 "trust",
	"pool_mode":                 PoolModeTransaction,
	"max_client_conn":           "500",
	"default_pool_size":         "20",
	"ignore_startup_parameters": "extra_float_digits,search_path",
}

// PgBouncerOptions configure StartPgBouncer. The zero value is valid.
type PgBouncerOptions struct {
	// PoolMode is pgbouncer's pool_mode. Defaults to PoolModeTransaction.
	PoolMode string
	// Settings are further [pgbouncer] settings (name to value), over the
	// defaults: listen_addr 127.0.0.1, no unix socket, auth_type trust,
	// max_client_conn 500, default_pool_size 20, ignore_startup_parameters
	// extra_float_digits,search_path. listen_port, auth_file and logfile
	// are the PgBouncer's own.
	Settings map[string]string
}

// PgBouncer is a private pgbouncer in a temporary directory, listening on a
// free port of 127.0.0.1 and forwarding one database to a PostgreSQL server,
// with trust authentication. As root it runs as the postgres user, since
// pgbouncer refuses root. Its methods are safe for concurrent use.
type PgBouncer struct {
	dir      string
	port     int
	user     string
	database string

	done    chan struct{} // closed once the process exited
	waitErr error         // how it exited, written before done is closed
	proc    *os.Process

	mu     sync.Mutex
	closed bool
}

// StartPgBouncer starts a pgbouncer in front of the database of target, a
// connection string (pgx syntax) of the server, which clients reach through
// the PgBouncer as the same user and database. ctx bounds the start only.
// The caller must Close it. It returns an error wrapping ErrNoPgBouncer when
// the binary cannot be found.
func StartPgBouncer(ctx context.Context, target string, opts PgBouncerOptions) (*PgBouncer, error) {
	bin, err := findPgBouncer()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoPgBouncer, err)
	}
	user, err := lookupClusterUser()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoPgBouncer, err)
	}
	server, err := pgconn.ParseConfig(target)
	if err != nil {
		return nil, fmt.Errorf("parsing the target connection string: %w", err)
	}
	// The free port may be taken by another process before pgbouncer
	// binds it: then it exits at once, and another port is tried.
	for attempt := 1; ; attempt++ {
		b, err := startPgBouncer(ctx, bin, user, server, opts)
		if err == nil || !errors.Is(err, errPortTaken) || attempt == 3 {
			return b, err
		}
	}
}

// errPortTaken reports that pgbouncer could not bind its port.
var errPortTaken = errors.New("port taken")

// startPgBouncer is one attempt of StartPgBouncer, on a new port.
func startPgBouncer(ctx context.Context, bin string, user clusterUser, server *pgconn.Config, opts PgBouncerOptions) (_ *PgBouncer, err error) {
	dir, err := os.MkdirTemp("", "vantage-pgbouncer-")
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
	b := &PgBouncer{dir: dir, port: port, user: server.User, database: server.Database, done: make(chan struct{})}
	ini, err := b.writeConfig(server, opts)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, ini)
	cmd.Dir = dir
	user.apply(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting pgbouncer: %w", err)
	}
	b.proc = cmd.Process
	go func() {
		b.waitErr = cmd.Wait()
		close(b.done)
	}()
	if err := b.waitReady(ctx); err != nil {
		_ = b.Close()
		return nil, err
	}
	return b, nil
}

// RequirePgBouncer starts a PgBouncer in front of the test database (see
// ConnString), closed in t.Cleanup. Without the binary it skips the test,
// unless the CI environment variable is set: then it fails, like the
// shared server's tests. CI installs it (.ci/run); elsewhere, install
// pgbouncer (Debian: apt-get install pgbouncer).
func RequirePgBouncer(t testing.TB, opts PgBouncerOptions) *PgBouncer {
	t.Helper()
	target := ConnString(t)
	return requireStarted(t, "pgbouncer", ErrNoPgBouncer, func() (*PgBouncer, error) { return StartPgBouncer(t.Context(), target, opts) })
}

// ConnString returns the URL of the database through the PgBouncer.
func (b *PgBouncer) ConnString() string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(b.user),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)),
		Path:     "/" + b.database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Port returns the TCP port the PgBouncer listens on.
func (b *PgBouncer) Port() int { return b.port }

// LogPath returns pgbouncer's log file. Close removes it.
func (b *PgBouncer) LogPath() string { return filepath.Join(b.dir, "pgbouncer.log") }

// Close stops pgbouncer at once (SIGTERM: its immediate shutdown, which
// closes the clients' connections), waits for it to exit and removes its
// directory. Idempotent.
func (b *PgBouncer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	select {
	case <-b.done:
	default:
		_ = b.proc.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(10 * time.Second):
			_ = b.proc.Kill()
			<-b.done
		}
	}
	return os.RemoveAll(b.dir)
}

// writeConfig writes the auth file and the ini file and returns the
// latter's path.
func (b *PgBouncer) writeConfig(server *pgconn.Config, opts PgBouncerOptions) (string, error) {
	auth := filepath.Join(b.dir, "userlist.txt")
	if err := os.WriteFile(auth, []byte(quoteAuth(server.User)+` ""`+"\n"), 0o644); err != nil {
		return "", err
	}
	settings := maps.Clone(pgBouncerSettings)
	if opts.PoolMode != "" {
		settings["pool_mode"] = opts.PoolMode
	}
	maps.Copy(settings, opts.Settings)
	settings["listen_port"] = strconv.Itoa(b.port)
	settings["auth_file"] = auth
	settings["logfile"] = b.LogPath()

	// The server's side: pgx's parsed host, port, database, user and
	// password, in pgbouncer's libpq-style key=value syntax.
	db := []string{
		"host=" + quoteINI(server.Host),
		"port=" + strconv.Itoa(int(server.Port)),
		"dbname=" + quoteINI(server.Database),
		"user=" + quoteINI(server.User),
	}
	if server.Password != "" {
		db = append(db, "password="+quoteINI(server.Password))
	}
	var ini strings.Builder
	ini.WriteString("[databases]\n")
	fmt.Fprintf(&ini, "%s = %s\n", quoteINI(b.database), strings.Join(db, " "))
	ini.WriteString("\n[pgbouncer]\n")
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		fmt.Fprintf(&ini, "%s = %s\n", name, settings[name])
	}
	path := filepath.Join(b.dir, "pgbouncer.ini")
	if err := os.WriteFile(path, []byte(ini.String()), 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// waitReady returns once pgbouncer accepts connections on its port, or with
// its log when it exited first, or when ctx ends.
func (b *PgBouncer) waitReady(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = conn.Close()
			return nil
		}
		select {
		case <-b.done:
			log, _ := os.ReadFile(b.LogPath())
			err := fmt.Errorf("pgbouncer exited (%v): %s", b.waitErr, strings.TrimSpace(string(log)))
			if strings.Contains(string(log), "Address already in use") {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return err
		case <-ctx.Done():
			return fmt.Errorf("waiting for pgbouncer on %s: %w", addr, ctx.Err())
		case <-tick.C:
		}
	}
}

// pgBouncerFallback is where Debian installs pgbouncer, which a user's PATH
// may lack.
var pgBouncerFallback = "/usr/sbin/pgbouncer"

// findPgBouncer returns pgbouncer from PATH, else pgBouncerFallback.
func findPgBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if isExecutable(pgBouncerFallback) {
		return pgBouncerFallback, nil
	}
	return "", fmt.Errorf("pgbouncer not found on PATH or at %s (Debian: apt-get install pgbouncer)", pgBouncerFallback)
}

// quoteINI quotes a value of pgbouncer's [databases] section when needed.
func quoteINI(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t'\\=;#") {
		return s
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// quoteAuth quotes a user name for pgbouncer's auth file.
func quoteAuth(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
