package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"

	"github.com/vantage-go/vantage/ports"
)

// listenWait bounds how long NotifierListen waits for the first LISTEN to be
// acknowledged. Past it the subscription is returned anyway (NOTIFY is only
// a hint; the engine polls) and gets a Reconnected wake once the listener
// is up, since notifications may have been missed meanwhile.
const listenWait = 5 * time.Second

// notifier delivers the schema's NOTIFY wakes to NotifierListen subscribers
// through one lib/pq Listener, started on the first subscription. Its
// goroutines (dispatch and the initial LISTEN) are owned by it and end in
// close.
type notifier struct {
	channel    string
	connString string
	minDelay   time.Duration
	maxDelay   time.Duration
	logger     *slog.Logger

	connected atomic.Bool // the listener's connection is up
	listening atomic.Bool // our LISTEN was acknowledged once

	// upOnce closes up on the listener's first connected event, which pq
	// emits just after the LISTEN is acknowledged: NotifierListen waits for
	// both, so NotifierHealthy is true when it returns.
	upOnce sync.Once
	up     chan struct{}

	// mu guards the fields below.
	mu        sync.Mutex
	closed    bool
	listener  *pq.Listener
	ready     chan struct{} // closed when the first LISTEN returned
	readyErr  error         // its error, written before ready is closed
	lateReady bool          // a subscriber stopped waiting for ready
	subs      map[*subscription]struct{}
	wg        sync.WaitGroup // dispatch and listen goroutines
}

// subscription is one NotifierListen channel. It is closed, under
// notifier.mu, by whichever comes first: its context ending or close.
type subscription struct {
	ch   chan ports.Wake
	stop func() bool // unregisters the context.AfterFunc
}

func newNotifier(s *Store) *notifier {
	return &notifier{
		channel:    s.channel,
		connString: s.opts.ConnString,
		minDelay:   s.opts.ListenerMinReconnect,
		maxDelay:   s.opts.ListenerMaxReconnect,
		logger:     s.opts.Logger.With(slog.String("component", "postgres.listener"), slog.String("schema", s.opts.Schema)),
		subs:       map[*subscription]struct{}{},
		up:         make(chan struct{}),
	}
}

// NotifierListen implements ports.Notifier. The first call starts the
// listener; every call waits (at most listenWait, or until ctx is done) for
// its LISTEN to be acknowledged, so a NOTIFY committed after NotifierListen
// returns is delivered. The channel has a buffer of one and coalesces
// bursts; a reconnect (notifications may have been lost) is delivered as
// Wake{Reconnected: true} and is never coalesced away. The channel is
// closed once ctx is done or the Store is closed. It returns ports.ErrClosed
// after Close, and ctx's error when ctx ends before the listener is up.
func (s *Store) NotifierListen(ctx context.Context) (<-chan ports.Wake, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.notifier.listen(ctx)
}

func (n *notifier) listen(ctx context.Context) (<-chan ports.Wake, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, fmt.Errorf("listening for wakes: %w", ports.ErrClosed)
	}
	n.startLocked()
	sub := &subscription{ch: make(chan ports.Wake, 1)}
	n.subs[sub] = struct{}{}
	sub.stop = context.AfterFunc(ctx, func() { n.unsubscribe(sub) })
	ready := n.ready
	n.mu.Unlock()

	timer := time.NewTimer(listenWait)
	defer timer.Stop()
	select {
	case <-ready:
		n.mu.Lock()
		err := n.readyErr
		n.mu.Unlock()
		if err != nil {
			n.unsubscribe(sub)
			return nil, fmt.Errorf("listening for wakes on %q: %w", n.channel, err)
		}
		select {
		case <-n.up:
		case <-timer.C: // connected and listening, only the event is late
		case <-ctx.Done():
			n.unsubscribe(sub)
			return nil, context.Cause(ctx)
		}
		return sub.ch, nil
	case <-timer.C:
		n.mu.Lock()
		n.lateReady = true
		n.mu.Unlock()
		n.logger.Warn("listener not connected yet; relying on polling until it is", slog.String("channel", n.channel))
		return sub.ch, nil
	case <-ctx.Done():
		n.unsubscribe(sub)
		return nil, context.Cause(ctx)
	}
}

