package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The soak's statement costs: at the end of each sample interval the soak
// reads pg_stat_statements, one query, and keeps what the statements of
// most execution time cost since the previous reading, so that a latency
// that drifts can be traced to the statement that got slower. The figures
// are the server's execution time (total_exec_time) of top-level
// statements, a function's statements counted in the statement calling
// it: from the start of the execution to its end in the backend, lock
// waits included. Parsing and planning are not in it, nor the round trip
// or the wait for a connection, nor the commit of a statement run in a
// transaction of its own, where synchronous_commit waits for the WAL
// flush. The figures count every session of the database, the soak's
// sampling included.

const (
	// soakTopStatements is the number of statements each sample keeps:
	// those of most execution time in its interval.
	soakTopStatements = 5
	// soakLabelMax is the length of the longest statement label, in
	// characters.
	soakLabelMax = 60
)

// soakStatement is what the statements of one label cost in a sample
// interval, from pg_stat_statements.
type soakStatement struct {
	// Label names the statement (statementLabel): the start of its
	// normalised text, or the names of its common table expressions and
	// the start of its main statement.
	Label string `json:"label"`
	Calls int64  `json:"calls"`
	// TotalMs is the execution time of the interval's calls
	// (total_exec_time), MeanMs that per call.
	TotalMs float64 `json:"total_ms"`
	MeanMs  float64 `json:"mean_ms"`
	Rows    int64   `json:"rows"`
}

// statementReading is a statement's cumulative figures in
// pg_stat_statements.
type statementReading struct {
	label  string
	calls  int64
	execMs float64
	rows   int64
}

// readStatements reads pg_stat_statements for the current database, by
// queryid (whatever the user).
func readStatements(ctx context.Context, pool *pgxpool.Pool, schema string) (map[int64]statementReading, error) {
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := pool.Query(qctx, `SELECT queryid, min(query), sum(calls)::bigint, sum(total_exec_time), sum(rows)::bigint
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND queryid IS NOT NULL
GROUP BY queryid`)
	if err != nil {
		return nil, fmt.Errorf("reading pg_stat_statements: %w", err)
	}
	defer rows.Close()
	out := map[int64]statementReading{}
	for rows.Next() {
		var id int64
		var query string
		var r statementReading
		if err := rows.Scan(&id, &query, &r.calls, &r.execMs, &r.rows); err != nil {
			return nil, fmt.Errorf("reading pg_stat_statements: %w", err)
		}
		r.label = statementLabel(query, schema)
		out[id] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading pg_stat_statements: %w", err)
	}
	return out, nil
}

// statementLabel labels a statement of pg_stat_statements by its
// whitespace-collapsed text, without the run's schema (which differs from
// run to run) and leading comment lines, cut to soakLabelMax characters. The labels of the SQL
// report (classifySQL) are not used: they match on constants, which
// pg_stat_statements shows as $n, and their fallback, the first words,
// would give one label to the engine's many statements that start with
// the same common table expression. A statement with common table
// expressions is labelled by their names and the first words of its main
// statement instead, which tells those apart: "WITH clock, live, held:
// SELECT ...".
func statementLabel(query, schema string) string {
	if schema != "" {
		query = strings.ReplaceAll(query, quoted(schema)+".", "")
	}
	// Leading comment lines (a migration's, say) would fill the label.
	query = strings.TrimSpace(query)
	for strings.HasPrefix(query, "--") {
		_, query, _ = strings.Cut(query, "\n")
		query = strings.TrimSpace(query)
	}
	text := strings.Join(strings.Fields(query), " ")
	if names, main, ok := splitWith(text); ok {
		text = "WITH " + strings.Join(names, ", ") + ": " + main
	}
	if r := []rune(text); len(r) > soakLabelMax {
		text = string(r[:soakLabelMax-1]) + "…"
	}
	return text
}

// splitWith splits a statement that starts with WITH into the names of its
// common table expressions and its main statement; ok is false for any
// other statement, or one it cannot follow.
func splitWith(text string) (names []string, main string, ok bool) {
	rest, found := cutPrefixFold(text, "WITH ")
	if !found {
		return nil, "", false
	}
	rest, _ = cutPrefixFold(rest, "RECURSIVE ")
	for {
		// name [(columns)] AS [[NOT] MATERIALIZED] (query)
		i := strings.IndexAny(rest, " (")
		if i <= 0 {
			return nil, "", false
		}
		names = append(names, rest[:i])
		rest = strings.TrimLeft(rest[i:], " ")
		if strings.HasPrefix(rest, "(") {
			if rest, ok = skipParens(rest); !ok {
				return nil, "", false
			}
			rest = strings.TrimLeft(rest, " ")
		}
		if rest, ok = cutPrefixFold(rest, "AS "); !ok {
			return nil, "", false
		}
		rest, _ = cutPrefixFold(rest, "NOT ")
		rest, _ = cutPrefixFold(rest, "MATERIALIZED ")
		if rest, ok = skipParens(rest); !ok {
			return nil, "", false
		}
		rest = strings.TrimLeft(rest, " ")
		if r, more := strings.CutPrefix(rest, ","); more {
			rest = strings.TrimLeft(r, " ")
			continue
		}
		return names, rest, rest != ""
	}
}

