package faults

import (
	"context"
	"sync"
	"time"

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

// lagMonitor samples the healthy lag of a run: the age of the oldest event
// not yet applied by every perspective, among the streams that hold no
// fault event. Those streams' events are owed nothing by any fault, so
// their lag is what a fault costs good events elsewhere; the delay of a
// fault stream's own later events is checked separately (they must be
// applied, in order).
type lagMonitor struct {
	pool     *pgxpool.Pool
	query    string
	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
	mu       sync.Mutex
	samples  []lagSample
}

func startLagMonitor(ctx context.Context, pool *pgxpool.Pool, schema string) *lagMonitor {
	ctx, cancel := context.WithCancel(ctx)
	m := &lagMonitor{pool: pool, query: lagQuery(schema), cancel: cancel, done: make(chan struct{})}
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

// sample reads the healthy lag once.
func (m *lagMonitor) sample(ctx context.Context) lagSample {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var seconds float64
	err := m.pool.QueryRow(ctx, m.query, Perspectives).Scan(&seconds)
	return lagSample{at: time.Now(), lag: time.Duration(seconds * float64(time.Second)), ok: err == nil}
}

func lagQuery(schema string) string {
	events := pgx.Identifier{schema, "vantage_events"}.Sanitize()
	models := pgx.Identifier{schema, "vantage_models"}.Sanitize()
	return `WITH faulted AS (SELECT DISTINCT stream_id FROM ` + events + ` WHERE data ? 'fault')
SELECT coalesce(extract(epoch FROM now() - min(e.created_at)), 0)::float8
FROM ` + events + ` e
CROSS JOIN unnest($1::text[]) AS p(name)
LEFT JOIN ` + models + ` m ON m.stream_id = e.stream_id AND m.perspective = p.name
WHERE e.version > coalesce(m.last_version, 0)
  AND e.stream_id NOT IN (SELECT stream_id FROM faulted)`
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
