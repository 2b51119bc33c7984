package ports

import (
	"context"
)

// Notifier carries wake-up hints. Notifications are best effort: polling is
// the correctness floor. Optional: without it the engine polls at
// Options.PollingInterval and claims at Options.ClaimInterval, never at
// their relaxed notify-healthy cadences.
type Notifier interface {
	// NotifierListen subscribes to wake signals. The returned channel has a
	// buffer of one and coalesces bursts; it is closed once ctx is done.
	NotifierListen(ctx context.Context) (<-chan Wake, error)
	// NotifierPublish wakes every listener of this backend (service).
	NotifierPublish(ctx context.Context) error
	// NotifierHealthy reports whether notifications are currently delivered
	// (the engine relaxes its poll cadence only while true).
	NotifierHealthy() bool
}
