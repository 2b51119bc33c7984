package pair

import (
	"log/slog"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/dedup"
)

// Key identifies a (stream, perspective) pair.
type Key struct {
	Stream      uuid.UUID
	Perspective string
}

// Attrs are the log attributes naming a (stream, perspective).
func Attrs(stream uuid.UUID, perspective string) []any {
	return []any{slog.String("stream_id", stream.String()), slog.String("perspective", perspective)}
}

// Dedup returns k as the dedup cache names pairs.
func (k Key) Dedup() dedup.Key {
	return dedup.Key{Stream: k.Stream, Perspective: k.Perspective}
}
