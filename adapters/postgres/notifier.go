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

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/vantage-go/vantage/ports"
)

// listenWait bounds how long NotifierListen waits for the first LISTEN to be
// acknowledged while the listener's first connection attempt is still under
// way (a server that does not answer). Past it, or as soon as an attempt
// failed, the subscription is returned anyway (NOTIFY is only a hint; the
// engine polls) and gets a Reconnected wake once the listener is up, since
// notifications may have been missed meanwhile.
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
	schema     string
	// logger is the Store's, for the lines about the listener while no
	// subscriber brought a logger of its own (see log).
	logger *slog.Logger

	connected atomic.Bool // the listener's connection is up
	listening atomic.Bool // our LISTEN was acknowledged once

	// upOnce closes up on the listener's first connected event, which pq
	// emits just after the LISTEN is acknowledged: NotifierListen waits for
	// both, so NotifierHealthy is true when it returns.
	upOnce sync.Once
	up     chan struct{}
	// failOnce closes failed on the listener's first failed connection
	// attempt: NotifierListen stops waiting for the LISTEN then, instead of
	// stalling its caller on a server it cannot reach.
	failOnce sync.Once
	failed   chan struct{}
	// stopping is closed when close starts.
	stopping chan struct{}

	// outage is the current outage of the listener's connection, for its
	// logs. Only event, on pq's goroutine, uses it.
	outage struct {
		since  time.Time // zero while connected
		failed int       // connection attempts that failed since
	}

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
	// base is NotifierListenParams.Logger, nil when none was given, and
	// logger the same with the listener's attributes.
	base   *slog.Logger
	logger *slog.Logger
}

func newNotifier(s *Store) *notifier {
	return &notifier{
		channel:    s.channel,
		connString: s.opts.ConnString,
		minDelay:   s.opts.ListenerMinReconnect,
		maxDelay:   s.opts.ListenerMaxReconnect,
		schema:     s.opts.Schema,
		logger:     listenerLogger(s.opts.Logger, s.opts.Schema),
		subs:       map[*subscription]struct{}{},
		up:         make(chan struct{}),
		failed:     make(chan struct{}),
		stopping:   make(chan struct{}),
	}
}

// NotifierListen implements ports.Notifier. The first call starts the
// listener; every call waits for its LISTEN to be acknowledged, so a NOTIFY
// committed after NotifierListen returns is delivered, unless the
// listener's connection failed (or its first attempt takes longer than
// listenWait): then it returns at once, while the listener keeps
// reconnecting, and the subscription gets Wake{Reconnected: true} once the
// listener is up. The channel has a buffer of one and coalesces bursts; a
// reconnect (notifications may have been lost) is delivered as
// Wake{Reconnected: true} and is never coalesced away. The channel is
// closed once ctx is done or the Store is closed. It returns ports.ErrClosed
// after Close, and ctx's error when ctx ends before NotifierListen returns.
//
// The listener, shared by the Store's subscriptions, logs its connection
// events to the params.Logger of each open subscription (once per distinct
// logger), with component=postgres.listener and the schema; while none is
// open, or none gave a Logger, to Options.Logger.
func (s *Store) NotifierListen(ctx context.Context, params *ports.NotifierListenParams) (<-chan ports.Wake, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var logger *slog.Logger
	if params != nil {
		logger = params.Logger
	}
	return s.notifier.listen(ctx, logger)
}

// listenerLogger is logger with the attributes of the listener's lines.
func listenerLogger(logger *slog.Logger, schema string) *slog.Logger {
	return logger.With(slog.String("component", "postgres.listener"), slog.String("schema", schema))
}

func (n *notifier) listen(ctx context.Context, logger *slog.Logger) (<-chan ports.Wake, error) {
	sub := &subscription{ch: make(chan ports.Wake, 1), base: logger, logger: n.logger}
	if logger != nil {
		sub.logger = listenerLogger(logger, n.schema)
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, fmt.Errorf("listening for wakes: %w", ports.ErrClosed)
	}
	n.startLocked()
	n.subs[sub] = struct{}{}
	sub.stop = context.AfterFunc(ctx, func() { n.unsubscribe(sub) })
	ready := n.ready
	n.mu.Unlock()

	timer := time.NewTimer(listenWait)
	defer timer.Stop()
	// A listener that is up wins over one that failed before: ready is
	// checked first, as select picks at random among ready cases.
	select {
	case <-ready:
		return n.whenUp(ctx, sub, timer)
	default:
	}
	select {
	case <-ready:
		return n.whenUp(ctx, sub, timer)
	case <-n.failed:
		return n.late(sub), nil
	case <-timer.C:
		sub.logger.Warn("listener not connected yet; relying on polling until it is", slog.String("channel", n.channel))
		return n.late(sub), nil
	case <-ctx.Done():
		n.unsubscribe(sub)
		return nil, context.Cause(ctx)
	}
}

// whenUp returns sub once the first LISTEN returned: its error, or the
// subscription once the listener's connected event arrived too.
func (n *notifier) whenUp(ctx context.Context, sub *subscription, timer *time.Timer) (<-chan ports.Wake, error) {
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
}

// late returns sub before the first LISTEN was acknowledged: the listener
// broadcasts a Reconnected wake once it is, since notifications committed
// meanwhile were missed.
func (n *notifier) late(sub *subscription) <-chan ports.Wake {
	n.mu.Lock()
	n.lateReady = true
	n.mu.Unlock()
	return sub.ch
}

