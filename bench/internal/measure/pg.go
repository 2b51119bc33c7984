package measure

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Backends records the server process ids of a pool's connections, so the
// CPU time PostgreSQL spent serving them can be read from /proc (the server
// runs on the same machine). Install AfterConnect on every pool.
type Backends struct {
	mu   sync.Mutex
	pids map[int]bool
}

// AfterConnect is a pgxpool AfterConnect hook recording the backend pid.
func (b *Backends) AfterConnect(ctx context.Context, conn *pgx.Conn) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pids == nil {
		b.pids = map[int]bool{}
	}
	b.pids[int(conn.PgConn().PID())] = true
	return nil
}

// CPU returns the summed CPU time of the recorded backends still alive.
func (b *Backends) CPU() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	var total time.Duration
	for pid := range b.pids {
		total += PIDCPU(pid)
	}
	return total
}

// Count returns how many backends were recorded.
func (b *Backends) Count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pids)
}

// SQLStat aggregates the statements of one label.
type SQLStat struct {
	// Calls counts statements, inside batches or not.
	Calls int64
	// RoundTrips counts network round trips: a statement outside a batch is
	// one, a whole batch is one.
	RoundTrips int64
	// Total is the wall time of those round trips as the client saw them
	// (server execution plus the loopback network and pgx).
	Total time.Duration
	// Rows counts rows affected or returned.
	Rows int64
}

// SQLStats is a pgx tracer aggregating every statement and batch by label.
// Set it as ConnConfig.Tracer. Safe for concurrent use.
type SQLStats struct {
	// Classify maps a statement's text to a short label.
	Classify func(sql string) string

	mu      sync.Mutex
	byLabel map[string]*SQLStat

	// labels caches Classify per statement text: the statements are few
	// and repeat, and classifying each call (normalising the text) would
	// make a profiled run spend a large share of its CPU here.
	labels sync.Map // string -> string
}

type queryKey struct{}

type queryStart struct {
	at  time.Time
	sql string
}

type batchKey struct{}

type batchState struct {
	at     time.Time
	labels []string
}

var _ interface {
	pgx.QueryTracer
	pgx.BatchTracer
} = (*SQLStats)(nil)

func (s *SQLStats) label(sql string) string {
	if l, ok := s.labels.Load(sql); ok {
		return l.(string)
	}
	var l string
	if s.Classify != nil {
		l = s.Classify(sql)
	} else {
		l = firstWords(sql, 6)
	}
	s.labels.Store(sql, l)
	return l
}

func (s *SQLStats) record(label string, calls, trips int64, d time.Duration, rows int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byLabel == nil {
		s.byLabel = map[string]*SQLStat{}
	}
	st := s.byLabel[label]
	if st == nil {
		st = &SQLStat{}
		s.byLabel[label] = st
	}
	st.Calls += calls
	st.RoundTrips += trips
	st.Total += d
	st.Rows += rows
}

// Calls returns the statements recorded so far, inside batches or not.
func (s *SQLStats) Calls() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, st := range s.byLabel {
		n += st.Calls
	}
	return n
}

// Reset forgets everything recorded so far (seeding, for instance).
func (s *SQLStats) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byLabel = nil
}

// TraceQueryStart implements pgx.QueryTracer.
func (s *SQLStats) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, queryKey{}, queryStart{at: time.Now(), sql: data.SQL})
}

// TraceQueryEnd implements pgx.QueryTracer.
func (s *SQLStats) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	q, ok := ctx.Value(queryKey{}).(queryStart)
	if !ok {
		return
	}
	s.record(s.label(q.sql), 1, 1, time.Since(q.at), data.CommandTag.RowsAffected())
}

// TraceBatchStart implements pgx.BatchTracer.
func (s *SQLStats) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, batchKey{}, &batchState{at: time.Now()})
}

