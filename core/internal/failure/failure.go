// Package failure decides what a failed apply costs: an attempt and a
// retry after a backoff while its pair waits, or, once its attempts are
// used up (or it cannot be applied at all), the move to dead letters. The
// drain and the rewinder charge their failures through it, and end their
// turn of the pair with the ending it returns.
package failure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/complete"
	"github.com/vantage-go/vantage/core/internal/dedup"
	"github.com/vantage-go/vantage/core/internal/modelstore"
	"github.com/vantage-go/vantage/core/internal/monitor"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/core/internal/perspective"
	"github.com/vantage-go/vantage/core/internal/retry"
	"github.com/vantage-go/vantage/core/internal/telemetry"
	"github.com/vantage-go/vantage/ports"
)

// Unlimited is the MaxAttempts of events retried forever.
const Unlimited = -1

// Config is what the failure handling reads.
type Config struct {
	DeadLetters ports.DeadLetterStore
	InstanceID  uuid.UUID
	Generation  string
	// MaxAttempts is how many attempts an event gets before it is
	// dead-lettered; Unlimited retries forever.
	MaxAttempts int
	// Retry spaces the retries of a failed event.
	Retry   retry.Backoff
	Metrics *telemetry.Metrics
	// OnDeadLettered and OnFailure announce a dead letter and a reported
	// failure; nil for none.
	OnDeadLettered func(ports.DeadLetter)
	OnFailure      func(ports.Failure)
}

// Failures charges failed applies (see the package doc). What a failure
// does to its pair it returns as the run's pair.Ending: the pair's owner
// holds the pair back, and only then is a failure reported.
type Failures struct {
	*base.Env
	cfg       Config
	completer *complete.Completer
	cache     *dedup.Cache
}

// New returns the failure handling of a worker: it reports through
// completer and records applied rows in cache.
func New(env *base.Env, cfg Config, completer *complete.Completer, cache *dedup.Cache) *Failures {
	return &Failures{Env: env, cfg: cfg, completer: completer, cache: cache}
}

// RetryDelay is the wait before the retry of an event that failed
// attempts times.
func (fl *Failures) RetryDelay(attempts int) time.Duration {
	return fl.cfg.Retry.Delay(attempts - 1)
}

// Outcome is what EventFailed made of a failed apply.
type Outcome int

const (
	// Retry: the event has attempts left; report the failure.
	Retry Outcome = iota
	// DeadLettered: it used up its attempts and was moved to dead
	// letters (or is gone already); its pair goes on with the next event.
	DeadLettered
	// Stop: moving it to dead letters failed, and the run stops with the
	// ending EventFailed returns: after a backend error the pair retries
	// after its backoff; after a refusal because another instance took
	// the stream (or it was released), nothing was charged and the pair
	// is left to that instance, which may have applied the event already.
	Stop
)

// EventFailed decides what a failed apply of row costs: one attempt, and
// when that was the last, the move to dead letters with the cause, at once,
// so the pair goes on without waiting for a retry. With Stop, the ending
// is the run's (see MoveEnding); with any other outcome it is Stopped.
func (fl *Failures) EventFailed(ctx context.Context, k pair.Key, row ports.WorkItem, cause error) (Outcome, pair.Ending) {
	fl.cfg.Metrics.ApplyFailed(ctx, k.Perspective)
	attempts := row.Attempts + 1
	limit := fl.cfg.MaxAttempts
	if limit == Unlimited || attempts < limit {
		return Retry, pair.Stopped()
	}
	reason := Reason(cause)
	res, err := fl.cfg.DeadLetters.DeadLetterMove(ctx, &ports.DeadLetterMoveParams{
		WorkID:     row.WorkID,
		InstanceID: fl.cfg.InstanceID,
		Generation: fl.cfg.Generation,
		Reason:     reason,
		Error:      cause.Error(),
		Attempts:   attempts,
		Now:        fl.ParamNow(),
	})
	if err != nil {
		return Stop, fl.MoveEnding(ctx, k, "moving work to dead letters", err)
	}
	if res.Moved {
		fl.deadLettered(ctx, res.DeadLetter)
	}
	return DeadLettered, pair.Stopped()
}

