package ports

import (
	"cmp"
	"context"
	"time"

	"github.com/google/uuid"
)

// RebuildQueue is the optional port through which running engine instances
// carry out the rebuild requests operators store (Admin.RebuildRequest):
// an instance that runs the request's perspective claims it, rebuilds the
// streams, records its progress as it goes and finishes it.
//
// Claims: a request is claimed by one instance at a time, until its claim
// expires (ClaimExpiry). A running request whose claim expired may be
// claimed by another instance, which resumes it where the progress
// recorded last left it (ResumeAfter). The holder of the latest claim,
// expired or not, is the only caller whose progress and finish take effect,
// until another instance claims the request (fencing, as for the leases of
// WorkClaimer): it names its claim by the request's InstanceID and Attempt
// as the claim returned them, and a call naming an older claim, or a
// request cancelled or finished meanwhile, returns ErrVersionConflict, so
// the caller stops.
type RebuildQueue interface {
	// RebuildClaim claims the oldest request (by RequestedAt, then id) of
	// one of params.Perspectives that is RebuildPending, or RebuildRunning
	// under a claim expired at Now, and returns it as claimed:
	// RebuildRunning, its InstanceID the caller, Attempt one more than
	// before, ClaimExpiry Now + ClaimDuration, StartedAt set on its first
	// claim, and its figures as recorded last. Claimed is false, with no
	// error, when there is none. Concurrent claims never claim one request
	// twice. Returns ErrInvalidArgument for a nil InstanceID, an empty
	// perspective name or a ClaimDuration that is not positive.
	RebuildClaim(ctx context.Context, params *RebuildClaimParams) (*RebuildClaimResult, error)

	// RebuildProgress records the figures of the caller's claim and
	// extends it to Now + ClaimDuration; with Release it gives the claim up
	// instead, the request RebuildPending again with its figures, so that
	// the next claim, by any instance, resumes it. Returns ErrNotFound for
	// an unknown id, ErrVersionConflict when the caller does not hold the
	// request's latest claim (see RebuildQueue), and ErrInvalidArgument for
	// invalid params.
	RebuildProgress(ctx context.Context, params *RebuildProgressParams) error

	// RebuildFinish records the final figures of the caller's claim and
	// ends the request: RebuildDone with an empty Error, RebuildFailed with
	// it; FinishedAt is Now. Returns ErrNotFound for an unknown id,
	// ErrVersionConflict when the caller does not hold the request's latest
	// claim, and ErrInvalidArgument for invalid params.
	RebuildFinish(ctx context.Context, params *RebuildFinishParams) error
}

// RebuildStatus is where a rebuild request stands. The values are stored and
// must not change.
type RebuildStatus string

// Rebuild request statuses.
const (
	// RebuildPending: waiting for an instance that runs its perspective to
	// claim it, or to resume it.
	RebuildPending RebuildStatus = "pending"
	// RebuildRunning: claimed by InstanceID until ClaimExpiry.
	RebuildRunning RebuildStatus = "running"
	// RebuildDone: every stream it covers was rebuilt.
	RebuildDone RebuildStatus = "done"
	// RebuildFailed: it stopped at an event the perspective could not
	// replay (Error says which and why); the streams before it are
	// rebuilt, the others are not.
	RebuildFailed RebuildStatus = "failed"
	// RebuildCancelled: an operator cancelled it (Admin.RebuildCancel).
	RebuildCancelled RebuildStatus = "cancelled"
)

// RebuildFigures are the progress of a rebuild request, recorded by the
// instance that runs it.
type RebuildFigures struct {
	// StreamsTotal is how many streams the request covers as the run that
	// recorded it last counted them: its StreamIDs, or the streams with
	// events its perspective handles, counted when each run starts (it may
	// grow while the request runs). Zero until counted.
	StreamsTotal int64
	// StreamsDone counts the streams rebuilt, over every run.
	StreamsDone int64
	// EventsReplayed counts the events the rebuilt streams replayed.
	EventsReplayed int64
	// ResumeAfter is the last stream rebuilt in the order the engine goes
	// through them (byte order of the ids): every stream up to it is done,
	// and a run that resumes the request starts after it. Nil before the
	// first.
	ResumeAfter uuid.UUID
}

