package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/vantage-go/vantage/ports"
)

// sqlAppendLock serialises appends to one stream for the rest of the
// transaction: $1 the schema's lock class (see appendLockClass), $2 the
// stream. Versions are read and assigned under it, so within a stream
// version order is commit order and a committed version is never below one
// still in flight. Every other statement that stores pending rows takes it
// too, before any row lock, and vantage_release_drained leaves alone the
// streams whose lock is held: a stream being given work keeps its row in
// vantage_active_streams. Two streams whose ids collide in hashtext merely
// share the lock.
const sqlAppendLock = `SELECT pg_advisory_xact_lock(hashtext($1::text), hashtext($2::text))`

// sqlAppendLocks takes the append locks (see sqlAppendLock) of the streams
// $2, in stream id order: $1 the lock class.
const sqlAppendLocks = `SELECT count(pg_advisory_xact_lock(hashtext($1::text), hashtext(s.stream_id::text)))
FROM (SELECT DISTINCT u.stream_id FROM unnest($2::uuid[]) AS u(stream_id) ORDER BY 1) s`

// rollbackTimeout bounds the ROLLBACK that ends an append's failed
// transaction, after the caller's context may have ended.
const rollbackTimeout = 5 * time.Second

// appendLockClass is the class of the Store's append locks: one per schema,
// so that services sharing a database do not share stream locks.
func (s *Store) appendLockClass() string { return "vantage_append:" + s.opts.Schema }

