package core

import "time"

// testSignals are the points at which core's internal tests watch or steer
// the engine. Every field is nil in production, where a signal costs a nil
// check. Tests set them before they drive the engine.
type testSignals struct {
	// fetchWaitFunc runs when a batch waits for its fetched rows to drain
	// before fetching more (see drainer.drainBatch).
	fetchWaitFunc func()
	// ackWaitFunc runs when a batch waits for the acknowledgement of the
	// rows it applied before fetching more (see drainer.drainBatch).
	ackWaitFunc func()
	// claimDeferFunc sees each notification whose claim waits for the
	// claim budget, with how long until the claim armed (see
	// claimer.loop).
	claimDeferFunc func(wait time.Duration)
	// windowFunc is called each time the sliding window took more ids or
	// closed (see consumers.collectWindow).
	windowFunc func(took int, closed bool)
	// pairSlotWaitFunc runs when a stream's drain waits for one of its
	// perspectives to end before it starts another (see drainer.drainPass).
	pairSlotWaitFunc func()
	// prePerspectiveWaitFunc runs when a perspective waits for another
	// perspective of its stream to run PrePerspective (see
	// lifecycle.prePerspective).
	prePerspectiveWaitFunc func()
}

func (s *testSignals) fetchWait() {
	if s.fetchWaitFunc != nil {
		s.fetchWaitFunc()
	}
}

func (s *testSignals) ackWait() {
	if s.ackWaitFunc != nil {
		s.ackWaitFunc()
	}
}

func (s *testSignals) claimDeferred(wait time.Duration) {
	if s.claimDeferFunc != nil {
		s.claimDeferFunc(wait)
	}
}

func (s *testSignals) window(took int, closed bool) {
	if s.windowFunc != nil {
		s.windowFunc(took, closed)
	}
}

func (s *testSignals) pairSlotWait() {
	if s.pairSlotWaitFunc != nil {
		s.pairSlotWaitFunc()
	}
}

func (s *testSignals) prePerspectiveWait() {
	if s.prePerspectiveWaitFunc != nil {
		s.prePerspectiveWaitFunc()
	}
}
