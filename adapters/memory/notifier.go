package memory

import (
	"context"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// listener is one NotifierListen subscription. Its channel is closed, under
// Store.mu, by whichever comes first: its context ending or Close.
type listener struct {
	ch chan ports.Wake
}

// NotifierListen implements ports.Notifier. The returned channel has a buffer
// of one: a wake published while one is already buffered is merged into it
// (ports.Wake.Merge). The wake of an append names its stream. The channel is closed once ctx is done or the store is closed. No
// goroutine runs while the listener waits; context.AfterFunc starts one,
// briefly, when ctx ends. In-process delivery has nothing to log, so
// params.Logger is unused. It returns ctx.Err() if ctx is already done.
func (s *Store) NotifierListen(ctx context.Context, _ *ports.NotifierListenParams) (<-chan ports.Wake, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	l := &listener{ch: make(chan ports.Wake, 1)}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()

	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.listeners[l]; ok { // not already closed by Close
			delete(s.listeners, l)
			close(l.ch)
		}
	})
	return l.ch, nil
}

// NotifierPublish implements ports.Publisher: every open listener gets a wake,
// unless one is already buffered for it. It never blocks.
func (s *Store) NotifierPublish(ctx context.Context) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()

	s.publishLocked()
	return nil
}

// publishLocked wakes every listener, naming streams when the wake reports
// appends to them and none when it may report anything. The caller holds
// s.mu, which also serializes sends with the closes of listener channels,
// and makes this the channels' only sender (see ports.OfferWake).
func (s *Store) publishLocked(streams ...uuid.UUID) {
	w := ports.Wake{Streams: streams}
	for l := range s.listeners {
		ports.OfferWake(l.ch, w)
	}
}

// NotifierHealthy implements ports.Notifier: in-process delivery never fails,
// so it is true until the store is closed.
func (s *Store) NotifierHealthy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed
}
