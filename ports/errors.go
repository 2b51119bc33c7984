package ports

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Sentinel errors returned by port implementations. Compare with errors.Is;
// adapters may wrap them with detail.
var (
	// ErrNotFound reports that the addressed row does not exist.
	ErrNotFound = errors.New("not found")
	// ErrVersionConflict reports that an optimistic concurrency check failed:
	// a stream's version or a stored cursor (its version or epoch) moved
	// since the caller read it.
	ErrVersionConflict = errors.New("version conflict")
	// ErrInstanceNotAlive reports that the calling instance has no live
	// heartbeat; it must call InstanceHeartbeat before claiming.
	ErrInstanceNotAlive = errors.New("instance not alive")
	// ErrInvalidArgument reports a malformed request (nil id, empty name,
	// negative limit). It is never retried.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrClosed reports that the backend (or a listener) was closed.
	ErrClosed = errors.New("closed")
	// ErrLeaseLost reports that a write fenced to the holder of a stream's
	// lease was refused, and changed nothing, because the caller no longer
	// holds it: another instance took the stream, or it was released (see
	// WorkClaimer). The caller leaves the stream to its holder; it is not an
	// infrastructure failure, and never retried as one.
	ErrLeaseLost = errors.New("stream lease lost")
	// ErrTransient reports an infrastructure failure that may not happen
	// again: a lost, refused or reset connection, a timeout, a serialization
	// failure or deadlock, a server shutting down or starting up. The call
	// may succeed when retried; for a write whose outcome is unknown (the
	// connection was lost around its commit) it may also have taken effect,
	// so only idempotent writes are retried blindly (see
	// EventStore.EventsAppend). Adapters wrap it around the driver's error
	// at their edge. The engine never counts it against an event.
	ErrTransient = errors.New("transient failure")
)

// invalidParam returns an error wrapping ErrInvalidArgument that names the
// rejected field, as in "ports: WorkClaimParams.MaxStreams must be positive,
// got 0".
func invalidParam(field, format string, args ...any) error {
	return fmt.Errorf("ports: %s %s: %w", field, fmt.Sprintf(format, args...), ErrInvalidArgument)
}

// checkID rejects a nil id.
func checkID(field string, id uuid.UUID) error {
	if id == uuid.Nil {
		return invalidParam(field, "must not be nil")
	}
	return nil
}

// checkIDs rejects a nil id in ids.
func checkIDs(field string, ids []uuid.UUID) error {
	for i, id := range ids {
		if id == uuid.Nil {
			return invalidParam(fmt.Sprintf("%s[%d]", field, i), "must not be nil")
		}
	}
	return nil
}

// checkName rejects an empty name.
func checkName(field, name string) error {
	if name == "" {
		return invalidParam(field, "must not be empty")
	}
	return nil
}

// checkPositive rejects a value below 1.
func checkPositive[T int | int64 | time.Duration](field string, v T) error {
	if v <= 0 {
		return invalidParam(field, "must be positive, got %v", v)
	}
	return nil
}

// checkNotNegative rejects a value below 0.
func checkNotNegative[T int | int64](field string, v T) error {
	if v < 0 {
		return invalidParam(field, "must not be negative, got %d", v)
	}
	return nil
}

// checkJSON rejects data that is not one JSON document.
func checkJSON(field string, data []byte) error {
	if len(data) == 0 || !json.Valid(data) {
		return invalidParam(field, "must be a JSON document")
	}
	return nil
}

// isJSONNull reports whether data, a valid JSON document, is null.
func isJSONNull(data []byte) bool {
	return bytes.Equal(bytes.Trim(data, " \t\r\n"), []byte("null"))
}

// checkPair rejects the identity and position of a completion, failure or
// model save: a nil stream id, an empty perspective, a negative version.
func checkPair(field string, streamID uuid.UUID, perspective string, lastVersion int64) error {
	return cmp.Or(
		checkID(field+".StreamID", streamID),
		checkName(field+".Perspective", perspective),
		checkNotNegative(field+".LastVersion", lastVersion),
	)
}

// checkSubscriptions rejects a subscription with an empty event type or
// perspective.
func checkSubscriptions(field string, subs []Subscription) error {
	for i, sub := range subs {
		at := fmt.Sprintf("%s[%d]", field, i)
		if err := cmp.Or(checkName(at+".EventType", sub.EventType), checkName(at+".Perspective", sub.Perspective)); err != nil {
			return err
		}
	}
	return nil
}
