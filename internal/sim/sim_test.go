package sim_test

import (
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/vantage-go/vantage/internal/pgtest"
	"github.com/vantage-go/vantage/internal/sim"
)

var (
	flagSeed    = flag.Uint64("sim.seed", 0, "replay this seed (0: draw fresh seeds)")
	flagSeeds   = flag.Int("sim.seeds", 0, "how many fresh seeds to run per backend (0: the smoke run, unless -sim.time)")
	flagTime    = flag.Duration("sim.time", 0, "run fresh seeds per backend until this much real time passed")
	flagRepeat  = flag.Int("sim.repeat", 1, "how many times to run -sim.seed")
	flagBackend = flag.String("sim.backend", "all", "memory, postgres or all")
	flagVerbose = flag.Bool("sim.v", false, "print the trace of every seed, not only of the failing ones")
	flagShort   = flag.Bool("sim.short", false, "a short fault phase, as the smoke run has")
	flagCalm    = flag.Bool("sim.calm", false, "no fault and no operation, appends only (checks the simulator's bounds)")
	flagFocus   = flag.String("sim.focus", "", "make every instance fault one kind: crash, stop, fail, block, lock, jump or reports")
	flagWatch   = flag.String("sim.watch", "", "trace the completions, failures, fetches and saves of the streams whose id starts with this")
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.WrapMain(m)) }

// TestSim runs the simulator: by default a smoke run (two short memory
// seeds and one PostgreSQL seed), or what the flags ask for. Every seed is
// printed to stdout; a failing one prints its violations, its trace and the
// command that replays it.
func TestSim(t *testing.T) {
	t.Parallel()
	backends := []string{sim.Memory, sim.Postgres}
	switch *flagBackend {
	case "all":
	case sim.Memory, sim.Postgres:
		backends = []string{*flagBackend}
	default:
		t.Fatalf("-sim.backend must be memory, postgres or all, got %q", *flagBackend)
	}
	// Seeds run one after another, never in parallel: sim time is paced on
	// real time, and seeds running at once would slow each other down.
	for _, backend := range backends {
		switch {
		case *flagSeed != 0:
			for range max(*flagRepeat, 1) {
				runSeed(t, backend, *flagSeed, false)
			}
		case *flagTime > 0:
			deadline := time.Now().Add(*flagTime)
			for n := 0; time.Now().Before(deadline); n++ {
				runSeed(t, backend, freshSeed(t), false)
			}
		case *flagSeeds > 0:
			for range *flagSeeds {
				runSeed(t, backend, freshSeed(t), false)
			}
		default:
			smoke := map[string]int{sim.Memory: 2, sim.Postgres: 1}[backend]
			for range smoke {
				runSeed(t, backend, freshSeed(t), true)
			}
		}
	}
}

// runSeed runs one seed as a subtest and reports it.
func runSeed(t *testing.T, backend string, seed uint64, short bool) {
	t.Run(fmt.Sprintf("%s/seed=%d", backend, seed), func(t *testing.T) {
		short = short || *flagShort
		res := sim.Run(t, sim.Config{Seed: seed, Backend: backend, Short: short, Calm: *flagCalm, Focus: *flagFocus, Watch: *flagWatch})
		fmt.Fprintln(os.Stdout, res.Summary())
		if *flagVerbose && !res.Failed() {
			fmt.Fprintln(os.Stdout, res.Report())
		}
		if res.Failed() {
			t.Errorf("%s\n%s\nreplay: go test ./internal/sim -run TestSim -sim.backend=%s -sim.seed=%d%s", res.Summary(), res.Report(), backend, seed, shortArg(short))
		}
	})
}

// freshSeed draws a seed from crypto/rand.
func freshSeed(t *testing.T) uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(b[:])>>1 | 1
}

func shortArg(short bool) string {
	if short {
		return " -sim.short"
	}
	return ""
}