// MoveEnding is how a run of the pair k ends whose move to dead letters
// returned err: an infrastructure error holds the pair back for its
// backoff (op names the call); a refusal because the stream is another
// instance's now (ports.ErrLeaseLost) costs nothing, is only noted, and
// leaves the pair to that instance (Stopped).
func (fl *Failures) MoveEnding(ctx context.Context, k pair.Key, op string, err error) pair.Ending {
	if errors.Is(err, ports.ErrLeaseLost) {
		fl.LeaseLost(ctx, k, err)
		return pair.Stopped()
	}
	return pair.InfraFailed(op, err)
}

// LeaseLost notes that a write of the pair k was refused because the
// stream is another instance's now (ports.ErrLeaseLost): it costs nothing,
// and the pair is left to that instance.
func (fl *Failures) LeaseLost(ctx context.Context, k pair.Key, err error) {
	fl.Log.InfoContext(ctx, "stream taken by another instance; leaving its pair to it",
		append(pair.Attrs(k.Stream, k.Perspective), slog.Any("error", err))...)
}

// deadLettered logs and announces a dead letter.
func (fl *Failures) deadLettered(ctx context.Context, dl ports.DeadLetter) {
	fl.cfg.Metrics.DeadLettered(ctx, dl)
	fl.Log.WarnContext(ctx, "event dead-lettered; its pair goes on with the next event",
		append(pair.Attrs(dl.StreamID, dl.Perspective), slog.Int64("version", dl.EventVersion), slog.String("event_id", dl.EventID.String()),
			slog.Int("attempts", dl.Attempts), slog.String("reason", dl.Reason), slog.String("error", dl.Error))...)
	if h := fl.cfg.OnDeadLettered; h != nil {
		h(dl)
	}
}

// Reason classifies the cause of a failed apply for its dead letter.
func Reason(cause error) string {
	switch {
	case errors.Is(cause, monitor.ErrDeadline), errors.Is(cause, monitor.ErrAbandoned), errors.Is(cause, modelstore.ErrWriteDeadline):
		return ports.ReasonTimedOut
	case errors.Is(cause, perspective.ErrUnknownEventType), errors.Is(cause, perspective.ErrNoHandler):
		return ports.ReasonUnknownType
	case errors.Is(cause, perspective.ErrUndecodable):
		return ports.ReasonUndecodable
	}
	return ports.ReasonFailed
}

// ReportFailure returns the ending of a run whose row failed with
// attempts left, after the rows in applied completed: the pair is held
// back until the failure is acknowledged (which releases the failed row,
// retried after a backoff) and its retry time, and the failure reported.
func (fl *Failures) ReportFailure(ctx context.Context, k pair.Key, row ports.WorkItem, applied []uuid.UUID, lastID uuid.UUID, lastVersion int64, cause error) pair.Ending {
	attempts := row.Attempts + 1
	retryAt := fl.Now().Add(fl.RetryDelay(attempts))
	f := ports.Failure{
		StreamID:       k.Stream,
		Perspective:    k.Perspective,
		LastEventID:    lastID,
		LastVersion:    lastVersion,
		AppliedWorkIDs: applied,
		FailedWorkIDs:  []uuid.UUID{row.WorkID},
		Attempt:        attempts,
		Error:          cause.Error(),
		RetryAt:        retryAt,
	}
	return fl.Failed(ctx, k, f, row.EventVersion, attempts, cause)
}

