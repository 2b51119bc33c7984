// Package raw is the benchmark's lower bound: the same work as Vantage (fold
// every event of every stream into one JSONB model per perspective, with a
// cursor) done by the shortest SQL pipeline that is still correct, with no
// engine around it.
//
// Appends insert an event batch and its work rows in one statement. Each
// worker holds one connection and loops on two round trips:
//
//  1. BEGIN; claim the 500 oldest work rows FOR UPDATE SKIP LOCKED and fetch
//     their events and the current models of their (stream, perspective)
//     pairs, in one statement.
//  2. DELETE the applied work rows, upsert the cursors, upsert the models,
//     COMMIT.
//
// Correctness needs one rule that an engine would otherwise provide: a pair
// is applied only from the version right after its stored model's, so rows
// of a pair whose earlier rows another worker holds are left for later (the
// claim's lock is released at COMMIT and they are claimed again). Rows at or
// below the model's version are deleted without being applied.
//
// Run drains a backlog (the catch-up) or, with Options.Stop, keeps claiming
// while events are appended one at a time by an Appender (the ramp); an
// idle worker polls every Options.IdlePoll.
package raw

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vantage-go/vantage/bench/internal/workload"
)

// claimSize is the rows one claim takes.
const claimSize = 500

// Setup creates the pipeline's tables in a new schema.
func Setup(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	s := pgx.Identifier{schema}.Sanitize()
	_, err := pool.Exec(ctx, fmt.Sprintf(`
CREATE SCHEMA %[1]s;
CREATE TABLE %[1]s.events (
    id uuid PRIMARY KEY,
    stream_id uuid NOT NULL,
    version bigint NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (stream_id, version)
);
CREATE TABLE %[1]s.work (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    stream_id uuid NOT NULL,
    perspective text NOT NULL,
    event_id uuid NOT NULL,
    version bigint NOT NULL
);
CREATE TABLE %[1]s.cursors (
    stream_id uuid NOT NULL,
    perspective text NOT NULL,
    last_version bigint NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (stream_id, perspective)
);
CREATE TABLE %[1]s.models (
    stream_id uuid NOT NULL,
    perspective text NOT NULL,
    data jsonb NOT NULL,
    last_version bigint NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (stream_id, perspective)
);`, s))
	return err
}

// appendSQL inserts events of one stream and, per event, one work row per
// perspective, in one statement: $1 stream, $2 type, $3 ids, $4 versions,
// $5 payloads, $6 perspective names.
func appendSQL(schema string) string {
	return fmt.Sprintf(`WITH ev AS (
    INSERT INTO %[1]s.events (id, stream_id, version, type, data)
    SELECT u.id, $1, u.version, $2, u.data::jsonb
    FROM unnest($3::uuid[], $4::bigint[], $5::text[]) AS u(id, version, data)
    RETURNING id, version
)
INSERT INTO %[1]s.work (stream_id, perspective, event_id, version)
SELECT $1, p.name, ev.id, ev.version
FROM ev CROSS JOIN unnest($6::text[]) AS p(name)
ORDER BY ev.version, p.name`, pgx.Identifier{schema}.Sanitize())
}

