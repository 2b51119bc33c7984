// Package rewind replays a (stream, perspective) from its start, or from a
// snapshot, when events were stored below its cursor; repairs rewinds a
// crash interrupted, at start-up; stores snapshots; and rebuilds
// perspectives on request. A replay runs under the pair's gate and its
// cooperative lock, moves the pair to a new epoch and completes the rows
// it applied.
package rewind

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/complete"
	"github.com/vantage-go/vantage/core/internal/dedup"
	"github.com/vantage-go/vantage/core/internal/failure"
	"github.com/vantage-go/vantage/core/internal/modelstore"
	"github.com/vantage-go/vantage/core/internal/monitor"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/core/internal/perspective"
	"github.com/vantage-go/vantage/core/internal/stage"
	"github.com/vantage-go/vantage/core/internal/telemetry"
	"github.com/vantage-go/vantage/ports"
)

// ScanMode says whether the startup scan holds the startup signal until
// every interrupted rewind is repaired.
type ScanMode int

const (
	// ScanBlocking repairs interrupted rewinds before the startup signal
	// (bounded: startupPolls polls).
	ScanBlocking ScanMode = iota
	// ScanBackground signals at once and repairs in the background.
	ScanBackground
	// ScanDisabled skips the scan.
	ScanDisabled
)

const (
	startupPolls                   = 100
	rebuildPageSize                = 500
	rewindLockRetryDelay           = time.Second
	lockReasonRewind, lockReasonRB = "rewind", "rebuild"
	// lockReleaseTimeout bounds the release of a pair's lock, which runs
	// when the replay ended, whatever its context.
	lockReleaseTimeout = 5 * time.Second
)

// Config is what the rewinder reads.
type Config struct {
	Rewind      ports.RewindStore
	Cursors     ports.CursorStore
	Models      ports.ModelStore
	Snapshots   ports.SnapshotStore // nil: no snapshots
	Events      ports.EventFetcher
	DeadLetters ports.DeadLetterStore
	// StagesRecorded is whether the backend records lifecycle stages:
	// the PostPerspective of re-delivered events then runs again when a
	// crash interrupted it.
	StagesRecorded bool
	InstanceID     uuid.UUID
	DebugMode      bool

	// Disabled turns rewinds off (so does a nil Rewind store).
	Disabled      bool
	StartupScan   ScanMode
	MaxConcurrent int // rewinds running at once
	// Debounce and MaxDebounce are the sliding window after a pair's
	// latest late event, and its cap from the first, before its rewind.
	Debounce, MaxDebounce time.Duration
	// LockTimeout is how long a pair's lock lasts without renewal;
	// KeepAlive how often a replay renews it.
	LockTimeout, KeepAlive time.Duration
	// SnapshotEvery stores a snapshot whenever a saved model crosses a
	// multiple of that many versions; 0 for none.
	SnapshotEvery int
	// PollInterval spaces the polls of the startup scan.
	PollInterval time.Duration
	// WriteLimit bounds each write of a table projection.
	WriteLimit modelstore.WriteLimit

	Registry perspective.Registry
	// Scope returns the context an apply of event gets: the event and its
	// security scope.
	Scope   func(ctx context.Context, event ports.Event) (context.Context, error)
	Tracing telemetry.Tracing
	Metrics *telemetry.Metrics
	// OnRewind announces a finished rewind or rebuild of a stream, and
	// OnStartupScanComplete the end of the startup scan; nil for none.
	OnRewind              func(Info)
	OnStartupScanComplete func()
}

// Pending fetches the pending rows of a stream, for the startup repair of
// a pair: the drain's fetch, with its dedup filter.
type Pending interface {
	// Fetch leases and fetches the pending events of streams; see the
	// drain's fetch.
	Fetch(ctx context.Context, streams []uuid.UUID) (*ports.EventsFetchPendingResult, uint64, error)
	// NotApplied splits rows into those to apply and the ids of those this
	// instance applied, their completion on its way.
	NotApplied(ctx context.Context, key pair.Key, rows []ports.WorkItem) ([]ports.WorkItem, []uuid.UUID)
}

