package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/complete"
	"github.com/vantage-go/vantage/core/internal/dedup"
	"github.com/vantage-go/vantage/core/internal/modelstore"
	"github.com/vantage-go/vantage/core/internal/monitor"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/core/internal/stage"
	"github.com/vantage-go/vantage/core/internal/telemetry"
	"github.com/vantage-go/vantage/ports"
)

// rewinder replays a pair from its start (or a snapshot) when events were
// stored below its cursor, repairs rewinds interrupted by a crash at
// start-up, takes snapshots, and rebuilds perspectives on request.
type rewinder struct {
	*engine
	parking   *pair.Parking
	lifecycle *stage.Lifecycle
	monitor   *monitor.Monitor
	completer *complete.Completer
	cache     *dedup.Cache
	gates     *pair.Gates
	scopes    *scopeCache
	store     *modelstore.Store
	fail      *failures
	drain     *drainer
	// sem bounds the rewinds running at once.
	sem chan struct{}

	startupOnce sync.Once
	startupDone chan struct{} // closed once the startup scan finished
}

// StartupScanMode says whether the startup rewind scan holds the startup
// signal until every interrupted rewind is repaired.
type StartupScanMode int

const (
	// StartupScanBlocking repairs interrupted rewinds before
	// StartupScanComplete is signalled (bounded: 100 polls).
	StartupScanBlocking StartupScanMode = iota
	// StartupScanBackground signals at once and repairs in the background.
	StartupScanBackground
	// StartupScanDisabled skips the scan.
	StartupScanDisabled
)

// Defaults of RewindOptions.
const (
	RewindDebounceDefault          = 5 * time.Second
	RewindMaxDebounceDefault       = 30 * time.Second
	RewindLockTimeoutDefault       = 30 * time.Second
	RewindKeepAliveDefault         = 10 * time.Second
	MaxConcurrentRewindsDefault    = 3
	rewindStartupPolls             = 100
	rebuildPageSize                = 500
	rewindLockRetryDelay           = time.Second
	lockReasonRewind, lockReasonRB = "rewind", "rebuild"
)

// RewindOptions configure rewinds: replaying a (stream, perspective) after
// an event arrived below its cursor.
type RewindOptions struct {
	// Disabled turns rewinds off. A late event (stored below its pair's
	// cursor) is then moved to dead letters with reason "late", never
	// applied out of order nor completed unapplied; requeue it once rewinds
	// are on.
	Disabled bool
	// StartupScan selects the startup scan mode. Defaults to
	// StartupScanBlocking.
	StartupScan StartupScanMode
	// MaxConcurrentRewinds bounds rewinds running at once. Defaults to 3.
	MaxConcurrentRewinds int
	// Debounce is the sliding window after the latest late event before a
	// rewind starts, so a burst of late events causes one rewind. Defaults
	// to 5s.
	Debounce time.Duration
	// MaxDebounce caps the wait from the first late event. Defaults to 30s.
	MaxDebounce time.Duration
	// LockTimeout is how long the rewind lock lasts without renewal.
	// Defaults to 30s.
	LockTimeout time.Duration
	// KeepAlive is how often a running rewind renews its lock. Defaults to
	// 10s; must be below LockTimeout.
	KeepAlive time.Duration
	// SnapshotEvery stores a model snapshot whenever a saved model crosses a
	// multiple of that many stream versions (in normal processing, rewinds
	// and rebuilds), so a rewind replays from the latest snapshot before its
	// trigger instead of from the start. A snapshot holds the pair's epoch
	// of the model it copies, and a rewind starts only from one of the
	// model it loaded: never from a snapshot of a model that a rewind or a
	// rebuild replaced since. A rewind keeps the snapshot it started from
	// for the epoch it moves the pair to. 0 disables snapshots.
	SnapshotEvery int
}

