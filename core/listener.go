package core

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/vantage-go/vantage/core/internal/startstop"
	"github.com/vantage-go/vantage/ports"
)

// listener turns the backend's notifications into wakes of the claimer and
// the consumers. Notifications are best effort: without them, or while they
// are unhealthy, the engine polls.
type listener struct {
	*engine
	startstop.Base
	// listening is set while the notification channel is open.
	listening atomic.Bool
	// count numbers the notifications received (see consumers.wantWindow).
	count atomic.Uint64
	// onWake is called for each notification.
	onWake func(ports.Wake)
	// backendLog is the logger handed to the backend's Notifier, which
	// names its own component.
	backendLog *slog.Logger
}

func newListener(e *engine, backendLog *slog.Logger, onWake func(ports.Wake)) *listener {
	return &listener{engine: e, backendLog: backendLog, onWake: onWake}
}

// Start subscribes to the backend's notifications and launches the loop
// that forwards them; it runs until Stop or until ctx ends. When the
// backend has no Notifier, or it cannot listen, the engine polls only.
func (l *listener) Start(ctx context.Context) {
	ctx, wg, ok := l.StartInit(ctx)
	if !ok {
		return
	}
	if l.backend.Notifier == nil {
		l.Log.InfoContext(ctx, "the backend has no notifier; polling only")
		return
	}
	wakes, err := l.backend.Notifier.NotifierListen(ctx, &ports.NotifierListenParams{Logger: l.backendLog})
	if err != nil {
		l.Log.WarnContext(ctx, "notifications unavailable; polling only", slog.Any("error", err))
		return
	}
	l.listening.Store(true)
	wg.Go(func() { l.loop(ctx, wakes) })
}

// healthy reports whether notifications arrive, so that polls may be rare.
func (l *listener) healthy() bool {
	return l.listening.Load() && l.backend.Notifier != nil && l.backend.Notifier.NotifierHealthy()
}

func (l *listener) loop(ctx context.Context, wakes <-chan ports.Wake) {
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
			l.count.Add(1)
			l.onWake(w)
		}
	}
}
