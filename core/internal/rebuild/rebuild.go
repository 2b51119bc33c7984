// Package rebuild carries out the rebuild requests stored for the worker's
// perspectives (ports.RebuildQueue), one at a time, through a Rebuilder:
// the machinery of Worker.Rebuild.
package rebuild

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/ports"
)

// releaseTimeout bounds the release of a request at stop.
const releaseTimeout = 5 * time.Second

// rebuildProgressEvery is the least time between two progress reports of a
// rebuild request that moved on.
const rebuildProgressEvery = time.Second

// errRebuildClaimLost ends the run of a rebuild request whose claim no
// longer stands: another instance took it over, an operator cancelled it,
// or it could not be renewed before it expired.
var errRebuildClaimLost = errors.New("the claim of the rebuild request was lost")

// A Queue carries out the rebuild requests stored for the worker's
// perspectives (ports.RebuildQueue), one at a time, through its Rebuilder.
//
// Every Config.PollInterval (and once at start) it claims requests
// until none is left, carrying out each before it claims the next. A
// request's claim lasts Config.LockTimeout; while the request runs, its
// figures are recorded whenever they moved on, at most once per second,
// and at least every Rewind.KeepAlive, each report renewing the claim. A
// report refused because the claim no longer stands (taken over after it
// expired, or the request cancelled) stops the run at once. So do reports
// that kept failing for Rewind.LockTimeout - Rewind.KeepAlive since the
// last one recorded: the run stops a KeepAlive before its claim expires,
// so that two instances never run one request at once (unless their
// clocks and the backend's drift apart by more than that). The stream in
// hand keeps its model as it was: a replay saves it only once whole.
//
// Streams are rebuilt in byte order of their ids, and the last one done is
// recorded with the figures: a request resumed by another instance, or by
// this one after a release, skips the streams done before. A stream
// rebuilt again after a crash (done, but not yet recorded) is rebuilt from
// scratch again, which changes nothing.
//
// Outcomes: a request whose streams were all rebuilt is finished done; one
// stopped by an event its perspective cannot replay (decode or apply
// error, an apply abandoned) or by a request the backend refuses is
// finished failed with the error; one stopped by anything else (a backend
// error, a pair's lock held by a rewind elsewhere) is released, its
// figures recorded, and claimed again (by any instance) at the next poll.
// At Worker.Stop the request in hand is released the same way, so another
// instance resumes it at once rather than after its claim expires.
type Queue struct {
	*base.Env
	cfg Config
}

// Config is what a Queue reads.
type Config struct {
	// Rebuilds stores the requests; nil: the Queue does nothing.
	Rebuilds   ports.RebuildQueue
	InstanceID uuid.UUID
	// PollInterval is the time between two claims of requests.
	PollInterval time.Duration
	// LockTimeout is how long a claim lasts; KeepAlive how often it is
	// renewed at least.
	LockTimeout, KeepAlive time.Duration
	// Perspectives returns those whose requests this instance carries
	// out, read when Run starts.
	Perspectives func() []string
	Rebuilder    Rebuilder
	// OnRequest is called with a request whenever this instance claimed
	// it, reported its progress or ended it; nil for none.
	OnRequest func(ports.RebuildRequest)
}

// Rebuilder rebuilds the streams of a perspective.
type Rebuilder interface {
	// Open returns the rebuild of perspective's streams, or an error when
	// it cannot be rebuilt.
	Open(perspective string) (Streams, error)
	// Failed reports whether err, returned by Open or by Streams, ends a
	// request for good (an event the perspective cannot replay, a
	// request the backend refuses): anything else may pass, and the
	// request is resumed later.
	Failed(err error) bool
}

// Streams are the streams of one perspective to rebuild.
type Streams interface {
	// Count returns how many streams a request of streams (none: every
	// stream of the perspective) covers.
	Count(ctx context.Context, streams []uuid.UUID) (int64, error)
	// Each calls fn with each stream of the request after after, in byte
	// order of their ids, until fn returns an error.
	Each(ctx context.Context, streams []uuid.UUID, after uuid.UUID, fn func(stream uuid.UUID) error) error
	// Rebuild rebuilds one stream and returns how many events it replayed.
	Rebuild(ctx context.Context, stream uuid.UUID) (int, error)
}

// New returns a Queue.
func New(env *base.Env, cfg Config) *Queue { return &Queue{Env: env, cfg: cfg} }