func (o *RewindOptions) withDefaults(errs *[]error) {
	defaultDuration(errs, "Rewind.Debounce", &o.Debounce, RewindDebounceDefault)
	defaultDuration(errs, "Rewind.MaxDebounce", &o.MaxDebounce, RewindMaxDebounceDefault)
	defaultDuration(errs, "Rewind.LockTimeout", &o.LockTimeout, RewindLockTimeoutDefault)
	defaultDuration(errs, "Rewind.KeepAlive", &o.KeepAlive, RewindKeepAliveDefault)
	defaultCount(errs, "Rewind.MaxConcurrentRewinds", &o.MaxConcurrentRewinds, MaxConcurrentRewindsDefault, false)
	if o.SnapshotEvery < 0 {
		*errs = append(*errs, fmt.Errorf("Options.Rewind.SnapshotEvery must not be negative, got %d", o.SnapshotEvery))
	}
	if o.KeepAlive >= o.LockTimeout {
		*errs = append(*errs, fmt.Errorf("Options.Rewind.KeepAlive (%s) must be below Options.Rewind.LockTimeout (%s)", o.KeepAlive, o.LockTimeout))
	}
	if o.Debounce > o.MaxDebounce {
		*errs = append(*errs, fmt.Errorf("Options.Rewind.Debounce (%s) must not exceed Options.Rewind.MaxDebounce (%s)", o.Debounce, o.MaxDebounce))
	}
	if o.StartupScan < StartupScanBlocking || o.StartupScan > StartupScanDisabled {
		*errs = append(*errs, fmt.Errorf("Options.Rewind.StartupScan has unknown value %d", o.StartupScan))
	}
}

func (rw *rewinder) rewindEnabled() bool {
	return rw.backend.Rewind != nil && !rw.opts.Rewind.Disabled
}

// cursorsOf reads the cursors of streams, when rewinds are enabled.
func (rw *rewinder) cursorsOf(ctx context.Context, streams []uuid.UUID) map[pair.Key]ports.Cursor {
	if !rw.rewindEnabled() || len(streams) == 0 {
		return nil
	}
	cs, err := rw.backend.Cursors.CursorsGet(ctx, &ports.CursorsGetParams{StreamIDs: streams})
	if err != nil {
		if ctx.Err() == nil {
			rw.Faults.Fail(ctx, "reading cursors for rewinds", err)
		}
		return nil
	}
	rw.Faults.OK(ctx, "reading cursors for rewinds")
	out := make(map[pair.Key]ports.Cursor, len(cs))
	for _, c := range cs {
		out[pair.Key{Stream: c.StreamID, Perspective: c.Perspective}] = c
	}
	return out
}

// rewindDue reports whether a flagged cursor's debounce window is over and,
// if not, when it will be.
func (rw *rewinder) rewindDue(c ports.Cursor) (bool, time.Time) {
	now := rw.Now()
	o := rw.opts.Rewind
	if c.RewindFlaggedAt.IsZero() {
		return true, time.Time{}
	}
	slide := c.RewindFlaggedAt.Add(o.Debounce)
	capAt := c.RewindFirstFlaggedAt.Add(o.MaxDebounce)
	if c.RewindFirstFlaggedAt.IsZero() {
		capAt = slide
	}
	due := slide
	if capAt.Before(due) {
		due = capAt
	}
	return !now.Before(due), due
}

// rewindOwner is what an abandoned apply of a rewind run by a drain hands
// back: the drain's pair task and the pair's gate. Rewinds run outside a
// drain (the startup repair) have none: a late apply there is cancelled
// and, past its grace, logged, but its caller waits for it.
type rewindOwner struct {
	task    *pairTask
	release func()
}

// rewindRetries bounds the replays of one rewind that restart at once
// because a failing event used up its attempts and was dead-lettered.
const rewindRetries = 3

// replayMovedRetries bounds the replays of one rewind or rebuild that
// start again because the pair moved while it was replayed (another
// instance saved the model: the holder, for a rebuild; an instance that
// lost the stream with an apply in flight, for a rewind).
const replayMovedRetries = 3

// replayMoved reports whether a replay's error is its save refused
// because the pair moved since the replay loaded it, as opposed to an
// event's own failure.
func replayMoved(err error) bool {
	var rf *replayFailure
	return errors.Is(err, ports.ErrVersionConflict) && !errors.As(err, &rf)
}

