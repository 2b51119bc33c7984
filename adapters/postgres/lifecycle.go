package postgres

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/vantage-go/vantage/ports"
)

var _ ports.LifecycleStore = (*Store)(nil)

// sqlStageInput is the input CTE of the statements that claim or complete
// the stages of events $3: each id once, with the position of its first
// occurrence.
const sqlStageInput = `input AS (
    SELECT DISTINCT ON (i.id) i.id, i.ord
    FROM unnest($3::uuid[]) WITH ORDINALITY AS i(id, ord)
    ORDER BY i.id, i.ord
)`

// sqlLifecycleClaim claims stage $4 of perspective $5 (empty for the per-event
// stages) of the events $3 for instance $1 at $2, and returns those it
// claimed in input order: the events without a row for the stage, and those
// whose stage is not completed and is claimed by the caller itself or by an
// instance that is not live (no heartbeat newer than now - $6). ON CONFLICT
// locks each event's row, so of concurrent claims exactly one wins: the
// others re-check the row once the winner committed and find it claimed by
// a live instance. Rows are taken in id order, so overlapping claims cannot
// deadlock.
const sqlLifecycleClaim = `WITH ` + sqlClock + `,
` + sqlStageInput + `,
claimed AS (
    INSERT INTO /* SCHEMA */.vantage_lifecycle_stages AS l (event_id, stage, perspective, instance_id, claimed_at)
    SELECT i.id, $4::smallint, $5::text, $1::uuid, clock.now FROM input i, clock
    ORDER BY i.id
    ON CONFLICT (event_id, stage, perspective) DO UPDATE
    SET instance_id = excluded.instance_id, claimed_at = excluded.claimed_at
    WHERE l.completed_at IS NULL
      AND (l.instance_id = excluded.instance_id
           OR NOT EXISTS (
               SELECT 1 FROM /* SCHEMA */.vantage_instances v
               WHERE v.instance_id = l.instance_id AND v.last_heartbeat_at > excluded.claimed_at - $6::interval))
    RETURNING l.event_id
)
SELECT i.id FROM input i JOIN claimed c ON c.event_id = i.id ORDER BY i.ord`

// sqlLifecycleComplete records stage $4 of perspective $5 of the events $3
// completed by instance $1 at $2, whoever claimed it, which releases the
// claim. A completed stage is left as it is, so completing again changes
// nothing. Rows are taken in id order, as claims take them.
const sqlLifecycleComplete = `WITH ` + sqlClock + `,
` + sqlStageInput + `
INSERT INTO /* SCHEMA */.vantage_lifecycle_stages AS l (event_id, stage, perspective, instance_id, completed_at)
SELECT i.id, $4::smallint, $5::text, $1::uuid, clock.now FROM input i, clock
ORDER BY i.id
ON CONFLICT (event_id, stage, perspective) DO UPDATE
SET instance_id = excluded.instance_id, completed_at = excluded.completed_at
WHERE l.completed_at IS NULL`

// LifecycleClaim implements ports.LifecycleStore in one statement. The
// events need not be stored: the claim records only their ids. A claim
// stands while its instance has a heartbeat newer than Now - StaleThreshold;
// the claim of an instance without a row (never registered, deregistered or
// abandoned) is taken over. It returns ports.ErrInvalidArgument, and records
// nothing, for a Stage that is not exactly one of the durable stages, a
// StagePostPerspective without a Perspective or another stage with one, a
// nil instance id, a nil event id, or a StaleThreshold that is not positive.
func (s *Store) LifecycleClaim(ctx context.Context, params *ports.LifecycleClaimParams) ([]uuid.UUID, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("claiming lifecycle stages: %w", err)
	}
	if len(params.EventIDs) == 0 {
		return []uuid.UUID{}, nil
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	won, err := queryRows(ctx, s, sqlLifecycleClaim, pgx.RowTo[uuid.UUID], params.InstanceID, nowArg(params.Now),
		uuidsArg(params.EventIDs), int16(params.Stage), params.Perspective, params.StaleThreshold)
	if err != nil {
		return nil, fmt.Errorf("claiming lifecycle stage %d: %w", params.Stage, err)
	}
	return won, nil
}

