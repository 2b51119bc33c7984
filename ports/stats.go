package ports

import (
	"context"
	"time"
)

// Stats is the optional port of backlog figures for metrics and health
// checks. Its reads must stay cheap on a large backlog (an index-only scan
// on PostgreSQL): the engine calls them at most once per
// Options.Telemetry.StatsInterval, and only while something asks for the
// figures. Without it the engine reports no lag.
type Stats interface {
	// PerspectivesLag returns, for each perspective with pending work rows,
	// how many there are and the age of the oldest one, ordered by
	// perspective (byte order of the names). A work row is pending from
	// when it is stored (by an append, a dead-letter requeue, or a failed
	// replay of an applied event) until it completes or moves to dead
	// letters: rows waiting for a retry count, and so do rows handed out to
	// an instance; completed rows that debug mode keeps do not.
	// Perspectives with no pending row are absent, so an empty backlog is
	// an empty result. It reads a consistent snapshot and changes nothing.
	PerspectivesLag(ctx context.Context, params *PerspectivesLagParams) ([]PerspectiveLag, error)
}

// PerspectivesLagParams are the inputs of PerspectivesLag.
type PerspectivesLagParams struct {
	// Now is the time ages are measured at: when set, else the backend's
	// own clock.
	Now time.Time
}

// PerspectiveLag is the backlog of one perspective.
type PerspectiveLag struct {
	Perspective string
	// Pending counts the perspective's pending work rows.
	Pending int64
	// OldestAge is how long the oldest pending work row has waited since
	// it was stored, at PerspectivesLagParams.Now: since its event was
	// appended, for a row an append stored; since its requeue or its
	// failure, for a dead letter requeued or a failed replay, whose wait
	// starts anew. Never negative: zero when even the oldest row was
	// stored after Now.
	OldestAge time.Duration
}
