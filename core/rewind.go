package core

import (
	"fmt"
	"time"

	"github.com/vantage-go/vantage/core/internal/rewind"
)

// StartupScanMode says whether the startup rewind scan holds the startup
// signal until every interrupted rewind is repaired.
type StartupScanMode int

const (
	// StartupScanBlocking repairs interrupted rewinds before
	// StartupScanComplete is signalled (bounded: 100 polls).
	StartupScanBlocking = StartupScanMode(rewind.ScanBlocking)
	// StartupScanBackground signals at once and repairs in the background.
	StartupScanBackground = StartupScanMode(rewind.ScanBackground)
	// StartupScanDisabled skips the scan.
	StartupScanDisabled = StartupScanMode(rewind.ScanDisabled)
)

// Defaults of RewindOptions.
const (
	RewindDebounceDefault       = 5 * time.Second
	RewindMaxDebounceDefault    = 30 * time.Second
	RewindLockTimeoutDefault    = 30 * time.Second
	RewindKeepAliveDefault      = 10 * time.Second
	MaxConcurrentRewindsDefault = 3
)

// RewindOptions configure rewinds: replaying a (stream, perspective) after
// an event arrived below its cursor.
type RewindOptions struct {
	// Disabled turns rewinds off. A late event (stored below its pair's
	// cursor) is then moved to dead letters with reason "late", never
	// applied out of order nor completed unapplied; requeue it once rewinds
	// are on.
	Disabled bool
	// StartupScan selects the startup scan mode. Defaults to
	// StartupScanBlocking.
	StartupScan StartupScanMode
	// MaxConcurrentRewinds bounds rewinds running at once. Defaults to 3.
	MaxConcurrentRewinds int
	// Debounce is the sliding window after the latest late event before a
	// rewind starts, so a burst of late events causes one rewind. Defaults
	// to 5s.
	Debounce time.Duration
	// MaxDebounce caps the wait from the first late event. Defaults to 30s.
	MaxDebounce time.Duration
	// LockTimeout is how long the rewind lock lasts without renewal.
	// Defaults to 30s.
	LockTimeout time.Duration
	// KeepAlive is how often a running rewind renews its lock. Defaults to
	// 10s; must be below LockTimeout.
	KeepAlive time.Duration
	// SnapshotEvery stores a model snapshot whenever a saved model crosses a
	// multiple of that many stream versions (in normal processing, rewinds
	// and rebuilds), so a rewind replays from the latest snapshot before its
	// trigger instead of from the start. A snapshot holds the pair's epoch
	// of the model it copies, and a rewind starts only from one of the
	// model it loaded: never from a snapshot of a model that a rewind or a
	// rebuild replaced since. A rewind keeps the snapshot it started from
	// for the epoch it moves the pair to. 0 disables snapshots.
	SnapshotEvery int
}

func (o *RewindOptions) withDefaults(errs *[]error) {
	defaultDuration(errs, "Rewind.Debounce", &o.Debounce, RewindDebounceDefault)
	defaultDuration(errs, "Rewind.MaxDebounce", &o.MaxDebounce, RewindMaxDebounceDefault)
	defaultDuration(errs, "Rewind.LockTimeout", &o.LockTimeout, RewindLockTimeoutDefault)
	defaultDuration(errs, "Rewind.KeepAlive", &o.KeepAlive, RewindKeepAliveDefault)
	defaultCount(errs, "Rewind.MaxConcurrentRewinds", &o.MaxConcurrentRewinds, MaxConcurrentRewindsDefault, false)
	if o.SnapshotEvery < 0 {
		*errs = append(*errs, fmt.Errorf("Options.Rewind.SnapshotEvery must not be negative, got %d", o.SnapshotEvery))
	}
	if o.KeepAlive >= o.LockTimeout {
		*errs = append(*errs, fmt.Errorf("Options.Rewind.KeepAlive (%s) must be below Options.Rewind.LockTimeout (%s)", o.KeepAlive, o.LockTimeout))
	}
	if o.Debounce > o.MaxDebounce {
		*errs = append(*errs, fmt.Errorf("Options.Rewind.Debounce (%s) must not exceed Options.Rewind.MaxDebounce (%s)", o.Debounce, o.MaxDebounce))
	}
	if o.StartupScan < StartupScanBlocking || o.StartupScan > StartupScanDisabled {
		*errs = append(*errs, fmt.Errorf("Options.Rewind.StartupScan has unknown value %d", o.StartupScan))
	}
}