// Run carries out requests until ctx ends; see Queue.
func (q *Queue) Run(ctx context.Context) {
	if q.cfg.Rebuilds == nil {
		return
	}
	names := q.cfg.Perspectives()
	if len(names) == 0 {
		return
	}
	q.claimAll(ctx, names)
	base.Every(ctx, q.Clock, q.cfg.PollInterval, func() { q.claimAll(ctx, names) })
}

// claimAll claims and carries out requests of names until none is left, a
// run ends in a release, or ctx ends.
func (q *Queue) claimAll(ctx context.Context, names []string) {
	const op = "claiming rebuild requests"
	for ctx.Err() == nil {
		res, err := q.cfg.Rebuilds.RebuildClaim(ctx, &ports.RebuildClaimParams{
			InstanceID: q.cfg.InstanceID, Perspectives: names, ClaimDuration: q.cfg.LockTimeout, Now: q.ParamNow(),
		})
		if err != nil {
			if ctx.Err() == nil {
				q.Faults.Fail(ctx, op, err)
			}
			return
		}
		q.Faults.OK(ctx, op)
		if !res.Claimed || !q.run(ctx, res.Request) {
			return
		}
	}
}

// run carries out the claimed request req and reports whether the next
// one may be claimed at once (false after a release: what stopped it may
// stop the next, and the poll interval is its backoff).
func (q *Queue) run(ctx context.Context, req ports.RebuildRequest) bool {
	log := q.Log.With(slog.String("rebuild_id", req.ID.String()), slog.String("perspective", req.Perspective), slog.Int("attempt", req.Attempt))
	log.InfoContext(ctx, "rebuild request claimed", slog.Int("streams", len(req.StreamIDs)),
		slog.Int64("streams_done", req.StreamsDone), slog.String("resume_after", req.ResumeAfter.String()))
	q.notify(req)
	tr := &rebuildTracker{figures: req.RebuildFigures}
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		q.keepClaim(runCtx, log, req, tr, stop)
	}()
	err := q.carryOut(runCtx, req, tr)
	stop(nil)
	<-kept
	req.RebuildFigures = tr.get()

	switch {
	case ctx.Err() != nil:
		q.release(ctx, log, req, "rebuild request released at stop; another instance resumes it")
		return false
	case errors.Is(context.Cause(runCtx), errRebuildClaimLost):
		log.WarnContext(ctx, "rebuild request stopped: its claim no longer stands (taken over, cancelled, or not renewed in time)",
			slog.Int64("streams_done", req.StreamsDone))
		return true
	case err == nil:
		return q.finish(ctx, log, req, "")
	case q.cfg.Rebuilder.Failed(err):
		return q.finish(ctx, log, req, err.Error())
	default:
		log.WarnContext(ctx, "rebuild request interrupted", slog.Any("error", err))
		q.release(ctx, log, req, "rebuild request released; it resumes at the next poll")
		return false
	}
}

// carryOut rebuilds the streams of req after its ResumeAfter, recording
// each in tr.
func (q *Queue) carryOut(ctx context.Context, req ports.RebuildRequest, tr *rebuildTracker) error {
	streams, err := q.cfg.Rebuilder.Open(req.Perspective)
	if err != nil {
		return err
	}
	total, err := streams.Count(ctx, req.StreamIDs)
	if err != nil {
		return err
	}
	tr.total(total)
	return streams.Each(ctx, req.StreamIDs, req.ResumeAfter, func(stream uuid.UUID) error {
		replayed, err := streams.Rebuild(ctx, stream)
		if err != nil {
			return err
		}
		tr.done(stream, replayed)
		return nil
	})
}

// keepClaim reports the figures of tr once per rebuildProgressEvery when
// they moved on, and every Config.KeepAlive when not, renewing req's claim,
// until ctx ends. It calls lost when a report is refused because the claim
// no longer stands, or when reports kept failing until the claim was about
// to expire.
func (q *Queue) keepClaim(ctx context.Context, log *slog.Logger, req ports.RebuildRequest, tr *rebuildTracker, lost context.CancelCauseFunc) {
	const op = "reporting rebuild progress"
	o := q.cfg
	reported := req.RebuildFigures
	last := q.Now()
	t := q.Clock.NewTimer(rebuildProgressEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		now := q.Now()
		figures := tr.get()
		if figures != reported || now.Sub(last) >= o.KeepAlive {
			err := q.cfg.Rebuilds.RebuildProgress(ctx, &ports.RebuildProgressParams{
				ID: req.ID, InstanceID: q.cfg.InstanceID, Attempt: req.Attempt, RebuildFigures: figures,
				ClaimDuration: o.LockTimeout, Now: q.ParamNow(),
			})
			switch {
			case err == nil:
				q.Faults.OK(ctx, op)
				reported, last = figures, now
				req.RebuildFigures = figures
				q.notify(req)
			case ctx.Err() != nil:
				return
			case errors.Is(err, ports.ErrVersionConflict) || errors.Is(err, ports.ErrNotFound):
				lost(errRebuildClaimLost)
				return
			case now.Sub(last) >= o.LockTimeout-o.KeepAlive:
				log.ErrorContext(ctx, op+" failed for too long; stopping the request before its claim expires", slog.Any("error", err))
				lost(errRebuildClaimLost)
				return
			default:
				q.Faults.Fail(ctx, op, err)
			}
		}
		t.Reset(rebuildProgressEvery)
	}
}

