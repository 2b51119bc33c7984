package postgres

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/vantage-go/vantage/ports"
)

// Rebuild requests live in vantage_rebuilds (migration 007). Every statement
// on them is one round trip; they are few, and only the periodic claim of
// each instance runs often: a probe of vantage_rebuilds_open_idx.

var _ ports.RebuildQueue = (*Store)(nil)

// Rebuild statuses as SQL literals (ports.RebuildStatus values).
const (
	sqlRebuildPending   = `'` + string(ports.RebuildPending) + `'`
	sqlRebuildRunning   = `'` + string(ports.RebuildRunning) + `'`
	sqlRebuildDone      = `'` + string(ports.RebuildDone) + `'`
	sqlRebuildFailed    = `'` + string(ports.RebuildFailed) + `'`
	sqlRebuildCancelled = `'` + string(ports.RebuildCancelled) + `'`
)

const sqlRebuildColumns = `id, perspective, stream_ids, requested_by, requested_at, status, instance_id, attempt, claim_expiry,
       started_at, updated_at, finished_at, error, streams_total, streams_done, events_replayed, resume_after`

// scanRebuild scans the columns of sqlRebuildColumns.
func scanRebuild(row pgx.CollectableRow) (ports.RebuildRequest, error) {
	var (
		r                                       ports.RebuildRequest
		streams                                 [][16]byte
		status                                  string
		instance, resume                        pgtype.UUID
		requested, expiry, started, updated, at pgtype.Timestamptz
	)
	err := row.Scan(uuidDest(&r.ID), &r.Perspective, &streams, &r.RequestedBy, &requested, &status, &instance, &r.Attempt, &expiry,
		&started, &updated, &at, &r.Error, &r.StreamsTotal, &r.StreamsDone, &r.EventsReplayed, &resume)
	for _, s := range streams {
		r.StreamIDs = append(r.StreamIDs, s)
	}
	r.Status, r.InstanceID, r.ResumeAfter = ports.RebuildStatus(status), fromUUID(instance), fromUUID(resume)
	r.RequestedAt, r.ClaimExpiry, r.StartedAt, r.UpdatedAt, r.FinishedAt = fromTime(requested), fromTime(expiry), fromTime(started), fromTime(updated), fromTime(at)
	return r, err
}

// sqlRebuildRequest stores the request $1 for perspective $3, streams $4
// (NULL for every stream), requested by $5 at $2 (NULL: now()).
const sqlRebuildRequest = `WITH ` + sqlClock + `
INSERT INTO /* SCHEMA */.vantage_rebuilds (id, perspective, stream_ids, requested_by, requested_at, updated_at)
SELECT $1, $3, $4::uuid[], $5, clock.now, clock.now
FROM clock
RETURNING ` + sqlRebuildColumns

