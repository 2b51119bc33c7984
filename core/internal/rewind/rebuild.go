package rewind

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/monitor"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/core/internal/perspective"
	"github.com/vantage-go/vantage/core/internal/rebuild"
	"github.com/vantage-go/vantage/ports"
)

// errStreamLockHeld reports a stream whose rebuild found the pair's lock
// held by another instance (a rewind or a rebuild running there).
var errStreamLockHeld = errors.New("its lock is held by another instance")

// Rebuild replays one perspective from scratch for the given streams (every
// stream with events it handles when none is given). Each stream is
// rebuilt under its pair's gate and rebuild lock; handlers do not fire.
func (rw *Rewinder) Rebuild(ctx context.Context, perspectiveName string, streams []uuid.UUID) (int, error) {
	p, err := rw.rebuildable(perspectiveName)
	if err != nil {
		return 0, err
	}
	rebuilt := 0
	err = rw.eachRebuildStream(ctx, p, streams, uuid.Nil, func(stream uuid.UUID) error {
		if _, err := rw.rebuildStream(ctx, p, stream); err != nil {
			return err
		}
		rebuilt++
		return nil
	})
	return rebuilt, err
}

// rebuildable returns the registered perspective named perspectiveName, or
// why it cannot be rebuilt.
func (rw *Rewinder) rebuildable(perspectiveName string) (perspective.Perspective, error) {
	if rw.cfg.Rewind == nil {
		return nil, errors.New("rebuilding: the backend has no RewindStore")
	}
	p, ok := rw.cfg.Registry.Lookup(perspectiveName)
	if !ok {
		return nil, fmt.Errorf("rebuilding: no perspective named %q", perspectiveName)
	}
	return p, nil
}

// eachRebuildStream calls fn with each stream a rebuild of p covers, in
// order, stopping at the first error: the given streams, or, when there are
// none, every stream with events p handles, in byte order of the ids, a
// page at a time. A stream at or below after (byte order) is skipped: a
// resumed rebuild passes the last stream done.
func (rw *Rewinder) eachRebuildStream(ctx context.Context, p perspective.Perspective, streams []uuid.UUID, after uuid.UUID, fn func(stream uuid.UUID) error) error {
	if len(streams) > 0 {
		for _, s := range streams {
			if after != uuid.Nil && bytes.Compare(s[:], after[:]) <= 0 {
				continue
			}
			if err := fn(s); err != nil {
				return err
			}
		}
		return nil
	}
	return rw.rebuildPages(ctx, p, after, func(page []uuid.UUID) error {
		for _, s := range page {
			if err := fn(s); err != nil {
				return err
			}
		}
		return nil
	})
}

// countRebuildStreams counts the streams a rebuild of p covers: the given
// streams, or every stream with events p handles (a pass over their ids).
func (rw *Rewinder) countRebuildStreams(ctx context.Context, p perspective.Perspective, streams []uuid.UUID) (int64, error) {
	if len(streams) > 0 {
		return int64(len(streams)), nil
	}
	var n int64
	err := rw.rebuildPages(ctx, p, uuid.Nil, func(page []uuid.UUID) error {
		n += int64(len(page))
		return nil
	})
	return n, err
}

// rebuildPages calls fn with each page of the streams with events p
// handles, above after in byte order, until the last page or an error.
func (rw *Rewinder) rebuildPages(ctx context.Context, p perspective.Perspective, after uuid.UUID, fn func(page []uuid.UUID) error) error {
	types := p.EventTypes()
	for {
		page, err := rw.cfg.Rewind.StreamsWithEventTypes(ctx, &ports.StreamsWithEventTypesParams{EventTypes: types, After: after, Limit: rebuildPageSize})
		if err != nil {
			return fmt.Errorf("rebuilding: listing streams: %w", err)
		}
		if err := fn(page); err != nil || len(page) < rebuildPageSize {
			return err
		}
		after = page[len(page)-1]
	}
}

