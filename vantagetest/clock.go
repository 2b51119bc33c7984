package vantagetest

import "github.com/vantage-go/vantage/internal/clocktest"

// FakeClock is a ports.Clock that moves only when the test calls Advance or
// Set; the timers of the code under test fire, in deadline order, when the
// clock reaches them. WaitTimers(n) returns a channel closed once n timers
// are armed, so a test advances the clock only after the code under test
// waits on it. Safe for concurrent use.
//
// It suits code of the application's own that takes a ports.Clock, where
// every step is the test's. As a worker's Options.Clock it stops every loop
// of the worker between two Advance calls (the claim an append's
// notification wakes, the drain window, polls), so a Harness on a FakeClock
// gets nowhere unless the test advances it at each step, and WaitIdle never
// returns; use an OffsetClock there.
type FakeClock = clocktest.Fake

// NewFakeClock returns a FakeClock standing at ClockStart.
func NewFakeClock() *FakeClock { return clocktest.NewFake() }

// OffsetClock is a ports.Clock whose timers are real but whose Now a test
// can Jump forward: the worker's loops run freely while the test makes a
// retry due, a lease expire or a heartbeat go stale at once. Safe for
// concurrent use.
type OffsetClock = clocktest.Offset

// NewOffsetClock returns an OffsetClock without offset.
func NewOffsetClock() *OffsetClock { return clocktest.NewOffset() }

// ClockStart is the instant a new FakeClock stands at.
var ClockStart = clocktest.Start
