package cli

import "time"

// WithTicks returns env with ticks in place of the ticker of the commands
// that repeat, so that a test decides when each round happens.
func WithTicks(env Env, ticks <-chan time.Time) Env {
	env.ticks = ticks
	return env
}
