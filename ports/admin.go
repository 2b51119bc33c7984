package ports

import (
	"context"
)

// AdminStore is the optional port of operator actions that change what the
// engine does. The engine never calls it; operator tools do.
type AdminStore interface {
	// PerspectiveRetire retires a perspective: its subscriptions are deleted
	// and later registrations of them are ignored, so appends stop creating
	// its work rows; its pending work rows are deleted; with DropState its
	// cursors, models and snapshots are deleted too. Safe while instances
	// run: their completions of deleted rows change nothing (an apply in
	// flight may still save its model once; retiring again drops it).
	// Idempotent. Returns ErrInvalidArgument for an empty perspective.
	PerspectiveRetire(ctx context.Context, params *PerspectiveRetireParams) (*RetireResult, error)
	// PerspectiveRevive undoes the retirement of a perspective: its
	// subscriptions may be registered again (the next Worker.Start, or
	// append through a registry that has it, registers them). Reviving a
	// perspective that is not retired is a no-op.
	PerspectiveRevive(ctx context.Context, perspective string) error
	// PerspectivesRetired lists the retired perspectives, sorted.
	PerspectivesRetired(ctx context.Context) ([]string, error)
}

// PerspectiveRetireParams are the inputs of PerspectiveRetire.
type PerspectiveRetireParams struct {
	Perspective string
	// DropState deletes the perspective's cursors, models and snapshots
	// too.
	DropState bool
}