// Failed returns the ending of a run that failed with f: the pair is held
// back until f is acknowledged and its retry time, and f is reported once
// it is (see pair.Failed).
func (fl *Failures) Failed(ctx context.Context, k pair.Key, f ports.Failure, version int64, attempts int, cause error) pair.Ending {
	if len(f.AppliedWorkIDs) > 0 {
		fl.cache.AddRange(k.Dedup(), f.AppliedWorkIDs)
	}
	fl.cfg.Metrics.FailureReported(ctx, k.Perspective, Reason(cause))
	fl.Log.WarnContext(ctx, "perspective failed on event; will retry",
		append(pair.Attrs(k.Stream, k.Perspective), slog.Int64("version", version), slog.Int("attempts", attempts),
			slog.Int("max_attempts", fl.cfg.MaxAttempts), slog.Time("retry_at", f.RetryAt), slog.Any("error", cause))...)
	return pair.Failed(f.RetryAt, func(ctx context.Context) {
		// The strategy keeps the failure until it is acknowledged; one
		// that cannot be reported is given up on, and the pair drained
		// again after a backoff.
		fl.completer.ReportFailure(ctx, f)
		if h := fl.cfg.OnFailure; h != nil {
			h(f)
		}
	})
}

// DeadLetterExhausted moves rows whose attempts are used up (by takeovers
// from dead instances: a failure that uses up the last attempt
// dead-letters its row at once) to dead letters before paying for decoding
// and applying, and returns the others. A row at or below position (the
// pair's cursor) that is not late was applied and saved, its completion
// lost (the takeover that charged it took the stream of an instance that
// died before completing): it is returned, to complete as a re-delivery.
// An error of the backend is returned (see MoveEnding): the pair retries,
// or, when the stream is another instance's now, leaves it to that
// instance.
func (fl *Failures) DeadLetterExhausted(ctx context.Context, rows []ports.WorkItem, position int64) ([]ports.WorkItem, error) {
	limit := fl.cfg.MaxAttempts
	exhausted := func(r ports.WorkItem) bool {
		return r.Attempts >= limit && (r.Late || r.EventVersion > position)
	}
	if limit == Unlimited || !slices.ContainsFunc(rows, exhausted) {
		return rows, nil
	}
	return fl.deadLetterRows(ctx, rows, func(r ports.WorkItem) (string, string, bool) {
		return ports.ReasonMaxAttemptsExceeded, "", exhausted(r)
	})
}

// DeadLetterLate moves the late rows below position to dead letters, when
// the engine cannot rewind: completing them would drop their events
// silently, and applying them out of order would corrupt the model. A
// requeue applies them in order once rewinds are on. It returns the other
// rows.
func (fl *Failures) DeadLetterLate(ctx context.Context, rows []ports.WorkItem, position int64) ([]ports.WorkItem, error) {
	return fl.deadLetterRows(ctx, rows, func(r ports.WorkItem) (string, string, bool) {
		return ports.ReasonLate, fmt.Sprintf("event stored below the cursor (version %d, cursor at %d) while rewinds are off; requeue it once rewinds are on",
			r.EventVersion, position), r.Late && r.EventVersion <= position
	})
}

// deadLetterRows moves the rows that match selects to dead letters, with
// the reason and error it gives, and returns the other rows. An error of
// the backend is returned at the first row it refuses, ports.ErrLeaseLost
// included (see MoveEnding).
func (fl *Failures) deadLetterRows(ctx context.Context, rows []ports.WorkItem, match func(ports.WorkItem) (reason, cause string, ok bool)) ([]ports.WorkItem, error) {
	keep := rows[:0:0]
	for _, r := range rows {
		reason, cause, ok := match(r)
		if !ok {
			keep = append(keep, r)
			continue
		}
		res, err := fl.cfg.DeadLetters.DeadLetterMove(ctx, &ports.DeadLetterMoveParams{
			WorkID:     r.WorkID,
			InstanceID: fl.cfg.InstanceID,
			Generation: fl.cfg.Generation,
			Reason:     reason,
			Error:      cause,
			Attempts:   r.Attempts,
			Now:        fl.ParamNow(),
		})
		if err != nil {
			return nil, err
		}
		if res.Moved {
			fl.deadLettered(ctx, res.DeadLetter)
		}
	}
	return keep, nil
}
