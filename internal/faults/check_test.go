package faults

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// steps returns events 1..n, with the faults given by version.
func steps(n int, faults map[int64]string) []storedEvent {
	evs := make([]storedEvent, n)
	for i := range evs {
		v := int64(i + 1)
		evs[i] = storedEvent{version: v, fault: faults[v]}
	}
	return evs
}

func deadLetter(stream uuid.UUID, perspective string, version int64, reason, errText string) ports.DeadLetter {
	return ports.DeadLetter{StreamID: stream, Perspective: perspective, EventVersion: version, Reason: reason,
		Error: errText, Attempts: maxAttempts, Generation: failedGeneration, Status: ports.DeadLetterDead}
}

// checks returns the check names of findings, in order.
func checks(findings []Finding) []string {
	var out []string
	for _, f := range findings {
		out = append(out, f.Check)
	}
	return out
}

func TestCheck(t *testing.T) {
	t.Parallel()
	s := uuid.MustParse("00000000-0000-0000-0000-000000000001")
	// dataset returns a stream of n events whose projection rows are its
	// history.
	dataset := func(n int, faults map[int64]string, history []int64, count int64, dead ...ports.DeadLetter) *dataset {
		return &dataset{
			events:  map[uuid.UUID][]storedEvent{s: steps(n, faults)},
			history: map[uuid.UUID][]int64{s: history},
			counts:  map[uuid.UUID]int64{s: count},
			rows:    map[uuid.UUID][]int64{s: slices.Clone(history)},
			dead:    dead,
			pending: map[string]map[eventKey]bool{},
		}
	}
	poisoned := func(p string) ports.DeadLetter {
		return deadLetter(s, p, 2, ports.ReasonFailed, "poison event (seq 9)")
	}

	t.Run("AllAppliedInOrder", func(t *testing.T) {
		t.Parallel()
		c, f := check(dataset(3, nil, []int64{1, 2, 3}, 3), nil)
		require.Empty(t, f)
		require.Zero(t, c)
	})
	t.Run("DeadLetteredPoisonExplainsItsGap", func(t *testing.T) {
		t.Parallel()
		d := dataset(3, map[int64]string{2: FaultPoison}, []int64{1, 3}, 2,
			poisoned(HistoryPerspective), poisoned(CountPerspective), poisoned(RowsProjection))
		c, f := check(d, nil)
		require.Empty(t, f)
		require.Zero(t, c)
	})
	t.Run("Lost", func(t *testing.T) {
		t.Parallel()
		d := dataset(3, nil, []int64{1}, 1)
		d.pending[HistoryPerspective] = map[eventKey]bool{{s, 3}: true}
		c, f := check(d, nil)
		require.Equal(t, Counts{Lost: 6}, c, "two events in each perspective")
		require.Equal(t, []string{CheckLost, CheckLost, CheckLost, CheckLost, CheckLost}, checks(f))
		require.Contains(t, f[0].Detail, "no work row left")
		require.Contains(t, f[1].Detail, "still pending")
		require.Equal(t, RowsProjection, f[2].Perspective)
		require.Contains(t, f[3].Detail, "no work row left", "pending for the history only")
		require.Contains(t, f[4].Detail, "counted 1 events, want 3")
	})
	t.Run("Skipped", func(t *testing.T) {
		t.Parallel()
		c, f := check(dataset(3, nil, []int64{1, 3}, 3), nil)
		require.Equal(t, Counts{Skipped: 2}, c, "in the history and the rows")
		require.Equal(t, CheckSkipped, f[0].Check)
		require.Equal(t, int64(2), f[0].Version)
	})
	t.Run("OutOfOrder", func(t *testing.T) {
		t.Parallel()
		c, f := check(dataset(3, nil, []int64{1, 3, 2}, 3), nil)
		require.Equal(t, Counts{Skipped: 2}, c)
		require.Contains(t, f[0].Detail, "applied after version 3")
	})
	t.Run("Double", func(t *testing.T) {
		t.Parallel()
		c, f := check(dataset(2, nil, []int64{1, 2, 2, 7}, 3), nil)
		require.Equal(t, Counts{Double: 5}, c, "a repeat, an unknown version (history and rows), one too many counted")
		require.Equal(t, []string{CheckDouble, CheckDouble, CheckDouble, CheckDouble, CheckDouble}, checks(f))
	})
	t.Run("RowsWrittenTwice", func(t *testing.T) {
		t.Parallel()
		d := dataset(3, nil, []int64{1, 2, 3}, 3)
		d.rows[s] = []int64{1, 2, 2, 3}
		c, f := check(d, nil)
		require.Equal(t, Counts{Double: 1}, c, "the models are right, the table is not")
		require.Equal(t, []string{CheckDouble}, checks(f))
		require.Equal(t, RowsProjection, f[0].Perspective)
		require.Equal(t, int64(2), f[0].Version)
	})
	t.Run("HealthyDeadLettered", func(t *testing.T) {
		t.Parallel()
		dl := deadLetter(s, RowsProjection, 2, ports.ReasonFailed, "FATAL: terminating connection due to administrator command (SQLSTATE 57P01)")
		d := dataset(3, nil, []int64{1, 2, 3}, 3, dl)
		d.rows[s] = []int64{1, 3}
		c, f := check(d, nil)
		require.Equal(t, Counts{HealthyDeadLettered: 1}, c, "counted once, not as skipped too")
		require.Equal(t, []string{CheckHealthyDeadLettered}, checks(f))
	})
	t.Run("RequeuedDeadLetterExplainsNothing", func(t *testing.T) {
		t.Parallel()
		dl := poisoned(HistoryPerspective)
		dl.Status = ports.DeadLetterRequeued
		c, _ := check(dataset(3, map[int64]string{2: FaultPoison}, []int64{1, 3}, 3, dl), nil)
		require.Equal(t, 2, c.Skipped, "in the history and the rows")
	})
	t.Run("FaultEventApplied", func(t *testing.T) {
		t.Parallel()
		c, f := check(dataset(2, map[int64]string{2: FaultHang}, []int64{1, 2}, 2), nil)
		require.Zero(t, c)
		require.Equal(t, []string{CheckFaultOutcome, CheckFaultOutcome}, checks(f))
	})
	t.Run("MustApply", func(t *testing.T) {
		t.Parallel()
		d := dataset(3, map[int64]string{2: FaultPoison}, []int64{1, 3}, 2,
			poisoned(HistoryPerspective), poisoned(CountPerspective), poisoned(RowsProjection))
		c, f := check(d, map[eventKey]bool{{s, 2}: true})
		require.Equal(t, Counts{Skipped: 2, Lost: 1}, c, "the dead letters explain nothing once requeued")
		require.Equal(t, []string{CheckSkipped, CheckSkipped, CheckLost}, checks(f))
		require.Contains(t, cleanReplay(d, s), "want 1..3 in order")

		d = dataset(3, map[int64]string{2: FaultPoison}, []int64{1, 2, 3}, 3)
		c, f = check(d, map[eventKey]bool{{s, 2}: true})
		require.Zero(t, c)
		require.Empty(t, f)
		require.Empty(t, cleanReplay(d, s))

		d.rows[s] = []int64{1, 2, 3, 2}
		require.Contains(t, cleanReplay(d, s), RowsTable+" holds [1 2 3 2]")
	})
	t.Run("DeadLetterRecord", func(t *testing.T) {
		t.Parallel()
		dl := poisoned(HistoryPerspective)
		dl.Reason, dl.Error, dl.Attempts, dl.Generation = ports.ReasonMaxAttemptsExceeded, "gave up", 4, ""
		_, f := check(dataset(3, map[int64]string{2: FaultPoison}, []int64{1, 3}, 2, dl, poisoned(CountPerspective), poisoned(RowsProjection)), nil)
		require.Equal(t, []string{CheckDeadLetterRecord}, checks(f))
		for _, want := range []string{`reason "max_attempts_exceeded", want "failed"`, `error "gave up"`, "4 attempts, want 3", `generation "", want "v1"`} {
			require.Contains(t, f[0].Detail, want)
		}
	})
}

