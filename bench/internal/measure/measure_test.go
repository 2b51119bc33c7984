package measure

import (
	"os"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	t.Parallel()

	// A command name with a space and a parenthesis, as a process title
	// may hold; utime 150, stime 50, cutime 300, cstime 100 ticks.
	line := "4242 (postgres: a) b) S 4200 4200 4200 0 -1 4194560 100 0 0 0 150 50 300 100 20 0 1 0 1234 0 0\n"
	st, ok := parseProcStat(line)
	if !ok {
		t.Fatalf("parseProcStat(%q) failed", line)
	}
	if st.name != "postgres: a) b" || st.ppid != 4200 || st.cpu != 2*time.Second || st.childrenCPU != 4*time.Second {
		t.Fatalf("parsed %+v, want name %q, ppid 4200, cpu 2s, children 4s", st, "postgres: a) b")
	}
	for _, bad := range []string{"", "4242 postgres S 1", "4242 (postgres) S 4200 1 2"} {
		if _, ok := parseProcStat(bad); ok {
			t.Errorf("parseProcStat(%q) succeeded, want a failure", bad)
		}
	}
}

func TestServerCPUCountsTheProcessItself(t *testing.T) {
	t.Parallel()

	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system")
	}
	self := os.Getpid()
	// Read the process's own figure first: the server figure, read after,
	// includes it and can only have grown since.
	own := PIDCPU(self)
	if got := ServerCPU(self); got < own {
		t.Fatalf("ServerCPU(self) = %s, below the process's own %s", got, own)
	}
	if got := ServerCPU(-1); got != 0 {
		t.Fatalf("ServerCPU of no process = %s, want 0", got)
	}
	if _, ok := Postmaster(self); ok {
		t.Fatalf("Postmaster(%d) found a PostgreSQL server above the test process", self)
	}
}