// Seed appends events over streams in round-robin batches of batch events
// with appenders concurrent connections, fanning out one work row per
// perspective, and returns the stream ids.
func Seed(ctx context.Context, pool *pgxpool.Pool, schema string, events, streams, perspectives, batch, appenders int) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, streams)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	names := workload.Perspectives(perspectives)
	q := appendSQL(schema)
	var wg sync.WaitGroup
	errs := make([]error, appenders)
	for a := range appenders {
		wg.Go(func() {
			for _, b := range workload.Plan(events, streams, batch, appenders, a) {
				evIDs := make([]uuid.UUID, b.Count)
				versions := make([]int64, b.Count)
				data := make([]string, b.Count)
				for i := range b.Count {
					v := b.From + int64(i)
					evIDs[i] = uuid.Must(uuid.NewV7())
					versions[i] = v
					payload, _ := json.Marshal(workload.NewIncremented(v))
					data[i] = string(payload)
				}
				if _, err := pool.Exec(ctx, q, ids[b.Stream], workload.EventType, evIDs, versions, data, names); err != nil {
					errs[a] = fmt.Errorf("appending to stream %d: %w", b.Stream, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return ids, errors.Join(errs...)
}

// Appender appends one event per call, as an application appending live
// does: the event and its work rows in one statement. It is safe for
// concurrent use.
type Appender struct {
	pool  *pgxpool.Pool
	sql   string
	names []string
}

// NewAppender returns an Appender writing to schema through pool.
func NewAppender(pool *pgxpool.Pool, schema string, perspectives int) *Appender {
	return &Appender{pool: pool, sql: appendSQL(schema), names: workload.Perspectives(perspectives)}
}

// Append appends the event at version of stream. The caller numbers the
// versions: the pipeline applies a pair's versions one after the other,
// so a version appended before the one below it waits for it.
func (a *Appender) Append(ctx context.Context, stream uuid.UUID, version int64) error {
	payload, err := json.Marshal(workload.NewIncremented(version))
	if err != nil {
		return err
	}
	_, err = a.pool.Exec(ctx, a.sql, stream, workload.EventType,
		[]uuid.UUID{uuid.Must(uuid.NewV7())}, []int64{version}, []string{string(payload)}, a.names)
	return err
}

// Options configure Run.
type Options struct {
	// Pool serves the workers; it needs Workers connections.
	Pool   *pgxpool.Pool
	Schema string
	// Streams are the seeded streams; Heads their last versions.
	Streams []uuid.UUID
	Heads   []int64
	// Perspectives is the number of perspectives.
	Perspectives int
	// Workers is the number of concurrent claim loops (connections).
	Workers int
	// Stop, when not nil, runs the pipeline live: a worker whose claim
	// found nothing waits IdlePoll and claims again, until Stop is closed
	// and the table is empty. When nil, Run returns once the table is
	// empty (the catch-up).
	Stop <-chan struct{}
	// IdlePoll is how long a live worker waits after an empty claim.
	// Defaults to IdlePollDefault.
	IdlePoll time.Duration
	// OnApplied, when not nil, is called once the transaction that
	// applied a pair's rows committed, with the version the pair reached.
	OnApplied func(stream uuid.UUID, perspective string, version int64)
}

// IdlePollDefault is the wait of a live worker after an empty claim.
const IdlePollDefault = 20 * time.Millisecond

// Stats are the counters of a Run, safe to read while it runs.
type Stats struct {
	// Applied counts work rows applied (one event, one perspective).
	Applied atomic.Int64
	// Claims counts claim round trips, empty ones included.
	Claims atomic.Int64
	// Deferred counts claimed rows left for later because an earlier row of
	// their pair was held by another worker.
	Deferred atomic.Int64
}

// Run drains the work table with opts.Workers workers and returns, per
// stream of opts.Heads, the time from the start at which its last pair
// reached its head.
func Run(ctx context.Context, opts Options, stats *Stats) ([]time.Duration, error) {
	s := pgx.Identifier{opts.Schema}.Sanitize()
	claimSQL := fmt.Sprintf(`WITH c AS (
    SELECT seq, stream_id, perspective, event_id, version
    FROM %[1]s.work
    ORDER BY seq
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), m AS (
    SELECT c.*, row_number() OVER (PARTITION BY c.stream_id, c.perspective ORDER BY c.version) = 1 AS first
    FROM c
)
SELECT m.seq, m.stream_id, m.perspective, m.version, m.first, e.data, md.data, coalesce(md.last_version, 0)
FROM m
JOIN %[1]s.events e ON e.id = m.event_id
LEFT JOIN %[1]s.models md ON m.first AND md.stream_id = m.stream_id AND md.perspective = m.perspective
ORDER BY m.stream_id, m.perspective, m.version`, s)
	deleteSQL := fmt.Sprintf(`DELETE FROM %s.work WHERE seq = ANY($1::bigint[])`, s)
	cursorsSQL := fmt.Sprintf(`INSERT INTO %s.cursors AS c (stream_id, perspective, last_version, updated_at)
SELECT u.stream_id, u.perspective, u.last_version, now()
FROM unnest($1::uuid[], $2::text[], $3::bigint[]) AS u(stream_id, perspective, last_version)
ON CONFLICT (stream_id, perspective) DO UPDATE
SET last_version = excluded.last_version, updated_at = excluded.updated_at`, s)
	modelsSQL := fmt.Sprintf(`INSERT INTO %s.models AS m (stream_id, perspective, data, last_version, updated_at)
SELECT u.stream_id, u.perspective, u.data::jsonb, u.last_version, now()
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[]) AS u(stream_id, perspective, data, last_version)
ON CONFLICT (stream_id, perspective) DO UPDATE
SET data = excluded.data, last_version = excluded.last_version, updated_at = excluded.updated_at`, s)
	remainingSQL := fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s.work)`, s)

	index := make(map[uuid.UUID]int, len(opts.Streams))
	for i, id := range opts.Streams {
		index[id] = i
	}
	pairsDone := make([]atomic.Int32, len(opts.Streams))
	doneAt := make([]time.Duration, len(opts.Streams))
	start := time.Now()

	w := worker{
		claimSQL: claimSQL, deleteSQL: deleteSQL, cursorsSQL: cursorsSQL, modelsSQL: modelsSQL,
		stats: stats,
		onPair: func(stream uuid.UUID, perspective string, version int64) {
			if opts.OnApplied != nil {
				opts.OnApplied(stream, perspective, version)
			}
			i, ok := index[stream]
			if ok && i < len(opts.Heads) && version == opts.Heads[i] && int(pairsDone[i].Add(1)) == opts.Perspectives {
				doneAt[i] = time.Since(start)
			}
		},
	}
	idle := cmp.Or(opts.IdlePoll, IdlePollDefault)
	var wg sync.WaitGroup
	errs := make([]error, opts.Workers)
	for i := range opts.Workers {
		wg.Go(func() {
			conn, err := opts.Pool.Acquire(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			defer conn.Release()
			for {
				n, err := w.cycle(ctx, conn.Conn())
				if err != nil {
					errs[i] = err
					return
				}
				if n > 0 {
					continue
				}
				if opts.Stop != nil {
					// Live: nothing claimable now; claim again after
					// IdlePoll, or end once stopped with nothing left.
					select {
					case <-opts.Stop:
					case <-ctx.Done():
						errs[i] = ctx.Err()
						return
					case <-time.After(idle):
						continue
					}
				}
				var more bool
				if err := conn.QueryRow(ctx, remainingSQL).Scan(&more); err != nil {
					errs[i] = err
					return
				}
				if !more {
					return
				}
				// Everything left is held by other workers: wait for them.
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	return doneAt, errors.Join(errs...)
}

type worker struct {
	claimSQL, deleteSQL, cursorsSQL, modelsSQL string
	stats                                      *Stats
	onPair                                     func(stream uuid.UUID, perspective string, version int64)
}

type claimed struct {
	seq         int64
	stream      uuid.UUID
	perspective string
	version     int64
	data        []byte
}

// pair is the state of one (stream, perspective) within a claim.
type pair struct {
	stream      uuid.UUID
	perspective string
	model       workload.Model
	version     int64 // the stored model's version
	applying    bool  // false once a gap was met
	applied     int   // rows applied in this claim
}

// cycle runs one claim: it returns how many rows it claimed.
func (w *worker) cycle(ctx context.Context, conn *pgx.Conn) (int, error) {
	w.stats.Claims.Add(1)
	var rows []claimed
	var pairs []*pair
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(w.claimSQL, claimSize)
	err := sendBatch(ctx, conn, b, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		rs, err := br.Query()
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var (
				c         claimed
				first     bool
				modelData []byte
				modelVer  int64
			)
			if err := rs.Scan(&c.seq, &c.stream, &c.perspective, &c.version, &first, &c.data, &modelData, &modelVer); err != nil {
				return err
			}
			if first {
				p := &pair{stream: c.stream, perspective: c.perspective, version: modelVer, applying: true}
				if modelData != nil {
					if err := json.Unmarshal(modelData, &p.model); err != nil {
						return err
					}
				}
				pairs = append(pairs, p)
			}
			rows = append(rows, c)
		}
		return rs.Err()
	})
	if err != nil {
		_, _ = conn.Exec(ctx, "ROLLBACK")
		return 0, fmt.Errorf("claiming: %w", err)
	}
	if len(rows) == 0 {
		_, err := conn.Exec(ctx, "COMMIT")
		return 0, err
	}

	var (
		done                   []int64
		cStreams               []uuid.UUID
		cPerspectives, cModels []string
		cVersions              []int64
	)
	pi := -1
	var p *pair
	for _, r := range rows {
		if p == nil || r.stream != p.stream || r.perspective != p.perspective {
			pi++
			p = pairs[pi]
		}
		switch {
		case r.version <= p.version:
			done = append(done, r.seq) // already in the model
		case p.applying && r.version == p.version+1:
			var e workload.Incremented
			if err := json.Unmarshal(r.data, &e); err != nil {
				_, _ = conn.Exec(ctx, "ROLLBACK")
				return 0, err
			}
			p.model = workload.Apply(p.model, r.version, e)
			p.version = r.version
			p.applied++
			done = append(done, r.seq)
			w.stats.Applied.Add(1)
		default:
			p.applying = false // an earlier row is held elsewhere
			w.stats.Deferred.Add(1)
		}
	}
	var moved []*pair
	for _, p := range pairs {
		if p.applied == 0 {
			continue
		}
		data, err := json.Marshal(p.model)
		if err != nil {
			_, _ = conn.Exec(ctx, "ROLLBACK")
			return 0, err
		}
		cStreams = append(cStreams, p.stream)
		cPerspectives = append(cPerspectives, p.perspective)
		cModels = append(cModels, string(data))
		cVersions = append(cVersions, p.version)
		moved = append(moved, p)
	}
	b = &pgx.Batch{}
	b.Queue(w.deleteSQL, done)
	b.Queue(w.cursorsSQL, cStreams, cPerspectives, cVersions)
	b.Queue(w.modelsSQL, cStreams, cPerspectives, cModels, cVersions)
	b.Queue("COMMIT")
	err = sendBatch(ctx, conn, b, func(br pgx.BatchResults) error {
		for range b.Len() {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_, _ = conn.Exec(ctx, "ROLLBACK")
		return 0, fmt.Errorf("completing: %w", err)
	}
	for _, p := range moved {
		w.onPair(p.stream, p.perspective, p.version)
	}
	return len(rows), nil
}

func sendBatch(ctx context.Context, conn *pgx.Conn, b *pgx.Batch, read func(pgx.BatchResults) error) (err error) {
	br := conn.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	return read(br)
}

// Check reads every model and compares it with the stream heads.
func Check(ctx context.Context, pool *pgxpool.Pool, schema string, streams []uuid.UUID, heads []int64, perspectives int) (workload.Check, int64, error) {
	return CheckModels(ctx, pool, fmt.Sprintf(`SELECT stream_id, perspective, data FROM %s.models`, pgx.Identifier{schema}.Sanitize()),
		fmt.Sprintf(`SELECT count(*) FROM %s.work`, pgx.Identifier{schema}.Sanitize()), streams, heads, perspectives)
}

// CheckModels runs modelsSQL (stream_id, perspective, data) and countSQL
// (pending work rows) and checks the models against the stream heads; it
// returns the verdict and the pending work rows.
func CheckModels(ctx context.Context, pool *pgxpool.Pool, modelsSQL, countSQL string, streams []uuid.UUID, heads []int64, perspectives int) (workload.Check, int64, error) {
	var check workload.Check
	type key struct {
		stream      uuid.UUID
		perspective string
	}
	models := map[key]workload.Model{}
	rows, err := pool.Query(ctx, modelsSQL)
	if err != nil {
		return check, 0, err
	}
	for rows.Next() {
		var k key
		var data []byte
		if err := rows.Scan(&k.stream, &k.perspective, &data); err != nil {
			rows.Close()
			return check, 0, err
		}
		var m workload.Model
		if err := json.Unmarshal(data, &m); err != nil {
			rows.Close()
			return check, 0, err
		}
		models[k] = m
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return check, 0, err
	}
	for i, s := range streams {
		for _, p := range workload.Perspectives(perspectives) {
			check.Add(models[key{s, p}], heads[i])
		}
	}
	var pending int64
	err = pool.QueryRow(ctx, countSQL).Scan(&pending)
	return check, pending, err
}