// sqlAppend stores events and their work rows in one statement, and
// registers the subscriptions the call carries. Parameters: $1 stream, $2
// now, $3 expected version, $4 event ids, $5 types, $6 explicit versions (0
// for none), $7 data, $8 metadata, $9 NOTIFY channel, $10 and $11 the
// carried subscriptions (event types, perspectives), $12 whether to record
// those missing (EventsAppend; AppendTx records them before, outside the
// caller's transaction: see AppendTx).
//
//   - known are the events of the call whose id is stored already (a
//     primary key probe per event: the LATERAL ... LIMIT 1 keeps it one
//     while the table has no statistics yet, as in its first minute, when
//     the planner would hash a scan of the whole table for every append),
//     each telling whether it is the same
//     event: in this stream, with the same type and data, at its explicit
//     version when one is given. repeat tells whether the call repeats an
//     append that took effect: every event known and the same, and the
//     lowest of their versions right after the expected one (1 for
//     ExpectNoStream) when a version is expected. Any known event stores
//     nothing (every write below is a no-op), so that a repeat, or a
//     conflicting id, never aborts the transaction with a unique
//     violation: AppendTx's caller can go on.
//   - ok is the stream head when no event is known and the ExpectedVersion
//     check passes, else empty (which makes every write below a no-op).
//   - numbered places the events in order: an explicit version is kept; an
//     implicit one continues after the highest version stored or placed so
//     far. With c the running count of implicit events, that is c plus the
//     larger of the head and every earlier explicit version minus its c.
//   - stored inserts them; a taken version is a unique violation, which
//     aborts the transaction (ErrVersionConflict), as is an id that a
//     concurrent append to another stream stores first.
//   - carried are the call's subscriptions, each once, those of retired
//     perspectives left out; registered records those not recorded yet
//     through vantage_subscriptions_add, called only when one is missing:
//     in the common case every one is recorded, which costs a probe each
//     and no insert. The fan-out reads carried itself, not the table: the
//     rows registered here are not visible to the rest of the statement,
//     and neither are those a concurrent append registered after this
//     statement's snapshot (its insert makes this one's a no-op).
//   - exposed tells whether a new event may be late: the lowest new
//     version is at or below the head (an explicit version, a late
//     arrival) or below a cursor already. Otherwise (every implicit
//     append: no cursor passes the head, read under the stream's lock, and
//     no row lies above it) nothing below is read or locked.
//   - marks share-locks the stream's row in vantage_active_streams and
//     reads its handed-out marks (see ports.WorkClaimer), and cur then
//     locks the stream's cursors, in perspective order as completions lock
//     them, and reads their positions as committed: a fetch moving a mark
//     (it locks the stream row before it reads the rows it hands out) or a
//     completion moving a cursor past a new event either committed before
//     (marks or cur sees it) or waits for this append to commit (the fetch
//     then hands out the new row, the completion's straggler check sees
//     it). Both run only when the append is exposed: an append above the
//     head reads and locks nothing below.
//   - fanout lists, per event type of the call, the perspectives subscribed
//     to it, recorded or carried, each once; work fans out one pending,
//     row per event and perspective of its type. A row is late when cur is
//     past its event, or when its pair's handed-out mark is: rows above it
//     were handed to an apply, whose save may move the cursor past the new
//     row before the pair is fetched again (see ports.WorkItem.Late).
//   - streamed inserts the stream's row in vantage_active_streams when it
//     has none (the stream's first pending work), with the insertion order
//     of its first new row: every stream with pending work has one. It
//     does nothing when the row exists, without waiting for its locks.
//   - late flags the cursors past a new row, with the smallest such event
//     as trigger.
//   - notified queues a NOTIFY naming the stream, delivered when the
//     transaction commits, when $9 is set (AppendTx) and the call stored
//     its events or repeated an append; EventsAppend passes NULL and
//     notifies after the commit instead (see EventsAppend).
//
// The result has one row per stored event, or per known event (known true),
// or a single row of NULLs when nothing was stored and no event is known.
const sqlAppend = `WITH ` + sqlClock + `,
head AS (
    SELECT coalesce(max(version), 0) AS version FROM /* SCHEMA */.vantage_events WHERE stream_id = $1
),
input AS (
    SELECT i.*, sum(CASE WHEN i.explicit > 0 THEN 0 ELSE 1 END) OVER (ORDER BY i.ord) AS c
    FROM unnest($4::uuid[], $5::text[], $6::bigint[], $7::text[], $8::text[])
         WITH ORDINALITY AS i(id, type, explicit, data, metadata, ord)
),
known AS MATERIALIZED (
    SELECT e.id, e.version, e.metadata, e.created_at,
           e.stream_id = $1 AND e.type = i.type AND e.data = i.data::jsonb
           AND (i.explicit = 0 OR e.version = i.explicit) AS same
    FROM input i
    CROSS JOIN LATERAL (
        SELECT e.id, e.stream_id, e.type, e.data, e.version, e.metadata, e.created_at
        FROM /* SCHEMA */.vantage_events e
        WHERE e.id = i.id
        LIMIT 1
    ) e
),
repeat AS (
    SELECT count(*) > 0 AS any,
           count(*) = cardinality($4::uuid[]) AND coalesce(bool_and(k.same), false)
           AND ($3::bigint = 0 OR min(k.version) = greatest($3::bigint, 0) + 1) AS yes
    FROM known k
),
ok AS (
    SELECT h.version FROM head h, repeat r
    WHERE NOT r.any AND ($3::bigint = 0 OR ($3::bigint = -1 AND h.version = 0) OR h.version = $3::bigint)
),
numbered AS MATERIALIZED (
    SELECT i.id, i.type, i.data, i.metadata,
           CASE WHEN i.explicit > 0 THEN i.explicit
                ELSE i.c + greatest(ok.version, max(CASE WHEN i.explicit > 0 THEN i.explicit - i.c END)
                                                    OVER (ORDER BY i.ord ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING))
           END AS version
    FROM input i CROSS JOIN ok
),
stored AS (
    INSERT INTO /* SCHEMA */.vantage_events (id, stream_id, type, version, data, metadata, created_at)
    SELECT n.id, $1, n.type, n.version, n.data::jsonb, n.metadata::jsonb, clock.now
    FROM numbered n, clock
    RETURNING id, type, version, created_at
),
carried AS MATERIALIZED (
    SELECT DISTINCT x.event_type, x.perspective
    FROM unnest($10::text[], $11::text[]) AS x(event_type, perspective)
    WHERE NOT EXISTS (SELECT 1 FROM /* SCHEMA */.vantage_retired_perspectives r WHERE r.perspective = x.perspective)
),
registered AS MATERIALIZED (
    SELECT /* SCHEMA */.vantage_subscriptions_add($10::text[], $11::text[]) AS added
    WHERE $12::boolean AND EXISTS (SELECT 1 FROM ok)
      AND EXISTS (
          SELECT 1 FROM carried c
          WHERE NOT EXISTS (
              SELECT 1 FROM /* SCHEMA */.vantage_subscriptions s
              WHERE s.event_type = c.event_type AND s.perspective = c.perspective))
),
exposed AS (
    SELECT (SELECT min(n.version) FROM numbered n)
           <= greatest((SELECT h.version FROM head h),
                       (SELECT max(c.last_version) FROM /* SCHEMA */.vantage_cursors c WHERE c.stream_id = $1)) AS yes
),
marks AS MATERIALIZED (
    SELECT a.handed_out
    FROM /* SCHEMA */.vantage_active_streams a
    WHERE a.stream_id = $1 AND (SELECT x.yes FROM exposed x)
    FOR SHARE
),
cur AS MATERIALIZED (
    SELECT c.perspective, c.last_version
    FROM /* SCHEMA */.vantage_cursors c
    WHERE c.stream_id = $1 AND (SELECT x.yes FROM exposed x)
      AND (SELECT count(*) FROM marks) >= 0 -- after marks: stream rows first
    ORDER BY c.perspective COLLATE "C"
    FOR UPDATE
),
fanout AS MATERIALIZED (
    SELECT s.event_type, s.perspective
    FROM /* SCHEMA */.vantage_subscriptions s
    WHERE s.event_type IN (SELECT DISTINCT i.type FROM input i)
    UNION
    SELECT c.event_type, c.perspective FROM carried c
),
work AS (
    INSERT INTO /* SCHEMA */.vantage_work (work_id, stream_id, perspective, event_id, event_version, late, created_at)
    SELECT /* SCHEMA */.vantage_uuid_v7(), $1, f.perspective, st.id, st.version,
           CASE WHEN (SELECT x.yes FROM exposed x)
                THEN coalesce(cur.last_version > st.version, false)
                     OR coalesce((SELECT (m.handed_out ->> f.perspective)::bigint FROM marks m) > st.version, false)
                ELSE false END,
           clock.now
    FROM stored st
    JOIN fanout f ON f.event_type = st.type
    LEFT JOIN cur ON cur.perspective = f.perspective
    CROSS JOIN clock
    ORDER BY st.version, f.perspective COLLATE "C"
    RETURNING seq, perspective, event_id, event_version, late
),
streamed AS (
    INSERT INTO /* SCHEMA */.vantage_active_streams (stream_id, first_seq, last_activity_at, created_at)
    SELECT $1, min(w.seq), clock.now, clock.now
    FROM work w, clock
    GROUP BY clock.now
    ON CONFLICT (stream_id) DO NOTHING
),
late AS (
    UPDATE /* SCHEMA */.vantage_cursors c
    SET ` + sqlFlagRewind + `
    FROM (
        SELECT DISTINCT ON (w.perspective) w.perspective, w.event_id, w.event_version
        FROM work w
        JOIN cur ON cur.perspective = w.perspective
        WHERE w.event_version < cur.last_version
        ORDER BY w.perspective, w.event_version
    ) f, clock
    WHERE c.stream_id = $1 AND c.perspective = f.perspective
    RETURNING 1
),
notified AS (
    SELECT pg_notify($9, $1::text)
    FROM (SELECT 1 FROM ok UNION ALL SELECT 1 FROM repeat WHERE yes) x
    WHERE $9::text IS NOT NULL
)
SELECT h.version, r.yes, x.known, x.id, x.version, x.created_at, x.metadata, x.same,
       (SELECT count(*) FROM work), (SELECT count(*) FROM late), (SELECT count(*) FROM notified),
       (SELECT count(*) FROM registered)
FROM head h
CROSS JOIN repeat r
LEFT JOIN (
    SELECT false AS known, st.id, st.version, st.created_at, NULL::jsonb AS metadata, true AS same FROM stored st
    UNION ALL
    SELECT true, k.id, k.version, k.created_at, k.metadata, k.same FROM known k
) x ON true`

