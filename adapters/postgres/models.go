package postgres

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/vantage-go/vantage/ports"
)

const sqlModelLoad = `SELECT data, last_event_id, last_version, epoch, updated_at
FROM /* SCHEMA */.vantage_models
WHERE stream_id = $1 AND perspective = $2`

// ModelLoad implements ports.ModelStore. It returns an error wrapping
// ports.ErrNotFound when no model is stored.
func (s *Store) ModelLoad(ctx context.Context, params *ports.ModelLoadParams) (ports.StoredModel, error) {
	streamID, perspective := params.StreamID, params.Perspective
	m := ports.StoredModel{StreamID: streamID, Perspective: perspective}
	if err := s.ready(ctx); err != nil {
		return ports.StoredModel{}, err
	}
	var (
		lastEvent pgtype.UUID
		updated   pgtype.Timestamptz
	)
	err := s.pool.QueryRow(ctx, s.sql(sqlModelLoad), streamID, perspective).Scan(&m.Data, &lastEvent, &m.LastVersion, &m.Epoch, &updated)
	if err != nil {
		return ports.StoredModel{}, fmt.Errorf("loading model %q of stream %s: %w", perspective, streamID, translate(err))
	}
	m.LastEventID, m.UpdatedAt = fromUUID(lastEvent), fromTime(updated)
	return m, nil
}

// sqlModelSave moves the cursor and stores the model in one statement:
// $1 stream, $2 now, $3 perspective, $4 data, $5 last event id, $6 last
// version, $7 expected version, $8 expected epoch, $9 the epoch to store,
// $10 the instance that must hold the stream's lease (NULL: the save is
// not fenced by the lease, see ports.ModelSaveParams.Holder), $11 the
// versions of the late rows the model holds (AppliedLate).
//
//   - held share-locks the stream's row in vantage_active_streams when its
//     lease names $10, live or expired (the fence of completions, see
//     sqlFenced), before the cursor (stream rows before cursors, as
//     everywhere): a claim, fetch or abandonment cannot take the stream
//     before the save commits, since a change of holder is a key update.
//   - moved updates an existing cursor whose version and epoch are the
//     expected ones; the row lock makes a concurrent save wait and then
//     fail the check.
//   - created inserts a missing cursor (status Processing) when the
//     expected version and epoch are 0; a concurrent insert wins the
//     conflict and this one stores nothing.
//   - both write only when the fence passed ($10 is NULL or held found
//     the stream), and the model is upserted only when one of them wrote,
//     so a failed fence or check stores nothing.
//   - unlate takes the late flag off the pending rows of $11, by the
//     pending index, when the save wrote.
//   - the cursor is read by one probe, for the error of a failed check,
//     with whether the fence passed.
const sqlModelSave = `WITH ` + sqlClock + `,
held AS MATERIALIZED (
    SELECT a.stream_id
    FROM /* SCHEMA */.vantage_active_streams a
    WHERE $10::uuid IS NOT NULL AND a.stream_id = $1 AND coalesce(a.instance_id = $10::uuid, false)
    FOR KEY SHARE
),
fence AS MATERIALIZED (
    SELECT $10::uuid IS NULL OR EXISTS (SELECT 1 FROM held) AS passed
),
moved AS (
    UPDATE /* SCHEMA */.vantage_cursors c
    SET last_event_id = $5, last_version = $6, epoch = $9, updated_at = clock.now
    FROM clock, fence
    WHERE c.stream_id = $1 AND c.perspective = $3 AND c.last_version = $7 AND c.epoch = $8 AND fence.passed
    RETURNING 1
),
created AS (
    INSERT INTO /* SCHEMA */.vantage_cursors (stream_id, perspective, last_event_id, last_version, epoch, status, updated_at)
    SELECT $1::uuid, $3::text, $5::uuid, $6::bigint, $9::bigint, 1, clock.now
    FROM clock, fence
    WHERE $7 = 0 AND $8::bigint = 0 AND fence.passed AND NOT EXISTS (SELECT 1 FROM moved)
    ON CONFLICT (stream_id, perspective) DO NOTHING
    RETURNING 1
),
saved AS (
    INSERT INTO /* SCHEMA */.vantage_models AS m (stream_id, perspective, data, last_event_id, last_version, epoch, updated_at)
    SELECT $1::uuid, $3::text, $4::jsonb, $5::uuid, $6::bigint, $9::bigint, clock.now
    FROM clock
    WHERE EXISTS (SELECT 1 FROM moved) OR EXISTS (SELECT 1 FROM created)
    ON CONFLICT (stream_id, perspective) DO UPDATE
    SET data = excluded.data, last_event_id = excluded.last_event_id,
        last_version = excluded.last_version, epoch = excluded.epoch, updated_at = excluded.updated_at
    RETURNING 1
),
unlate AS (
    UPDATE /* SCHEMA */.vantage_work w
    SET late = false
    WHERE w.stream_id = $1 AND w.perspective = $3 AND w.event_version = ANY ($11::bigint[])
      AND w.processed_at IS NULL AND w.late
      AND EXISTS (SELECT 1 FROM saved)
)
SELECT (SELECT count(*) FROM saved), (SELECT passed FROM fence), c.last_version, c.epoch
FROM (VALUES (1)) AS one (x)
LEFT JOIN /* SCHEMA */.vantage_cursors c ON c.stream_id = $1 AND c.perspective = $3`