func TestRecovery(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(s float64, lag float64, ok bool) lagSample {
		return lagSample{at: t0.Add(time.Duration(s * float64(time.Second))), lag: time.Duration(lag * float64(time.Second)), ok: ok}
	}
	threshold := 2 * time.Second
	d, peak, ok := recovery([]lagSample{at(-1, 5, true), at(0, 0.1, true), at(1, 0.2, true)}, t0, threshold)
	require.True(t, ok)
	require.Zero(t, d, "samples before the fault do not count")
	require.Equal(t, 200*time.Millisecond, peak)

	d, peak, ok = recovery([]lagSample{at(0, 0.1, true), at(1, 0, false), at(2, 3, true), at(3, 1, true), at(4, 0.1, true)}, t0, threshold)
	require.True(t, ok)
	require.Equal(t, 3*time.Second, d, "until the first good sample after the last bad one")
	require.Equal(t, 3*time.Second, peak)

	_, _, ok = recovery([]lagSample{at(0, 0.1, true), at(1, 3, true)}, t0, threshold)
	require.False(t, ok, "still above the threshold at the end")
}

func TestFindingString(t *testing.T) {
	t.Parallel()
	s := uuid.MustParse("00000000-0000-0000-0000-000000000001")
	require.Equal(t, "caught-up: 3 pending", Finding{Check: CheckCaughtUp, Detail: "3 pending"}.String())
	require.Equal(t, "lost: stream "+s.String()+" fault_history version 4: gone",
		Finding{Check: CheckLost, Stream: s, Perspective: HistoryPerspective, Version: 4, Detail: "gone"}.String())
}

