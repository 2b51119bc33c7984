package rewind

import (
	"context"
	"log/slog"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/ports"
)

// StartupScan reconciles interrupted lifecycles and repairs interrupted
// rewinds, then closes the startup signal.
func (rw *Rewinder) StartupScan(ctx context.Context) {
	defer rw.FinishStartupScan()
	rw.lifecycle.Reconcile(ctx)
	if !rw.Enabled() || rw.cfg.StartupScan == ScanDisabled {
		return
	}
	if rw.cfg.StartupScan == ScanBackground {
		rw.FinishStartupScan()
	}
	// Pairs whose pending rows are leased elsewhere are left to their
	// holder: rewinding them here would only re-flag them.
	skip := map[pair.Key]bool{}
	for range startupPolls {
		cursors, err := rw.cfg.Rewind.CursorsRewindRequired(ctx, &ports.CursorsRewindRequiredParams{Limit: 1000})
		if err != nil {
			if ctx.Err() == nil {
				rw.Log.ErrorContext(ctx, "startup rewind scan", slog.Any("error", err))
			}
			return
		}
		var todo []ports.Cursor
		for _, c := range cursors {
			if !skip[pair.Key{Stream: c.StreamID, Perspective: c.Perspective}] {
				todo = append(todo, c)
			}
		}
		if len(todo) == 0 {
			return
		}
		rw.Log.InfoContext(ctx, "repairing interrupted rewinds", slog.Int("cursors", len(todo)))
		for _, c := range todo {
			if ctx.Err() != nil {
				return
			}
			key := pair.Key{Stream: c.StreamID, Perspective: c.Perspective}
			if !rw.repairRewind(ctx, key) {
				skip[key] = true
			}
		}
		t := rw.Clock.NewTimer(rw.cfg.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// repairRewind rewinds a flagged pair now, with its pending rows when this
// instance can lease them. It leaves a pair a drain of this instance is
// carrying on (its applied rows await their acknowledgement) and one whose
// flag was cleared since the poll. It reports false when the pair stays
// flagged because its rows are held elsewhere (or it is unknown here).
func (rw *Rewinder) repairRewind(ctx context.Context, key pair.Key) bool {
	p, ok := rw.cfg.Registry.Lookup(key.Perspective)
	if !ok {
		return false
	}
	turn, err := rw.parking.Take(ctx, key)
	if err != nil {
		return false
	}
	defer turn.Release()
	res, _, err := rw.pending.Fetch(ctx, []uuid.UUID{key.Stream})
	if err != nil {
		return false
	}
	var rows []ports.WorkItem
	for _, r := range res.Work {
		if r.Perspective == key.Perspective {
			rows = append(rows, r)
		}
	}
	rows, applied := rw.pending.NotApplied(ctx, key, rows)
	if len(applied) > 0 {
		// A drain of this instance applied rows of the pair and waits for
		// their acknowledgement, which carries the pair on (a rewind's
		// clears the flag): replaying now would only repeat its work. The
		// next poll looks again.
		return true
	}
	// The flag may have been cleared since the poll read it (a drain's
	// rewind was acknowledged): repair only what is still flagged, from
	// its current trigger.
	c, ok := rw.currentCursor(ctx, key, res.Cursors)
	if !ok || !c.Status.Has(ports.CursorRewindRequired) {
		return true
	}
	rows, err = rw.fail.DeadLetterExhausted(ctx, rows, c.LastVersion)
	if err != nil {
		// Held elsewhere now when the move was refused: left to its holder.
		end := rw.fail.MoveEnding(ctx, key, "moving work to dead letters", err)
		turn.End(ctx, end)
		return !end.IsStopped()
	}
	fresh, end, _ := rw.RewindPair(ctx, p, turn, rows, nil, c, true, nil)
	turn.End(ctx, end)
	rw.lifecycle.AfterBatch(ctx, fresh, nil)
	// Flush now, so the next poll sees the flag cleared.
	if err := rw.completer.FlushNow(ctx); err != nil && ctx.Err() == nil {
		rw.Log.WarnContext(ctx, "flushing the repaired rewind", slog.Any("error", err))
	}
	if len(rows) > 0 {
		return true
	}
	after := rw.cursorsOf(ctx, []uuid.UUID{key.Stream})
	return !after[key].Status.Has(ports.CursorRewindRequired)
}

// currentCursor returns the pair's cursor as a fetch read it, or reads it
// when the fetch had no work of the pair. It reports false when the cursor
// could not be read.
func (rw *Rewinder) currentCursor(ctx context.Context, key pair.Key, fetched []ports.Cursor) (ports.Cursor, bool) {
	for _, c := range fetched {
		if c.StreamID == key.Stream && c.Perspective == key.Perspective {
			return c, true
		}
	}
	c, ok := rw.cursorsOf(ctx, []uuid.UUID{key.Stream})[key]
	return c, ok
}

// StartupDone returns a channel closed once the startup scan finished (in
// ScanBackground mode: once it started).
func (rw *Rewinder) StartupDone() <-chan struct{} { return rw.startupDone }

// FinishStartupScan closes the startup signal, once; a worker that runs no
// scan calls it at start.
func (rw *Rewinder) FinishStartupScan() {
	rw.startupOnce.Do(func() {
		close(rw.startupDone)
		if h := rw.cfg.OnStartupScanComplete; h != nil {
			h()
		}
	})
}