// EventsAppend implements ports.EventStore in one round trip (two when the
// common case hands the call over, see below): the append runs in a
// transaction of its own (the stream lock and the append statement), and
// the wake notification follows in a second transaction in the same round
// trip, so that it is sent right after the commit. A NOTIFY
// inside the appending transaction would hold PostgreSQL's notification
// queue lock across the commit's WAL flush, and concurrent appends would
// commit one at a time; the notification's own transaction writes nothing
// and flushes nothing. A repeated append wakes the listeners too, since the
// call that stored the events may have failed before its notification, and
// so does an append that failed its ExpectedVersion check (a harmless
// wake); an append that fails with an error from the database does not.
//
// An append whose events all take the next versions of their stream goes
// through vantage_append_implicit first (see appendImplicit), which costs
// the database about a third less; when it finds the call needs the general
// statement (a version conflict, a stored event id, a cursor past the head,
// a carried subscription to record), it stores nothing and the general
// statement runs in a second round trip.
//
// Events are placed in order: one without a Version gets the version after
// the highest one stored or placed so far, so in a batch an implicit event
// following an explicit one continues after it. A call whose events are all
// stored already, as a repeat of an append that took effect (see
// ports.EventStore.EventsAppend), returns them as stored, with the call's
// data and AlreadyStored set. It returns ports.ErrInvalidArgument for a nil
// stream id, no events, an ExpectedVersion below ExpectNoStream, an event
// with an empty type, a negative version, or data that is not a JSON
// document; and ports.ErrVersionConflict for a failed ExpectedVersion
// check, a taken version, an event id listed twice, or a stored event id
// that is not such a repeat. On error nothing is stored.
//
// A new row is late (ports.WorkItem.Late) when its pair's cursor is past
// its event, which also flags the cursor RewindRequired, or when its pair's
// handed-out mark is.
//
// The Subscriptions of the call are registered by the same statement, as
// SubscriptionsRegister would (those of retired perspectives are ignored),
// and the events fan out to them whether they were recorded before or not:
// an append never creates fewer work rows than they call for. Registering
// subscriptions that are recorded already writes nothing. It returns
// ports.ErrInvalidArgument, and stores nothing, for a subscription with an
// empty event type or perspective.
func (s *Store) EventsAppend(ctx context.Context, params *ports.EventsAppendParams) (*ports.EventsAppendResult, error) {
	// Wait for the schema before taking a connection, which the migration
	// being waited for may need.
	if err := s.appendReady(ctx, params); err != nil {
		return nil, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("appending to stream %s: %w", params.StreamID, translate(err))
	}
	defer conn.Release()
	res, err := s.append(ctx, conn, params, "", true, true)
	if pc := conn.Conn().PgConn(); err != nil && !pc.IsClosed() && pc.TxStatus() != 'I' {
		// The batch opened the transaction and failed before its COMMIT:
		// end it, so the connection goes back to the pool usable.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		if _, rerr := conn.Exec(rctx, "ROLLBACK"); rerr != nil {
			_ = conn.Conn().Close(rctx) // the pool drops a closed connection
		}
		cancel()
	}
	return res, err
}

