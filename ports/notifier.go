package ports

import (
	"context"
	"log/slog"
)

// Notifier carries wake-up hints. Notifications are best effort: polling is
// the correctness floor. Optional: without it the engine polls at
// Options.PollingInterval and claims at Options.ClaimInterval, never at
// their relaxed notify-healthy cadences.
type Notifier interface {
	// NotifierListen subscribes to wake signals. The returned channel has a
	// buffer of one and coalesces bursts (a wake sent while one is buffered
	// replaces it with their Merge); it is closed once ctx is done. The wake
	// of an append names the appended stream (Wake.Streams; the conformance
	// suite checks it): a sole engine instance then drains it without a
	// claim. A nil params is the zero NotifierListenParams.
	NotifierListen(ctx context.Context, params *NotifierListenParams) (<-chan Wake, error)
	// NotifierPublish wakes every listener of this backend (service).
	NotifierPublish(ctx context.Context) error
	// NotifierHealthy reports whether notifications are currently delivered
	// (the engine relaxes its poll cadence only while true).
	NotifierHealthy() bool
}

// NotifierListenParams are the inputs of NotifierListen.
type NotifierListenParams struct {
	// Logger, when set, receives what the adapter logs about the delivery
	// of the subscription's wakes (a listener's connection lost and
	// regained, say) in place of the adapter's own logger, so that these
	// lines join the subscriber's, with its attributes. The adapter adds
	// its own "component" attribute, so Logger should carry none: a JSON
	// line holding a key twice loses one of the values. Defaults to the
	// adapter's logger.
	Logger *slog.Logger
}
