package logtest

import (
	"context"
	"log/slog"
	"sync"
)

// Records is a slog.Handler that keeps the records it is given, for tests
// that read a line's level, message and typed attributes.
type Records struct {
	mu      sync.Mutex
	records []slog.Record
}

// Enabled reports true: every level is kept.
func (r *Records) Enabled(context.Context, slog.Level) bool { return true }

// WithAttrs returns r: attributes added by With are not kept.
func (r *Records) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup returns r: groups are not kept.
func (r *Records) WithGroup(string) slog.Handler { return r }

// Handle keeps a copy of rec.
func (r *Records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}

// Lines returns "LEVEL message" of every record so far.
func (r *Records) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.records))
	for i, rec := range r.records {
		out[i] = rec.Level.String() + " " + rec.Message
	}
	return out
}

// Attr returns the value of the attribute key of the i-th record, the zero
// Value when it has none.
func (r *Records) Attr(i int, key string) slog.Value {
	r.mu.Lock()
	defer r.mu.Unlock()
	var v slog.Value
	r.records[i].Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}