// skipParens returns what follows the parenthesised group text starts
// with, nested groups and quoted strings and identifiers included.
func skipParens(text string) (string, bool) {
	if !strings.HasPrefix(text, "(") {
		return "", false
	}
	depth := 0
	var quote byte
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				return text[i+1:], true
			}
		}
	}
	return "", false
}

// cutPrefixFold is strings.CutPrefix ignoring ASCII case.
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

// topStatements returns what the statements cost between readings prev and
// cur, by label, the n labels of most execution time first. A statement
// with fewer calls in cur than in prev, or missing from prev, was evicted
// or reset in between: all of cur counts.
func topStatements(prev, cur map[int64]statementReading, n int) []soakStatement {
	byLabel := map[string]*soakStatement{}
	for id, c := range cur {
		d := c
		if p, ok := prev[id]; ok && c.calls >= p.calls && c.execMs >= p.execMs {
			d.calls, d.execMs, d.rows = c.calls-p.calls, c.execMs-p.execMs, c.rows-p.rows
		}
		if d.calls == 0 {
			continue
		}
		st := byLabel[c.label]
		if st == nil {
			st = &soakStatement{Label: c.label}
			byLabel[c.label] = st
		}
		st.Calls += d.calls
		st.TotalMs += d.execMs
		st.Rows += d.rows
	}
	out := make([]soakStatement, 0, len(byLabel))
	for _, st := range byLabel {
		st.MeanMs = st.TotalMs / float64(st.Calls)
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b soakStatement) int {
		return cmp.Or(cmp.Compare(b.TotalMs, a.TotalMs), cmp.Compare(a.Label, b.Label))
	})
	return out[:min(len(out), n)]
}

// statementWindow adds up a statement label's figures over the samples of
// a window that had it in their top.
type statementWindow struct {
	Samples int
	Calls   int64
	TotalMs float64
}

func (w *statementWindow) add(st soakStatement) {
	w.Samples++
	w.Calls += st.Calls
	w.TotalMs += st.TotalMs
}

// MeanMs is the window's execution time per call, 0 without a call.
func (w statementWindow) MeanMs() float64 {
	if w.Calls == 0 {
		return 0
	}
	return w.TotalMs / float64(w.Calls)
}

// statementTrend is a statement label's cost in the first and the last
// verdict windows, and over the whole run.
type statementTrend struct {
	Label            string
	First, Last, Run statementWindow
}

// statementTrends returns, for every label in the top of any sample, its
// figures in the first w samples, the last w and all of them; the labels
// of most execution time in the last window first, then in the run.
func statementTrends(samples []soakSample, w int) []statementTrend {
	n := len(samples)
	byLabel := map[string]*statementTrend{}
	for i, smp := range samples {
		for _, st := range smp.Statements {
			t := byLabel[st.Label]
			if t == nil {
				t = &statementTrend{Label: st.Label}
				byLabel[st.Label] = t
			}
			t.Run.add(st)
			if i < w {
				t.First.add(st)
			}
			if i >= n-w {
				t.Last.add(st)
			}
		}
	}
	out := make([]statementTrend, 0, len(byLabel))
	for _, t := range byLabel {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b statementTrend) int {
		return cmp.Or(cmp.Compare(b.Last.TotalMs, a.Last.TotalMs), cmp.Compare(b.Run.TotalMs, a.Run.TotalMs), cmp.Compare(a.Label, b.Label))
	})
	return out
}

// printStatements writes, per statement label in the top of any sample,
// its calls and mean execution time in the first and the last verdict
// windows, and the ratio of the means.
func printStatements(w io.Writer, f *soakFigures) {
	if f.StatementsError != "" {
		fmt.Fprintf(w, "statements: unavailable: %s\n", f.StatementsError)
		return
	}
	n := len(f.Samples)
	if n == 0 || f.Window < 1 || f.Window > n {
		return
	}
	trends := statementTrends(f.Samples, f.Window)
	if len(trends) == 0 {
		fmt.Fprintln(w, "statements: none recorded")
		return
	}
	fmt.Fprintf(w, "statements (pg_stat_statements: execution time in the server; each sample keeps its top %d by total time)\n", soakTopStatements)
	fmt.Fprintf(w, "first = %s, last = %s, run = %s; in = the samples of the window with the statement in their top, calls and ms (mean per call) over those\n",
		span(1, f.Window), span(n-f.Window+1, n), span(1, n))
	fmt.Fprintf(w, "  %-*s %8s %11s %8s %7s %10s %8s %7s %7s %8s\n", soakLabelMax, "statement",
		"first_in", "first_calls", "first_ms", "last_in", "last_calls", "last_ms", "last/1st", "run_in", "run_ms")
	for _, t := range trends {
		ratio := "-"
		if t.First.Calls > 0 && t.Last.Calls > 0 && t.First.MeanMs() > 0 {
			ratio = fmt.Sprintf("%.2fx", t.Last.MeanMs()/t.First.MeanMs())
		}
		fmt.Fprintf(w, "  %-*s %8d %11d %8s %7d %10d %8s %7s %7d %8s\n", soakLabelMax, t.Label,
			t.First.Samples, t.First.Calls, meanMs(t.First), t.Last.Samples, t.Last.Calls, meanMs(t.Last), ratio, t.Run.Samples, meanMs(t.Run))
	}
}

func meanMs(w statementWindow) string {
	if w.Calls == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", w.MeanMs())
}