// RebuildRequest implements ports.Admin in one statement. The stream ids are
// sorted and deduplicated before they are stored. It returns
// ports.ErrInvalidArgument for an empty perspective or a nil stream id.
func (s *Store) RebuildRequest(ctx context.Context, params *ports.RebuildRequestParams) (ports.RebuildRequest, error) {
	if err := params.Validate(); err != nil {
		return ports.RebuildRequest{}, fmt.Errorf("requesting a rebuild: %w", err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return ports.RebuildRequest{}, fmt.Errorf("requesting a rebuild: generating id: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return ports.RebuildRequest{}, err
	}
	var streams []pgtype.UUID
	if len(params.StreamIDs) > 0 {
		ids := slices.Clone(params.StreamIDs)
		slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
		streams = uuidsArg(slices.Compact(ids))
	}
	rs, err := queryRows(ctx, s, sqlRebuildRequest, scanRebuild, uuidArg(id), nowArg(params.Now), params.Perspective, streams, params.RequestedBy)
	if err != nil {
		return ports.RebuildRequest{}, fmt.Errorf("requesting a rebuild of %q: %w", params.Perspective, err)
	}
	return rs[0], nil
}

const sqlRebuildGet = `SELECT ` + sqlRebuildColumns + ` FROM /* SCHEMA */.vantage_rebuilds WHERE id = $1`

// RebuildGet implements ports.Admin in one statement. It returns
// ports.ErrNotFound for an unknown id.
func (s *Store) RebuildGet(ctx context.Context, params *ports.RebuildGetParams) (ports.RebuildRequest, error) {
	if err := s.ready(ctx); err != nil {
		return ports.RebuildRequest{}, err
	}
	rs, err := queryRows(ctx, s, sqlRebuildGet, scanRebuild, uuidArg(params.ID))
	switch {
	case err != nil:
		return ports.RebuildRequest{}, fmt.Errorf("reading rebuild request %s: %w", params.ID, err)
	case len(rs) == 0:
		return ports.RebuildRequest{}, fmt.Errorf("reading rebuild request %s: %w", params.ID, ports.ErrNotFound)
	}
	return rs[0], nil
}

// sqlRebuildsList lists the requests of perspective $1 (” for any) in
// status $2 (” for any), newest first, at most $3 (NULL for no limit),
// walking vantage_rebuilds_requested_idx backwards.
const sqlRebuildsList = `SELECT ` + sqlRebuildColumns + `
FROM /* SCHEMA */.vantage_rebuilds
WHERE ($1 = '' OR perspective = $1) AND ($2 = '' OR status = $2)
ORDER BY requested_at DESC, id DESC
LIMIT $3::bigint`

// RebuildsList implements ports.Admin in one statement. It returns
// ports.ErrInvalidArgument for a negative Limit or an unknown Status.
func (s *Store) RebuildsList(ctx context.Context, params *ports.RebuildsListParams) ([]ports.RebuildRequest, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("listing rebuild requests: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	rs, err := queryRows(ctx, s, sqlRebuildsList, scanRebuild, params.Perspective, string(params.Status), limitArg(params.Limit))
	if err != nil {
		return nil, fmt.Errorf("listing rebuild requests: %w", err)
	}
	if rs == nil {
		rs = []ports.RebuildRequest{}
	}
	return rs, nil
}

// sqlRebuildCancel cancels the request $1 at $2 when it is pending or
// running, and returns whether it did, and the status it had (NULL for an
// unknown id).
const sqlRebuildCancel = `WITH ` + sqlClock + `,
prior AS (
    SELECT r.status FROM /* SCHEMA */.vantage_rebuilds r WHERE r.id = $1
),
cancelled AS (
    UPDATE /* SCHEMA */.vantage_rebuilds r
    SET status = ` + sqlRebuildCancelled + `, claim_expiry = NULL, finished_at = clock.now, updated_at = clock.now
    FROM clock
    WHERE r.id = $1 AND r.status IN (` + sqlRebuildPending + `, ` + sqlRebuildRunning + `)
    RETURNING 1
)
SELECT (SELECT count(*) FROM cancelled), (SELECT status FROM prior)`

// RebuildCancel implements ports.Admin in one statement. It returns
// ports.ErrNotFound for an unknown id and ports.ErrVersionConflict for a
// request done or failed.
func (s *Store) RebuildCancel(ctx context.Context, params *ports.RebuildCancelParams) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	var (
		cancelled int
		prior     pgtype.Text
	)
	if err := s.pool.QueryRow(ctx, s.sql(sqlRebuildCancel), uuidArg(params.ID), nowArg(params.Now)).Scan(&cancelled, &prior); err != nil {
		return fmt.Errorf("cancelling rebuild request %s: %w", params.ID, translate(err))
	}
	switch {
	case cancelled > 0 || prior.String == string(ports.RebuildCancelled):
		return nil
	case !prior.Valid:
		return fmt.Errorf("cancelling rebuild request %s: %w", params.ID, ports.ErrNotFound)
	default:
		return fmt.Errorf("cancelling rebuild request %s: it is %s: %w", params.ID, prior.String, ports.ErrVersionConflict)
	}
}

// sqlRebuildClaim claims for instance $1 at $2 the oldest request of the
// perspectives $3 that is pending or running under a claim expired at $2,
// for $4. picked walks vantage_rebuilds_open_idx in order; FOR UPDATE SKIP
// LOCKED passes over a request another claim (or a progress report) has
// locked, and one that a concurrent claim committed meanwhile no longer
// matches when locked, so two claims never take the same request.
const sqlRebuildClaim = `WITH ` + sqlClock + `,
picked AS (
    SELECT r.id AS picked_id
    FROM /* SCHEMA */.vantage_rebuilds r
    WHERE r.status IN (` + sqlRebuildPending + `, ` + sqlRebuildRunning + `) AND r.perspective = ANY ($3::text[])
      AND (r.status = ` + sqlRebuildPending + ` OR r.claim_expiry <= (SELECT now FROM clock))
    ORDER BY r.requested_at, r.id
    LIMIT 1
    FOR UPDATE OF r SKIP LOCKED
)
UPDATE /* SCHEMA */.vantage_rebuilds r
SET status = ` + sqlRebuildRunning + `,
    instance_id = $1,
    attempt = r.attempt + 1,
    claim_expiry = clock.now + $4::interval,
    started_at = coalesce(r.started_at, clock.now),
    updated_at = clock.now
FROM picked p, clock
WHERE r.id = p.picked_id
RETURNING ` + sqlRebuildColumns

// RebuildClaim implements ports.RebuildQueue in one statement (see
// sqlRebuildClaim). It returns ports.ErrInvalidArgument for a nil
// InstanceID, an empty perspective name or a ClaimDuration that is not
// positive.
func (s *Store) RebuildClaim(ctx context.Context, params *ports.RebuildClaimParams) (*ports.RebuildClaimResult, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("claiming a rebuild request: %w", err)
	}
	if len(params.Perspectives) == 0 {
		return &ports.RebuildClaimResult{}, nil
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	rs, err := queryRows(ctx, s, sqlRebuildClaim, scanRebuild, uuidArg(params.InstanceID), nowArg(params.Now), params.Perspectives, params.ClaimDuration)
	if err != nil {
		return nil, fmt.Errorf("claiming a rebuild request: %w", err)
	}
	if len(rs) == 0 {
		return &ports.RebuildClaimResult{}, nil
	}
	return &ports.RebuildClaimResult{Request: rs[0], Claimed: true}, nil
}

// sqlRebuildFigures is the SET list that records the figures $5 to $8.
const sqlRebuildFigures = `streams_total = $5, streams_done = $6, events_replayed = $7, resume_after = $8::uuid, updated_at = clock.now`

// sqlRebuildHeld is the condition that the caller holds the latest claim
// of the request $1: instance $3, attempt $4.
const sqlRebuildHeld = `r.id = $1 AND r.status = ` + sqlRebuildRunning + ` AND r.instance_id = $3 AND r.attempt = $4`

// sqlRebuildProgress records the figures of the claim ($1 request, $2 now,
// $3 instance, $4 attempt, $5 to $8 the figures) and extends it by $9, or,
// with $10, releases it. It returns whether it matched, and the status the
// request had (NULL for an unknown id).
const sqlRebuildProgress = `WITH ` + sqlClock + `,
prior AS (
    SELECT r.status FROM /* SCHEMA */.vantage_rebuilds r WHERE r.id = $1
),
recorded AS (
    UPDATE /* SCHEMA */.vantage_rebuilds r
    SET ` + sqlRebuildFigures + `,
        status = CASE WHEN $10::boolean THEN ` + sqlRebuildPending + ` ELSE r.status END,
        claim_expiry = CASE WHEN $10::boolean THEN NULL ELSE clock.now + $9::interval END
    FROM clock
    WHERE ` + sqlRebuildHeld + `
    RETURNING 1
)
SELECT (SELECT count(*) FROM recorded), (SELECT status FROM prior)`

// RebuildProgress implements ports.RebuildQueue in one statement. It
// returns ports.ErrNotFound for an unknown id, ports.ErrVersionConflict when
// the caller does not hold the request's latest claim, and
// ports.ErrInvalidArgument for invalid params.
func (s *Store) RebuildProgress(ctx context.Context, params *ports.RebuildProgressParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("recording rebuild progress: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	f := params.RebuildFigures
	var (
		recorded int
		prior    pgtype.Text
	)
	err := s.pool.QueryRow(ctx, s.sql(sqlRebuildProgress), uuidArg(params.ID), nowArg(params.Now), uuidArg(params.InstanceID), params.Attempt,
		f.StreamsTotal, f.StreamsDone, f.EventsReplayed, uuidArg(f.ResumeAfter), params.ClaimDuration, params.Release).Scan(&recorded, &prior)
	if err != nil {
		return fmt.Errorf("recording the progress of rebuild request %s: %w", params.ID, translate(err))
	}
	return claimOutcome("recording the progress of", params.ID, params.InstanceID, params.Attempt, recorded > 0, prior)
}

// sqlRebuildFinish records the final figures of the claim ($1 request, $2
// now, $3 instance, $4 attempt, $5 to $8 the figures) and ends the request,
// done when the error $9 is empty and failed with it otherwise. It returns
// whether it matched, and the status the request had (NULL for an unknown
// id).
const sqlRebuildFinish = `WITH ` + sqlClock + `,
prior AS (
    SELECT r.status FROM /* SCHEMA */.vantage_rebuilds r WHERE r.id = $1
),
finished AS (
    UPDATE /* SCHEMA */.vantage_rebuilds r
    SET ` + sqlRebuildFigures + `,
        status = CASE WHEN $9 = '' THEN ` + sqlRebuildDone + ` ELSE ` + sqlRebuildFailed + ` END,
        error = $9,
        claim_expiry = NULL,
        finished_at = clock.now
    FROM clock
    WHERE ` + sqlRebuildHeld + `
    RETURNING 1
)
SELECT (SELECT count(*) FROM finished), (SELECT status FROM prior)`

// RebuildFinish implements ports.RebuildQueue in one statement. It returns
// ports.ErrNotFound for an unknown id, ports.ErrVersionConflict when the
// caller does not hold the request's latest claim, and
// ports.ErrInvalidArgument for invalid params.
func (s *Store) RebuildFinish(ctx context.Context, params *ports.RebuildFinishParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("finishing a rebuild request: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	f := params.RebuildFigures
	var (
		finished int
		prior    pgtype.Text
	)
	err := s.pool.QueryRow(ctx, s.sql(sqlRebuildFinish), uuidArg(params.ID), nowArg(params.Now), uuidArg(params.InstanceID), params.Attempt,
		f.StreamsTotal, f.StreamsDone, f.EventsReplayed, uuidArg(f.ResumeAfter), params.Error).Scan(&finished, &prior)
	if err != nil {
		return fmt.Errorf("finishing rebuild request %s: %w", params.ID, translate(err))
	}
	return claimOutcome("finishing", params.ID, params.InstanceID, params.Attempt, finished > 0, prior)
}

// claimOutcome turns the outcome of a statement fenced by a rebuild claim
// into the error of the port: nil when it matched, else ErrNotFound for an
// unknown id and ErrVersionConflict when the claim does not stand.
func claimOutcome(doing string, id, instance uuid.UUID, attempt int, matched bool, prior pgtype.Text) error {
	switch {
	case matched:
		return nil
	case !prior.Valid:
		return fmt.Errorf("%s rebuild request %s: %w", doing, id, ports.ErrNotFound)
	default:
		return fmt.Errorf("%s rebuild request %s: the claim of instance %s, attempt %d, does not stand (the request is %s): %w",
			doing, id, instance, attempt, prior.String, ports.ErrVersionConflict)
	}
}