// RebuildRequest is a stored request to rebuild a perspective: to replay
// it from scratch for some or all of its streams.
type RebuildRequest struct {
	ID          uuid.UUID
	Perspective string
	// StreamIDs are the streams to rebuild, sorted by their bytes without
	// duplicates; empty for every stream with events the perspective
	// handles.
	StreamIDs []uuid.UUID
	// RequestedBy is free text the requester gave (an operator's name, a
	// ticket), "" for none.
	RequestedBy string
	RequestedAt time.Time
	Status      RebuildStatus
	// InstanceID is the instance of the latest claim, nil before the first;
	// Attempt counts the claims (0 before the first), the number of the
	// latest.
	InstanceID uuid.UUID
	Attempt    int
	// ClaimExpiry is when the latest claim expires; zero unless running.
	ClaimExpiry time.Time
	// StartedAt is the first claim, UpdatedAt the latest change, FinishedAt
	// the end (done, failed or cancelled); zero until they happen.
	StartedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt time.Time
	// Error says why a RebuildFailed request failed.
	Error string
	RebuildFigures
}

// Remaining estimates how long the request has still to run, from the
// pace of its runs so far: the time from StartedAt to UpdatedAt per stream
// done, times the streams left. ok is false when there is nothing to go
// by: a request that is not running or pending, whose streams are not
// counted yet, or that has rebuilt none. The time a request waited between
// runs counts as run time, so a request that was resumed looks slower than
// it runs.
func (r RebuildRequest) Remaining() (remaining time.Duration, ok bool) {
	if r.Status != RebuildRunning && r.Status != RebuildPending || r.StreamsDone <= 0 || r.StreamsTotal <= 0 || r.StartedAt.IsZero() {
		return 0, false
	}
	left := max(r.StreamsTotal-r.StreamsDone, 0)
	perStream := r.UpdatedAt.Sub(r.StartedAt) / time.Duration(r.StreamsDone)
	return max(perStream*time.Duration(left), 0), true
}

// RebuildRequestParams are the inputs of Admin.RebuildRequest.
type RebuildRequestParams struct {
	// Perspective is the perspective to rebuild. Required.
	Perspective string
	// StreamIDs, when not empty, are the streams to rebuild; else every
	// stream with events the perspective handles.
	StreamIDs []uuid.UUID
	// RequestedBy is stored with the request.
	RequestedBy string
	Now         time.Time
}

// RebuildGetParams are the inputs of Admin.RebuildGet.
type RebuildGetParams struct {
	ID uuid.UUID
}

// RebuildsListParams filter Admin.RebuildsList. Zero fields filter
// nothing.
type RebuildsListParams struct {
	Perspective string
	// Status, when set, keeps the requests in that status only.
	Status RebuildStatus
	// Limit bounds the requests returned when positive.
	Limit int
}

// RebuildCancelParams are the inputs of Admin.RebuildCancel.
type RebuildCancelParams struct {
	ID  uuid.UUID
	Now time.Time
}

// RebuildClaimParams are the inputs of RebuildClaim.
type RebuildClaimParams struct {
	// InstanceID is the claiming instance.
	InstanceID uuid.UUID
	// Perspectives are those the caller runs: only their requests are
	// claimed. None claims nothing.
	Perspectives []string
	// ClaimDuration is how long the claim lasts unless renewed.
	ClaimDuration time.Duration
	Now           time.Time
}

// RebuildClaimResult is the output of RebuildClaim.
type RebuildClaimResult struct {
	// Request is the request as claimed; zero when Claimed is false.
	Request RebuildRequest
	// Claimed is false when no request could be claimed.
	Claimed bool
}

// RebuildProgressParams are the inputs of RebuildProgress.
type RebuildProgressParams struct {
	// ID, InstanceID and Attempt name the request and the caller's claim
	// (see RebuildQueue).
	ID         uuid.UUID
	InstanceID uuid.UUID
	Attempt    int
	// RebuildFigures are recorded as they are.
	RebuildFigures
	// ClaimDuration extends the claim to Now + ClaimDuration. Must be
	// positive unless Release is set.
	ClaimDuration time.Duration
	// Release gives the claim up after recording the figures.
	Release bool
	Now     time.Time
}

