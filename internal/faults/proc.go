package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
)

// Bounds of the process waits.
const (
	readyTimeout = 30 * time.Second
	killWait     = 10 * time.Second
)

// CommandFunc returns the command that runs a worker process with args
// (the flags of WorkerMain). The suite sets its output and starts it.
type CommandFunc func(args []string) (*exec.Cmd, error)

// SelfCommand runs this executable again as a worker process, with
// WorkerEnv set: its main (or TestMain) must call WorkerMain when IsWorker
// reports true. It is the default CommandFunc.
func SelfCommand(args []string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this executable: %w", err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), WorkerEnv+"=1")
	return cmd, nil
}

// process is one worker process of a run.
type process struct {
	name       string // also its application_name in pg_stat_activity
	generation string
	fixed      bool
	instanceID uuid.UUID
	logPath    string // the worker's JSON log
	stderrPath string // its standard error: panics, races, start-up errors
	cmd        *exec.Cmd
	exited     chan struct{} // closed once the process was reaped
	exitErr    error         // how it exited; read after exited is closed
	// ended is set when the suite killed or stopped the process on
	// purpose; any other exit is a failure of the run.
	ended atomic.Bool
}

// startProcess starts a worker process named name in dir, on the database
// URL db (to which it adds application_name=name), and waits until it is
// ready. On error the process is killed.
func startProcess(ctx context.Context, command CommandFunc, dir, name, db, schema, generation string, fixed bool) (_ *process, err error) {
	db, err = withApplicationName(db, name)
	if err != nil {
		return nil, err
	}
	p := &process{
		name:       name,
		generation: generation,
		fixed:      fixed,
		logPath:    filepath.Join(dir, name+".log"),
		stderrPath: filepath.Join(dir, name+".stderr"),
		exited:     make(chan struct{}),
	}
	args := []string{"-db", db, "-schema", schema, "-log", p.logPath}
	if generation != "" {
		args = append(args, "-generation", generation)
	}
	if fixed {
		args = append(args, "-fixed")
	}
	cmd, err := command(args)
	if err != nil {
		return nil, err
	}
	stderr, err := os.Create(p.stderrPath)
	if err != nil {
		return nil, err
	}
	defer stderr.Close() // the child holds its own descriptor
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting worker %s: %w", name, err)
	}
	p.cmd = cmd
	ready := make(chan uuid.UUID, 1)
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), readyLine); ok {
				if u, err := uuid.Parse(id); err == nil {
					ready <- u
				}
			}
		}
		// Wait only once the pipe is drained, as os/exec requires.
		p.exitErr = cmd.Wait()
	}()
	defer func() {
		if err != nil {
			p.kill()
		}
	}()
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case p.instanceID = <-ready:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("worker %s exited before it was ready (%v): %s", name, p.exitErr, tail(p.stderrPath, 20))
	case <-timer.C:
		return nil, fmt.Errorf("worker %s not ready after %s: %s", name, readyTimeout, tail(p.stderrPath, 20))
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// kill sends SIGKILL (kill -9) and waits, bounded, until it is reaped.
func (p *process) kill() {
	p.ended.Store(true)
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(killWait):
	}
}

// pause freezes the process (SIGSTOP): it keeps its connections and
// locks, and does nothing until resume.
func (p *process) pause() error {
	if freezeSignal == nil {
		return fmt.Errorf("pausing %s: %w", p.name, errors.ErrUnsupported)
	}
	if err := p.cmd.Process.Signal(freezeSignal); err != nil {
		return fmt.Errorf("pausing %s: %w", p.name, err)
	}
	return nil
}

// resume lets a paused process run on (SIGCONT).
func (p *process) resume() error {
	if thawSignal == nil {
		return fmt.Errorf("resuming %s: %w", p.name, errors.ErrUnsupported)
	}
	if err := p.cmd.Process.Signal(thawSignal); err != nil {
		return fmt.Errorf("resuming %s: %w", p.name, err)
	}
	return nil
}

// stop asks the process to stop (SIGTERM) and waits up to timeout for it
// to exit, then kills it. It returns nil when the process exited by itself
// in time with status 0, else what happened.
func (p *process) stop(timeout time.Duration) error {
	p.ended.Store(true)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.kill()
		return fmt.Errorf("signalling it: %w; killed", err)
	}
	select {
	case <-p.exited:
		if p.exitErr != nil {
			return fmt.Errorf("it stopped with %w", p.exitErr)
		}
		return nil
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("it did not stop within %s; killed", timeout)
	}
}

// unexpectedExit returns how the process exited when it exited without
// the suite asking it to; nil while it runs or after an asked-for exit.
func (p *process) unexpectedExit() error {
	select {
	case <-p.exited:
		if !p.ended.Load() {
			return fmt.Errorf("exited on its own: %v", p.exitErr)
		}
	default:
	}
	return nil
}

// withApplicationName sets the application_name parameter of a URL, so the
// process's connections (its pool and its listener) can be found in
// pg_stat_activity.
func withApplicationName(db, name string) (string, error) {
	sep := "?"
	if strings.Contains(db, "?") {
		sep = "&"
	}
	if strings.Contains(db, "application_name=") {
		return "", fmt.Errorf("database URL %q already names an application", db)
	}
	return db + sep + "application_name=" + name, nil
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
