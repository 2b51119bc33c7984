package postgres

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/vantage-go/vantage/ports"
)

// Cursor status flags as SQL literals (ports.CursorStatus values).
const (
	sqlStatusCompleted      = "2"
	sqlStatusFailed         = "4"
	sqlStatusRewindRequired = "32"
)

const sqlCursorColumns = `stream_id, perspective, last_event_id, last_version, epoch, status, error,
       rewind_trigger_event_id, rewind_trigger_version, rewind_flagged_at, rewind_first_flagged_at, updated_at`

const sqlCursorsGet = `SELECT ` + sqlCursorColumns + `
FROM /* SCHEMA */.vantage_cursors
WHERE stream_id = ANY($1::uuid[]) AND ($2 = '' OR perspective = $2)
ORDER BY stream_id, perspective COLLATE "C"`

// CursorsGet implements ports.CursorStore. Cursors come back ordered by
// stream id, then perspective.
func (s *Store) CursorsGet(ctx context.Context, params *ports.CursorsGetParams) ([]ports.Cursor, error) {
	if len(params.StreamIDs) == 0 {
		return nil, nil
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	out, err := queryRows(ctx, s, sqlCursorsGet, scanCursor, uuidsArg(params.StreamIDs), params.Perspective)
	if err != nil {
		return nil, fmt.Errorf("reading cursors: %w", err)
	}
	return out, nil
}

func scanCursor(row pgx.CollectableRow) (ports.Cursor, error) {
	var (
		c                          ports.Cursor
		lastEvent, triggerEvent    pgtype.UUID
		status                     int16
		errText                    pgtype.Text
		triggerVersion             pgtype.Int8
		flagged, firstFlagged, upd pgtype.Timestamptz
	)
	err := row.Scan(&c.StreamID, &c.Perspective, &lastEvent, &c.LastVersion, &c.Epoch, &status, &errText,
		&triggerEvent, &triggerVersion, &flagged, &firstFlagged, &upd)
	if err != nil {
		return c, err
	}
	c.LastEventID = fromUUID(lastEvent)
	c.Status = ports.CursorStatus(status)
	c.Error = fromText(errText)
	c.RewindTriggerEventID = fromUUID(triggerEvent)
	c.RewindTriggerVersion = fromInt8(triggerVersion)
	c.RewindFlaggedAt = fromTime(flagged)
	c.RewindFirstFlaggedAt = fromTime(firstFlagged)
	c.UpdatedAt = fromTime(upd)
	return c, nil
}

// sqlFinish completes the listed rows: $1 caller, $2 work ids with their
// (stream, perspective) in $3 and $4, $5 now. Only pending rows of that pair
// in a stream whose lease the caller holds count (the fence, sqlFenced);
// the lease may have expired as long as nobody took the stream. A completed
// row that DeadLetterRequeue stored marks its dead letter recovered (see
// sqlRecovered). It returns the rows completed and the dead letters
// recovered.
//
// The list drives the statement, one primary key probe per id (see
// sqlListedRows).
var sqlFinish = finishStatement(sqlFenceShared, false)

// sqlFinishDebug is sqlFinish for debug mode: rows are kept, marked processed
// at $5 (their retry time cleared, see vantage_work_scheduled_check), which
// hides them from every pending-row query.
var sqlFinishDebug = finishStatement(sqlFenceShared, true)

// finishStatement returns the statement completing the listed rows under
// the fence lock (see sqlFenced), keeping them as processed in debug mode.
func finishStatement(lock string, debug bool) string {
	change := `DELETE FROM /* SCHEMA */.vantage_work w
    ` + sqlFinishRows
	if debug {
		change = `UPDATE /* SCHEMA */.vantage_work w
    SET processed_at = coalesce($5::timestamptz, now()), scheduled_for = NULL
    ` + sqlFinishRows
	}
	return `WITH ` + sqlFenced(lock) + `,
finished AS (
    ` + change + `
    RETURNING w.dead_letter_id
),
` + sqlRecovered + `
SELECT (SELECT count(*) FROM finished), (SELECT count(*) FROM recovered)`
}

// sqlFenced returns the CTE fenced: the streams of the rows listed in $3
// whose lease the caller $1 holds, live or expired, the fence of
// completions and failures. It locks their rows FOR KEY SHARE in stream id
// order, before any work row, so that no claim, fetch or abandonment takes
// a stream while its rows are being completed or failed (a change of
// holder is a key update, see vantage_active_streams_instance_idx: claims
// skip the stream, the others wait), and so that the rows a takeover
// charges are never those a completion deletes. The holder's own fetches
// and renewals update the rows without changing their key, and never wait
// for its completions. (WorkFail locks its streams more strongly first,
// see sqlFailFence.) The streams are found by primary key: the holder
// check, wrapped in coalesce, serves no index, since by
// vantage_active_streams_instance_idx the planner read every stream the
// caller holds to find the few a completion names.
func sqlFenced(lock string) string {
	return `fenced AS MATERIALIZED (
    SELECT a.stream_id
    FROM /* SCHEMA */.vantage_active_streams a
    WHERE a.stream_id = ANY ($3::uuid[]) AND coalesce(a.instance_id = $1, false)
    ORDER BY a.stream_id
    FOR ` + lock + `
)`
}

// sqlFenceShared is the lock of the fence (see sqlFenced).
const sqlFenceShared = `KEY SHARE`

// sqlFailFence locks FOR NO KEY UPDATE, in stream id order, the rows of
// the streams $2 that the caller $1 holds (found as sqlFenced finds them):
// the first statement of WorkFail, which lowers the marks of the streams
// it fences. Taking the exclusive lock up front, rather than upgrading the
// fence's shared lock when it writes the marks, keeps it from deadlocking
// with a fetch that holds one of the streams and waits, to take another
// over, for the shared lock.
const sqlFailFence = `SELECT count(*) FROM (
    SELECT a.stream_id
    FROM /* SCHEMA */.vantage_active_streams a
    WHERE a.stream_id = ANY ($2::uuid[]) AND coalesce(a.instance_id = $1, false)
    ORDER BY a.stream_id
    FOR NO KEY UPDATE
) f`

// sqlFinishRows is the condition shared by sqlFinish and sqlFinishDebug:
// the rows the list names (see sqlListedRows), reached by a scan of their
// ctids (in physical order, each page once), and still pending when the
// statement reaches them (sqlStillPending).
var sqlFinishRows = `WHERE w.ctid = ANY (ARRAY(SELECT l.row_id FROM ` + sqlListedRows(`unnest($2::uuid[], $3::uuid[], $4::text[]) AS c(work_id, stream_id, perspective)`, "") + `))
      AND ` + sqlStillPending

// sqlStillPending checks again, on the row w a statement reached by its
// ctid, that it is pending: a row changed since it was found is reached in
// its new version, which has the same id and pair.
const sqlStillPending = `coalesce(w.processed_at IS NULL, false)`

// sqlRecovered marks DeadLetterRecovered, at $5, the requeued dead letters
// of the rows in finished: a primary key probe per requeued row among them
// (most rows name none), after the rows, as in every statement that locks
// both.
const sqlRecovered = `recovered AS (
    UPDATE /* SCHEMA */.vantage_dead_letters d
    SET status = ` + sqlDeadLetterRecovered + `, resolved_at = coalesce($5::timestamptz, now())
    WHERE d.id = ANY (ARRAY(
              SELECT f.dead_letter_id FROM finished f WHERE f.dead_letter_id IS NOT NULL ORDER BY f.dead_letter_id))
      AND d.status = ` + sqlDeadLetterRequeued + `
    RETURNING 1
)`

// sqlListedRows returns the FROM item l of the rows a list names, list a
// FROM item c of (work_id, stream_id, perspective) and the columns cols (a
// list starting with a comma, or ""): for each entry, the row of that id
// and pair that is pending in a stream of the CTE fenced (see sqlFenced),
// as l.row_id, its ctid, with cols. The statement then changes the rows
// of those ctids (see sqlFinishRows and sqlListedRow).
//
// Each entry is one primary key probe, in the list's order (LIMIT 1 keeps
// the probe a subquery per entry, never part of a join the planner could
// reorder), and the row it finds is then reached by its ctid: no plan
// reads more of the table than the listed rows. The id is the only
// condition an index can serve: the pair is compared with IS NOT DISTINCT
// FROM, and the pending check and the stream's membership in fenced are
// wrapped in coalesce. Queue statistics lag behind the table, and the
// planner, taking a (stream, perspective) or the pending rows for a
// handful of rows, would otherwise read vantage_work_pending_idx: per
// listed id the whole backlog of a long stream, or, with statistics taken
// while the table was empty, every pending row (a matching partial index
// needs no condition). Joined to the table by id instead, a list the
// planner cannot size (a generic plan counts 10 entries) became the outer
// side of a nested loop over the rows an index scan of all the ids found,
// compared pair by pair: a completion of 5,600 rows made 15.7 million
// comparisons, and catch-ups slowed fiftyfold.
func sqlListedRows(list, cols string) string {
	return `(SELECT k.row_id` + cols + `
    FROM ` + list + `
    CROSS JOIN LATERAL (
        SELECT x.ctid AS row_id
        FROM /* SCHEMA */.vantage_work x
        WHERE x.work_id = c.work_id
          AND (x.stream_id, x.perspective) IS NOT DISTINCT FROM (c.stream_id, c.perspective)
          AND coalesce(x.processed_at IS NULL, false)
          AND coalesce(x.stream_id = ANY (ARRAY(SELECT f.stream_id FROM fenced f)), false)
        LIMIT 1
    ) k) l`
}

// sqlListedRow is the condition on the row w of a statement joining the
// rows sqlListedRows found, to change each with its entry's columns: w is
// the row found (a scan by ctid per entry), and still pending when the
// statement reaches it (sqlStillPending).
const sqlListedRow = `w.ctid = l.row_id AND ` + sqlStillPending

// sqlCompleteCursors upserts one cursor per pair from the payload: $1 now,
// $2 streams, $3 perspectives, $4 last event ids, $5 last versions. The
// position only moves forward; status becomes exactly Completed and the
// error and rewind columns are cleared. A missing cursor of a retired
// perspective is not created (see sqlNoCursorOfRetired).
//
// A cursor that is so already is not written: the save of the completed
// events moved it to their position, and a completed pair's completion
// usually finds nothing to change. Those pairs are left out before the
// insert, which would lock their rows, and the update checks again on the
// row it locked (a concurrent write may have flagged or failed it).
var sqlCompleteCursors = `WITH ` + sqlClock1 + `
INSERT INTO /* SCHEMA */.vantage_cursors AS c
    (stream_id, perspective, last_event_id, last_version, status, updated_at)
SELECT u.stream_id, u.perspective, nullif(u.last_event_id, '00000000-0000-0000-0000-000000000000'), u.last_version, ` + sqlStatusCompleted + `, clock.now
FROM unnest($2::uuid[], $3::text[], $4::uuid[], $5::bigint[]) AS u(stream_id, perspective, last_event_id, last_version), clock
WHERE ` + sqlNoCursorOfRetired("u") + `
  AND NOT EXISTS (SELECT 1 FROM /* SCHEMA */.vantage_cursors x
                  WHERE x.stream_id = u.stream_id AND x.perspective = u.perspective AND ` + sqlCursorCompleted("x", "u") + `)
ON CONFLICT (stream_id, perspective) DO UPDATE
SET last_event_id = CASE WHEN excluded.last_version > c.last_version THEN excluded.last_event_id ELSE c.last_event_id END,
    last_version = greatest(c.last_version, excluded.last_version),
    status = ` + sqlStatusCompleted + `,
    error = NULL,
    rewind_trigger_event_id = NULL,
    rewind_trigger_version = NULL,
    rewind_flagged_at = NULL,
    rewind_first_flagged_at = NULL,
    updated_at = excluded.updated_at
WHERE NOT ` + sqlCursorCompleted("c", "excluded")

// sqlCursorCompleted is true for cursor c that completion u (with its
// last_version) would not change: at or past u's position, exactly
// Completed, without an error or a rewind.
func sqlCursorCompleted(c, u string) string {
	return `(` + c + `.last_version >= ` + u + `.last_version AND ` + c + `.status = ` + sqlStatusCompleted + `
       AND ` + c + `.error IS NULL AND ` + c + `.rewind_trigger_event_id IS NULL AND ` + c + `.rewind_trigger_version IS NULL
       AND ` + c + `.rewind_flagged_at IS NULL AND ` + c + `.rewind_first_flagged_at IS NULL)`
}

// sqlNoCursorOfRetired is true for a reported pair r (stream_id,
// perspective) whose cursor a completion or a failure may write: one that
// exists, or one of a perspective that is not retired. A report sent before
// a retirement with DropState lands after it (its acknowledgement was
// lost): the model its position stands for was deleted with the cursor,
// and a cursor without it would be refused by every save. The retired
// perspectives are few; the cursor is one primary key probe.
func sqlNoCursorOfRetired(r string) string {
	return `(NOT EXISTS (SELECT 1 FROM /* SCHEMA */.vantage_retired_perspectives x WHERE x.perspective = ` + r + `.perspective)
       OR EXISTS (SELECT 1 FROM /* SCHEMA */.vantage_cursors x WHERE x.stream_id = ` + r + `.stream_id AND x.perspective = ` + r + `.perspective))`
}

// sqlFlagRewind is the SET list that flags cursor c RewindRequired for a late
// event f (event_id, event_version) at clock.now: the trigger keeps the
// smallest version, rewind_flagged_at moves on every detection (debounce
// edge), rewind_first_flagged_at is set once (debounce cap anchor).
const sqlFlagRewind = `status = c.status | ` + sqlStatusRewindRequired + `,
    rewind_trigger_event_id = CASE WHEN c.rewind_trigger_version IS NULL OR f.event_version < c.rewind_trigger_version
                                   THEN f.event_id ELSE c.rewind_trigger_event_id END,
    rewind_trigger_version = least(c.rewind_trigger_version, f.event_version),
    rewind_flagged_at = clock.now,
    rewind_first_flagged_at = coalesce(c.rewind_first_flagged_at, clock.now),
    updated_at = clock.now`

// sqlFlagStragglers makes late the pending rows of the pairs ($2, $3)
// strictly below the position their completion reports ($4), except the
// rows the call lists ($5: still pending because the caller lost the
// stream, but applied), and flags those pairs' cursors, the smallest such
// row being the trigger. It runs
// after the call's deletions, and after its cursor upsert locked the
// cursors: only the pair's cursor holder marks its rows.
//
// The completion's own position, not the stored one, is the bound: the
// engine saves models (which moves the stored cursor) before it flushes the
// completions of earlier batches, so rows applied and saved but not yet
// completed would otherwise look like stragglers on every batched flush and
// trigger phantom rewinds. A row at the position is not a straggler either
// (it was applied; its deletion is merely late).
//
// marked walks each pair's rows below the position (a range of
// vantage_work_pending_idx; none in the common case) and updates them by
// key, in work id order; rows marked before are passed over, and a late
// row is not written again.
var sqlFlagStragglers = `WITH ` + sqlClock1 + `,
pairs AS (
    SELECT p.stream_id, p.perspective, max(p.last_version) AS last_version
    FROM unnest($2::uuid[], $3::text[], $4::bigint[]) AS p(stream_id, perspective, last_version)
    GROUP BY p.stream_id, p.perspective
),
` + sqlMarkLate("pairs", "coalesce($5::uuid[], '{}')") + `,
f AS (
    SELECT p.stream_id, p.perspective, s.event_id, s.event_version
    FROM pairs p
    CROSS JOIN LATERAL (
        SELECT w.event_id, w.event_version
        FROM /* SCHEMA */.vantage_work w
        WHERE w.stream_id = p.stream_id AND w.perspective = p.perspective
          AND w.processed_at IS NULL AND w.event_version < p.last_version
          AND w.work_id <> ALL (coalesce($5::uuid[], '{}'))
        ORDER BY w.event_version
        LIMIT 1
    ) s
)
UPDATE /* SCHEMA */.vantage_cursors c
SET ` + sqlFlagRewind + `
FROM f, clock
WHERE c.stream_id = f.stream_id AND c.perspective = f.perspective`

// sqlMarkLate returns the CTE marked, which makes late the pending rows of
// each pair of bounds (a CTE of stream_id, perspective, last_version) below
// last_version that are not late yet, except the rows of the array except
// (the rows the call lists as applied: see sqlFlagStragglers). The rows are
// found per pair by a range scan (OFFSET 0 keeps it: flattened, the planner
// may hash the whole work table) and updated by key, which locks them in
// work id order.
func sqlMarkLate(bounds, except string) string {
	return `marked AS (
    UPDATE /* SCHEMA */.vantage_work w
    SET late = true
    WHERE w.work_id = ANY (ARRAY(
        SELECT s.work_id
        FROM ` + bounds + ` b
        CROSS JOIN LATERAL (
            SELECT l.work_id
            FROM /* SCHEMA */.vantage_work l
            WHERE l.stream_id = b.stream_id AND l.perspective = b.perspective
              AND l.processed_at IS NULL AND l.event_version < b.last_version AND NOT l.late
              AND l.work_id <> ALL (` + except + `)
            OFFSET 0
        ) s))
    RETURNING 1
)`
}

// sqlReleaseDrained releases the streams $1 that have no pending row left
// and that the caller $2 holds or nobody does (whoever holds them when $2
// is NULL; see
// vantage_release_drained, $3 the append lock class). The streams are
// filtered first by a probe of vantage_work_pending_idx each, so a
// completion of a stream with more work, the common case, takes no lock.
const sqlReleaseDrained = `SELECT /* SCHEMA */.vantage_release_drained(ARRAY(
    SELECT a.stream_id
    FROM /* SCHEMA */.vantage_active_streams a
    WHERE a.stream_id = ANY ($1::uuid[]) AND ($2::uuid IS NULL OR a.instance_id = $2 OR a.instance_id IS NULL)
      AND NOT EXISTS (
          SELECT 1 FROM /* SCHEMA */.vantage_work w
          WHERE w.stream_id = a.stream_id AND w.processed_at IS NULL)), $3, $2::uuid)`

// finishArgs flattens the rows to complete of a call, the ids already in
// the form of a uuid[] parameter (see uuidsArg).
type finishArgs struct {
	workIDs      []pgtype.UUID
	streams      []pgtype.UUID
	perspectives []string
}

func (f *finishArgs) add(streamID uuid.UUID, perspective string, ids []uuid.UUID) {
	for _, id := range ids {
		f.workIDs = append(f.workIDs, uuidElem(id))
		f.streams = append(f.streams, uuidElem(streamID))
		f.perspectives = append(f.perspectives, perspective)
	}
}

// Len, Less and Swap sort the rows by work id (sort.Interface).
func (f *finishArgs) Len() int { return len(f.workIDs) }
func (f *finishArgs) Less(i, j int) bool {
	return bytes.Compare(f.workIDs[i].Bytes[:], f.workIDs[j].Bytes[:]) < 0
}
func (f *finishArgs) Swap(i, j int) {
	f.workIDs[i], f.workIDs[j] = f.workIDs[j], f.workIDs[i]
	f.streams[i], f.streams[j] = f.streams[j], f.streams[i]
	f.perspectives[i], f.perspectives[j] = f.perspectives[j], f.perspectives[i]
}

// queue queues the statements completing the rows; read reads their
// results and returns the count of rows completed. The rows are sent in
// work id order, the order in which the statement probes them, after the
// fence locked their streams (see sqlFenced); it then deletes them in the
// order of their location (ctid), as a resent completion of the same rows
// does.
func (f *finishArgs) queue(s *Store, b *pgx.Batch, instanceID uuid.UUID, debug bool, now any) {
	sort.Sort(f)
	stmt := sqlFinish
	if debug {
		stmt = sqlFinishDebug
	}
	b.Queue(s.sql(stmt), instanceID, f.workIDs, f.streams, f.perspectives, now)
}

func (f *finishArgs) read(br pgx.BatchResults) (int, error) {
	var completed, recovered int
	if err := br.QueryRow().Scan(&completed, &recovered); err != nil {
		return 0, err
	}
	return completed, nil
}

// pairKey names one (stream, perspective).
type pairKey struct {
	streamID    uuid.UUID
	perspective string
}

// position is a cursor position reported for a pair, with the failure text
// when it comes from a failure.
type position struct {
	eventID uuid.UUID
	version int64
	err     string
}

// positions collects one position per pair in first-seen order; a pair seen
// twice keeps the highest position and the latest error.
type positions struct {
	order []pairKey
	byKey map[pairKey]*position
}

func (p *positions) add(k pairKey, pos position) {
	if p.byKey == nil {
		p.byKey = map[pairKey]*position{}
	}
	cur, ok := p.byKey[k]
	if !ok {
		p.order = append(p.order, k)
		p.byKey[k] = &pos
		return
	}
	if pos.version > cur.version {
		cur.eventID, cur.version = pos.eventID, pos.version
	}
	cur.err = pos.err
}

// comparePair orders pairs by stream, then perspective: the order in which
// statements lock cursors, so that concurrent calls cannot deadlock.
func comparePair(a, b pairKey) int {
	return cmp.Or(compareUUID(a.streamID, b.streamID), strings.Compare(a.perspective, b.perspective))
}

// columns returns the pairs and positions as parallel arrays, ordered by
// stream and perspective so that concurrent calls lock cursors in one order.
// The ids are in the form of a uuid[] parameter (see uuidsArg).
func (p *positions) columns() (streams []pgtype.UUID, perspectives []string, eventIDs []pgtype.UUID, versions []int64, errs []string) {
	slices.SortFunc(p.order, comparePair)
	for _, k := range p.order {
		pos := p.byKey[k]
		streams = append(streams, uuidElem(k.streamID))
		perspectives = append(perspectives, k.perspective)
		eventIDs = append(eventIDs, uuidElem(pos.eventID))
		versions = append(versions, pos.version)
		errs = append(errs, pos.err)
	}
	return streams, perspectives, eventIDs, versions, errs
}

// WorkComplete implements ports.CursorStore in one round trip: a batch of
// four statements in one implicit transaction, in this order: complete the
// listed rows of the streams the caller holds (fenced by sqlFenced),
// recovering the dead letters of requeued ones, upsert the cursors, mark
// stragglers late and flag their cursors, release drained streams
// (sqlReleaseDrained).
// Every deletion of the call thus precedes every cursor check. A pair listed
// in several completions ends at its highest position. Stragglers are rows
// below the position the completions report, not below a stored position
// that a ModelSave moved further (see sqlFlagStragglers). It returns
// ports.ErrInvalidArgument, and changes nothing, when a completion has a nil
// stream id, an empty perspective or a negative LastVersion.
func (s *Store) WorkComplete(ctx context.Context, params *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("completing work: %w", err)
	}
	var (
		finish finishArgs
		pos    positions
	)
	for _, c := range params.Completions {
		finish.add(c.StreamID, c.Perspective, c.WorkIDs)
		pos.add(pairKey{c.StreamID, c.Perspective}, position{eventID: c.LastEventID, version: c.LastVersion})
	}
	result := &ports.WorkCompleteResult{}
	if len(pos.order) == 0 {
		return result, nil
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	now := nowArg(params.Now)
	streams, perspectives, eventIDs, versions, _ := pos.columns()
	b := &pgx.Batch{}
	finish.queue(s, b, params.InstanceID, params.DebugMode, now)
	b.Queue(s.sql(sqlCompleteCursors), now, streams, perspectives, eventIDs, versions)
	var listed []uuid.UUID
	for _, c := range params.Completions {
		listed = append(listed, c.WorkIDs...)
	}
	b.Queue(s.sql(sqlFlagStragglers), now, streams, perspectives, versions, uuidsArg(listed))
	b.Queue(s.sql(sqlReleaseDrained), distinctStreams(streams), params.InstanceID, s.appendLockClass())
	err := s.sendWork(ctx, b, func(br pgx.BatchResults) error {
		var err error
		if result.Completed, err = finish.read(br); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		result.RewindsFlagged = int(tag.RowsAffected())
		_, err = br.Exec()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("completing work of instance %s: %w", params.InstanceID, translate(err))
	}
	return result, nil
}

// sqlFailRows charges the failed rows of streams whose lease the caller
// ($1) holds (the fence, as in sqlFinish): up to the attempt the report
// names ($7, when positive: sent again, it charges nothing more), or else
// an attempt when they are handed out (at or below their pair's mark: an
// apply of it failed; a resent report finds the row below the mark the
// first one lowered and charges nothing again); it stores their error and
// schedules them: $2 work ids, $3 streams, $4 perspectives, $5 errors, $6
// retry times (NULL: claimable at once).
// Rows are found by id, as in sqlFinish (see sqlListedRows). Then each
// failed pair's handed-out mark drops below its lowest failed row: the rows
// from it on are no longer being applied (the holder stops at a failure),
// and a row stored below them later is not late. The stream rows, locked
// by the fence, are updated last.
var sqlFailRows = `WITH ` + sqlFenced(sqlFenceShared) + `,
failed AS (
    UPDATE /* SCHEMA */.vantage_work w
    SET attempts = CASE WHEN l.attempt > 0 THEN greatest(w.attempts, l.attempt)
                        ELSE w.attempts + CASE WHEN w.event_version <= coalesce((
                            SELECT (a.handed_out ->> w.perspective)::bigint
                            FROM /* SCHEMA */.vantage_active_streams a WHERE a.stream_id = w.stream_id), 0) THEN 1 ELSE 0 END
                   END,
        error = l.error, scheduled_for = l.retry_at
    FROM ` + sqlListedRows(`unnest($2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::timestamptz[], $7::int[])
         AS c(work_id, stream_id, perspective, error, retry_at, attempt)`, ", c.error, c.retry_at, c.attempt") + `
    WHERE ` + sqlListedRow + `
    RETURNING w.stream_id, w.perspective, w.event_version
),
lowered AS MATERIALIZED (
    SELECT f.stream_id, f.perspective, min(f.event_version) - 1 AS mark
    FROM failed f
    GROUP BY f.stream_id, f.perspective
)
UPDATE /* SCHEMA */.vantage_active_streams a
SET handed_out = a.handed_out || (
    SELECT jsonb_object_agg(l.perspective, l.mark)
    FROM lowered l
    WHERE l.stream_id = a.stream_id AND (a.handed_out ->> l.perspective)::bigint > l.mark)
WHERE a.stream_id IN (SELECT l.stream_id FROM lowered l)
  AND EXISTS (
      SELECT 1 FROM lowered l
      WHERE l.stream_id = a.stream_id AND (a.handed_out ->> l.perspective)::bigint > l.mark)`

// sqlFailCursors upserts one cursor per failed pair: $1 now, $2 streams, $3
// perspectives, $4 last event ids, $5 last versions, $6 errors, $7 the rows
// the call lists as applied (never stragglers: see sqlFlagStragglers), $8
// whether each pair is fenced (see fencedPairs), $9 the caller. The
// position moves forward only; Completed is replaced by Failed and the
// error stored, unless the report is stale (see sqlFailStale); a missing cursor of a retired perspective is not created
// (see sqlNoCursorOfRetired).
// When the position moves, the pending rows below the new position become
// late (moved, then marked: see sqlMarkLate), and the smallest of them
// (found by the LATERAL join and carried in the excluded row's trigger
// columns) flags RewindRequired as in WorkComplete; otherwise the rewind
// columns stay as they are. prior locks the cursors first, in key order, so
// that moved compares with the committed positions the upsert then
// replaces.
var sqlFailCursors = `WITH ` + sqlClock1 + `,
f AS (
    SELECT * FROM unnest($2::uuid[], $3::text[], $4::uuid[], $5::bigint[], $6::text[], $8::boolean[])
        AS f(stream_id, perspective, last_event_id, last_version, error, fenced)
),
lost AS MATERIALIZED (
    SELECT f.stream_id, f.perspective
    FROM f
    WHERE f.fenced AND NOT EXISTS (
        SELECT 1 FROM /* SCHEMA */.vantage_active_streams a
        WHERE a.stream_id = f.stream_id AND a.instance_id = $9::uuid)
),
prior AS MATERIALIZED (
    SELECT c.stream_id, c.perspective, c.last_version
    FROM /* SCHEMA */.vantage_cursors c
    WHERE (c.stream_id, c.perspective) IN (SELECT f.stream_id, f.perspective FROM f)
    ORDER BY c.stream_id, c.perspective COLLATE "C"
    FOR UPDATE
),
moved AS (
    SELECT f.stream_id, f.perspective, f.last_version
    FROM f
    LEFT JOIN prior p ON p.stream_id = f.stream_id AND p.perspective = f.perspective
    WHERE f.last_version > coalesce(p.last_version, 0)
),
` + sqlMarkLate("moved", "coalesce($7::uuid[], '{}')") + `
INSERT INTO /* SCHEMA */.vantage_cursors AS c
    (stream_id, perspective, last_event_id, last_version, status, error,
     rewind_trigger_event_id, rewind_trigger_version, rewind_flagged_at, rewind_first_flagged_at, updated_at)
SELECT f.stream_id, f.perspective, nullif(f.last_event_id, '00000000-0000-0000-0000-000000000000'), f.last_version,
       ` + sqlStatusFailed + ` | CASE WHEN s.event_version IS NULL THEN 0 ELSE ` + sqlStatusRewindRequired + ` END,
       f.error, s.event_id, s.event_version,
       CASE WHEN s.event_version IS NOT NULL THEN clock.now END,
       CASE WHEN s.event_version IS NOT NULL THEN clock.now END,
       clock.now
FROM f
CROSS JOIN clock
LEFT JOIN LATERAL (
    SELECT w.event_id, w.event_version
    FROM /* SCHEMA */.vantage_work w
    WHERE w.stream_id = f.stream_id AND w.perspective = f.perspective
      AND w.processed_at IS NULL AND w.event_version < f.last_version
      AND w.work_id <> ALL (coalesce($7::uuid[], '{}'))
    ORDER BY w.event_version
    LIMIT 1
) s ON true
WHERE ` + sqlNoCursorOfRetired("f") + `
ORDER BY f.stream_id, f.perspective COLLATE "C"
ON CONFLICT (stream_id, perspective) DO UPDATE
SET last_event_id = CASE WHEN excluded.last_version > c.last_version THEN excluded.last_event_id ELSE c.last_event_id END,
    last_version = greatest(c.last_version, excluded.last_version),
    status = CASE WHEN ` + sqlFailStale + ` THEN c.status
                  ELSE (c.status & ~` + sqlStatusCompleted + `) | ` + sqlStatusFailed + `
                       | CASE WHEN ` + sqlFailRewinds + `
                              THEN ` + sqlStatusRewindRequired + ` ELSE 0 END
             END,
    error = CASE WHEN ` + sqlFailStale + ` THEN c.error ELSE excluded.error END,
    rewind_trigger_event_id = CASE WHEN ` + sqlFailRewinds + `
                                        AND (c.rewind_trigger_version IS NULL OR excluded.rewind_trigger_version < c.rewind_trigger_version)
                                   THEN excluded.rewind_trigger_event_id ELSE c.rewind_trigger_event_id END,
    rewind_trigger_version = CASE WHEN ` + sqlFailRewinds + `
                                  THEN least(c.rewind_trigger_version, excluded.rewind_trigger_version)
                                  ELSE c.rewind_trigger_version END,
    rewind_flagged_at = CASE WHEN ` + sqlFailRewinds + `
                             THEN excluded.rewind_flagged_at ELSE c.rewind_flagged_at END,
    rewind_first_flagged_at = CASE WHEN ` + sqlFailRewinds + `
                                   THEN coalesce(c.rewind_first_flagged_at, excluded.rewind_first_flagged_at)
                                   ELSE c.rewind_first_flagged_at END,
    updated_at = excluded.updated_at`

// sqlFailStale is true in sqlFailCursors' conflict branch when the failure
// is a stale report, which leaves the cursor's status and error: the
// cursor is past its position, or the caller lost the stream of a pair
// whose failures name no event (lost).
const sqlFailStale = `(excluded.last_version > 0 AND excluded.last_version < c.last_version)
                  OR EXISTS (SELECT 1 FROM lost l WHERE l.stream_id = c.stream_id AND l.perspective = c.perspective)`

// sqlFailRewinds is true in sqlFailCursors' conflict branch when the failure
// moves the position past a pending row, which then flags RewindRequired.
const sqlFailRewinds = `excluded.last_version > c.last_version AND excluded.rewind_trigger_version IS NOT NULL`

// sqlFailEvents charges failures to events that have no pending row of
// their pair (a replay failed on an event applied long ago): $1 now, $2
// streams, $3 perspectives, $4 event ids, $5 versions, $6 errors, $7 retry
// times. It stores a pending row for the event, marked replay (the event
// was applied before), with one attempt, the error and the retry time; when
// the pair has a pending row for the event already (the key of pending
// work, vantage_work_pending_idx), that row gets the attempt instead, as a
// failed row does, whoever holds the stream, and keeps its replay flag. A
// retired perspective gets no row: nothing would ever apply it (its
// instances no longer run it), and its stream would never drain.
// Rows are written in key order, so overlapping calls cannot deadlock, and
// the streams get their row in vantage_active_streams (see sqlAppend's
// streamed) under the append locks that WorkFail took first.
const sqlFailEvents = `WITH ` + sqlClock1 + `,
stored AS (
    INSERT INTO /* SCHEMA */.vantage_work AS w
        (work_id, stream_id, perspective, event_id, event_version, attempts, error, scheduled_for, replay, created_at)
    SELECT /* SCHEMA */.vantage_uuid_v7(), f.stream_id, f.perspective, f.event_id, f.event_version, 1, f.error, f.retry_at, true, clock.now
    FROM unnest($2::uuid[], $3::text[], $4::uuid[], $5::bigint[], $6::text[], $7::timestamptz[])
         AS f(stream_id, perspective, event_id, event_version, error, retry_at), clock
    WHERE NOT EXISTS (SELECT 1 FROM /* SCHEMA */.vantage_retired_perspectives r WHERE r.perspective = f.perspective)
    ORDER BY f.stream_id, f.perspective COLLATE "C", f.event_version
    ON CONFLICT (stream_id, perspective, event_version) WHERE processed_at IS NULL DO UPDATE
    SET attempts = w.attempts + 1, error = excluded.error, scheduled_for = excluded.scheduled_for
    RETURNING w.stream_id, w.seq
)
INSERT INTO /* SCHEMA */.vantage_active_streams (stream_id, first_seq, last_activity_at, created_at)
SELECT s.stream_id, min(s.seq), clock.now, clock.now
FROM stored s, clock
GROUP BY s.stream_id, clock.now
ORDER BY s.stream_id
ON CONFLICT (stream_id) DO NOTHING`

// sqlFlagFailedEvents makes late the rows of the failed events ($2 to $5)
// that their pair's cursor is past, and flags those cursors
// RewindRequired, so that a rewind applies the events in order once their
// retry time comes; an earlier trigger is kept (see sqlFlagRewind). It
// runs after sqlFailCursors, which locked these cursors in key order and
// moved their positions, and after sqlFailEvents, which locked the rows.
// $1 is now.
const sqlFlagFailedEvents = `WITH ` + sqlClock1 + `,
past AS MATERIALIZED (
    SELECT e.stream_id, e.perspective, e.event_id, e.event_version
    FROM unnest($2::uuid[], $3::text[], $4::uuid[], $5::bigint[]) AS e(stream_id, perspective, event_id, event_version)
    JOIN /* SCHEMA */.vantage_cursors c ON c.stream_id = e.stream_id AND c.perspective = e.perspective
    WHERE c.last_version > e.event_version
),
marked AS (
    UPDATE /* SCHEMA */.vantage_work w
    SET late = true
    FROM past p
    WHERE w.stream_id = p.stream_id AND w.perspective = p.perspective AND w.event_version = p.event_version
      AND w.processed_at IS NULL AND NOT w.late
    RETURNING 1
),
f AS (
    SELECT DISTINCT ON (p.stream_id, p.perspective) p.stream_id, p.perspective, p.event_id, p.event_version
    FROM past p
    ORDER BY p.stream_id, p.perspective, p.event_version
)
UPDATE /* SCHEMA */.vantage_cursors c
SET ` + sqlFlagRewind + `
FROM f, clock
WHERE c.stream_id = f.stream_id AND c.perspective = f.perspective`

// failedEvents collects the FailedEventID of failures, one per pair and
// version (the key of pending work): a later failure of the same event
// replaces an earlier one's error and retry time.
type failedEvents struct {
	order []failedEventKey
	byKey map[failedEventKey]*ports.Failure
}

type failedEventKey struct {
	pair    pairKey
	version int64
}

func (e *failedEvents) add(f *ports.Failure) {
	if e.byKey == nil {
		e.byKey = map[failedEventKey]*ports.Failure{}
	}
	k := failedEventKey{pairKey{f.StreamID, f.Perspective}, f.FailedEventVersion}
	if _, ok := e.byKey[k]; !ok {
		e.order = append(e.order, k)
	}
	e.byKey[k] = f
}

// failedEventColumns are the columns of the failed events of a call, in
// key order.
type failedEventColumns struct {
	streams, eventIDs []pgtype.UUID
	perspectives      []string
	versions          []int64
	errs              []string
	retryAt           []pgtype.Timestamptz
}

// streams returns the streams of the failed events.
func (e *failedEvents) streams() []pgtype.UUID {
	out := make([]pgtype.UUID, 0, len(e.order))
	for _, k := range e.order {
		out = append(out, uuidElem(k.pair.streamID))
	}
	return out
}

// columns returns the failed events as parallel arrays in key order, so that
// sqlFailEvents writes rows and sqlFlagFailedEvents cursors in one order.
func (e *failedEvents) columns() failedEventColumns {
	slices.SortFunc(e.order, func(a, b failedEventKey) int {
		return cmp.Or(comparePair(a.pair, b.pair), cmp.Compare(a.version, b.version))
	})
	var c failedEventColumns
	for _, k := range e.order {
		f := e.byKey[k]
		c.streams = append(c.streams, uuidElem(f.StreamID))
		c.perspectives = append(c.perspectives, f.Perspective)
		c.eventIDs = append(c.eventIDs, uuidElem(f.FailedEventID))
		c.versions = append(c.versions, f.FailedEventVersion)
		c.errs = append(c.errs, f.Error)
		c.retryAt = append(c.retryAt, timestamptz(f.RetryAt))
	}
	return c
}

// WorkFail implements ports.CursorStore in one round trip: a batch of five
// to eight statements in one implicit transaction: take the append locks
// of the failed events' streams (when a failure names an event), lock the
// streams the caller holds (sqlFailFence), complete
// the applied rows, charge and schedule the failed rows and lower their
// pairs' marks (fenced like completions), store the failed events
// (sqlFailEvents), upsert the cursors (marking late the pending rows below
// a position that moved), mark late the failed events' rows below their
// cursor and flag those cursors (sqlFlagFailedEvents), release drained
// streams. The stream's lease stays with the caller. A zero RetryAt makes
// the failed rows drainable at once. A failed event of a retired perspective
// stores no row.
// It returns ports.ErrInvalidArgument, and changes nothing, when a failure
// has a nil stream id, an empty perspective, a negative LastVersion, or a
// FailedEventID without a positive FailedEventVersion (or the reverse).
func (s *Store) WorkFail(ctx context.Context, params *ports.WorkFailParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("recording failures: %w", err)
	}
	var (
		finish finishArgs
		pos    positions
		failed struct {
			finishArgs
			errs     []string
			retryAt  []pgtype.Timestamptz
			attempts []int32
		}
		events failedEvents
	)
	for i := range params.Failures {
		f := &params.Failures[i]
		if f.FailedEventID != uuid.Nil {
			events.add(f)
		}
		finish.add(f.StreamID, f.Perspective, f.AppliedWorkIDs)
		failed.add(f.StreamID, f.Perspective, f.FailedWorkIDs)
		for range f.FailedWorkIDs {
			failed.errs = append(failed.errs, f.Error)
			failed.retryAt = append(failed.retryAt, timestamptz(f.RetryAt))
			failed.attempts = append(failed.attempts, int32(min(f.Attempt, math.MaxInt32)))
		}
		pos.add(pairKey{f.StreamID, f.Perspective}, position{eventID: f.LastEventID, version: f.LastVersion, err: f.Error})
	}
	if len(pos.order) == 0 {
		return nil
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	now := nowArg(params.Now)
	streams, perspectives, eventIDs, versions, errs := pos.columns()
	b := &pgx.Batch{}
	if len(events.order) > 0 {
		b.Queue(sqlAppendLocks, s.appendLockClass(), events.streams())
	}
	b.Queue(s.sql(sqlFailFence), params.InstanceID, distinctStreams(streams))
	finish.queue(s, b, params.InstanceID, params.DebugMode, now)
	b.Queue(s.sql(sqlFailRows), params.InstanceID, failed.workIDs, failed.streams, failed.perspectives, failed.errs, failed.retryAt, failed.attempts)
	var ev failedEventColumns
	if len(events.order) > 0 {
		ev = events.columns()
		b.Queue(s.sql(sqlFailEvents), now, ev.streams, ev.perspectives, ev.eventIDs, ev.versions, ev.errs, ev.retryAt)
	}
	var applied []uuid.UUID
	for _, f := range params.Failures {
		applied = append(applied, f.AppliedWorkIDs...)
	}
	b.Queue(s.sql(sqlFailCursors), now, streams, perspectives, eventIDs, versions, errs, uuidsArg(applied),
		fencedPairs(params, streams, perspectives), params.InstanceID)
	if len(events.order) > 0 {
		b.Queue(s.sql(sqlFlagFailedEvents), now, ev.streams, ev.perspectives, ev.eventIDs, ev.versions)
	}
	b.Queue(s.sql(sqlReleaseDrained), distinctStreams(streams), params.InstanceID, s.appendLockClass())
	err := s.sendWork(ctx, b, func(br pgx.BatchResults) error { return execN(br, b.Len()) })
	if err != nil {
		return fmt.Errorf("recording failures of instance %s: %w", params.InstanceID, translate(err))
	}
	return nil
}

// fencedPairs returns, for each pair of the columns streams and
// perspectives, whether its failures leave the cursor's status alone when
// the caller does not hold the stream (see sqlFailStale): those of a
// caller that names itself, when none names an event (a replay's failure
// is any instance's to send).
func fencedPairs(params *ports.WorkFailParams, streams []pgtype.UUID, perspectives []string) []bool {
	event := map[pairKey]bool{}
	for _, f := range params.Failures {
		if f.FailedEventID != uuid.Nil {
			event[pairKey{f.StreamID, f.Perspective}] = true
		}
	}
	out := make([]bool, len(streams))
	for i := range streams {
		k := pairKey{uuid.UUID(streams[i].Bytes), perspectives[i]}
		out[i] = params.InstanceID != uuid.Nil && !event[k]
	}
	return out
}

// distinctStreams returns the distinct ids of streams, which must be sorted
// (as columns returns them), in a new slice: the caller's stays as it was.
func distinctStreams(streams []pgtype.UUID) []pgtype.UUID {
	return slices.Compact(slices.Clone(streams))
}

// timestamptz converts t for a timestamptz[] parameter (zero is NULL).
func timestamptz(t time.Time) pgtype.Timestamptz {
	if t.IsZero() {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: t.Truncate(time.Microsecond), Valid: true}
}

// compareUUID orders uuids by their bytes, as PostgreSQL orders uuid values.
func compareUUID(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) }