func TestConfig(t *testing.T) {
	t.Parallel()
	c, err := Config{}.withDefaults()
	require.NoError(t, err)
	require.Len(t, c.Faults, len(scenarios), "every scenario by default")
	require.Equal(t, RateDefault, c.Rate)

	_, err = Config{Faults: []string{"nope"}, Rate: -1, Settle: -time.Second}.withDefaults()
	require.ErrorContains(t, err, `unknown fault "nope"`)
	require.ErrorContains(t, err, "Config.Rate must be positive")
	require.ErrorContains(t, err, "Config.Settle must not be negative")

	short := ShortConfig()
	require.NotContains(t, short.Faults, "none")
	require.Len(t, short.Faults, len(scenarios)-1)
}

func TestWithApplicationName(t *testing.T) {
	t.Parallel()
	u, err := withApplicationName("postgres://h/db?sslmode=disable", "w1")
	require.NoError(t, err)
	require.Equal(t, "postgres://h/db?sslmode=disable&application_name=w1", u)
	u, err = withApplicationName("postgres://h/db", "w1")
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(u, "?application_name=w1"))
	_, err = withApplicationName(u, "w2")
	require.Error(t, err)
}

func TestLockWait(t *testing.T) {
	t.Parallel()
	ms, ok := lockWait("2026-12-06 20:44:50.228 UTC [2403] pause-1-w2: LOG:  process 2403 acquired ShareLock on transaction 3201 after 7537.137 ms")
	require.True(t, ok)
	require.InDelta(t, 7537.137, ms, 1e-9)
	_, ok = lockWait("2026-12-06 20:44:43.646 UTC [2434] pause-1-w3: LOG:  process 2434 still waiting for ShareLock on transaction 3201 after 1001.012 ms")
	require.False(t, ok, "still waiting: not acquired yet")
}
