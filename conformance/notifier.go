package conformance

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/internal/logtest"
	"github.com/vantage-go/vantage/ports"
)

// runNotifier verifies ports.Notifier, an optional port.
func runNotifier(t *testing.T, newBackend NewBackendFunc, implemented bool) {
	t.Helper()
	const port = "Notifier"

	optionalGroup(t, "NotifierHealthy", port, implemented, map[string]func(t *testing.T){
		"TrueWhileDelivering": func(t *testing.T) {
			tb := setup(t, newBackend)
			wakes := listen(t.Context(), t, tb.backend)
			require.NoError(t, publish(t, tb.backend))
			requireWake(t, wakes)

			require.True(t, tb.backend.Notifier.NotifierHealthy())
		},
	})

	optionalGroup(t, "NotifierListen", port, implemented, map[string]func(t *testing.T){
		"ClosesChannelWhenContextDone": func(t *testing.T) {
			tb := setup(t, newBackend)
			ctx, cancel := context.WithCancel(t.Context())
			wakes := listen(ctx, t, tb.backend)

			cancel()

			deadline := time.After(wakeTimeout)
			for {
				select {
				case _, ok := <-wakes:
					if !ok {
						return
					}
				case <-deadline:
					require.FailNow(t, "the channel was not closed after the context ended")
				}
			}
		},
		"CoalescesBursts": func(t *testing.T) {
			tb := setup(t, newBackend)
			wakes := listen(t.Context(), t, tb.backend)
			require.Equal(t, 1, cap(wakes))

			// Nobody reads: publishing must neither block nor fail.
			for range 20 {
				require.NoError(t, publish(t, tb.backend))
			}

			requireWake(t, wakes)
		},
		"WakesEveryListener": func(t *testing.T) {
			tb := setup(t, newBackend)
			first := listen(t.Context(), t, tb.open(t))
			second := listen(t.Context(), t, tb.open(t))

			require.NoError(t, publish(t, tb.open(t)))

			requireWake(t, first)
			requireWake(t, second)
		},
		"TakesNilParams": func(t *testing.T) {
			tb := setup(t, newBackend)
			if tb.backend.Notifier == nil {
				t.Skip("adapter does not implement ports.Notifier")
			}
			wakes, err := tb.backend.Notifier.NotifierListen(t.Context(), nil)
			require.NoError(t, err, "a nil params is the zero NotifierListenParams")

			require.NoError(t, publish(t, tb.backend))

			requireWake(t, wakes)
		},
		"TakesSubscriberLogger": func(t *testing.T) {
			tb := setup(t, newBackend)
			logger, logs := logtest.NewJSON(slog.LevelDebug)
			wakes := listenWith(t.Context(), t, tb.backend, &ports.NotifierListenParams{Logger: logger})

			require.NoError(t, publish(t, tb.backend))

			requireWake(t, wakes)
			// What the adapter logs about this subscription, if anything,
			// names its component once (the subscriber's logger has none);
			// Lines fails on a key logged twice.
			for _, line := range logs.Lines(t) {
				require.NotEmpty(t, line["component"], "a line of the adapter names its component: %v", line)
			}
		},
		"WakesOnAppend": func(t *testing.T) {
			tb := setup(t, newBackend)
			wakes := listen(t.Context(), t, tb.open(t))
			subscribe(t, tb.backend, eventType, perspective)

			appendN(t, tb.open(t), newID(t), at(0), eventType, 1)

			requireWake(t, wakes)
		},
		"AppendWakesNameTheirStreams": func(t *testing.T) {
			tb := setup(t, newBackend)
			wakes := listen(t.Context(), t, tb.open(t))
			subscribe(t, tb.backend, eventType, perspective)
			appender := tb.open(t)
			streams := []uuid.UUID{newID(t), newID(t), newID(t)}
			for _, s := range streams {
				appendN(t, appender, s, at(0), eventType, 1)
			}

			// Received now or merged while buffered, every stream is named
			// by a wake, and no wake names another.
			named := map[uuid.UUID]bool{}
			for len(named) < len(streams) {
				select {
				case w, ok := <-wakes:
					require.True(t, ok, "the channel was closed instead of woken")
					require.NotEmpty(t, w.Streams, "a wake of appends names their streams")
					for _, id := range w.Streams {
						require.Contains(t, streams, id, "a wake names only streams appended to")
						named[id] = true
					}
				case <-time.After(wakeTimeout):
					require.FailNow(t, "streams not named within "+wakeTimeout.String(), "named %v of %v", named, streams)
				}
			}
		},
		"PublishedWakeNamesNoStream": func(t *testing.T) {
			tb := setup(t, newBackend)
			wakes := listen(t.Context(), t, tb.open(t))

			require.NoError(t, publish(t, tb.open(t)))

			select {
			case w := <-wakes:
				require.Empty(t, w.Streams, "a published wake may report anything: it names no stream")
			case <-time.After(wakeTimeout):
				require.FailNow(t, "no wake within "+wakeTimeout.String())
			}
		},
	})
}

// listen subscribes to b's wakes until ctx is done.
func listen(ctx context.Context, t *testing.T, b ports.Backend) <-chan ports.Wake {
	t.Helper()
	return listenWith(ctx, t, b, &ports.NotifierListenParams{})
}

// listenWith subscribes to b's wakes with params until ctx is done.
func listenWith(ctx context.Context, t *testing.T, b ports.Backend, params *ports.NotifierListenParams) <-chan ports.Wake {
	t.Helper()
	if b.Notifier == nil {
		t.Skip("adapter does not implement ports.Notifier")
	}
	wakes, err := b.Notifier.NotifierListen(ctx, params)
	require.NoError(t, err)
	require.NotNil(t, wakes)
	return wakes
}

// requireWake waits for one wake on wakes.
func requireWake(t *testing.T, wakes <-chan ports.Wake) {
	t.Helper()
	select {
	case _, ok := <-wakes:
		require.True(t, ok, "the channel was closed instead of woken")
	case <-time.After(wakeTimeout):
		require.FailNow(t, "no wake within "+wakeTimeout.String())
	}
}

// publish wakes every listener of b through the optional ports.Publisher
// of its Notifier; a case that needs it skips without it.
func publish(t *testing.T, b ports.Backend) error {
	t.Helper()
	p, ok := b.Notifier.(ports.Publisher)
	if !ok {
		t.Skip("the adapter's Notifier does not implement ports.Publisher")
	}
	return p.NotifierPublish(t.Context())
}
