package core

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// Rebuild replays one perspective from scratch for the given streams (every
// stream with events it handles when none is given) while the worker keeps
// serving everything else. Each stream is rebuilt under its pair's gate and
// rebuild lock; handlers do not fire (nothing is new). It needs a backend
// with a RewindStore.
func (w *Worker) Rebuild(ctx context.Context, perspectiveName string, streams ...uuid.UUID) (int, error) {
	return w.rewind.rebuild(ctx, perspectiveName, streams)
}

// rebuild carries out Worker.Rebuild.
func (rw *rewinder) rebuild(ctx context.Context, perspectiveName string, streams []uuid.UUID) (int, error) {
	if rw.backend.Rewind == nil {
		return 0, errors.New("rebuilding: the backend has no RewindStore")
	}
	p, ok := rw.reg.perspective(perspectiveName)
	if !ok {
		return 0, fmt.Errorf("rebuilding: no perspective named %q", perspectiveName)
	}
	rebuilt := 0
	rebuild := func(stream uuid.UUID) error {
		key := pairKey{stream: stream, perspective: perspectiveName}
		release, err := rw.gates.acquire(ctx, key, nil)
		if err != nil {
			return err
		}
		defer release()
		unlock, ok := rw.lockPair(ctx, key, lockReasonRB)
		if !ok {
			return fmt.Errorf("rebuilding stream %s: its lock is held by another instance", stream)
		}
		defer unlock()
		start := rw.now()
		if rw.backend.Snapshots != nil {
			if _, err := rw.backend.Snapshots.SnapshotsDeleteFrom(ctx, &ports.SnapshotsDeleteFromParams{StreamID: stream, Perspective: perspectiveName}); err != nil {
				return fmt.Errorf("rebuilding stream %s: %w", stream, err)
			}
		}
		res, err := rw.replay(ctx, p, key, 0, nil, func(info AbandonedApply, _ bool) { rw.monitor.noteAbandoned(ctx, info) })
		if err != nil {
			return fmt.Errorf("rebuilding stream %s: %w", stream, err)
		}
		rebuilt++
		rw.metrics.rewound(ctx, perspectiveName, true, rw.now().Sub(start), res.replayed, 0)
		if h := rw.opts.Hooks.OnRewind; h != nil {
			h(RewindInfo{StreamID: stream, Perspective: perspectiveName, Replayed: res.replayed, Duration: rw.now().Sub(start), Rebuild: true})
		}
		return nil
	}
	rebuildAll := func(streams []uuid.UUID) error {
		for _, s := range streams {
			if err := rebuild(s); err != nil {
				return err
			}
		}
		return nil
	}
	if len(streams) > 0 {
		err := rebuildAll(streams)
		return rebuilt, err
	}
	types := p.eventTypes()
	for after := uuid.Nil; ; {
		page, err := rw.backend.Rewind.StreamsWithEventTypes(ctx, &ports.StreamsWithEventTypesParams{EventTypes: types, After: after, Limit: rebuildPageSize})
		if err != nil {
			return rebuilt, fmt.Errorf("rebuilding: listing streams: %w", err)
		}
		if err := rebuildAll(page); err != nil || len(page) < rebuildPageSize {
			return rebuilt, err
		}
		after = page[len(page)-1]
	}
}