// Store appends inside the caller's pgx transactions, through core.AppendTx
// too.
var _ ports.TxEventStore[pgx.Tx] = (*Store)(nil)

// AppendTx is EventsAppend inside the caller's transaction, so business
// writes and events commit together; the wake notification is sent when tx
// commits, and no event nor work row is stored if it rolls back. To append registered
// events, call core.AppendTx with the Store: it adds what
// core.Registry.Append adds (event ids, the metadata of the context, the
// registry's subscriptions). The stream's lock is held until tx ends: keep
// such transactions short. Use it in READ COMMITTED transactions: a
// REPEATABLE READ or SERIALIZABLE snapshot taken before the lock may miss a
// concurrent append, which then surfaces as ports.ErrVersionConflict. A
// repeated append (AlreadyStored) and a stored event id leave the
// transaction usable; after a taken version the transaction is aborted (a
// unique violation): roll it back.
//
// The subscriptions params carries that are not recorded yet are recorded
// first, in a transaction of their own on the Store's pool, and stay
// recorded whatever becomes of tx: recorded in tx, their rows would stay
// uncommitted while the application keeps tx open, and every other append
// carrying them would wait for tx, an application that keeps tx open until
// another of its appends returns standing still. The events fan out to
// them in any case.
func (s *Store) AppendTx(ctx context.Context, tx pgx.Tx, params *ports.EventsAppendParams) (*ports.EventsAppendResult, error) {
	if err := s.appendReady(ctx, params); err != nil {
		return nil, err
	}
	// When the pool cannot record them at once (every connection taken,
	// perhaps by transactions like tx), they are recorded in tx, as
	// before: an append never waits on the pool for good.
	rctx, cancel := context.WithTimeout(ctx, recordSubscriptionsTimeout)
	err := s.recordSubscriptions(rctx, params.Subscriptions)
	cancel()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("appending to stream %s: %w", params.StreamID, translate(ctx.Err()))
	}
	return s.append(ctx, tx, params, s.channel, false, err != nil)
}

