package core

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vantage-go/vantage/ports"
)

// faultSummaryEvery is the least time between two log lines about the same
// failing operation.
const faultSummaryEvery = 10 * time.Second

// faultLog tells the failures of a background operation once: the first
// failure is logged (at Warn when the backend called it transient, else at
// Error), repeats within faultSummaryEvery are counted, not logged, and at
// most one line per faultSummaryEvery sums them up with the latest error.
// The first success after failures is logged at Info with how long the
// operation failed and how often. A database outage of ten seconds thus
// costs a few lines per operation, not one per claim tick.
type faultLog struct {
	log   *slog.Logger
	clock ports.Clock
	// failing counts the operations failing now, so that ok costs one
	// atomic load on the paths that succeed.
	failing atomic.Int32

	mu  sync.Mutex
	ops map[string]*faultState
}

type faultState struct {
	since    time.Time // first failure
	told     time.Time // last line logged
	failures int       // since the first failure
	untold   int       // since the last line logged
}

func newFaultLog(log *slog.Logger, clock ports.Clock) *faultLog {
	return &faultLog{log: log, clock: clock, ops: map[string]*faultState{}}
}

// fail records a failure of op, logging it when it is the first or a
// summary is due. attrs are added to the line.
func (f *faultLog) fail(ctx context.Context, op string, err error, attrs ...any) {
	now := f.clock.Now()
	f.mu.Lock()
	st, ok := f.ops[op]
	if !ok {
		st = &faultState{since: now}
		f.ops[op] = st
		f.failing.Add(1)
	}
	st.failures++
	st.untold++
	tell := !ok || now.Sub(st.told) >= faultSummaryEvery
	untold, failures, since := st.untold, st.failures, st.since
	if tell {
		st.told, st.untold = now, 0
	}
	f.mu.Unlock()
	if !tell {
		return
	}
	level := slog.LevelError
	if errors.Is(err, ports.ErrTransient) {
		level = slog.LevelWarn
	}
	if !ok {
		f.log.Log(ctx, level, op+" failed; retrying", append(attrs, slog.Any("error", err))...)
		return
	}
	f.log.Log(ctx, level, op+" still failing; retrying", append(attrs,
		slog.Int("failures", failures), slog.Int("since_last_log", untold),
		slog.Duration("failing_for", now.Sub(since)), slog.Any("error", err))...)
}

// ok records a success of op, logging the recovery when it failed before.
func (f *faultLog) ok(ctx context.Context, op string, attrs ...any) {
	if f.failing.Load() == 0 {
		return
	}
	f.mu.Lock()
	st, failed := f.ops[op]
	if failed {
		delete(f.ops, op)
		f.failing.Add(-1)
	}
	f.mu.Unlock()
	if failed {
		f.log.InfoContext(ctx, op+" recovered", append(attrs,
			slog.Int("failures", st.failures), slog.Duration("failed_for", f.clock.Now().Sub(st.since)))...)
	}
}
