// Package logtest captures the JSON lines of a slog logger for tests and
// reads them back as a log pipeline would: one JSON object per line, each
// key once.
package logtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// JSON keeps what a slog JSON handler writes. Safe for concurrent use.
type JSON struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	added chan struct{} // a buffer of one: something was written
}

// NewJSON returns a logger writing JSON lines at level and above, and the
// JSON that keeps them.
func NewJSON(level slog.Leveler) (*slog.Logger, *JSON) {
	j := &JSON{added: make(chan struct{}, 1)}
	return slog.New(slog.NewJSONHandler(j, &slog.HandlerOptions{Level: level})), j
}

// Write implements io.Writer for the handler.
func (j *JSON) Write(p []byte) (int, error) {
	j.mu.Lock()
	n, err := j.buf.Write(p)
	j.mu.Unlock()
	select {
	case j.added <- struct{}{}:
	default:
	}
	return n, err
}

// Line is one decoded log line.
type Line map[string]any

// Level returns the line's level ("INFO", "WARN" ...).
func (l Line) Level() string { s, _ := l[slog.LevelKey].(string); return s }

// Msg returns the line's message.
func (l Line) Msg() string { s, _ := l[slog.MessageKey].(string); return s }

// Lines decodes every line written so far. A line that is not a JSON
// object, or that holds a key twice in one object, fails the test: a log
// pipeline keeps one of the two values, or rejects the line.
func (j *JSON) Lines(t testing.TB) []Line {
	t.Helper()
	j.mu.Lock()
	raw := bytes.Clone(j.buf.Bytes())
	j.mu.Unlock()
	var out []Line
	for line := range bytes.Lines(raw) {
		if err := UniqueKeys(line); err != nil {
			t.Fatalf("log line %s: %v", line, err)
		}
		var l Line
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("log line %s: %v", line, err)
		}
		out = append(out, l)
	}
	return out
}

// WaitFor waits until the lines written satisfy done, failing the test
// after timeout.
func (j *JSON) WaitFor(t testing.TB, what string, timeout time.Duration, done func([]Line) bool) {
	t.Helper()
	deadline := time.After(timeout)
	for !done(j.Lines(t)) {
		select {
		case <-j.added:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// WithMsg returns the lines whose message is msg.
func WithMsg(lines []Line, msg string) []Line {
	var out []Line
	for _, l := range lines {
		if l.Msg() == msg {
			out = append(out, l)
		}
	}
	return out
}

// UniqueKeys reports the first key that appears twice in one object of the
// JSON value in line.
func UniqueKeys(line []byte) error {
	return uniqueKeys(json.NewDecoder(bytes.NewReader(line)))
}

// uniqueKeys reads one JSON value from dec, walking its tokens, since
// json.Unmarshal silently keeps the last of two equal keys.
func uniqueKeys(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := k.(string)
			if seen[key] {
				return fmt.Errorf("key %q appears twice", key)
			}
			seen[key] = true
			if err := uniqueKeys(dec); err != nil {
				return err
			}
		}
		_, err = dec.Token() // }
		return err
	case json.Delim('['):
		for dec.More() {
			if err := uniqueKeys(dec); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ]
		return err
	}
	return nil
}
