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
//   - sqlGuardBound is the ordering guard as a version bound: a row passes
//     when its version is at most the lowest version of a blocking row;
//   - sqlPrefixEnd ends the prefix a fetch returns: the lowest version of a
//     row not under the caller's live lease.
//
// A statement therefore costs O((pairs + rows it touches) · log n).

// sqlMaxVersion is the version bound that holds nothing back.
const sqlMaxVersion = `9223372036854775807`

// sqlPairHeads returns the recursive CTE name listing the first pending row
// (stream_id, perspective, event_version, instance_id, lease_expiry,
// scheduled_for) of every (stream, perspective) of the streams in streams, a
// table expression with a stream_id column. It is a skip scan over
// vantage_work_pending_idx: one LIMIT 1 probe per pair and one more per
// stream, whatever the backlog. The statement must begin WITH RECURSIVE.
func sqlPairHeads(name, streams string) string {
	const head = `
        SELECT w.stream_id, w.perspective, w.event_version, w.instance_id, w.lease_expiry, w.scheduled_for
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

// sqlBlocking is true when the row r is under another holder's live lease or
// scheduled in the future: the rows the ordering guard waits for. $1 is the
// caller.
func sqlBlocking(r string) string {
	return `((` + r + `.lease_expiry > clock.now AND ` + r + `.instance_id <> $1) OR ` + r + `.scheduled_for > clock.now)`
}

// sqlGuardBound is the ordering guard of the pair whose first pending row is
// p (see sqlPairHeads), for the caller $1 at clock.now, as a version bound:
// a pending row of the pair passes the guard when its version is at most the
// bound, the lowest version of a blocking row (sqlMaxVersion when none).
//
// When the first row blocks, it is the bound. Otherwise three probes find the
// lowest blocking row: a row scheduled in the future is unleased
// (vantage_work_schedule_check), so it is the first such row of
// vantage_work_stream_unleased_idx, reached past the unleased rows below it
// (which the caller may lease); rows under another holder's live lease are
// in the holder ranges below and above $1 (see sqlMinLeased), so the rows
// the caller holds itself are never read.
var sqlGuardBound = `CASE WHEN ` + sqlBlocking("p") + ` THEN p.event_version ELSE coalesce(least(
        ` + sqlMinUnleased(" AND b.scheduled_for > clock.now") + `,
        ` + sqlMinLeased("<", "> clock.now") + `,
        ` + sqlMinLeased(">", "> clock.now") + `
    ), ` + sqlMaxVersion + `) END`

// sqlMine is true when the row r is under the caller's ($1) live lease and
// not scheduled in the future: a row a fetch returns.
func sqlMine(r string) string {
	return `coalesce(` + r + `.instance_id = $1 AND ` + r + `.lease_expiry > clock.now
             AND (` + r + `.scheduled_for IS NULL OR ` + r + `.scheduled_for <= clock.now), false)`
}

// sqlPrefixEnd is the version that ends the prefix a fetch by the caller $1
// returns from the pair whose first pending row is p: the lowest version of a
// pending row that is not the caller's (see sqlMine), sqlMaxVersion when
// every row is. When the first row is not the caller's, it ends the prefix at
// once. Otherwise four probes find the lowest unleased row (rows scheduled in
// the future are among them), the lowest row held by another instance (on
// either side of $1) and the lowest row whose lease the caller let expire;
// none reads the caller's live rows.
var sqlPrefixEnd = `CASE WHEN NOT ` + sqlMine("p") + ` THEN p.event_version ELSE coalesce(least(
        ` + sqlMinUnleased("") + `,
        ` + sqlMinLeased("<", "IS NOT NULL") + `,
        ` + sqlMinLeased(">", "IS NOT NULL") + `,
        ` + sqlMinLeased("=", "<= clock.now") + `
    ), ` + sqlMaxVersion + `) END`

// sqlMinUnleased is the lowest version of an unleased pending row of the
// pair p that also satisfies cond (an AND term, or empty), in version order
// through vantage_work_stream_unleased_idx.
func sqlMinUnleased(cond string) string {
	return `(SELECT min(b.event_version) FROM /* SCHEMA */.vantage_work b
         WHERE b.stream_id = p.stream_id AND b.perspective = p.perspective AND b.processed_at IS NULL
           AND b.instance_id IS NULL` + cond + `)`
}

// sqlMinLeased is the lowest version of a row of the pair p leased to an
// instance whose id compares to the caller's ($1) by op, with a lease expiry
// that satisfies expiry: one range of vantage_work_stream_leased_idx. A
// leased row is always pending (vantage_work_processed_check), so the probe
// tests no processed_at: that keeps it off vantage_work_pending_idx, where
// the planner would turn the min into a walk of the pair in version order
// that stops at the first match and, when nothing matches, reads every row
// of the pair.
func sqlMinLeased(op, expiry string) string {
	return `(SELECT min(b.event_version) FROM /* SCHEMA */.vantage_work b
         WHERE b.stream_id = p.stream_id AND b.perspective = p.perspective
           AND b.instance_id ` + op + ` $1 AND b.lease_expiry ` + expiry + `)`
}
