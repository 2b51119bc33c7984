package postgres

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/vantage-go/vantage/ports"
)

// sqlModelSaveSet is sqlModelSave for many pairs in one statement, each
// entry checked and stored exactly as sqlModelSave would store it alone.
// The entries come as parallel arrays in pair order, no pair twice and
// none holding late rows ($1 streams, $2 perspectives, $3 data, $4 last
// event ids, $5 last versions, $6 expected versions, $7 expected epochs,
// $8 epochs to store, $9 holders (NULL: not fenced by the lease), $10 nows
// (NULL: the database's)); $11 lists the streams of the fenced entries and
// $12 their holders, for the fence's lock.
//
// A statement per entry costs the server an executor start and six CTEs
// for every pair; a drain saves many pairs at once, and one statement
// makes it a row per table per pair.
//
//   - held share-locks, in stream id order, the rows of the fenced streams
//     whose lease names a holder of the call, before any cursor, as every
//     statement locks them. An entry passes its fence when it has no
//     holder or held found its stream under its holder.
//   - locked locks the passing entries' cursors in pair order (the order
//     in which completions lock them too), by a primary key probe each,
//     and reads their position as of the lock; moved moves those at the
//     expected version and epoch.
//   - created inserts the missing cursors of the passing entries whose
//     expected version and epoch are 0, in pair order; a concurrent insert
//     wins the conflict and this one stores nothing for that entry.
//   - saved upserts the model of each entry whose cursor was moved or
//     created.
//   - the result is one row per entry, in the order of the arrays: whether
//     its model was saved, whether its fence passed, and, for the error of
//     a failed check, its cursor's version and epoch as locked (none when
//     the fence failed, which needs none, or there was no cursor).
const sqlModelSaveSet = `WITH entries AS MATERIALIZED (
    SELECT e.*
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::uuid[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::uuid[], $10::timestamptz[])
         WITH ORDINALITY AS e(stream_id, perspective, data, last_event_id, last_version, expected_version, expected_epoch, epoch, holder, now, ord)
),
held AS MATERIALIZED (
    SELECT a.stream_id, a.instance_id
    FROM /* SCHEMA */.vantage_active_streams a
    WHERE a.stream_id = ANY ($11::uuid[]) AND a.instance_id = ANY ($12::uuid[])
    ORDER BY a.stream_id
    FOR KEY SHARE
),
passing AS MATERIALIZED (
    SELECT e.*, coalesce(e.now, now()) AS at
    FROM entries e
    WHERE e.holder IS NULL OR EXISTS (SELECT 1 FROM held h WHERE h.stream_id = e.stream_id AND h.instance_id = e.holder)
),
locked AS MATERIALIZED (
    SELECT c.stream_id, c.perspective, c.last_version, c.epoch
    FROM (SELECT p.stream_id, p.perspective FROM passing p ORDER BY p.stream_id, p.perspective) p
    CROSS JOIN LATERAL (
        SELECT c.stream_id, c.perspective, c.last_version, c.epoch
        FROM /* SCHEMA */.vantage_cursors c
        WHERE c.stream_id = p.stream_id AND c.perspective = p.perspective
        FOR NO KEY UPDATE
    ) c
),
moved AS (
    UPDATE /* SCHEMA */.vantage_cursors c
    SET last_event_id = p.last_event_id, last_version = p.last_version, epoch = p.epoch, updated_at = p.at
    FROM locked l
    JOIN passing p ON p.stream_id = l.stream_id AND p.perspective = l.perspective
    WHERE c.stream_id = l.stream_id AND c.perspective = l.perspective
      AND l.last_version = p.expected_version AND l.epoch = p.expected_epoch
    RETURNING c.stream_id, c.perspective
),
created AS (
    INSERT INTO /* SCHEMA */.vantage_cursors (stream_id, perspective, last_event_id, last_version, epoch, status, updated_at)
    SELECT p.stream_id, p.perspective, p.last_event_id, p.last_version, p.epoch, 1, p.at
    FROM passing p
    WHERE p.expected_version = 0 AND p.expected_epoch = 0
      AND NOT EXISTS (SELECT 1 FROM locked l WHERE l.stream_id = p.stream_id AND l.perspective = p.perspective)
    ORDER BY p.stream_id, p.perspective
    ON CONFLICT (stream_id, perspective) DO NOTHING
    RETURNING stream_id, perspective
),
written AS (
    SELECT stream_id, perspective FROM moved
    UNION ALL
    SELECT stream_id, perspective FROM created
),
saved AS (
    INSERT INTO /* SCHEMA */.vantage_models AS m (stream_id, perspective, data, last_event_id, last_version, epoch, updated_at)
    SELECT p.stream_id, p.perspective, p.data::jsonb, p.last_event_id, p.last_version, p.epoch, p.at
    FROM passing p
    JOIN written w ON w.stream_id = p.stream_id AND w.perspective = p.perspective
    ORDER BY p.stream_id, p.perspective
    ON CONFLICT (stream_id, perspective) DO UPDATE
    SET data = excluded.data, last_event_id = excluded.last_event_id,
        last_version = excluded.last_version, epoch = excluded.epoch, updated_at = excluded.updated_at
    RETURNING m.stream_id, m.perspective
)
SELECT EXISTS (SELECT 1 FROM saved s WHERE s.stream_id = e.stream_id AND s.perspective = e.perspective),
       EXISTS (SELECT 1 FROM passing p WHERE p.ord = e.ord),
       l.last_version, l.epoch
FROM entries e
LEFT JOIN locked l ON l.stream_id = e.stream_id AND l.perspective = e.perspective
ORDER BY e.ord`