// LifecycleComplete implements ports.LifecycleStore in one statement. The
// events need not be stored, nor the stages claimed. It returns
// ports.ErrInvalidArgument, and records nothing, for the arguments
// LifecycleClaim rejects (its StaleThreshold aside).
func (s *Store) LifecycleComplete(ctx context.Context, params *ports.LifecycleCompleteParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("completing lifecycle stages: %w", err)
	}
	if len(params.EventIDs) == 0 {
		return nil
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, s.sql(sqlLifecycleComplete), params.InstanceID, nowArg(params.Now),
		uuidsArg(params.EventIDs), int16(params.Stage), params.Perspective)
	if err != nil {
		return fmt.Errorf("completing lifecycle stage %d: %w", params.Stage, translate(err))
	}
	return nil
}

// sqlLifecycleStages returns the completed per-event stages of the events
// $1, and their completed StagePostPerspective of perspective $2 (none when
// $2 is empty: a PostPerspective row always names its perspective), one
// row per event that has any. Each event is a probe of the key, so
// the read grows with the call, not with the table: as a plain "= ANY",
// the planner scans the whole table when a few hundred events are listed
// and the table is still small enough for a scan to look as cheap as the
// probes.
const sqlLifecycleStages = `SELECT i.id, s.stages
FROM (SELECT DISTINCT unnest($1::uuid[]) AS id) i
CROSS JOIN LATERAL (
    SELECT bit_or(l.stage) AS stages
    FROM /* SCHEMA */.vantage_lifecycle_stages l
    WHERE l.event_id = i.id AND l.completed_at IS NOT NULL
      AND (l.stage <> ` + sqlStagePostPerspective + ` OR l.perspective = $2::text)
) s
WHERE s.stages IS NOT NULL`

// Lifecycle stages as SQL literals (ports.LifecycleStage values).
const (
	sqlStagePostLifecycle   = "4"
	sqlStagePostPerspective = "8"
)

