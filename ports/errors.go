package ports

import "errors"

// Sentinel errors returned by port implementations. Compare with errors.Is;
// adapters may wrap them with detail.
var (
	// ErrNotFound reports that the addressed row does not exist.
	ErrNotFound = errors.New("not found")
	// ErrVersionConflict reports that an optimistic concurrency check failed:
	// a stream's version or a stored cursor moved since the caller read it.
	ErrVersionConflict = errors.New("version conflict")
	// ErrInstanceNotAlive reports that the calling instance has no live
	// heartbeat; it must call InstanceHeartbeat before claiming.
	ErrInstanceNotAlive = errors.New("instance not alive")
	// ErrInvalidArgument reports a malformed request (nil id, empty name,
	// negative limit). It is never retried.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrClosed reports that the backend (or a listener) was closed.
	ErrClosed = errors.New("closed")
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