// startLocked starts the listener, its dispatch loop and the initial LISTEN.
// The caller holds n.mu.
func (n *notifier) startLocked() {
	if n.listener != nil {
		return
	}
	l := pq.NewListener(n.connString, n.minDelay, n.maxDelay, n.event)
	n.listener = l
	n.ready = make(chan struct{})
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		n.dispatch(l)
	}()
	go func() {
		defer n.wg.Done()
		// Listen blocks until the listener is connected (it reconnects on
		// its own), or until Close.
		err := l.Listen(n.channel)
		if errors.Is(err, net.ErrClosed) {
			err = ports.ErrClosed
		}
		n.mu.Lock()
		n.readyErr = err
		late := n.lateReady
		n.mu.Unlock()
		if err == nil {
			n.listening.Store(true)
			if late {
				n.broadcast(ports.Wake{Reconnected: true})
			}
		}
		close(n.ready)
	}()
}

// dispatch fans the listener's notifications out until the listener is
// closed. pq sends nil after a reconnect: notifications may have been lost.
func (n *notifier) dispatch(l *pq.Listener) {
	n.logger.Debug("listener started", slog.String("channel", n.channel))
	defer n.logger.Debug("listener stopped", slog.String("channel", n.channel))
	for msg := range l.Notify {
		switch {
		case msg == nil:
			n.broadcast(ports.Wake{Reconnected: true})
		case msg.Channel == n.channel:
			n.broadcast(ports.Wake{})
		}
	}
}

// event is the pq.Listener's state callback. It runs on the listener's
// goroutine and must not block.
func (n *notifier) event(ev pq.ListenerEventType, err error) {
	switch ev {
	case pq.ListenerEventConnected, pq.ListenerEventReconnected:
		n.connected.Store(true)
		n.upOnce.Do(func() { close(n.up) })
		n.logger.Debug("listener connected", slog.String("event", ev.String()))
	case pq.ListenerEventDisconnected, pq.ListenerEventConnectionAttemptFailed:
		n.connected.Store(false)
		if !n.isClosed() {
			n.logger.Warn("listener disconnected; relying on polling until it reconnects",
				slog.String("event", ev.String()), slog.Any("error", err))
		}
	}
}

// broadcast offers w to every subscriber without blocking. A wake already
// buffered absorbs a plain one; a Reconnected wake replaces a buffered plain
// one, so the receiver learns that it must poll.
func (n *notifier) broadcast(w ports.Wake) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for sub := range n.subs {
		select {
		case sub.ch <- w:
			continue
		default:
		}
		if !w.Reconnected {
			continue
		}
		// Only this goroutine sends (under n.mu), so after taking the
		// buffered wake the send cannot block.
		select {
		case <-sub.ch:
		default:
		}
		select {
		case sub.ch <- w:
		default:
		}
	}
}

func (n *notifier) unsubscribe(sub *subscription) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.subs[sub]; ok {
		n.removeLocked(sub)
	}
}

// removeLocked unregisters sub and closes its channel. The caller holds n.mu.
func (n *notifier) removeLocked(sub *subscription) {
	delete(n.subs, sub)
	sub.stop()
	close(sub.ch)
}

func (n *notifier) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}

// healthy reports whether wakes are being delivered: connected and
// listening, and not closed.
func (n *notifier) healthy() bool {
	return n.connected.Load() && n.listening.Load() && !n.isClosed()
}

// close stops the listener, closes every subscription and waits for the
// notifier's goroutines. Idempotent.
func (n *notifier) close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	for sub := range n.subs {
		n.removeLocked(sub)
	}
	l := n.listener
	n.mu.Unlock()
	if l == nil {
		return nil
	}
	err := l.Close()
	n.wg.Wait() // dispatch ends when pq closes l.Notify
	n.connected.Store(false)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("closing listener: %w", err)
	}
	return nil
}

// NotifierPublish implements ports.Notifier: a NOTIFY on the schema's
// channel, which wakes every listener of every Store on the schema.
func (s *Store) NotifierPublish(ctx context.Context) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, '')`, s.channel); err != nil {
		return fmt.Errorf("publishing wake on %q: %w", s.channel, translate(err))
	}
	return nil
}

// NotifierHealthy implements ports.Notifier: true while the listener is
// connected and listening, false before the first NotifierListen, while
// disconnected and after Close.
func (s *Store) NotifierHealthy() bool { return s.notifier.healthy() }