// rewindPair replays a (stream, perspective) whose cursor has
// RewindRequired, under the cooperative rewind lock: from the latest
// snapshot before the trigger (or from the start), every event the
// perspective handles up to the newest pending row, except the events
// dead-lettered for the pair, then saves the model and completes the
// pending rows (which clears the flag), and the rows of held: rows of the
// pair this instance applied whose completion is on its way, which the
// replay applies again as part of the pair's history. The pair's other
// late rows (held by another instance, behind a row waiting for its retry,
// or stored since the fetch) are left out with their events, for the
// rewind that can complete them. Only events that were never applied
// (the pending rows, but for those a failed replay stored for an event
// applied before: see ports.WorkItem.Replay) fire handlers and count as
// new. A replayed event that fails is charged its attempt; when that
// dead-letters it the replay starts over without it, so the pair goes on.
// A save refused because the pair moved during the replay (an instance
// that lost the stream saved an apply it had in flight) replays again from
// the model saved. The caller holds the pair's gate. It returns the new
// events applied, and errPairAbandoned when an apply was abandoned.
func (rw *rewinder) rewindPair(ctx context.Context, p perspective, key pair.Key, rows []ports.WorkItem, held []uuid.UUID, cursor ports.Cursor, force bool, owner *rewindOwner) ([]ports.Event, error) {
	if !force {
		if due, at := rw.rewindDue(cursor); !due {
			rw.parking.ParkFor(key, at)
			return nil, nil
		}
	}
	select {
	case rw.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil
	}
	freeSem := sync.OnceFunc(func() { <-rw.sem })
	defer freeSem()
	unlock, ok := rw.lockPair(ctx, key, lockReasonRewind)
	if !ok {
		rw.parking.ParkFor(key, rw.Now().Add(rewindLockRetryDelay))
		return nil, nil
	}
	unlock = sync.OnceFunc(unlock)
	defer unlock()

	start := rw.Now()
	trigger := cursor.RewindTriggerVersion
	if trigger == 0 && len(rows) > 0 {
		trigger = rows[0].EventVersion
	}
	// A late row in hand below the cursor's trigger (the flag it raised
	// was cleared and raised again by a later one) is replayed too: the
	// replay starts before the earliest of them, or its completion would
	// take a row whose event it never applied.
	for _, row := range rows {
		if row.Late && row.EventVersion < trigger {
			trigger = row.EventVersion
		}
	}
	ctx, span := rw.tracing.StartRewind(ctx, key, trigger)
	var (
		res replayResult
		err error
	)
	defer func() { telemetry.EndRewind(span, res.from, res.replayed, res.fresh, spanError(err)) }()
	for try, moves := 1, 1; ; {
		abandon := func(info monitor.Abandoned, _ bool) { rw.monitor.NoteAbandoned(ctx, info) }
		if owner != nil {
			pending := rows
			abandon = func(info monitor.Abandoned, late bool) {
				actx := context.WithoutCancel(ctx)
				rw.monitor.NoteAbandoned(actx, info)
				dead := late && rw.replayFailed(actx, key, pending, info.EventID, info.Version, fmt.Errorf("%w (after %s)", monitor.ErrAbandoned, info.Elapsed))
				unlock()
				freeSem()
				owner.release()
				owner.task.abandon(0, nil)
				if dead {
					// The event was dead-lettered: its row may have been the
					// pair's last, and then no row brings the pair back to a
					// drain to rewind it without the event. Rewind it now.
					rw.repairRewind(ctx, key)
				}
			}
		}
		res, err = rw.replay(ctx, p, key, trigger, rows, held, false, abandon)
		if errors.Is(err, errPairAbandoned) {
			return nil, err
		}
		if err == nil {
			rw.parking.InfraRecovered(key)
			rw.metrics.Rewound(ctx, key.Perspective, false, rw.Now().Sub(start), res.replayed, len(res.fresh))
			rw.Log.InfoContext(ctx, "rewound perspective", append(pair.Attrs(key.Stream, key.Perspective),
				slog.Int64("trigger_version", trigger), slog.Int64("from_version", res.from), slog.Int("replayed", res.replayed),
				slog.Int("skipped", res.skipped), slog.Int("new", len(res.fresh)))...)
			if h := rw.opts.Hooks.OnRewind; h != nil {
				h(RewindInfo{StreamID: key.Stream, Perspective: key.Perspective, FromVersion: res.from, TriggerVersion: trigger, Replayed: res.replayed, New: len(res.fresh), Duration: rw.Now().Sub(start)})
			}
			return res.fresh, nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		if replayMoved(err) && moves < replayMovedRetries {
			// Replay again, from the model saved meanwhile.
			moves++
			continue
		}
		var rf *replayFailure
		if !errors.As(err, &rf) {
			rw.parking.InfraFailed(ctx, key, "rewinding", err)
			return nil, nil
		}
		if !rw.replayFailed(ctx, key, rows, rf.event.ID, rf.event.Version, rf.cause) || try >= rewindRetries {
			return nil, nil
		}
		// The event was dead-lettered: replay again, without it.
		rows = slices.DeleteFunc(slices.Clone(rows), func(r ports.WorkItem) bool { return r.EventID == rf.event.ID })
		try++
	}
}

// replayFailed charges a failed replay of an event to that event: to its
// pending row when it has one (the failure may dead-letter it), else to a
// row the backend stores for it (it was applied and completed long ago).
// It reports true when the event was dead-lettered, so a replay without it
// may go on at once; false too when the stream is another instance's now
// (nothing is charged: that instance rewinds the pair).
func (rw *rewinder) replayFailed(ctx context.Context, key pair.Key, rows []ports.WorkItem, eventID uuid.UUID, version int64, cause error) bool {
	if i := slices.IndexFunc(rows, func(r ports.WorkItem) bool { return r.EventID == eventID }); i >= 0 {
		switch rw.fail.eventFailed(ctx, key, rows[i], cause) {
		case failureDeadLettered:
			return true
		case failureInfra, failureLeaseLost:
			return false
		}
		rw.fail.reportFailure(ctx, key, rows[i], nil, uuid.Nil, 0, cause)
		return false
	}
	rw.fail.failed(ctx, key, ports.Failure{
		StreamID:           key.Stream,
		Perspective:        key.Perspective,
		FailedEventID:      eventID,
		FailedEventVersion: version,
		Error:              cause.Error(),
		RetryAt:            rw.Now().Add(rw.fail.failureRetryDelay(1)),
	}, version, 1, cause)
	return false
}

// replayFailure is a replay that stopped because an event failed to decode
// or apply.
type replayFailure struct {
	event ports.Event
	cause error
}

func (e *replayFailure) Error() string {
	return fmt.Sprintf("replaying version %d: %v", e.event.Version, e.cause)
}

func (e *replayFailure) Unwrap() error { return e.cause }

// lockPair takes the pair's cooperative lock and keeps it alive until the
// returned release is called.
func (rw *rewinder) lockPair(ctx context.Context, key pair.Key, reason string) (func(), bool) {
	o := rw.opts.Rewind
	params := &ports.StreamLockParams{StreamID: key.Stream, Perspective: key.Perspective, InstanceID: rw.opts.InstanceID, Reason: reason, Duration: o.LockTimeout, Now: rw.ParamNow()}
	ok, err := rw.backend.Rewind.StreamLockAcquire(ctx, params)
	if err != nil {
		if ctx.Err() == nil {
			rw.Faults.Fail(ctx, "acquiring stream locks", err, pair.Attrs(key.Stream, key.Perspective)...)
		}
		return nil, false
	}
	rw.Faults.OK(ctx, "acquiring stream locks")
	if !ok {
		return nil, false
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := rw.Clock.NewTimer(o.KeepAlive)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C():
			}
			p := *params
			p.Now = rw.ParamNow()
			switch ok, err := rw.backend.Rewind.StreamLockAcquire(ctx, &p); {
			case err != nil:
				if ctx.Err() == nil {
					rw.Faults.Fail(ctx, "renewing stream locks", err, pair.Attrs(key.Stream, key.Perspective)...)
				}
			case !ok:
				rw.Faults.OK(ctx, "renewing stream locks")
				rw.Log.WarnContext(ctx, "renewing stream lock failed", append(pair.Attrs(key.Stream, key.Perspective), slog.Bool("held", false))...)
			default:
				rw.Faults.OK(ctx, "renewing stream locks")
			}
			t.Reset(o.KeepAlive)
		}
	}()
	return func() {
		close(stop)
		<-done
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deregisterTimeout)
		defer cancel()
		if err := rw.backend.Rewind.StreamLockRelease(rctx, params); err != nil {
			rw.Faults.Fail(ctx, "releasing stream locks", err, pair.Attrs(key.Stream, key.Perspective)...)
			return
		}
		rw.Faults.OK(ctx, "releasing stream locks")
	}, true
}
