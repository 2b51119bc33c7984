package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lagEvery is the lag monitor's sampling period.
const lagEvery = 200 * time.Millisecond

// lagSample is one reading of the healthy lag.
type lagSample struct {
	at  time.Time
	lag time.Duration
	ok  bool // false when the database did not answer (an outage)
}

// lagCulprit describes the event behind the largest healthy lag read, and
// its stream's work at that time, for the recovery finding.
type lagCulprit struct {
	lag    time.Duration
	detail string
}

// lagMonitor samples the healthy lag of a run: the age of the oldest event
// not yet applied by every perspective, among the streams that hold no
// fault event. Those streams' events are owed nothing by any fault, so
// their lag is what a fault costs good events elsewhere; the delay of a
// fault stream's own later events is checked separately (they must be
// applied, in order).
type lagMonitor struct {
	pool      *pgxpool.Pool
	schema    string
	query     string
	threshold time.Duration
	cancel    context.CancelFunc
	done      chan struct{}
	stopOnce  sync.Once
	mu        sync.Mutex
	samples   []lagSample
	culprit   lagCulprit
}

func startLagMonitor(ctx context.Context, pool *pgxpool.Pool, schema string, threshold time.Duration) *lagMonitor {
	ctx, cancel := context.WithCancel(ctx)
	m := &lagMonitor{pool: pool, schema: schema, query: lagQuery(schema), threshold: threshold, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		ticker := time.NewTicker(lagEvery)
		defer ticker.Stop()
		for {
			s := m.sample(ctx)
			if ctx.Err() != nil {
				return
			}
			m.mu.Lock()
			m.samples = append(m.samples, s)
			m.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	return m
}

// sample reads the healthy lag once; above the threshold, and above the
// worst lag seen so far, it also notes the event behind it and its
// stream's work.
func (m *lagMonitor) sample(ctx context.Context) lagSample {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var (
		seconds     float64
		stream      *uuid.UUID
		version     *int64
		perspective *string
	)
	err := m.pool.QueryRow(ctx, m.query, Perspectives).Scan(&seconds, &stream, &version, &perspective)
	s := lagSample{at: time.Now(), lag: time.Duration(seconds * float64(time.Second)), ok: err == nil}
	m.mu.Lock()
	worse := s.ok && s.lag > m.threshold && s.lag > m.culprit.lag && stream != nil
	m.mu.Unlock()
	if worse {
		detail := fmt.Sprintf("the oldest unapplied event: stream %s version %d (%s); %s",
			*stream, *version, *perspective, describeStream(ctx, m.pool, m.schema, *stream))
		m.mu.Lock()
		m.culprit = lagCulprit{lag: s.lag, detail: detail}
		m.mu.Unlock()
	}
	return s
}

// worst returns the description of the event behind the largest lag read
// above the threshold, empty when none was.
func (m *lagMonitor) worst() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.culprit.detail
}

func lagQuery(schema string) string {
	events := pgx.Identifier{schema, "vantage_events"}.Sanitize()
	models := pgx.Identifier{schema, "vantage_models"}.Sanitize()
	return `WITH faulted AS (SELECT DISTINCT stream_id FROM ` + events + ` WHERE data ? 'fault'),
late AS (
    SELECT e.created_at, e.stream_id, e.version, p.name
    FROM ` + events + ` e
    CROSS JOIN unnest($1::text[]) AS p(name)
    LEFT JOIN ` + models + ` m ON m.stream_id = e.stream_id AND m.perspective = p.name
    WHERE e.version > coalesce(m.last_version, 0)
      AND e.stream_id NOT IN (SELECT stream_id FROM faulted)
    ORDER BY e.created_at
    LIMIT 1
)
SELECT coalesce((SELECT extract(epoch FROM now() - created_at) FROM late), 0)::float8,
       (SELECT stream_id FROM late), (SELECT version FROM late), (SELECT name FROM late)`
}

// describeStream lists a stream's lease (its holder, the lease's time
// left) and its first pending work rows (retry time, attempts), for a
// finding. Leases are held per stream (vantage_active_streams), not per
// row.
func describeStream(ctx context.Context, pool *pgxpool.Pool, schema string, stream uuid.UUID) string {
	var (
		holder string
		lease  float64
	)
	err := pool.QueryRow(ctx, `SELECT coalesce(a.instance_id::text, '-'), coalesce(extract(epoch FROM a.lease_expiry - now())::float8, 0)
		FROM `+pgx.Identifier{schema, "vantage_active_streams"}.Sanitize()+` a WHERE a.stream_id = $1`, stream).Scan(&holder, &lease)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		holder = "-"
	case err != nil:
		return "reading its lease: " + err.Error()
	}
	rows, err := pool.Query(ctx, `SELECT w.perspective, w.event_version,
		coalesce(extract(epoch FROM w.scheduled_for - now())::float8, 0), w.attempts
		FROM `+pgx.Identifier{schema, "vantage_work"}.Sanitize()+` w
		WHERE w.stream_id = $1 AND w.processed_at IS NULL
		ORDER BY w.perspective, w.event_version
		LIMIT 6`, stream)
	if err != nil {
		return "reading its work: " + err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "stream leased to %s (%.1fs left); pending:", holder, lease)
	n := 0
	for rows.Next() {
		var (
			perspective string
			version     int64
			retry       float64
			attempts    int
		)
		if err := rows.Scan(&perspective, &version, &retry, &attempts); err != nil {
			return "reading its work: " + err.Error()
		}
		n++
		fmt.Fprintf(&b, " [%s v%d, retry in %.1fs, attempts %d]", perspective, version, retry, attempts)
	}
	if err := rows.Err(); err != nil {
		return "reading its work: " + err.Error()
	}
	if n == 0 {
		return "no pending work (applied since)"
	}
	return b.String()
}

// last returns the latest sample, and false before the first.
func (m *lagMonitor) last() (lagSample, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.samples) == 0 {
		return lagSample{}, false
	}
	return m.samples[len(m.samples)-1], true
}

// stop ends the sampling and returns the samples, the last one read now:
// the periodic one may predate the end of the run by a period. Idempotent.
func (m *lagMonitor) stop() []lagSample {
	m.stopOnce.Do(func() {
		m.cancel()
		<-m.done
		s := m.sample(context.Background())
		m.mu.Lock()
		m.samples = append(m.samples, s)
		m.mu.Unlock()
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.samples
}

// recovery returns how long after t0 the healthy lag stayed above
// threshold, or could not be read: from t0 to the first sample after the
// last bad one. It is 0 when no sample from t0 on was bad, and ok is false
// when the last sample was bad (never recovered). peak is the largest lag
// read from t0 on.
func recovery(samples []lagSample, t0 time.Time, threshold time.Duration) (d, peak time.Duration, ok bool) {
	lastBad := -1
	for i, s := range samples {
		if s.at.Before(t0) {
			continue
		}
		peak = max(peak, s.lag)
		if !s.ok || s.lag > threshold {
			lastBad = i
		}
	}
	switch {
	case lastBad < 0:
		return 0, peak, true
	case lastBad == len(samples)-1:
		return samples[lastBad].at.Sub(t0), peak, false
	default:
		return samples[lastBad+1].at.Sub(t0), peak, true
	}
}
