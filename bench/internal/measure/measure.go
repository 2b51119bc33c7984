// Package measure holds the benchmark's instruments: latency percentiles,
// the process's peak resident set size and CPU time, and the CPU time of
// PostgreSQL's processes, its backends' or a whole server's.
package measure

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vantage-go/vantage/internal/proccpu"
)

// Latencies collects durations from many goroutines.
type Latencies struct {
	mu sync.Mutex
	ds []time.Duration
}

// Add records one duration.
func (l *Latencies) Add(d time.Duration) {
	l.mu.Lock()
	l.ds = append(l.ds, d)
	l.mu.Unlock()
}

// Len returns the number of durations recorded.
func (l *Latencies) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ds)
}

// Percentiles returns the p-quantiles (0 < p ≤ 1, nearest rank) of the
// recorded durations in milliseconds; zeros when none were recorded.
func (l *Latencies) Percentiles(ps ...float64) []float64 {
	l.mu.Lock()
	ds := slices.Clone(l.ds)
	l.mu.Unlock()
	return Percentiles(ds, ps...)
}

// Percentiles returns the p-quantiles (0 < p ≤ 1, nearest rank) of ds in
// milliseconds; zeros when ds is empty. It sorts ds.
func Percentiles(ds []time.Duration, ps ...float64) []float64 {
	slices.Sort(ds)
	out := make([]float64, len(ps))
	if len(ds) == 0 {
		return out
	}
	for i, p := range ps {
		rank := int(p*float64(len(ds))+0.999999) - 1
		rank = min(max(rank, 0), len(ds)-1)
		out[i] = float64(ds[rank]) / float64(time.Millisecond)
	}
	return out
}

// PeakRSSMB returns the process's peak resident set size (VmHWM) in MiB.
func PeakRSSMB() (float64, error) { return statusMiB("VmHWM:") }

// RSSMB returns the process's resident set size (VmRSS) in MiB.
func RSSMB() (float64, error) { return statusMiB("VmRSS:") }

func statusMiB(field string) (float64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, field) {
			continue
		}
		fields := strings.Fields(line[len(field):])
		if len(fields) == 0 {
			break
		}
		kb, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, err
		}
		return kb / 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s line in /proc/self/status", field)
}

// ResetPeakRSS resets VmHWM to the current RSS (Linux 4.0+), so the peak
// measured afterwards excludes what came before (seeding, for instance).
func ResetPeakRSS() error {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// ProcessCPU returns the user and system CPU time the process used so far.
func ProcessCPU() time.Duration { return proccpu.Used() }

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times; 100 on every
// Linux platform Go supports.
const clockTicks = 100

// PIDCPU returns the CPU time (user + system) of process pid, read from
// /proc/<pid>/stat; 0 if it is gone.
func PIDCPU(pid int) time.Duration {
	st, ok := readProcStat(pid)
	if !ok {
		return 0
	}
	return st.cpu
}

// ServerCPU returns the CPU time (user + system) that server process pid
// and its children used: its own, that of the children it has reaped
// (for a PostgreSQL postmaster, the backends and workers that ended, such
// as autovacuum's), and that of its children still running. It reads
// every /proc/<pid>/stat of the machine, a few hundred files; a child that
// ends during the reading may be counted twice or not at all. 0 if pid is
// gone.
func ServerCPU(pid int) time.Duration {
	st, ok := readProcStat(pid)
	if !ok {
		return 0
	}
	total := st.cpu + st.childrenCPU
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return total
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		if cs, ok := readProcStat(child); ok && cs.ppid == pid {
			total += cs.cpu
		}
	}
	return total
}

// Postmaster returns the pid of the PostgreSQL server of which backendPID
// (pg_backend_pid() of a connection) is a backend, when the server runs on
// this machine: the parent of backendPID, provided both are named
// postgres. ok is false otherwise, for a server on another machine for
// instance, whose pids mean nothing here.
func Postmaster(backendPID int) (pid int, ok bool) {
	b, ok := readProcStat(backendPID)
	if !ok || b.name != "postgres" {
		return 0, false
	}
	pm, ok := readProcStat(b.ppid)
	if !ok || (pm.name != "postgres" && pm.name != "postmaster") {
		return 0, false
	}
	return b.ppid, true
}

// procStat holds the fields of /proc/<pid>/stat the package reads.
type procStat struct {
	name        string
	ppid        int
	cpu         time.Duration // utime + stime
	childrenCPU time.Duration // cutime + cstime: the children waited for
}

func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, false
	}
	return parseProcStat(string(b))
}

// parseProcStat parses the text of /proc/<pid>/stat.
func parseProcStat(s string) (procStat, bool) {
	// The command name is in parentheses and may hold spaces and
	// parentheses: it ends at the last ')'.
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procStat{}, false
	}
	f := strings.Fields(s[end+1:])
	// f[0] is field 3 (state), f[1] field 4 (ppid); utime, stime, cutime
	// and cstime are fields 14 to 17.
	if len(f) < 15 {
		return procStat{}, false
	}
	var n [5]int64
	for i, k := range []int{1, 11, 12, 13, 14} {
		v, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return procStat{}, false
		}
		n[i] = v
	}
	return procStat{
		name:        s[open+1 : end],
		ppid:        int(n[0]),
		cpu:         time.Duration(n[1]+n[2]) * time.Second / clockTicks,
		childrenCPU: time.Duration(n[3]+n[4]) * time.Second / clockTicks,
	}, true
}

// PostgresAuxCPU returns the summed CPU time of the PostgreSQL processes
// that are not client backends (WAL writer, checkpointer, background
// writer, autovacuum, ...), recognised by their process titles.
func PostgresAuxCPU() time.Duration {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var total time.Duration
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		title := string(cmd)
		if !strings.HasPrefix(title, "postgres: ") {
			continue
		}
		for _, aux := range []string{"walwriter", "checkpointer", "background writer", "autovacuum", "logical replication launcher", "stats"} {
			if strings.Contains(title, aux) {
				total += PIDCPU(pid)
				break
			}
		}
	}
	return total
}

// MachineBusy returns the CPU time all processes of the machine spent
// busy (not idle, not waiting for I/O) since boot, from /proc/stat.
func MachineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest times are included in user already
			break
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks
}
