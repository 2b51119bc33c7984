package vantagetest

import (
	"log/slog"
	"testing"
	"time"

	"github.com/vantage-go/vantage/core"
)

// Options returns core.Options for tests. The production defaults favour
// many instances sharing a database: they drain a notified append within
// milliseconds too, but poll every second when a wake-up is missed, may
// gather a batch for up to 300ms behind a slow one, and take over half an
// hour to dead-letter an event that always fails; these values make the
// same work take milliseconds (BENCHMARKS.md measures it):
//
//   - the cadences between an append and its stored model (claims, polls,
//     the gathering of a batch) are 1-10ms, so an append reaches its model
//     within a few of them;
//   - a failing event is retried after 2ms doubling to 10ms and
//     dead-lettered at its third failure, so a test sees both the retry
//     and the dead letter within tens of milliseconds;
//   - an apply fails after a second and is abandoned half a second later,
//     so a hung apply fails within a wait's WaitTimeoutDefault instead of
//     outliving it;
//   - rewinds start a millisecond after a late event, and a Generation's
//     dead-letter recovery runs every 10ms.
//
// Warnings and errors of the worker go to tb's output (see Logger). Change
// fields of the result for a test that needs other values, and pass it to
// Start or core.New: the fields it leaves zero take core's defaults, as
// does every field of a core.Options{} built from scratch.
func Options(tb testing.TB) core.Options {
	return core.Options{
		Logger: Logger(tb),

		Drain: core.DrainOptions{
			PollingInterval:              10 * time.Millisecond,
			NotifyHealthyPollingInterval: 10 * time.Millisecond,
			Batcher: core.DrainBatcherOptions{
				SlidingWindow: time.Millisecond,
				MaxWait:       5 * time.Millisecond,
			},
			ApplyTimeout:      time.Second,
			ApplyAbandonGrace: 500 * time.Millisecond,
		},
		Claims: core.ClaimOptions{
			Interval:              time.Millisecond,
			NotifyHealthyInterval: 10 * time.Millisecond,
			HeartbeatInterval:     100 * time.Millisecond,
		},

		Retries: core.RetryOptions{
			MaxEventAttempts: 3,
			Event:            core.Backoff{Initial: 2 * time.Millisecond, Max: 10 * time.Millisecond},
			CompletionResend: core.Backoff{
				Initial: 100 * time.Millisecond,
				Max:     time.Second,
			},
		},

		Rewind: core.RewindOptions{
			Debounce:    time.Millisecond,
			MaxDebounce: 10 * time.Millisecond,
			LockTimeout: 5 * time.Second,
			KeepAlive:   time.Second,
		},
		DeadLetterRecovery: core.DeadLetterRecoveryOptions{Interval: 10 * time.Millisecond},
	}
}

// Logger returns a logger that writes warnings and errors to tb's output,
// where go test shows them next to the test that caused them (always for a
// failed test, with -v for the others).
func Logger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}
