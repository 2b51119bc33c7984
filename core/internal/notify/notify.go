// Package notify turns the backend's notifications into wakes of the
// engine. Notifications are best effort: without them, or while they are
// unhealthy, the engine polls.
package notify

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/startstop"
	"github.com/vantage-go/vantage/ports"
)

// Config is what a Listener reads.
type Config struct {
	// Notifier is the backend's notifier; nil when it has none.
	Notifier ports.Notifier
	// BackendLog is the logger handed to the Notifier, which names its own
	// component.
	BackendLog *slog.Logger
	// OnWake is called for each notification, on the listener's
	// goroutine.
	OnWake func(ports.Wake)
}

// Listener turns the backend's notifications into calls of OnWake.
type Listener struct {
	*base.Env
	startstop.Base
	cfg Config
	// listening is set while the notification channel is open.
	listening atomic.Bool
	// heard numbers the notifications received.
	heard atomic.Uint64
}

// New returns a Listener of env configured by cfg.
func New(env *base.Env, cfg Config) *Listener {
	return &Listener{Env: env, cfg: cfg}
}

// Start subscribes to the backend's notifications and launches the loop
// that forwards them; it runs until Stop or until ctx ends. When the
// backend has no Notifier, or it cannot listen, the engine polls only:
// that is no error.
func (l *Listener) Start(ctx context.Context) error {
	ctx, wg, ok := l.StartInit(ctx)
	if !ok {
		return nil
	}
	if l.cfg.Notifier == nil {
		l.Log.InfoContext(ctx, "the backend has no notifier; polling only")
		return nil
	}
	wakes, err := l.cfg.Notifier.NotifierListen(ctx, &ports.NotifierListenParams{Logger: l.cfg.BackendLog})
	if err != nil {
		l.Log.WarnContext(ctx, "notifications unavailable; polling only", slog.Any("error", err))
		return nil
	}
	l.listening.Store(true)
	wg.Go(func() { l.loop(ctx, wakes) })
	return nil
}

// Healthy reports whether notifications arrive, so that polls may be rare.
func (l *Listener) Healthy() bool {
	return l.listening.Load() && l.cfg.Notifier != nil && l.cfg.Notifier.NotifierHealthy()
}

// Heard returns how many notifications arrived so far.
func (l *Listener) Heard() uint64 { return l.heard.Load() }

func (l *Listener) loop(ctx context.Context, wakes <-chan ports.Wake) {
	for {
		select {
		case <-ctx.Done():
			return
		case w, ok := <-wakes:
			if !ok {
				if ctx.Err() == nil {
					l.listening.Store(false)
					l.Log.WarnContext(ctx, "notification channel closed; polling only")
				}
				return
			}
			l.heard.Add(1)
			l.cfg.OnWake(w)
		}
	}
}