// Deps are the services the rewinder calls.
type Deps struct {
	Parking   *pair.Parking
	Lifecycle *stage.Lifecycle
	Monitor   *monitor.Monitor
	Completer *complete.Completer
	Cache     *dedup.Cache
	Store     *modelstore.Store
	Failures  *failure.Failures
	Pending   Pending
}

// Info describes a finished rewind, or a stream's rebuild.
type Info struct {
	StreamID       uuid.UUID
	Perspective    string
	FromVersion    int64
	TriggerVersion int64
	Replayed       int
	New            int
	Duration       time.Duration
	Rebuild        bool
}

// Rewinder replays pairs (see the package doc).
type Rewinder struct {
	*base.Env
	cfg       Config
	parking   *pair.Parking
	lifecycle *stage.Lifecycle
	monitor   *monitor.Monitor
	completer *complete.Completer
	cache     *dedup.Cache
	store     *modelstore.Store
	fail      *failure.Failures
	pending   Pending
	// sem bounds the rewinds running at once.
	sem chan struct{}

	startupOnce sync.Once
	startupDone chan struct{} // closed once the startup scan finished
}

// New returns a rewinder.
func New(env *base.Env, cfg Config, d Deps) *Rewinder {
	return &Rewinder{
		Env: env, cfg: cfg, parking: d.Parking, lifecycle: d.Lifecycle, monitor: d.Monitor, completer: d.Completer,
		cache: d.Cache, store: d.Store, fail: d.Failures, pending: d.Pending,
		sem: make(chan struct{}, cfg.MaxConcurrent), startupDone: make(chan struct{}),
	}
}

// Enabled reports whether the rewinder replays pairs: the backend can,
// and rewinds are not disabled.
func (rw *Rewinder) Enabled() bool {
	return rw.cfg.Rewind != nil && !rw.cfg.Disabled
}

