package base

import "time"

// Signals are the points at which the engine's tests watch or steer it.
// Every field is nil in production, where a signal costs a nil check.
// Tests set them before they drive the engine.
type Signals struct {
	// FetchWait runs when a batch waits for its fetched rows to drain
	// before fetching more.
	FetchWait func()
	// AckWait runs when a batch waits for the acknowledgement of the rows
	// it applied before fetching more.
	AckWait func()
	// ClaimDeferred sees each notification whose claim waits for the
	// claim budget, with how long until the claim armed.
	ClaimDeferred func(wait time.Duration)
	// Window is called each time a consumer's sliding window took more
	// ids or closed.
	Window func(took int, closed bool)
	// PairSlotWait runs when a stream's drain waits for one of its
	// perspectives to end before it starts another.
	PairSlotWait func()
	// PrePerspectiveWait runs when a perspective waits for another
	// perspective of its stream to run PrePerspective.
	PrePerspectiveWait func()
}

// OnFetchWait calls FetchWait, if set.
func (s *Signals) OnFetchWait() {
	if s.FetchWait != nil {
		s.FetchWait()
	}
}

// OnAckWait calls AckWait, if set.
func (s *Signals) OnAckWait() {
	if s.AckWait != nil {
		s.AckWait()
	}
}

// OnClaimDeferred calls ClaimDeferred, if set.
func (s *Signals) OnClaimDeferred(wait time.Duration) {
	if s.ClaimDeferred != nil {
		s.ClaimDeferred(wait)
	}
}

// OnWindow calls Window, if set.
func (s *Signals) OnWindow(took int, closed bool) {
	if s.Window != nil {
		s.Window(took, closed)
	}
}

// OnPairSlotWait calls PairSlotWait, if set.
func (s *Signals) OnPairSlotWait() {
	if s.PairSlotWait != nil {
		s.PairSlotWait()
	}
}

// OnPrePerspectiveWait calls PrePerspectiveWait, if set.
func (s *Signals) OnPrePerspectiveWait() {
	if s.PrePerspectiveWait != nil {
		s.PrePerspectiveWait()
	}
}