// rebuildStream replays p from scratch for one stream, under the pair's
// gate and rebuild lock, and returns the events it replayed. A lock held
// by another instance is errStreamLockHeld; an event that fails to decode
// or apply is a *replayFailure. The instance that holds the stream may
// save the model while it is replayed (the gate and the lock are not
// its): the replay's save then fails its check and the stream is replayed
// again from the model saved meanwhile, up to replayMovedRetries times.
func (rw *Rewinder) rebuildStream(ctx context.Context, p perspective.Perspective, stream uuid.UUID) (int, error) {
	key := pair.Key{Stream: stream, Perspective: p.Name()}
	turn, err := rw.parking.Take(ctx, key)
	if err != nil {
		return 0, err
	}
	defer turn.Release()
	unlock, ok := rw.lockPair(ctx, key, lockReasonRB)
	if !ok {
		return 0, fmt.Errorf("rebuilding stream %s: %w", stream, errStreamLockHeld)
	}
	defer unlock()
	start := rw.Now()
	var res replayResult
	for try := 1; ; try++ {
		// The snapshots go on every try: the holder may have stored one
		// with the model its save replaced.
		if rw.cfg.Snapshots != nil {
			if _, err := rw.cfg.Snapshots.SnapshotsDeleteFrom(ctx, &ports.SnapshotsDeleteFromParams{StreamID: stream, Perspective: key.Perspective}); err != nil {
				return 0, fmt.Errorf("rebuilding stream %s: %w", stream, err)
			}
		}
		res, err = rw.replay(ctx, p, key, 0, nil, nil, true, func(info monitor.Abandoned, _ bool) { rw.monitor.NoteAbandoned(ctx, info) })
		if err == nil {
			break
		}
		if !replayMoved(err) || try >= replayMovedRetries {
			return 0, fmt.Errorf("rebuilding stream %s: %w", stream, err)
		}
	}
	rw.cfg.Metrics.Rewound(ctx, key.Perspective, true, rw.Now().Sub(start), res.replayed, 0)
	if h := rw.cfg.OnRewind; h != nil {
		h(Info{StreamID: stream, Perspective: key.Perspective, Replayed: res.replayed, Duration: rw.Now().Sub(start), Rebuild: true})
	}
	return res.replayed, nil
}

// Rebuilder returns the rewinder as the queue of rebuild requests reads it.
func (rw *Rewinder) Rebuilder() rebuild.Rebuilder { return rebuilder{rw} }

type rebuilder struct{ rw *Rewinder }

func (r rebuilder) Open(name string) (rebuild.Streams, error) {
	p, err := r.rw.rebuildable(name)
	if err != nil {
		return nil, err
	}
	return rebuildStreams{r.rw, p}, nil
}

// Failed reports whether err ends a request for good: an event the
// perspective cannot replay, or a request the backend refuses. Anything
// else may pass, and the request is resumed later.
func (rebuilder) Failed(err error) bool {
	var rf *replayFailure
	return errors.As(err, &rf) || errors.Is(err, pair.ErrRunAbandoned) ||
		errors.Is(err, ports.ErrInvalidArgument) || errors.Is(err, ports.ErrNotFound)
}

// rebuildStreams are the streams of one perspective to rebuild.
type rebuildStreams struct {
	rw *Rewinder
	p  perspective.Perspective
}

func (s rebuildStreams) Count(ctx context.Context, streams []uuid.UUID) (int64, error) {
	return s.rw.countRebuildStreams(ctx, s.p, streams)
}

func (s rebuildStreams) Each(ctx context.Context, streams []uuid.UUID, after uuid.UUID, fn func(uuid.UUID) error) error {
	return s.rw.eachRebuildStream(ctx, s.p, streams, after, fn)
}

func (s rebuildStreams) Rebuild(ctx context.Context, stream uuid.UUID) (int, error) {
	return s.rw.rebuildStream(ctx, s.p, stream)
}
