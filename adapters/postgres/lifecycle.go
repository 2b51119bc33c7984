package postgres

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/vantage-go/vantage/ports"
)

var _ ports.LifecycleStore = (*Store)(nil)

// sqlLifecycleClaim records stage $4 for the events $3 that lack it, for
// instance $1 at $2, and returns those it recorded in input order (an id
// listed twice counts at its first position). ON CONFLICT locks each event's
// row, so of concurrent claims of one stage exactly one wins; rows are
// taken in id order, so overlapping claims cannot deadlock.
const sqlLifecycleClaim = `WITH ` + sqlClock + `,
input AS (
    SELECT DISTINCT ON (i.id) i.id, i.ord
    FROM unnest($3::uuid[]) WITH ORDINALITY AS i(id, ord)
    ORDER BY i.id, i.ord
),
claimed AS (
    INSERT INTO /* SCHEMA */.vantage_lifecycle AS l (event_id, stages, instance_id, claimed_at)
    SELECT i.id, $4::smallint, $1::uuid, clock.now FROM input i, clock
    ORDER BY i.id
    ON CONFLICT (event_id) DO UPDATE
    SET stages = l.stages | excluded.stages, instance_id = excluded.instance_id, claimed_at = excluded.claimed_at
    WHERE l.stages & excluded.stages = 0
    RETURNING l.event_id
)
SELECT i.id FROM input i JOIN claimed c ON c.event_id = i.id ORDER BY i.ord`

// LifecycleClaim implements ports.LifecycleStore in one statement. The
// events need not be stored: the claim records only their ids. It returns
// ports.ErrInvalidArgument, and records nothing, for a Stage that is not
// exactly one of the durable stages, a nil instance id or a nil event id.
func (s *Store) LifecycleClaim(ctx context.Context, params *ports.LifecycleClaimParams) ([]uuid.UUID, error) {
	switch params.Stage {
	case ports.StagePrePerspective, ports.StagePostAllPerspectives, ports.StagePostLifecycle:
	default:
		return nil, fmt.Errorf("claiming lifecycle stage %d: %w", params.Stage, invalid("not a single durable stage"))
	}
	switch {
	case params.InstanceID == uuid.Nil:
		return nil, fmt.Errorf("claiming lifecycle stage %d: %w", params.Stage, invalid("nil instance id"))
	case slices.Contains(params.EventIDs, uuid.Nil):
		return nil, fmt.Errorf("claiming lifecycle stage %d: %w", params.Stage, invalid("nil event id"))
	case len(params.EventIDs) == 0:
		return []uuid.UUID{}, nil
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	won, err := queryRows(ctx, s, sqlLifecycleClaim, pgx.RowTo[uuid.UUID], params.InstanceID, nowArg(params.Now), uuidsArg(params.EventIDs), int16(params.Stage))
	if err != nil {
		return nil, fmt.Errorf("claiming lifecycle stage %d: %w", params.Stage, err)
	}
	return won, nil
}

const sqlLifecycleStages = `SELECT event_id, stages FROM /* SCHEMA */.vantage_lifecycle WHERE event_id = ANY($1::uuid[])`

// LifecycleStages implements ports.LifecycleStore. The map is never nil.
func (s *Store) LifecycleStages(ctx context.Context, eventIDs []uuid.UUID) (map[uuid.UUID]ports.LifecycleStage, error) {
	out := map[uuid.UUID]ports.LifecycleStage{}
	if len(eventIDs) == 0 {
		return out, nil
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.sql(sqlLifecycleStages), uuidsArg(eventIDs))
	if err != nil {
		return nil, fmt.Errorf("reading lifecycle stages: %w", translate(err))
	}
	var (
		id     uuid.UUID
		stages int16
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &stages}, func() error {
		out[id] = ports.LifecycleStage(stages)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading lifecycle stages: %w", translate(err))
	}
	return out, nil
}

// sqlLifecycleOrphans finds events whose PostLifecycle is not recorded
// although every expected perspective's cursor is at or past them and none
// has the event's row still pending (a late event awaiting its rewind is
// not applied yet): $1, $2
// are the expected (type, perspective) pairs, $3 Since (NULL for none), $4
// the limit (NULL for none). Per type it walks
// vantage_events_type_created_idx in creation order and stops at the limit;
// the walks are merged and cut again.
const sqlLifecycleOrphans = `WITH expected AS (
    SELECT x.type, array_agg(DISTINCT x.perspective) AS perspectives
    FROM unnest($1::text[], $2::text[]) AS x(type, perspective)
    GROUP BY x.type
)
SELECT o.id, o.stream_id, o.type, o.version, o.data, o.metadata, o.created_at
FROM expected x
CROSS JOIN LATERAL (
    SELECT e.*
    FROM /* SCHEMA */.vantage_events e
    WHERE e.type = x.type
      AND e.created_at >= coalesce($3::timestamptz, '-infinity')
      AND NOT EXISTS (
          SELECT 1 FROM /* SCHEMA */.vantage_lifecycle l
          WHERE l.event_id = e.id AND l.stages & 4 <> 0)
      AND (SELECT count(*)
           FROM /* SCHEMA */.vantage_cursors c
           WHERE c.stream_id = e.stream_id AND c.perspective = ANY (x.perspectives)
             AND c.last_version >= e.version
             AND NOT EXISTS (
                 SELECT 1 FROM /* SCHEMA */.vantage_work w
                 WHERE w.stream_id = e.stream_id AND w.perspective = c.perspective
                   AND w.event_version = e.version AND w.processed_at IS NULL)) = cardinality(x.perspectives)
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
	if params.Limit < 0 {
		return nil, fmt.Errorf("finding orphaned lifecycles: %w", invalid("limit %d is negative", params.Limit))
	}
	var types, perspectives []string
	for typ, ps := range params.Expected {
		for _, p := range ps {
			types = append(types, typ)
			perspectives = append(perspectives, p)
		}
	}
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