// recordSubscriptionsTimeout bounds AppendTx's recording of missing
// subscriptions on the pool.
const recordSubscriptionsTimeout = 250 * time.Millisecond

// subscriptionsRecheck is how long the Store trusts that a subscription it
// recorded, or found recorded, still is: a retirement deletes it, and a
// revival leaves it to be recorded again.
const subscriptionsRecheck = time.Minute

// recordSubscriptions records those of subs not recorded yet, on the pool,
// unless the Store recorded or found each recorded within
// subscriptionsRecheck.
func (s *Store) recordSubscriptions(ctx context.Context, subs []ports.Subscription) error {
	now := time.Now()
	fresh := true
	for _, sub := range subs {
		if until, ok := s.subscribed.Load(sub); !ok || now.After(until.(time.Time)) {
			fresh = false
			break
		}
	}
	if fresh {
		return nil
	}
	if err := s.SubscriptionsRegister(ctx, &ports.SubscriptionsRegisterParams{Subscriptions: subs}); err != nil {
		return err
	}
	for _, sub := range subs {
		s.subscribed.Store(sub, now.Add(subscriptionsRecheck))
	}
	return nil
}

// appendReady returns the error of an append of params before it is sent:
// params that every EventStore rejects, a closed Store, or a schema that
// is not ready.
func (s *Store) appendReady(ctx context.Context, params *ports.EventsAppendParams) error {
	if err := params.Validate(); err != nil {
		return err
	}
	return s.ready(ctx)
}

// appendRow is one row of sqlAppend's result.
type appendRow struct {
	id       pgtype.UUID
	version  pgtype.Int8
	created  pgtype.Timestamptz
	metadata []byte
	known    pgtype.Bool
	same     pgtype.Bool
}

