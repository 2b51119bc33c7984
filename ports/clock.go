package ports

import "time"

// Clock is the engine's only source of time. Core and the memory adapter never
// call time.Now or time.NewTimer directly, so tests can drive time.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is the subset of *time.Timer the engine needs.
type Timer interface {
	// C returns the channel on which the firing time is delivered.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether it stopped it.
	Stop() bool
	// Reset changes the timer to fire after d. Call it only on stopped or
	// drained timers.
	Reset(d time.Duration)
}

// SystemClock is the real Clock: wall time and runtime timers.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns a runtime timer.
func (SystemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (s systemTimer) C() <-chan time.Time   { return s.t.C }
func (s systemTimer) Stop() bool            { return s.t.Stop() }
func (s systemTimer) Reset(d time.Duration) { s.t.Reset(d) }
