package ports

import (
	"cmp"
	"context"
	"time"

	"github.com/google/uuid"
)

// LifecycleStage is a durable lifecycle stage of an event. The values are
// stored and must not change.
type LifecycleStage uint8

// Durable lifecycle stages. StagePostPerspective is recorded per
// (event, perspective), the others per event.
const (
	StagePrePerspective      LifecycleStage = 1
	StagePostAllPerspectives LifecycleStage = 2
	StagePostLifecycle       LifecycleStage = 4
	StagePostPerspective     LifecycleStage = 8
)

// LifecycleStore records the lifecycle stages of events in two steps, a
// claim before the receptors run and a completion once they returned, so
// that a stage runs on one instance at a time and a crash never loses one:
// a stage claimed by an instance that died is claimed again. It also tells
// which events every perspective applied, and finds those whose lifecycle a
// crash interrupted. Optional: without it the engine guards stages in
// memory only, and a crash may lose a stage.
type LifecycleStore interface {
	// LifecycleClaim claims Stage of each listed event (of Perspective for
	// StagePostPerspective; Perspective is empty for the other stages) for
	// the caller and returns exactly the events it claimed, in input order:
	// those whose stage is not completed and is not claimed by another live
	// instance (one whose heartbeat is newer than Now - StaleThreshold). A
	// claim of the caller itself, or of an instance that is no longer live,
	// is taken over: the stage of an instance that died running it is run
	// again. The caller runs the stage's receptors, then calls
	// LifecycleComplete.
	LifecycleClaim(ctx context.Context, params *LifecycleClaimParams) ([]uuid.UUID, error)

	// LifecycleComplete records Stage (of Perspective) as completed for each
	// listed event, whoever claimed it, and releases the claims.
	// Idempotent. A completed StagePostLifecycle is the event's completion
	// marker.
	LifecycleComplete(ctx context.Context, params *LifecycleCompleteParams) error

	// LifecycleStages returns the completed stages of each listed event that
	// has any, StagePostPerspective excepted (it is recorded per
	// perspective) unless Perspective is set: then an event whose
	// StagePostPerspective of that perspective completed has it too. Events
	// with none are absent.
	LifecycleStages(ctx context.Context, params *LifecycleStagesParams) (map[uuid.UUID]LifecycleStage, error)

	// LifecycleReady returns, in input order, the listed events that every
	// perspective Expected lists for their type has applied: its cursor of
	// the event's stream is at or past the event's version and it has no
	// pending work row for the event (a late event below a cursor is not
	// applied until its rewind completed it). Events of a type absent from
	// Expected, or mapped to no perspective, are ready; unknown ids are
	// not.
	LifecycleReady(ctx context.Context, params *LifecycleReadyParams) ([]uuid.UUID, error)

	// LifecycleOrphans returns events created at or after Since (a zero
	// Since: no bound) whose StagePostLifecycle is not completed (claimed or
	// not) although
	// every perspective that Expected lists for the event's type has a
	// cursor at or past the event's version in its stream and no pending
	// work row for the event (all perspectives applied it; a pending row
	// below a cursor is a late event awaiting its rewind). Events of types
	// absent from Expected, or mapped to no perspective, are never returned.
	// A perspective listed twice counts once. Oldest first (by creation,
	// then stream id bytes, then version), at most Limit when positive.
	LifecycleOrphans(ctx context.Context, params *LifecycleOrphansParams) ([]Event, error)
}

// LifecycleClaimParams are the inputs of LifecycleClaim.
type LifecycleClaimParams struct {
	EventIDs []uuid.UUID
	Stage    LifecycleStage
	// Perspective names the perspective of a StagePostPerspective claim;
	// empty for the other stages.
	Perspective string
	InstanceID  uuid.UUID
	// StaleThreshold tells live instances, whose claims stand, from dead
	// ones, whose claims are taken over.
	StaleThreshold time.Duration
	Now            time.Time
}

// LifecycleCompleteParams are the inputs of LifecycleComplete.
type LifecycleCompleteParams struct {
	EventIDs    []uuid.UUID
	Stage       LifecycleStage
	Perspective string
	InstanceID  uuid.UUID
	Now         time.Time
}

// LifecycleStagesParams are the inputs of LifecycleStages.
type LifecycleStagesParams struct {
	EventIDs []uuid.UUID
	// Perspective, when set, asks for StagePostPerspective of that
	// perspective as well.
	Perspective string
}

// LifecycleReadyParams are the inputs of LifecycleReady.
type LifecycleReadyParams struct {
	EventIDs []uuid.UUID
	// Expected maps an event type to the perspectives that must all have
	// applied an event of that type.
	Expected map[string][]string
}

// LifecycleOrphansParams are the inputs of LifecycleOrphans.
type LifecycleOrphansParams struct {
	// Expected maps an event type to the perspectives that must all have
	// applied an event of that type.
	Expected map[string][]string
	Since    time.Time
	Limit    int
}

// RewindStore supports rewinds and rebuilds: listing cursors that need a
// rewind, the cooperative per-(stream, perspective) lock, and listing the
// streams a perspective must replay. Optional: without it the engine never
// rewinds, and moves a late event (one stored below its pair's cursor) to

// checkStage rejects the stage of a claim or completion: exactly one
// durable stage, a perspective for StagePostPerspective and none for the
// others (recording a per-event stage under a perspective would split what
// is one stage of the event), and no nil id.
func checkStage(typ string, stage LifecycleStage, perspective string, instanceID uuid.UUID, eventIDs []uuid.UUID) error {
	switch stage {
	case StagePrePerspective, StagePostAllPerspectives, StagePostLifecycle:
		if perspective != "" {
			return invalidParam(typ+".Perspective", "must be empty for stage %d, recorded per event, got %q", stage, perspective)
		}
	case StagePostPerspective:
		if perspective == "" {
			return invalidParam(typ+".Perspective", "must be set for stage %d", stage)
		}
	default:
		return invalidParam(typ+".Stage", "must be a single durable stage, got %d", stage)
	}
	return cmp.Or(checkID(typ+".InstanceID", instanceID), checkIDs(typ+".EventIDs", eventIDs))
}

// Validate reports the first field every LifecycleStore rejects with
// ErrInvalidArgument: a Stage that is not exactly one durable stage, a
// StagePostPerspective without a Perspective or another stage with one, a
// nil InstanceID or event id, or a StaleThreshold that is not positive.
func (p *LifecycleClaimParams) Validate() error {
	return cmp.Or(
		checkStage("LifecycleClaimParams", p.Stage, p.Perspective, p.InstanceID, p.EventIDs),
		checkPositive("LifecycleClaimParams.StaleThreshold", p.StaleThreshold),
	)
}

// Validate reports the first field every LifecycleStore rejects with
// ErrInvalidArgument: as LifecycleClaimParams.Validate, StaleThreshold
// aside.
func (p *LifecycleCompleteParams) Validate() error {
	return checkStage("LifecycleCompleteParams", p.Stage, p.Perspective, p.InstanceID, p.EventIDs)
}

// Validate reports the field every LifecycleStore rejects with
// ErrInvalidArgument: a negative Limit.
func (p *LifecycleOrphansParams) Validate() error {
	return checkNotNegative("LifecycleOrphansParams.Limit", p.Limit)
}