// setSavable reports whether the entries of params listed in order (valid,
// sorted by pair) can go as one statement of sqlModelSaveSet: no pair
// twice (a later entry sees the earlier ones), no late rows held.
func setSavable(params []*ports.ModelSaveParams, order []int) bool {
	for j, i := range order {
		p := params[i]
		if len(p.AppliedLate) > 0 {
			return false
		}
		if j > 0 {
			q := params[order[j-1]]
			if q.StreamID == p.StreamID && q.Perspective == p.Perspective {
				return false
			}
		}
	}
	return true
}

// saveSet saves the entries of params listed in order (see setSavable) in
// one statement of sqlModelSaveSet, and sets their errors in errs.
func (s *Store) saveSet(ctx context.Context, params []*ports.ModelSaveParams, order []int, errs []error) error {
	n := len(order)
	var (
		streams, events, holders = make([]pgtype.UUID, n), make([]pgtype.UUID, n), make([]pgtype.UUID, n)
		names, data              = make([]string, n), make([]string, n)
		versions, expVersions    = make([]int64, n), make([]int64, n)
		expEpochs, epochs        = make([]int64, n), make([]int64, n)
		nows                     = make([]pgtype.Timestamptz, n)
		fenced, fencedBy         []pgtype.UUID
	)
	for j, i := range order {
		p := params[i]
		streams[j], names[j], data[j] = uuidElem(p.StreamID), p.Perspective, string(p.Data)
		events[j], versions[j] = uuidArg(p.LastEventID), p.LastVersion
		expVersions[j], expEpochs[j], epochs[j] = p.ExpectedVersion, p.ExpectedEpoch, p.Epoch()
		holders[j], nows[j] = uuidArg(p.Holder()), timestamptz(p.Now)
		if holders[j].Valid {
			// In pair order, a stream's entries are next to each other.
			if k := len(fenced); k == 0 || fenced[k-1] != streams[j] {
				fenced = append(fenced, streams[j])
			}
			if !slices.Contains(fencedBy, holders[j]) {
				fencedBy = append(fencedBy, holders[j])
			}
		}
	}
	rows := make([]modelSaveRow, 0, n)
	b := &pgx.Batch{}
	b.Queue(s.sql(sqlModelSaveSet), streams, names, data, events, versions, expVersions, expEpochs, epochs, holders, nows, fenced, fencedBy)
	err := s.sendWork(ctx, b, func(br pgx.BatchResults) error {
		res, err := br.Query()
		if err != nil {
			return err
		}
		var (
			saved bool
			r     modelSaveRow
		)
		_, err = pgx.ForEachRow(res, []any{&saved, &r.passed, &r.version, &r.epoch}, func() error {
			r.saved = 0
			if saved {
				r.saved = 1
			}
			rows = append(rows, r)
			return nil
		})
		if err == nil && len(rows) != n {
			err = fmt.Errorf("%d rows for %d entries", len(rows), n)
		}
		return err
	})
	if err != nil {
		return err
	}
	for j, i := range order {
		errs[i] = rows[j].result(params[i])
	}
	return nil
}