// RebuildFinishParams are the inputs of RebuildFinish.
type RebuildFinishParams struct {
	// ID, InstanceID and Attempt name the request and the caller's claim
	// (see RebuildQueue).
	ID         uuid.UUID
	InstanceID uuid.UUID
	Attempt    int
	// RebuildFigures are recorded as they are.
	RebuildFigures
	// Error, when set, fails the request with it; empty, it is done.
	Error string
	Now   time.Time
}

// Validate reports the first field every Admin rejects with
// ErrInvalidArgument: an empty Perspective or a nil stream id.
func (p *RebuildRequestParams) Validate() error {
	return cmp.Or(
		checkName("RebuildRequestParams.Perspective", p.Perspective),
		checkIDs("RebuildRequestParams.StreamIDs", p.StreamIDs),
	)
}

// Validate reports the first field every Admin rejects with
// ErrInvalidArgument: a negative Limit or a Status that is none of the
// RebuildStatus values.
func (p *RebuildsListParams) Validate() error {
	return cmp.Or(
		checkNotNegative("RebuildsListParams.Limit", p.Limit),
		checkRebuildStatus("RebuildsListParams.Status", p.Status),
	)
}

// Validate reports the first field every RebuildQueue rejects with
// ErrInvalidArgument: a nil InstanceID, an empty perspective name or a
// ClaimDuration that is not positive.
func (p *RebuildClaimParams) Validate() error {
	if err := checkID("RebuildClaimParams.InstanceID", p.InstanceID); err != nil {
		return err
	}
	for _, name := range p.Perspectives {
		if err := checkName("RebuildClaimParams.Perspectives", name); err != nil {
			return err
		}
	}
	return checkPositive("RebuildClaimParams.ClaimDuration", p.ClaimDuration)
}

// Validate reports the first field every RebuildQueue rejects with
// ErrInvalidArgument: a nil ID or InstanceID, an Attempt below 1, a
// negative figure, or a ClaimDuration that is not positive without
// Release.
func (p *RebuildProgressParams) Validate() error {
	if err := cmp.Or(
		checkClaim("RebuildProgressParams", p.ID, p.InstanceID, p.Attempt),
		checkFigures("RebuildProgressParams", p.RebuildFigures),
	); err != nil {
		return err
	}
	if p.Release {
		return nil
	}
	return checkPositive("RebuildProgressParams.ClaimDuration", p.ClaimDuration)
}

// Validate reports the first field every RebuildQueue rejects with
// ErrInvalidArgument: a nil ID or InstanceID, an Attempt below 1 or a
// negative figure.
func (p *RebuildFinishParams) Validate() error {
	return cmp.Or(
		checkClaim("RebuildFinishParams", p.ID, p.InstanceID, p.Attempt),
		checkFigures("RebuildFinishParams", p.RebuildFigures),
	)
}

// checkClaim rejects the name of a claim: a nil request or instance id, an
// attempt below 1.
func checkClaim(params string, id, instanceID uuid.UUID, attempt int) error {
	return cmp.Or(
		checkID(params+".ID", id),
		checkID(params+".InstanceID", instanceID),
		checkPositive(params+".Attempt", attempt),
	)
}

// checkFigures rejects a negative figure.
func checkFigures(params string, f RebuildFigures) error {
	return cmp.Or(
		checkNotNegative(params+".StreamsTotal", f.StreamsTotal),
		checkNotNegative(params+".StreamsDone", f.StreamsDone),
		checkNotNegative(params+".EventsReplayed", f.EventsReplayed),
	)
}

// checkRebuildStatus rejects a status that is neither empty nor one of the
// RebuildStatus values.
func checkRebuildStatus(field string, status RebuildStatus) error {
	switch status {
	case "", RebuildPending, RebuildRunning, RebuildDone, RebuildFailed, RebuildCancelled:
		return nil
	}
	return invalidParam(field, "must be a RebuildStatus, got %q", status)
}