// TraceBatchQuery implements pgx.BatchTracer.
func (s *SQLStats) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	b, ok := ctx.Value(batchKey{}).(*batchState)
	if !ok {
		return
	}
	label := s.label(data.SQL)
	b.labels = append(b.labels, label)
	s.record(label, 1, 0, 0, data.CommandTag.RowsAffected())
}

// TraceBatchEnd implements pgx.BatchTracer.
func (s *SQLStats) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	b, ok := ctx.Value(batchKey{}).(*batchState)
	if !ok {
		return
	}
	s.record("batch("+strings.Join(b.labels, " + ")+")", 0, 1, time.Since(b.at), 0)
}

// Report writes the statements and batches by total time, with per-event
// figures for events events.
func (s *SQLStats) Report(w io.Writer, events int64) {
	s.mu.Lock()
	type row struct {
		label string
		st    SQLStat
	}
	var rows []row
	var trips int64
	var total time.Duration
	for l, st := range s.byLabel {
		rows = append(rows, row{l, *st})
		trips += st.RoundTrips
		total += st.Total
	}
	s.mu.Unlock()
	slices.SortFunc(rows, func(a, b row) int {
		if a.st.Total != b.st.Total {
			return int(b.st.Total - a.st.Total)
		}
		return int(b.st.Calls - a.st.Calls)
	})
	fmt.Fprintf(w, "SQL seen by the client: %d round trips (%.3f per event), %s connection time in all\n",
		trips, float64(trips)/float64(max(events, 1)), total.Round(time.Millisecond))
	fmt.Fprintf(w, "  %-70s %9s %9s %10s %9s %9s %10s\n", "statement or batch", "calls", "trips", "total", "share", "avg ms", "rows")
	for _, r := range rows {
		avg := 0.0
		if r.st.RoundTrips > 0 {
			avg = float64(r.st.Total) / float64(r.st.RoundTrips) / float64(time.Millisecond)
		}
		share := 0.0
		if total > 0 {
			share = 100 * float64(r.st.Total) / float64(total)
		}
		fmt.Fprintf(w, "  %-70s %9d %9d %10s %8.1f%% %9.2f %10d\n", truncate(r.label, 70), r.st.Calls, r.st.RoundTrips, r.st.Total.Round(time.Millisecond), share, avg, r.st.Rows)
	}
}

func firstWords(sql string, n int) string {
	f := strings.Fields(sql)
	return strings.Join(f[:min(len(f), n)], " ")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// PGSnapshot is a reading of PostgreSQL's cumulative statistics for one
// schema and the whole cluster.
type PGSnapshot struct {
	Tables map[string]TableStat
	WAL    WALStat
	DB     DBStat
}

// TableStat is a table's row of pg_stat_user_tables.
type TableStat struct {
	Ins, Upd, HotUpd, Del, SeqScan, SeqTupRead, IdxScan, IdxTupFetch int64
}

// WALStat is pg_stat_wal.
type WALStat struct {
	Records, FPI, Bytes, Writes, Syncs int64
}

// DBStat is the database's row of pg_stat_database.
type DBStat struct {
	Commits, Rollbacks, BlksRead, BlksHit, TempBytes int64
}

// TakePGSnapshot reads the statistics of the tables in schema, on one
// connection of pool whose statistics snapshot it clears first.
//
// The figures are those the backends published: a PostgreSQL 15 backend
// keeps its counters to itself until a transaction ends at least a second
// after its previous report, or until it has been idle for 10 seconds, or
// until it exits. Make the backends of interest publish first (the
// benchmark has each idle connection call pg_stat_force_next_flush(), whose
// forced report runs before the backend answers).
func TakePGSnapshot(ctx context.Context, pool *pgxpool.Pool, schemas ...string) (PGSnapshot, error) {
	snap := PGSnapshot{Tables: map[string]TableStat{}}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return snap, err
	}
	defer conn.Release()
	// Outside a transaction block each statement reads afresh under the
	// default stats_fetch_consistency (cache); clearing makes it so under
	// any setting.
	if _, err := conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		return snap, err
	}
	rows, err := conn.Query(ctx, `SELECT schemaname || '.' || relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del,
       coalesce(seq_scan, 0), coalesce(seq_tup_read, 0), coalesce(idx_scan, 0), coalesce(idx_tup_fetch, 0)
FROM pg_stat_user_tables WHERE schemaname = ANY($1)`, schemas)
	if err != nil {
		return snap, err
	}
	for rows.Next() {
		var name string
		var t TableStat
		if err := rows.Scan(&name, &t.Ins, &t.Upd, &t.HotUpd, &t.Del, &t.SeqScan, &t.SeqTupRead, &t.IdxScan, &t.IdxTupFetch); err != nil {
			rows.Close()
			return snap, err
		}
		snap.Tables[name] = t
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return snap, err
	}
	err = conn.QueryRow(ctx, `SELECT wal_records, wal_fpi, wal_bytes::bigint, wal_write, wal_sync FROM pg_stat_wal`).
		Scan(&snap.WAL.Records, &snap.WAL.FPI, &snap.WAL.Bytes, &snap.WAL.Writes, &snap.WAL.Syncs)
	if err != nil {
		return snap, err
	}
	err = conn.QueryRow(ctx, `SELECT xact_commit, xact_rollback, blks_read, blks_hit, temp_bytes FROM pg_stat_database WHERE datname = current_database()`).
		Scan(&snap.DB.Commits, &snap.DB.Rollbacks, &snap.DB.BlksRead, &snap.DB.BlksHit, &snap.DB.TempBytes)
	return snap, err
}