// LifecycleStages implements ports.LifecycleStore. The map is never nil.
func (s *Store) LifecycleStages(ctx context.Context, params *ports.LifecycleStagesParams) (map[uuid.UUID]ports.LifecycleStage, error) {
	eventIDs := params.EventIDs
	out := map[uuid.UUID]ports.LifecycleStage{}
	if len(eventIDs) == 0 {
		return out, nil
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.sql(sqlLifecycleStages), uuidsArg(eventIDs), params.Perspective)
	if err != nil {
		return nil, fmt.Errorf("reading lifecycle stages: %w", translate(err))
	}
	var (
		id     uuid.UUID
		stages int16
	)
	_, err = pgx.ForEachRow(rows, []any{uuidDest(&id), &stages}, func() error {
		out[id] = ports.LifecycleStage(stages)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading lifecycle stages: %w", translate(err))
	}
	return out, nil
}

// sqlExpected is the CTE of the expected perspectives of each event type,
// each once: $1 and $2 are the (type, perspective) pairs.
const sqlExpected = `expected AS (
    SELECT x.type, array_agg(DISTINCT x.perspective) AS perspectives
    FROM unnest($1::text[], $2::text[]) AS x(type, perspective)
    GROUP BY x.type
)`

// sqlAppliedByAll is true when every perspective of x.perspectives applied
// the event e: its cursor of e's stream is at or past e's version (a
// primary key probe per perspective) and it has no pending row for e (a
// late event below the cursor is not applied until its rewind completed
// its row).
const sqlAppliedByAll = `(SELECT count(*)
     FROM /* SCHEMA */.vantage_cursors c
     WHERE c.stream_id = e.stream_id AND c.perspective = ANY (x.perspectives)
       AND c.last_version >= e.version
       AND NOT EXISTS (
           SELECT 1 FROM /* SCHEMA */.vantage_work w
           WHERE w.stream_id = e.stream_id AND w.perspective = c.perspective
             AND w.event_version = e.version AND w.processed_at IS NULL)) = cardinality(x.perspectives)`

// sqlLifecycleReady returns, in input order, the events $3 that every
// expected perspective of their type applied (see sqlAppliedByAll); the
// events of a type without expected perspectives are ready, unknown ids are
// not. Each listed id is looked up by primary key, row by row: the LATERAL
// ... LIMIT 1 keeps the planner from hashing the whole events table, which
// statistics taken when it was small would make it pick.
const sqlLifecycleReady = `WITH ` + sqlExpected + `,
input AS (
    SELECT DISTINCT ON (i.id) i.id, i.ord
    FROM unnest($3::uuid[]) WITH ORDINALITY AS i(id, ord)
    ORDER BY i.id, i.ord
)
SELECT e.id
FROM input i
CROSS JOIN LATERAL (
    SELECT e.id, e.stream_id, e.type, e.version
    FROM /* SCHEMA */.vantage_events e
    WHERE e.id = i.id
    LIMIT 1
) e
LEFT JOIN expected x ON x.type = e.type
WHERE x.type IS NULL OR ` + sqlAppliedByAll + `
ORDER BY i.ord`

// LifecycleReady implements ports.LifecycleStore in one statement. An id
// listed twice is returned once, at its first position; a perspective
// listed twice for a type counts once.
func (s *Store) LifecycleReady(ctx context.Context, params *ports.LifecycleReadyParams) ([]uuid.UUID, error) {
	if len(params.EventIDs) == 0 {
		return []uuid.UUID{}, nil
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	types, perspectives := expectedPairs(params.Expected)
	out, err := queryRows(ctx, s, sqlLifecycleReady, func(row pgx.CollectableRow) (uuid.UUID, error) {
		var id uuid.UUID
		return id, row.Scan(uuidDest(&id))
	}, types, perspectives, uuidsArg(params.EventIDs))
	if err != nil {
		return nil, fmt.Errorf("checking which events are applied: %w", err)
	}
	if out == nil {
		out = []uuid.UUID{}
	}
	return out, nil
}

// expectedPairs flattens expected into (type, perspective) pairs.
func expectedPairs(expected map[string][]string) (types, perspectives []string) {
	for typ, ps := range expected {
		for _, p := range ps {
			types = append(types, typ)
			perspectives = append(perspectives, p)
		}
	}
	return types, perspectives
}

// sqlLifecycleOrphans finds events whose PostLifecycle is not completed
// (claimed or not: a claim may have died with its instance) although every
// expected perspective applied them (see sqlAppliedByAll): $1, $2 are the
// expected (type, perspective) pairs, $3 Since (NULL for none), $4 the limit
// (NULL for none). Per type it walks vantage_events_type_created_idx in
// creation order and stops at the limit; the walks are merged and cut
// again.
const sqlLifecycleOrphans = `WITH ` + sqlExpected + `
SELECT o.id, o.stream_id, o.type, o.version, o.data, o.metadata, o.created_at
FROM expected x
CROSS JOIN LATERAL (
    SELECT e.*
    FROM /* SCHEMA */.vantage_events e
    WHERE e.type = x.type
      AND e.created_at >= coalesce($3::timestamptz, '-infinity')
      AND NOT EXISTS (
          SELECT 1 FROM /* SCHEMA */.vantage_lifecycle_stages l
          WHERE l.event_id = e.id AND l.stage = ` + sqlStagePostLifecycle + ` AND l.perspective = ''
            AND l.completed_at IS NOT NULL)
      AND ` + sqlAppliedByAll + `
    ORDER BY e.created_at, e.stream_id, e.version
    LIMIT $4::bigint
) o
ORDER BY o.created_at, o.stream_id, o.version
LIMIT $4::bigint`

// LifecycleOrphans implements ports.LifecycleStore. A perspective listed
// twice for a type counts once, and a type mapped to no perspective is
// treated like a type absent from Expected: its events are never returned.
// It returns ports.ErrInvalidArgument for a negative Limit.
func (s *Store) LifecycleOrphans(ctx context.Context, params *ports.LifecycleOrphansParams) ([]ports.Event, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("finding orphaned lifecycles: %w", err)
	}
	types, perspectives := expectedPairs(params.Expected)
	if len(types) == 0 {
		return nil, nil
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	out, err := queryRows(ctx, s, sqlLifecycleOrphans, scanEvent, types, perspectives, nowArg(params.Since), limitArg(params.Limit))
	if err != nil {
		return nil, fmt.Errorf("finding orphaned lifecycles: %w", err)
	}
	return out, nil
}
