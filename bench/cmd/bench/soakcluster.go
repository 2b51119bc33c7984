package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// soakMaxConnections is the soak cluster's max_connections: the soak's
// pools (the appenders' 16, each instance's -pool, the checks') and the
// instances' listeners, with room to spare.
const soakMaxConnections = 200

// soakStatementsSettings make the soak cluster's server count the
// statements' costs (pg_stat_statements, a contrib module shipped with
// PostgreSQL) when the module is installed: the samples read them. Only
// top-level statements are tracked: the engine's and the appenders', not
// those run by functions they call.
const soakStatementsSettings = "-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=top"

// soakCluster is the soak's own PostgreSQL server, made with initdb and
// pg_ctl of one installation in a temporary directory and listening on a
// free port of 127.0.0.1 and on a socket in that directory, with user
// postgres and trust authentication. Its settings are initdb's, so those
// of a fresh production install (autovacuum on, fsync and
// synchronous_commit on, the default checkpoints), but for
// max_connections and, when the installation has it,
// soakStatementsSettings, with the extension created in the postgres
// database. When the benchmark runs as root the binaries run as the
// postgres user, since initdb and pg_ctl refuse root.
type soakCluster struct {
	dir   string // data, log and socket
	data  string
	log   string
	pgctl string
	port  int
	asPG  bool // run the binaries as the postgres user
	// statements says the server preloads pg_stat_statements and the
	// postgres database has the extension.
	statements bool
}

// startSoakCluster creates and starts a cluster with the binaries of
// pgBin. The caller must stop it, which removes it.
func startSoakCluster(ctx context.Context, pgBin string) (_ *soakCluster, err error) {
	initdb, pgctl := filepath.Join(pgBin, "initdb"), filepath.Join(pgBin, "pg_ctl")
	for _, bin := range []string{initdb, pgctl} {
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("-pg-bin: %w", err)
		}
	}
	dir, err := os.MkdirTemp("", "vantage-soak-")
	if err != nil {
		return nil, err
	}
	c := &soakCluster{dir: dir, data: filepath.Join(dir, "data"), log: filepath.Join(dir, "server.log"), pgctl: pgctl, asPG: os.Geteuid() == 0}
	defer func() {
		if err != nil {
			_ = c.stop()
		}
	}()
	if c.asPG {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root and no postgres user to run initdb as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	if c.port, err = freeTCPPort(); err != nil {
		return nil, err
	}
	if err := c.run(ctx, initdb, "-D", c.data, "-U", "postgres", "-A", "trust", "-E", "UTF8"); err != nil {
		return nil, err
	}
	opts := fmt.Sprintf("-p %d -k '%s' -c listen_addresses=127.0.0.1 -c max_connections=%d", c.port, dir, soakMaxConnections)
	statements := statementsInstalled(ctx, pgBin)
	if statements {
		opts += " " + soakStatementsSettings
	}
	// pg_ctl starts the server in a session of its own, so an interrupt
	// at the terminal reaches the benchmark, which stops it, and not the
	// server.
	if err := c.run(ctx, pgctl, "-D", c.data, "-l", c.log, "-o", opts, "-w", "-t", "120", "start"); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, c.logTail(20))
	}
	if statements {
		// Without the extension the soak runs as before, and its child
		// says that the statements' costs are missing.
		if err := c.createStatementsExtension(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "bench: creating pg_stat_statements on the soak's cluster: %v\n", err)
		} else {
			c.statements = true
		}
	}
	return c, nil
}

// statementsInstalled reports whether the PostgreSQL installation of pgBin
// has the pg_stat_statements module: its library and its extension
// control file, where pg_config says they belong.
func statementsInstalled(ctx context.Context, pgBin string) bool {
	out, err := exec.CommandContext(ctx, filepath.Join(pgBin, "pg_config"), "--pkglibdir", "--sharedir").Output()
	if err != nil {
		return false
	}
	dirs := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(dirs) != 2 {
		return false
	}
	for _, f := range []string{
		filepath.Join(dirs[0], "pg_stat_statements.so"),
		filepath.Join(dirs[1], "extension", "pg_stat_statements.control"),
	} {
		if _, err := os.Stat(f); err != nil {
			return false
		}
	}
	return true
}

// createStatementsExtension creates pg_stat_statements in the postgres
// database, the soak's.
func (c *soakCluster) createStatementsExtension(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(cctx, c.url())
	if err != nil {
		return err
	}
	defer conn.Close(cctx)
	_, err = conn.Exec(cctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
	return err
}

// url is the connection URL of the cluster's postgres database.
func (c *soakCluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// stop stops the server, if it runs, and removes its directory. A fast
// shutdown disconnects the clients; an immediate one follows if it fails.
func (c *soakCluster) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	if _, serr := os.Stat(filepath.Join(c.data, "postmaster.pid")); serr == nil {
		if err = c.run(ctx, c.pgctl, "-D", c.data, "-m", "fast", "-w", "-t", "60", "stop"); err != nil {
			err = c.run(ctx, c.pgctl, "-D", c.data, "-m", "immediate", "-w", "-t", "30", "stop")
		}
	}
	return errors.Join(err, os.RemoveAll(c.dir))
}

// run runs a PostgreSQL binary in the cluster's directory, as the postgres
// user when the benchmark is root.
func (c *soakCluster) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	if c.asPG {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	cmd.Dir = c.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", filepath.Base(name), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// logTail returns the last n lines of the server log.
func (c *soakCluster) logTail(n int) string {
	b, err := os.ReadFile(c.log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// freeTCPPort returns a TCP port free on 127.0.0.1 at the time of the
// call.
func freeTCPPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