// finish records the end of req, done with an empty errText, failed with
// it, and reports whether the next request may be claimed.
func (q *Queue) finish(ctx context.Context, log *slog.Logger, req ports.RebuildRequest, errText string) bool {
	err := q.cfg.Rebuilds.RebuildFinish(ctx, &ports.RebuildFinishParams{
		ID: req.ID, InstanceID: q.cfg.InstanceID, Attempt: req.Attempt, RebuildFigures: req.RebuildFigures, Error: errText, Now: q.ParamNow(),
	})
	attrs := []any{slog.Int64("streams_done", req.StreamsDone), slog.Int64("events_replayed", req.EventsReplayed)}
	switch {
	case err == nil:
		req.Status, req.Error = ports.RebuildDone, errText
		if errText != "" {
			req.Status = ports.RebuildFailed
			log.ErrorContext(ctx, "rebuild request failed", append(attrs, slog.String("error", errText))...)
		} else {
			log.InfoContext(ctx, "rebuild request done", attrs...)
		}
		q.notify(req)
		return true
	case errors.Is(err, ports.ErrVersionConflict) || errors.Is(err, ports.ErrNotFound):
		log.WarnContext(ctx, "rebuild request ended, but its claim no longer stands (taken over, or cancelled)", attrs...)
		return true
	default:
		// The claim expires and another run resumes the request, to the
		// same end.
		log.ErrorContext(ctx, "recording the end of a rebuild request", append(attrs, slog.Any("error", err))...)
		return false
	}
}

// release gives req's claim up with its figures, so that the next claim,
// by any instance, resumes it. It runs when ctx may be done (at Stop), so
// it is bounded by its own timeout.
func (q *Queue) release(ctx context.Context, log *slog.Logger, req ports.RebuildRequest, msg string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	err := q.cfg.Rebuilds.RebuildProgress(rctx, &ports.RebuildProgressParams{
		ID: req.ID, InstanceID: q.cfg.InstanceID, Attempt: req.Attempt, RebuildFigures: req.RebuildFigures, Release: true, Now: q.ParamNow(),
	})
	attrs := []any{slog.Int64("streams_done", req.StreamsDone), slog.String("resume_after", req.ResumeAfter.String())}
	switch {
	case err == nil:
		log.InfoContext(ctx, msg, attrs...)
		req.Status, req.ClaimExpiry = ports.RebuildPending, time.Time{}
		q.notify(req)
	case errors.Is(err, ports.ErrVersionConflict) || errors.Is(err, ports.ErrNotFound):
		log.WarnContext(ctx, "releasing a rebuild request, whose claim no longer stands", attrs...)
	default:
		log.WarnContext(ctx, "releasing a rebuild request failed; it resumes once its claim expired", append(attrs, slog.Any("error", err))...)
	}
}

// notify calls OnRequest with req.
func (q *Queue) notify(req ports.RebuildRequest) {
	if h := q.cfg.OnRequest; h != nil {
		h(req)
	}
}

// rebuildTracker holds the figures of a running request: the rebuild
// writes them, the claim keeper reads them.
type rebuildTracker struct {
	mu      sync.Mutex
	figures ports.RebuildFigures
}

func (t *rebuildTracker) get() ports.RebuildFigures {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.figures
}

// total records the streams the request covers, never fewer than those
// done (a stream may have lost its events since).
func (t *rebuildTracker) total(n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.figures.StreamsTotal = max(n, t.figures.StreamsDone)
}

// done records stream rebuilt with replayed events.
func (t *rebuildTracker) done(stream uuid.UUID, replayed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.figures.StreamsDone++
	t.figures.StreamsTotal = max(t.figures.StreamsTotal, t.figures.StreamsDone)
	t.figures.EventsReplayed += int64(replayed)
	t.figures.ResumeAfter = stream
}