// ReportDelta writes what happened between before and after, per event for
// events events. The WAL and database figures are cluster- or
// database-wide: other sessions running at the same time are included.
func ReportDelta(w io.Writer, before, after PGSnapshot, events int64) {
	ev := float64(max(events, 1))
	fmt.Fprintf(w, "PostgreSQL counters (pg_stat_user_tables, per event in parentheses):\n")
	fmt.Fprintf(w, "  %-40s %12s %12s %12s %12s %10s %12s %10s\n", "table", "inserted", "updated", "hot upd", "deleted", "seq scans", "seq rows", "idx scans")
	names := make([]string, 0, len(after.Tables))
	for n := range after.Tables {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		a, b := after.Tables[n], before.Tables[n]
		d := TableStat{a.Ins - b.Ins, a.Upd - b.Upd, a.HotUpd - b.HotUpd, a.Del - b.Del, a.SeqScan - b.SeqScan, a.SeqTupRead - b.SeqTupRead, a.IdxScan - b.IdxScan, a.IdxTupFetch - b.IdxTupFetch}
		if d == (TableStat{}) {
			continue
		}
		fmt.Fprintf(w, "  %-40s %12s %12s %12s %12s %10d %12d %10s\n", truncate(n, 40),
			perEvent(d.Ins, ev), perEvent(d.Upd, ev), perEvent(d.HotUpd, ev), perEvent(d.Del, ev), d.SeqScan, d.SeqTupRead, perEvent(d.IdxScan, ev))
	}
	wal := after.WAL
	wal.Records -= before.WAL.Records
	wal.FPI -= before.WAL.FPI
	wal.Bytes -= before.WAL.Bytes
	wal.Writes -= before.WAL.Writes
	wal.Syncs -= before.WAL.Syncs
	fmt.Fprintf(w, "  WAL (cluster-wide): %d records (%.1f per event), %.1f MiB (%.0f bytes per event), %d full-page images, %d writes, %d syncs\n",
		wal.Records, float64(wal.Records)/ev, float64(wal.Bytes)/(1<<20), float64(wal.Bytes)/ev, wal.FPI, wal.Writes, wal.Syncs)
	db := after.DB
	fmt.Fprintf(w, "  database: %d commits (%.3f per event), %d rollbacks, %d blocks read, %d blocks hit, %d temp bytes\n",
		db.Commits-before.DB.Commits, float64(db.Commits-before.DB.Commits)/ev, db.Rollbacks-before.DB.Rollbacks,
		db.BlksRead-before.DB.BlksRead, db.BlksHit-before.DB.BlksHit, db.TempBytes-before.DB.TempBytes)
}

