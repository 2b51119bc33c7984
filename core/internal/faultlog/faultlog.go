// Package faultlog logs the failures of the engine's background operations
// once, sums up their repeats, and tells their recovery.
package faultlog

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vantage-go/vantage/ports"
)

// SummaryEvery is the least time between two log lines about the same
// failing operation.
const SummaryEvery = 10 * time.Second

// Log tells the failures of a background operation once: the first
// failure is logged (at Warn when the backend called it transient, else at
// Error), repeats within SummaryEvery are counted, not logged, and at
// most one line per SummaryEvery sums them up with the latest error.
// The first success after failures is logged at Info with how long the
// operation failed and how often. A database outage of ten seconds thus
// costs a few lines per operation, not one per claim tick.
//
// Conditions that are no failure of an operation but may recur as often
// (a batch given up on, work of an unknown perspective skipped) are logged
// by Recur, at most once per interval, with a count.
type Log struct {
	log   *slog.Logger
	clock ports.Clock
	// failing counts the operations failing now, so that ok costs one
	// atomic load on the paths that succeed.
	failing atomic.Int32

	mu     sync.Mutex
	ops    map[string]*faultState
	recurs map[string]*recurState
}

type faultState struct {
	since    time.Time // first failure
	told     time.Time // last line logged
	failures int       // since the first failure
	untold   int       // since the last line logged
}

// New returns a Log that writes to log, timed by clock.
func New(log *slog.Logger, clock ports.Clock) *Log {
	return &Log{log: log, clock: clock, ops: map[string]*faultState{}, recurs: map[string]*recurState{}}
}

// Fail records a failure of op, logging it when it is the first or a
// summary is due. attrs are added to the line.
func (f *Log) Fail(ctx context.Context, op string, err error, attrs ...any) {
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
	tell := !ok || now.Sub(st.told) >= SummaryEvery
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

// OK records a success of op, logging the recovery when it failed before,
// preceded by what the recurrences tied to op (see Recurrence.Op) counted
// since their last line.
func (f *Log) OK(ctx context.Context, op string, attrs ...any) {
	if f.failing.Load() == 0 {
		return
	}
	f.mu.Lock()
	st, failed := f.ops[op]
	var untold []untoldRecurrence
	if failed {
		delete(f.ops, op)
		f.failing.Add(-1)
		untold = f.untoldLocked(op, f.clock.Now())
	}
	f.mu.Unlock()
	if !failed {
		return
	}
	for _, u := range untold {
		f.log.Log(ctx, u.level, u.msg, u.attrs...)
	}
	f.log.InfoContext(ctx, op+" recovered", append(attrs,
		slog.Int("failures", st.failures), slog.Duration("failed_for", f.clock.Now().Sub(st.since)))...)
}

// Recurrence is a condition that may recur many times a second, logged by
// Log.Recur at most once per Every.
type Recurrence struct {
	Key      string // names the condition: one count per key
	Every    time.Duration
	Level    slog.Level
	Msg      string
	CountKey string // the attribute that carries the summed counts
	// Op, when set, is the operation whose failures cause the condition:
	// its recovery tells what was counted since the last line, which no
	// later occurrence will.
	Op string
}

type recurState struct {
	r           Recurrence
	told        time.Time // last line logged
	count       int       // sum of n since told
	occurrences int       // since told
	attrs       []any     // of the latest occurrence
}

// untoldRecurrence is a line OK logs for a recurrence it ends.
type untoldRecurrence struct {
	level slog.Level
	msg   string
	attrs []any
}

// Recur records an occurrence of r that counts n (events, items), and logs
// r.Msg when it is the first of its key or every passed since the previous
// line. A line carries, as r.CountKey, the sum of n over the occurrences
// it stands for (those since the previous line, its own included) and how
// many they were ("occurrences"), with attrs of the latest. Occurrences
// counted after the last line are told with the next one, or when r.Op
// recovers; a condition that stops recurring without either keeps them
// untold.
func (f *Log) Recur(ctx context.Context, r Recurrence, n int, attrs ...any) {
	now := f.clock.Now()
	f.mu.Lock()
	st, ok := f.recurs[r.Key]
	if !ok {
		st = &recurState{r: r}
		f.recurs[r.Key] = st
	}
	st.count += n
	st.occurrences++
	st.attrs = attrs
	tell := !ok || now.Sub(st.told) >= r.Every
	count, occurrences := st.count, st.occurrences
	if tell {
		st.told, st.count, st.occurrences, st.attrs = now, 0, 0, nil
	}
	f.mu.Unlock()
	if tell {
		f.log.Log(ctx, r.Level, r.Msg, append(attrs, slog.Int(r.CountKey, count), slog.Int("occurrences", occurrences))...)
	}
}

// untoldLocked returns the lines of the recurrences tied to op that
// counted occurrences since their last line, and resets them. The caller
// holds f.mu.
func (f *Log) untoldLocked(op string, now time.Time) []untoldRecurrence {
	var out []untoldRecurrence
	for _, st := range f.recurs {
		if st.r.Op != op || st.occurrences == 0 {
			continue
		}
		out = append(out, untoldRecurrence{level: st.r.Level, msg: st.r.Msg, attrs: append(st.attrs,
			slog.Int(st.r.CountKey, st.count), slog.Int("occurrences", st.occurrences))})
		st.told, st.count, st.occurrences, st.attrs = now, 0, 0, nil
	}
	return out
}