// ModelSave implements ports.ModelStore in one statement. The stored
// position is the cursor's LastVersion and epoch (0 and 0 without a
// cursor); the cursor's status and rewind columns are kept, except that a
// missing cursor is created with status Processing. It returns
// ports.ErrInvalidArgument for a nil stream id, an empty perspective, a
// negative version or epoch or Data that is not a JSON document,
// ports.ErrLeaseLost when the save names an instance (and no Rebase) that
// does not hold the stream's lease, live or expired, and
// ports.ErrVersionConflict when ExpectedVersion or ExpectedEpoch differs
// from the stored position; in each case nothing is stored.
func (s *Store) ModelSave(ctx context.Context, params *ports.ModelSaveParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("saving model: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	var r modelSaveRow
	err := s.pool.QueryRow(ctx, s.sql(sqlModelSave), modelSaveArgs(params)...).Scan(r.dest()...)
	if err != nil {
		return fmt.Errorf("saving model %q of stream %s: %w", params.Perspective, params.StreamID, translate(err))
	}
	return r.result(params)
}

func modelSaveArgs(params *ports.ModelSaveParams) []any {
	return []any{uuidArg(params.StreamID), nowArg(params.Now), params.Perspective,
		string(params.Data), uuidArg(params.LastEventID), params.LastVersion, params.ExpectedVersion,
		params.ExpectedEpoch, params.Epoch(), uuidArg(params.Holder()), params.AppliedLate}
}

// modelSaveRow is the row of sqlModelSave: whether the model was saved,
// whether the lease fence passed, and the cursor's version and epoch (NULL
// without a cursor).
type modelSaveRow struct {
	saved          int
	passed         bool
	version, epoch pgtype.Int8
}

func (r *modelSaveRow) dest() []any { return []any{&r.saved, &r.passed, &r.version, &r.epoch} }

// result returns the outcome of the save of params: nil when saved, else
// its ports.ErrLeaseLost or ports.ErrVersionConflict.
func (r *modelSaveRow) result(params *ports.ModelSaveParams) error {
	if r.saved == 0 && !r.passed {
		return fmt.Errorf("saving model %q of stream %s: the stream is not leased to instance %s: %w",
			params.Perspective, params.StreamID, params.Holder(), ports.ErrLeaseLost)
	}
	if r.saved == 0 {
		return fmt.Errorf("saving model %q of stream %s: expected version %d at epoch %d, cursor is at %d at epoch %d: %w",
			params.Perspective, params.StreamID, params.ExpectedVersion, params.ExpectedEpoch, fromInt8(r.version), fromInt8(r.epoch), ports.ErrVersionConflict)
	}
	return nil
}

// sqlModelLoadMany reads the models of the pairs ($1[i], $2[i]), each once,
// by a primary key probe each (the LATERAL ... LIMIT 1): a model is loaded
// when its pair is not cached, often one at a time under live traffic, and
// the planner, which cannot know how many pairs a call names, would
// otherwise hash a scan of the whole table while its statistics are young.
const sqlModelLoadMany = `SELECT m.stream_id, m.perspective, m.data, m.last_event_id, m.last_version, m.epoch, m.updated_at
FROM (SELECT DISTINCT p.stream_id, p.perspective FROM unnest($1::uuid[], $2::text[]) AS p(stream_id, perspective)) p
CROSS JOIN LATERAL (
    SELECT m.stream_id, m.perspective, m.data, m.last_event_id, m.last_version, m.epoch, m.updated_at
    FROM /* SCHEMA */.vantage_models m
    WHERE m.perspective = p.perspective AND m.stream_id = p.stream_id
    LIMIT 1
) m`

// ModelLoadMany implements ports.ModelBatchStore in one statement, sent
// after the work settings, whose generic plan it keeps.
func (s *Store) ModelLoadMany(ctx context.Context, params *ports.ModelLoadManyParams) ([]ports.StoredModel, error) {
	pairs := params.Pairs
	if len(pairs) == 0 {
		return []ports.StoredModel{}, nil
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	streams := make([]pgtype.UUID, len(pairs)) // a uuid[] parameter (see uuidsArg)
	names := make([]string, len(pairs))
	for i, p := range pairs {
		streams[i], names[i] = uuidElem(p.StreamID), p.Perspective
	}
	models, err := queryWorkRows(ctx, s, sqlModelLoadMany, scanStoredModel, streams, names)
	if err != nil {
		return nil, fmt.Errorf("loading %d models: %w", len(pairs), err)
	}
	return models, nil
}

// scanStoredModel reads a row of sqlModelLoadMany.
func scanStoredModel(row pgx.CollectableRow) (ports.StoredModel, error) {
	var (
		m         ports.StoredModel
		lastEvent pgtype.UUID
		updated   pgtype.Timestamptz
	)
	err := row.Scan(&m.StreamID, &m.Perspective, &m.Data, &lastEvent, &m.LastVersion, &m.Epoch, &updated)
	m.LastEventID, m.UpdatedAt = fromUUID(lastEvent), fromTime(updated)
	return m, err
}

// saveSetMin is the fewest entries ModelSaveMany saves in one statement
// (sqlModelSaveSet) rather than a statement each: the one statement costs
// more to start, and below four entries a statement each is as fast or
// faster (BenchmarkModelSaveManyShapes).
var saveSetMin = 4

// ModelSaveMany implements ports.ModelBatchStore in one round trip and one
// commit: the valid entries go as one statement (sqlModelSaveSet), or, when
// they are few, a pair comes twice or an entry holds late rows, as a batch of
// sqlModelSave statements in one implicit transaction. They are ordered by
// pair (entries of the same pair keep their order), so concurrent calls
// lock cursors in the same order and cannot deadlock. Both shapes run under
// the work settings (sendWork): a statement each is otherwise planned anew
// for each call whenever its call's values look cheaper to the planner.
func (s *Store) ModelSaveMany(ctx context.Context, p *ports.ModelSaveManyParams) ([]error, error) {
	params := p.Saves
	errs := make([]error, len(params))
	order := make([]int, 0, len(params))
	for i, p := range params {
		if errs[i] = p.Validate(); errs[i] == nil {
			order = append(order, i)
		}
	}
	if len(order) == 0 {
		return errs, nil
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return comparePair(pairKey{params[a].StreamID, params[a].Perspective}, pairKey{params[b].StreamID, params[b].Perspective})
	})
	if len(order) >= saveSetMin && setSavable(params, order) {
		if err := s.saveSet(ctx, params, order, errs); err != nil {
			return nil, fmt.Errorf("saving %d models: %w", len(order), translate(err))
		}
		return errs, nil
	}
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(order))}
	for _, i := range order {
		b.Queue(s.sql(sqlModelSave), modelSaveArgs(params[i])...)
	}
	err := s.sendWork(ctx, b, func(br pgx.BatchResults) error {
		for _, i := range order {
			var r modelSaveRow
			if err := br.QueryRow().Scan(r.dest()...); err != nil {
				return err
			}
			errs[i] = r.result(params[i])
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("saving %d models: %w", len(order), translate(err))
	}
	return errs, nil
}