func perEvent(n int64, ev float64) string {
	return fmt.Sprintf("%d(%.2f)", n, float64(n)/ev)
}

// PIDs returns the recorded backend pids.
func (b *Backends) PIDs() map[int]bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[int]bool, len(b.pids))
	for p := range b.pids {
		out[p] = true
	}
	return out
}

// logEntry matches the first line of a server log entry with the default
// Debian log_line_prefix ("%m [%p] %q%u@%d ").
var logEntry = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \S+ \[(\d+)\] (.*)$`)

var planDuration = regexp.MustCompile(`duration: ([0-9.]+) ms\s+plan:`)

// ReportPlans reads the server log from offset and writes, per statement
// label, how many auto_explain plans of pids were logged, their total
// duration and the slowest one.
func ReportPlans(w io.Writer, path string, offset int64, pids map[int]bool, classify func(string) string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return err
	}
	type plan struct {
		ms   float64
		text string
	}
	type agg struct {
		n       int
		totalMs float64
		slowest plan
	}
	byLabel := map[string]*agg{}
	var cur *strings.Builder
	var curMs float64
	flush := func() {
		if cur == nil {
			return
		}
		text := cur.String()
		query := text
		if i := strings.Index(text, "Query Text:"); i >= 0 {
			query = text[i+len("Query Text:"):]
		}
		label := classify(query)
		a := byLabel[label]
		if a == nil {
			a = &agg{}
			byLabel[label] = a
		}
		a.n++
		a.totalMs += curMs
		if curMs > a.slowest.ms {
			a.slowest = plan{curMs, text}
		}
		cur = nil
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := logEntry.FindStringSubmatch(line); m != nil {
			flush()
			pid, _ := strconv.Atoi(m[1])
			if !pids[pid] {
				continue
			}
			if d := planDuration.FindStringSubmatch(m[2]); d != nil {
				curMs, _ = strconv.ParseFloat(d[1], 64)
				cur = &strings.Builder{}
			}
			continue
		}
		if cur != nil {
			cur.WriteString(line)
			cur.WriteByte('\n')
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		return err
	}
	labels := make([]string, 0, len(byLabel))
	for l := range byLabel {
		labels = append(labels, l)
	}
	slices.SortFunc(labels, func(a, b string) int { return int(byLabel[b].totalMs - byLabel[a].totalMs) })
	fmt.Fprintf(w, "Server-side plans (auto_explain, statements slower than the threshold, actual rows, timing off):\n")
	for _, l := range labels {
		a := byLabel[l]
		fmt.Fprintf(w, "  %-50s %6d plans, %10.0f ms in all, slowest %.0f ms\n", l, a.n, a.totalMs, a.slowest.ms)
	}
	for _, l := range labels {
		a := byLabel[l]
		fmt.Fprintf(w, "\n--- slowest %q (%.0f ms) ---\n%s", l, a.slowest.ms, stripQueryText(a.slowest.text))
	}
	return nil
}

// stripQueryText drops the query text from a logged plan, keeping the plan.
func stripQueryText(text string) string {
	lines := strings.Split(text, "\n")
	var out []string
	inQuery := false
	for _, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(t, "Query Text:"):
			inQuery = true
			continue
		case inQuery && (strings.Contains(l, "  (cost=") || strings.Contains(l, "(actual rows") || strings.HasPrefix(t, "Update on") || strings.HasPrefix(t, "Insert on") || strings.HasPrefix(t, "Delete on")):
			inQuery = false
		case inQuery:
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}
