package postgres

// Per-pair SQL building blocks.
//
// The pending rows of a (stream, perspective) are a queue in version order.
// No statement compares each row with the rows before it: a correlated
// "no earlier blocking row" test per row costs O(n²) in a pair's backlog
// (a claim of one stream with 10,000 pending rows took tens of seconds).
// Instead a statement finds, per pair, the few rows that decide what it may
// take, with bounded index probes, and then reads exactly the rows it returns
// or changes, through a range scan up to a version bound:
//
//   - sqlPairHeads lists the pairs of some streams with their first pending
//     rows (a skip scan, one probe per pair);
//   - sqlPrefixEnd ends the prefix a fetch returns: the lowest version of a
//     row scheduled in the future (one probe of vantage_work_scheduled_idx).
//
// Leases are per stream (vantage_active_streams), so nothing a pair's rows
// carry decides who may take them: only retry times do.
//
// A statement therefore costs O((pairs + rows it touches) · log n).

// sqlMaxVersion is the version bound that holds nothing back.
const sqlMaxVersion = `9223372036854775807`

// sqlPairHeads returns the recursive CTE name listing the first pending row
// (stream_id, perspective, event_version, scheduled_for) of every (stream,
// perspective) of the streams in streams, a table expression with a
// stream_id column. It is a skip scan over vantage_work_pending_idx: one
// LIMIT 1 probe per pair and one more per stream, whatever the backlog. The
// statement must begin WITH RECURSIVE.
func sqlPairHeads(name, streams string) string {
	const head = `
        SELECT w.stream_id, w.perspective, w.event_version, w.scheduled_for
        FROM /* SCHEMA */.vantage_work w`
	return name + ` AS (
    SELECT f.*
    FROM ` + streams + ` s
    CROSS JOIN LATERAL (` + head + `
        WHERE w.stream_id = s.stream_id AND w.processed_at IS NULL
        ORDER BY w.perspective, w.event_version
        LIMIT 1
    ) f
    UNION ALL
    SELECT f.*
    FROM ` + name + ` p
    CROSS JOIN LATERAL (` + head + `
        WHERE w.stream_id = p.stream_id AND w.perspective > p.perspective AND w.processed_at IS NULL
        ORDER BY w.perspective, w.event_version
        LIMIT 1
    ) f
)`
}

// sqlPrefixEnd is the version that ends the prefix a fetch returns from the
// pair whose first pending row is p: the lowest version of a pending row
// scheduled in the future, sqlMaxVersion when there is none. When the first
// row waits, it ends the prefix at once. Otherwise one probe of
// vantage_work_scheduled_idx finds it: a row with a retry time is pending
// (vantage_work_scheduled_check), and the probe's condition implies that
// index's predicate and not that of vantage_work_pending_idx, so it never
// walks the pair's rows in version order.
var sqlPrefixEnd = `CASE WHEN p.scheduled_for > clock.now THEN p.event_version ELSE coalesce(
        (SELECT min(b.event_version) FROM /* SCHEMA */.vantage_work b
         WHERE b.stream_id = p.stream_id AND b.perspective = p.perspective AND b.scheduled_for > clock.now),
        ` + sqlMaxVersion + `) END`
