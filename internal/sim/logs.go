package sim

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
)

// logRing keeps the engine's latest warnings and errors of a run, to print
// with a failing seed.
type logRing struct {
	mu    sync.Mutex
	lines []string
	next  int
	full  bool
}

func newLogRing(n int) *logRing { return &logRing{lines: make([]string, n)} }

func (r *logRing) add(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines[r.next] = line
	r.next = (r.next + 1) % len(r.lines)
	if r.next == 0 {
		r.full = true
	}
}

func (r *logRing) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	if r.full {
		out = append(out, r.lines[r.next:]...)
	}
	out = append(out, r.lines[:r.next]...)
	return strings.Join(out, "")
}

// handler returns a slog handler that writes the records at Warn and above
// to the ring, one line each.
func (r *logRing) handler() slog.Handler {
	return &ringHandler{ring: r, level: slog.LevelWarn}
}

type ringHandler struct {
	ring  *logRing
	level slog.Level
	attrs []slog.Attr
	group string
}

func (h *ringHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *ringHandler) Handle(ctx context.Context, rec slog.Record) error {
	var buf bytes.Buffer
	th := slog.Handler(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: h.level}))
	th = th.WithAttrs(h.attrs)
	if h.group != "" {
		th = th.WithGroup(h.group)
	}
	if err := th.Handle(ctx, rec); err != nil {
		return err
	}
	h.ring.add(buf.String())
	return nil
}

func (h *ringHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

func (h *ringHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.group = name
	return &c
}