// append stores the events of params through db (see EventsAppend),
// recording the missing subscriptions it carries when record is set. With
// own set, db is a connection outside any transaction: the batch wraps
// the append in a transaction of its own and notifies s.channel after its
// commit (see EventsAppend). Without it, db is the caller's transaction and
// channel, when set, is notified when that transaction commits. The caller
// checked appendReady.
func (s *Store) append(ctx context.Context, db batchSender, params *ports.EventsAppendParams, channel string, own, record bool) (*ports.EventsAppendResult, error) {
	subTypes, subPerspectives := subscriptionColumns(params.Subscriptions)
	n := len(params.Events)
	var (
		ids      = make([]pgtype.UUID, n) // a uuid[] parameter (see uuidsArg)
		types    = make([]string, n)
		versions = make([]int64, n)
		data     = make([]string, n)
		metadata = make([]string, n)
		byID     = make(map[uuid.UUID]int, n)
	)
	for i, e := range params.Events {
		id := e.ID
		if id == uuid.Nil {
			var err error
			if id, err = uuid.NewV7(); err != nil {
				return nil, fmt.Errorf("appending to stream %s: generating event id: %w", params.StreamID, err)
			}
		}
		if _, dup := byID[id]; dup {
			return nil, fmt.Errorf("appending to stream %s: event %s appears twice: %w", params.StreamID, id, ports.ErrVersionConflict)
		}
		meta, err := json.Marshal(e.Metadata)
		if err != nil {
			return nil, fmt.Errorf("appending to stream %s: encoding metadata of event %d: %w", params.StreamID, i, err)
		}
		ids[i], types[i], versions[i], data[i], metadata[i] = uuidElem(id), e.Type, e.Version, string(e.Data), string(meta)
		byID[id] = i
	}

	if own && allImplicit(params.Events) {
		stored, workRows, err := s.appendImplicit(ctx, db, params, ids, types, data, metadata, subTypes, subPerspectives)
		if err != nil {
			return nil, fmt.Errorf("appending to stream %s: %w", params.StreamID, translate(err))
		}
		if len(stored) == n {
			res, err := appendResult(params, byID, stored, false)
			if err != nil {
				return nil, err
			}
			res.WorkRows = workRows
			return res, nil
		}
		// Stored nothing: the general statement decides.
	}

	var (
		head          int64
		repeat        bool
		stored, known []appendRow
		workRows      int
	)
	err := s.sendAppend(ctx, db, params.StreamID, own, s.sql(sqlAppend), []any{uuidArg(params.StreamID), nowArg(params.Now), params.ExpectedVersion,
		ids, types, versions, data, metadata, textArg(channel), subTypes, subPerspectives, record},
		func(rows pgx.Rows) error {
			var (
				r                         appendRow
				late, notices, registered int
			)
			if err := rows.Scan(&head, &repeat, &r.known, &r.id, &r.version, &r.created, &r.metadata, &r.same,
				&workRows, &late, &notices, &registered); err != nil {
				return err
			}
			switch {
			case !r.id.Valid: // nothing stored, nothing known
			case r.known.Bool:
				known = append(known, r)
			default:
				stored = append(stored, r)
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("appending to stream %s: %w", params.StreamID, translate(err))
	}
	switch {
	case repeat:
		return appendResult(params, byID, known, true)
	case len(known) > 0:
		return nil, fmt.Errorf("appending to stream %s: %s: %w", params.StreamID, notARepeat(params, known), ports.ErrVersionConflict)
	case len(stored) != n:
		want := "no stream"
		if params.ExpectedVersion > 0 {
			want = fmt.Sprintf("version %d", params.ExpectedVersion)
		}
		return nil, fmt.Errorf("appending to stream %s: expected %s, found version %d: %w",
			params.StreamID, want, head, ports.ErrVersionConflict)
	}
	res, err := appendResult(params, byID, stored, false)
	if err != nil {
		return nil, err
	}
	res.WorkRows = workRows
	return res, nil
}

// sqlAppendImplicit appends events at the next versions of their stream
// when nothing calls for the general statement (see
// vantage_append_implicit).
const sqlAppendImplicit = `SELECT id, version, created_at, work_rows
FROM /* SCHEMA */.vantage_append_implicit($1, $2, $3, $4::uuid[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[])`

// allImplicit reports whether no event of an append names its version.
func allImplicit(events []ports.NewEvent) bool {
	for _, e := range events {
		if e.Version != 0 {
			return false
		}
	}
	return true
}

// appendImplicit is EventsAppend's common case, every event at the next
// version of its stream, in the same round trip as the general statement
// (BEGIN, lock, append, COMMIT, notification) but through
// vantage_append_implicit, whose small statements cost the database less
// than the general statement. It returns the stored events, or none (having
// stored nothing) when the general statement must run: an ExpectedVersion
// that does not match, a stored event id, a cursor past the head, or a
// carried subscription that is not recorded. The notification is sent
// either way; without events stored it is a harmless wake.
func (s *Store) appendImplicit(ctx context.Context, db batchSender, params *ports.EventsAppendParams,
	ids []pgtype.UUID, types, data, metadata, subTypes, subPerspectives []string,
) (stored []appendRow, workRows int, err error) {
	err = s.sendAppend(ctx, db, params.StreamID, true, s.sql(sqlAppendImplicit), []any{uuidArg(params.StreamID), nowArg(params.Now), params.ExpectedVersion,
		ids, types, data, metadata, subTypes, subPerspectives},
		func(rows pgx.Rows) error {
			var r appendRow
			if err := rows.Scan(&r.id, &r.version, &r.created, &workRows); err != nil {
				return err
			}
			stored = append(stored, r)
			return nil
		})
	return stored, workRows, err
}

// sendAppend sends the append statement stmt with args through db, after
// the stream's lock and, with own, inside a transaction of its own (BEGIN
// before the lock, COMMIT after the statement) followed by the wake
// notification (see EventsAppend). scan reads each row of the statement.
// When only the notification failed, after the commit, the events are
// stored: the failure is logged, listeners fall back on polling, and
// sendAppend returns nil.
func (s *Store) sendAppend(ctx context.Context, db batchSender, stream uuid.UUID, own bool, stmt string, args []any, scan func(pgx.Rows) error) error {
	b := &pgx.Batch{}
	leading := 1 // the lock; BEGIN before it
	if own {
		b.Queue("BEGIN")
		leading = 2
	}
	b.Queue(sqlAppendLock, s.appendLockClass(), stream)
	b.Queue(stmt, args...)
	if own {
		b.Queue("COMMIT")
		b.Queue(sqlPublish, s.channel, stream.String())
	}
	committed := false
	err := sendBatch(ctx, db, b, func(br pgx.BatchResults) error {
		if err := execN(br, leading); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			if err := scan(rows); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil || !own {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		committed = true
		_, err = br.Exec()
		return err
	})
	if err != nil && committed {
		s.opts.Logger.Warn("publishing the wake notification of an append failed; listeners rely on polling",
			slog.String("stream_id", stream.String()), slog.Any("error", err))
		return nil
	}
	return err
}

// appendResult returns the events of rows (one per event of params) in the
// order of params: the call's type and data (which a repeat matched) and the
// stored id, version and time; the stored metadata when rows are known
// events, the call's otherwise.
func appendResult(params *ports.EventsAppendParams, byID map[uuid.UUID]int, rows []appendRow, repeat bool) (*ports.EventsAppendResult, error) {
	result := &ports.EventsAppendResult{Events: make([]ports.Event, len(params.Events)), AlreadyStored: repeat}
	for _, r := range rows {
		i := byID[r.id.Bytes]
		e := params.Events[i]
		ev := ports.Event{
			ID:        r.id.Bytes,
			StreamID:  params.StreamID,
			Type:      e.Type,
			Version:   r.version.Int64,
			Data:      bytes.Clone(e.Data),
			Metadata:  e.Metadata.Clone(),
			CreatedAt: fromTime(r.created),
		}
		if repeat {
			ev.Metadata = ports.Metadata{}
			if err := json.Unmarshal(r.metadata, &ev.Metadata); err != nil {
				return nil, fmt.Errorf("appending to stream %s: decoding metadata of event %s: %w", params.StreamID, ev.ID, err)
			}
		}
		result.Events[i] = ev
	}
	return result, nil
}

// notARepeat says why the known events of a call do not make it a repeat.
func notARepeat(params *ports.EventsAppendParams, known []appendRow) string {
	for _, r := range known {
		if !r.same.Bool {
			return fmt.Sprintf("event %s is stored already, with another stream, type, data or version", uuid.UUID(r.id.Bytes))
		}
	}
	if len(known) < len(params.Events) {
		return fmt.Sprintf("event %s is stored already, and others of the call are not", uuid.UUID(known[0].id.Bytes))
	}
	first := known[0].version.Int64
	for _, r := range known {
		first = min(first, r.version.Int64)
	}
	return fmt.Sprintf("the events are stored already from version %d, not right after the expected version %d", first, params.ExpectedVersion)
}

// sqlSubscriptionsRegister records the subscriptions $1, $2 that are not
// recorded yet, those of retired perspectives excepted (see
// vantage_subscriptions_add, which appends call too).
const sqlSubscriptionsRegister = `SELECT /* SCHEMA */.vantage_subscriptions_add($1::text[], $2::text[])`

// SubscriptionsRegister implements ports.EventStore. Registering a known
// subscription again is a no-op, and so is registering one of a retired
// perspective (see PerspectiveRetire). It returns
// ports.ErrInvalidArgument, and records nothing, when a subscription has an
// empty event type or perspective.
func (s *Store) SubscriptionsRegister(ctx context.Context, params *ports.SubscriptionsRegisterParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("registering subscriptions: %w", err)
	}
	types, perspectives := subscriptionColumns(params.Subscriptions)
	if len(types) == 0 {
		return nil
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, s.sql(sqlSubscriptionsRegister), types, perspectives); err != nil {
		return fmt.Errorf("registering subscriptions: %w", translate(err))
	}
	return nil
}

// subscriptionColumns returns the event types and perspectives of subs as
// parallel arrays.
func subscriptionColumns(subs []ports.Subscription) (types, perspectives []string) {
	types = make([]string, 0, len(subs))
	perspectives = make([]string, 0, len(subs))
	for _, sub := range subs {
		types = append(types, sub.EventType)
		perspectives = append(perspectives, sub.Perspective)
	}
	return types, perspectives
}
