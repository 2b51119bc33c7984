package core

import "time"

// HealthOptions are the thresholds of Worker.Health.
type HealthOptions struct {
	// MaxPendingAge is the age of the oldest pending event (of any
	// perspective this worker runs, on any instance) past which the worker
	// reports itself lagging, not ready. Defaults to 0: lag is reported but
	// not checked.
	MaxPendingAge time.Duration
}