// cursorsOf reads the cursors of streams, when rewinds are enabled.
func (rw *Rewinder) cursorsOf(ctx context.Context, streams []uuid.UUID) map[pair.Key]ports.Cursor {
	if !rw.Enabled() || len(streams) == 0 {
		return nil
	}
	cs, err := rw.cfg.Cursors.CursorsGet(ctx, &ports.CursorsGetParams{StreamIDs: streams})
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
func (rw *Rewinder) rewindDue(c ports.Cursor) (bool, time.Time) {
	now := rw.Now()
	o := rw.cfg
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

// RewindPair replays a (stream, perspective) whose cursor has
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
// the model saved. It runs on the pair's turn, and returns the new events
// applied and how the rewind ended, for the turn's End.
//
// abandoned, when set, ends the drain's task of a pair whose apply was
// abandoned: the rewind lets go of the lock and the turn and calls it,
// and RewindPair returns pair.ErrRunAbandoned (the turn is then the
// abandonment's). A rewind run outside a drain (the start-up repair) has
// none: a late apply there is cancelled and, past its grace, logged, but
// its caller waits for it.
func (rw *Rewinder) RewindPair(ctx context.Context, p perspective.Perspective, turn *pair.Turn, rows []ports.WorkItem, held []uuid.UUID, cursor ports.Cursor, force bool, abandoned func()) ([]ports.Event, pair.Ending, error) {
	key := turn.Key
	if !force {
		if due, at := rw.rewindDue(cursor); !due {
			return nil, pair.HoldUntil(at), nil
		}
	}
	select {
	case rw.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, pair.Stopped(), nil
	}
	freeSem := sync.OnceFunc(func() { <-rw.sem })
	defer freeSem()
	unlock, ok := rw.lockPair(ctx, key, lockReasonRewind)
	if !ok {
		return nil, pair.HoldUntil(rw.Now().Add(rewindLockRetryDelay)), nil
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
	ctx, span := rw.cfg.Tracing.StartRewind(ctx, key, trigger)
	var (
		res replayResult
		err error
	)
	defer func() { telemetry.EndRewind(span, res.from, res.replayed, res.fresh, err) }()
	for try, moves := 1, 1; ; {
		abandon := func(info monitor.Abandoned, _ bool) { rw.monitor.NoteAbandoned(ctx, info) }
		if abandoned != nil {
			pending := rows
			abandon = func(info monitor.Abandoned, late bool) {
				actx := context.WithoutCancel(ctx)
				rw.monitor.NoteAbandoned(actx, info)
				dead, end := false, pair.Stopped()
				if late {
					dead, end = rw.replayFailed(actx, key, pending, info.EventID, info.Version, fmt.Errorf("%w (after %s)", monitor.ErrAbandoned, info.Elapsed))
				}
				unlock()
				freeSem()
				turn.End(actx, end)
				abandoned()
				if dead {
					// The event was dead-lettered: its row may have been the
					// pair's last, and then no row brings the pair back to a
					// drain to rewind it without the event. Rewind it now.
					rw.repairRewind(ctx, key)
				}
			}
		}
		res, err = rw.replay(ctx, p, key, trigger, rows, held, false, abandon)
		if errors.Is(err, pair.ErrRunAbandoned) {
			return nil, pair.Stopped(), err
		}
		if err == nil {
			rw.cfg.Metrics.Rewound(ctx, key.Perspective, false, rw.Now().Sub(start), res.replayed, len(res.fresh))
			rw.Log.InfoContext(ctx, "rewound perspective", append(pair.Attrs(key.Stream, key.Perspective),
				slog.Int64("trigger_version", trigger), slog.Int64("from_version", res.from), slog.Int("replayed", res.replayed),
				slog.Int("skipped", res.skipped), slog.Int("new", len(res.fresh)))...)
			if h := rw.cfg.OnRewind; h != nil {
				h(Info{StreamID: key.Stream, Perspective: key.Perspective, FromVersion: res.from, TriggerVersion: trigger, Replayed: res.replayed, New: len(res.fresh), Duration: rw.Now().Sub(start)})
			}
			return res.fresh, pair.Recovered(), nil
		}
		if ctx.Err() != nil {
			return nil, pair.Stopped(), nil
		}
		if replayMoved(err) && moves < replayMovedRetries {
			// Replay again, from the model saved meanwhile.
			moves++
			continue
		}
		var rf *replayFailure
		if !errors.As(err, &rf) {
			return nil, pair.InfraFailed("rewinding", err), nil
		}
		dead, end := rw.replayFailed(ctx, key, rows, rf.event.ID, rf.event.Version, rf.cause)
		if !dead || try >= rewindRetries {
			return nil, end, nil
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
// (nothing is charged: that instance rewinds the pair). The ending is the
// rewind's when it stops there (see failure.Failures.EventFailed and
// Failed).
func (rw *Rewinder) replayFailed(ctx context.Context, key pair.Key, rows []ports.WorkItem, eventID uuid.UUID, version int64, cause error) (bool, pair.Ending) {
	if i := slices.IndexFunc(rows, func(r ports.WorkItem) bool { return r.EventID == eventID }); i >= 0 {
		switch outcome, end := rw.fail.EventFailed(ctx, key, rows[i], cause); outcome {
		case failure.DeadLettered:
			return true, end
		case failure.Stop:
			return false, end
		}
		return false, rw.fail.ReportFailure(ctx, key, rows[i], nil, uuid.Nil, 0, cause)
	}
	return false, rw.fail.Failed(ctx, key, ports.Failure{
		StreamID:           key.Stream,
		Perspective:        key.Perspective,
		FailedEventID:      eventID,
		FailedEventVersion: version,
		Error:              cause.Error(),
		RetryAt:            rw.Now().Add(rw.fail.RetryDelay(1)),
	}, version, 1, cause)
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
func (rw *Rewinder) lockPair(ctx context.Context, key pair.Key, reason string) (func(), bool) {
	o := rw.cfg
	params := &ports.StreamLockParams{StreamID: key.Stream, Perspective: key.Perspective, InstanceID: rw.cfg.InstanceID, Reason: reason, Duration: o.LockTimeout, Now: rw.ParamNow()}
	ok, err := rw.cfg.Rewind.StreamLockAcquire(ctx, params)
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
			switch ok, err := rw.cfg.Rewind.StreamLockAcquire(ctx, &p); {
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
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lockReleaseTimeout)
		defer cancel()
		if err := rw.cfg.Rewind.StreamLockRelease(rctx, params); err != nil {
			rw.Faults.Fail(ctx, "releasing stream locks", err, pair.Attrs(key.Stream, key.Perspective)...)
			return
		}
		rw.Faults.OK(ctx, "releasing stream locks")
	}, true
}