// startLocked starts the listener, its dispatch loop and the initial LISTEN.
// The caller holds n.mu.
func (n *notifier) startLocked() {
	if n.ready != nil {
		return
	}
	n.ready = make(chan struct{})
	if n.connString == "" { // Options.PollOnly
		n.readyErr = ErrPollOnly
		close(n.ready)
		return
	}
	l := pq.NewListener(n.connString, n.minDelay, n.maxDelay, n.event)
	n.listener = l
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
				// pq emits the connected event right after the LISTEN;
				// waiting for it makes NotifierHealthy true by the time
				// the subscribers get the wake.
				select {
				case <-n.up:
				case <-n.stopping:
				}
				n.broadcast(ports.Wake{Reconnected: true})
			}
		}
		close(n.ready)
	}()
}

// dispatch fans the listener's notifications out until the listener is
// closed. pq sends nil after a reconnect: notifications may have been lost.
func (n *notifier) dispatch(l *pq.Listener) {
	n.log(slog.LevelDebug, "listener started", slog.String("channel", n.channel))
	defer n.log(slog.LevelDebug, "listener stopped", slog.String("channel", n.channel))
	for msg := range l.Notify {
		switch {
		case msg == nil:
			n.broadcast(ports.Wake{Reconnected: true})
		case msg.Channel == n.channel:
			n.broadcast(wakeOf(msg.Extra))
		}
	}
}

// event is the pq.Listener's state callback. It runs on the listener's
// goroutine and must not block. It logs one warning per outage, when the
// connection is lost or the first attempt to make it fails (pq retries
// every ListenerMinReconnect to ListenerMaxReconnect, which would otherwise
// log a warning at every attempt), and, when the listener is up again, how
// long it was down and how many attempts failed.
func (n *notifier) event(ev pq.ListenerEventType, err error) {
	switch ev {
	case pq.ListenerEventConnected, pq.ListenerEventReconnected:
		n.connected.Store(true)
		n.upOnce.Do(func() { close(n.up) })
		if n.outage.since.IsZero() {
			n.log(slog.LevelDebug, "listener connected", slog.String("event", ev.String()))
			return
		}
		n.log(slog.LevelInfo, "listener reconnected",
			slog.Duration("down_for", time.Since(n.outage.since)), slog.Int("failed_attempts", n.outage.failed))
		n.outage.since, n.outage.failed = time.Time{}, 0
	case pq.ListenerEventDisconnected:
		n.connected.Store(false)
		n.down(err)
	case pq.ListenerEventConnectionAttemptFailed:
		n.connected.Store(false)
		n.failOnce.Do(func() { close(n.failed) })
		n.down(err)
		n.outage.failed++
		n.log(slog.LevelDebug, "listener connection attempt failed", slog.Int("failed_attempts", n.outage.failed), slog.Any("error", err))
	}
}

// down starts an outage, unless one is under way or the notifier is
// closing, and logs it.
func (n *notifier) down(err error) {
	if !n.outage.since.IsZero() || n.isClosed() {
		return
	}
	n.outage.since = time.Now()
	n.log(slog.LevelWarn, "listener disconnected; relying on polling until it reconnects", slog.Any("error", err))
}

// log logs a line about the listener to the logger of every open
// subscription that gave one, once per distinct logger, or to the Store's
// when there is none: each subscriber learns, in its own log, why its wakes
// stop and resume.
func (n *notifier) log(level slog.Level, msg string, attrs ...any) {
	var loggers []*slog.Logger
	n.mu.Lock()
	seen := map[*slog.Logger]bool{}
	for sub := range n.subs {
		if sub.base != nil && !seen[sub.base] {
			seen[sub.base] = true
			loggers = append(loggers, sub.logger)
		}
	}
	n.mu.Unlock()
	if len(loggers) == 0 {
		loggers = append(loggers, n.logger)
	}
	for _, l := range loggers {
		l.Log(context.Background(), level, msg, attrs...)
	}
}

// wakeOf returns the wake of a notification's payload: an append's names
// its stream (see sqlPublish); any other payload names none.
func wakeOf(payload string) ports.Wake {
	id, err := uuid.Parse(payload)
	if err != nil {
		return ports.Wake{}
	}
	return ports.Wake{Streams: []uuid.UUID{id}}
}

// broadcast offers w to every subscriber without blocking. A wake still
// buffered is replaced by its merge with w (ports.Wake.Merge), so the
// receiver learns of every stream, or that it must poll.
func (n *notifier) broadcast(w ports.Wake) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for sub := range n.subs {
		ports.OfferWake(sub.ch, w) // only this goroutine sends, under n.mu
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
	close(n.stopping)
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

// sqlPublish wakes the listeners of a channel, $1, with a payload, $2: the
// stream id of an append (see wakeOf), or empty.
const sqlPublish = `SELECT pg_notify($1, $2::text)`

var _ ports.Publisher = (*Store)(nil)

// NotifierPublish implements ports.Publisher: a NOTIFY on the schema's
// channel, which wakes every listener of every Store on the schema.
func (s *Store) NotifierPublish(ctx context.Context) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, sqlPublish, s.channel, ""); err != nil {
		return fmt.Errorf("publishing wake on %q: %w", s.channel, translate(err))
	}
	return nil
}

// NotifierHealthy implements ports.Notifier: true while the listener is
// connected and listening, false before the first NotifierListen, while
// disconnected and after Close.
func (s *Store) NotifierHealthy() bool { return s.notifier.healthy() }
