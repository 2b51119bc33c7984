//go:build unix

package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// startCluster creates and starts an ephemeral cluster with the local
// initdb and pg_ctl, in a temporary directory removed by stop. As root (CI
// containers) it runs them as the postgres user, since initdb refuses root.
func startCluster(ctx context.Context) (_ *server, err error) {
	initdb, pgctl, err := findBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := clusterCredential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "vantage-pgtest-")
	if err != nil {
		return nil, err
	}
	cleanupDir := func() { _ = os.RemoveAll(dir) }
	defer func() {
		if err != nil {
			cleanupDir()
		}
	}()
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	run := func(ctx context.Context, name string, args ...string) error {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", filepath.Base(name), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := run(ctx, initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
		return nil, err
	}
	// fsync off: the cluster is thrown away. Enough connections for
	// parallel tests that each open their own pools and listeners.
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300", port, dir)
	if err := run(ctx, pgctl, "-D", data, "-l", filepath.Join(dir, "log"), "-o", opts, "-w", "-t", "60", "start"); err != nil {
		return nil, err
	}
	stop := func() {
		// Not ctx: it ends with the search, and stop runs at the end of
		// the tests.
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = run(stopCtx, pgctl, "-D", data, "-m", "immediate", "-w", "stop")
		cleanupDir()
	}
	cs := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	s, err := connect(ctx, cs, "ephemeral cluster in "+dir)
	if err != nil {
		stop()
		return nil, err
	}
	s.stop = stop
	return s, nil
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

// clusterCredential returns the postgres user's credential when running as
// root, nil otherwise.
func clusterCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root and no postgres user to run initdb as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
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
