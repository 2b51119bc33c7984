package notify_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/notify"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// channelNotifier hands out wakes, or fails to listen with err.
type channelNotifier struct {
	ports.Notifier
	wakes chan ports.Wake
	err   error
}

func (n *channelNotifier) NotifierListen(context.Context, *ports.NotifierListenParams) (<-chan ports.Wake, error) {
	return n.wakes, n.err
}

func (n *channelNotifier) NotifierHealthy() bool { return true }

func env() *base.Env {
	return &base.Env{Clock: clocktest.NewFake(), Log: slog.New(slog.DiscardHandler)}
}

// messages is a slog.Handler that sends each message it handles.
type messages chan string

func (m messages) Enabled(context.Context, slog.Level) bool      { return true }
func (m messages) WithAttrs([]slog.Attr) slog.Handler            { return m }
func (m messages) WithGroup(string) slog.Handler                 { return m }
func (m messages) Handle(_ context.Context, r slog.Record) error { m <- r.Message; return nil }

// Each notification reaches OnWake and is counted; notifications are
// healthy while the channel is open, and no longer once it closed.
func TestListenerForwardsWakes(t *testing.T) {
	t.Parallel()

	n := &channelNotifier{wakes: make(chan ports.Wake)}
	got := make(chan ports.Wake)
	logged := make(messages, 1)
	e := env()
	e.Log = slog.New(logged)
	l := notify.New(e, notify.Config{Notifier: n, OnWake: func(w ports.Wake) { got <- w }})
	require.False(t, l.Healthy(), "not listening before Start")
	require.NoError(t, l.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, l.Stop(context.Background())) })
	require.True(t, l.Healthy())

	stream := uuid.New()
	n.wakes <- ports.Wake{Streams: []uuid.UUID{stream}}
	require.Equal(t, []uuid.UUID{stream}, (<-got).Streams)
	n.wakes <- ports.Wake{Reconnected: true}
	require.True(t, (<-got).Reconnected)
	require.Equal(t, uint64(2), l.Heard())

	close(n.wakes)
	require.Equal(t, "notification channel closed; polling only", <-logged)
	require.False(t, l.Healthy(), "a closed channel: polling only")
}

// Without a notifier, or when it cannot listen, the engine polls: Start
// succeeds and notifications are never healthy.
func TestListenerWithoutNotifications(t *testing.T) {
	t.Parallel()

	for name, n := range map[string]ports.Notifier{
		"none":     nil,
		"refusing": &channelNotifier{err: errors.New("listen: connection refused")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := notify.New(env(), notify.Config{Notifier: n, OnWake: func(ports.Wake) { t.Error("no wake expected") }})
			require.NoError(t, l.Start(t.Context()))
			require.False(t, l.Healthy())
			require.NoError(t, l.Stop(t.Context()))
		})
	}
}
