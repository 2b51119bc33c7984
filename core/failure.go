package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// Backoff of a pair whose drain met an infrastructure error (a backend call
// failed): it starts at infraRetryInitial and grows to infraRetryMax, with
// jitter, for as long as the pair keeps failing. The pair keeps its rows
// and no attempt is counted: the event is not at fault.
const (
	infraRetryInitial = 100 * time.Millisecond
	infraRetryMax     = 5 * time.Second
	// unknownPerspectiveRetry holds back work of a perspective this
	// instance does not know (another instance may, during a deploy).
	unknownPerspectiveRetry = 30 * time.Second
)

// parking holds a pair back: until its failure is acknowledged by the
// backend (which releases the failed row and schedules it) and its retry
// time passed, or until a time (an infrastructure retry, a debounce, a lock
// retry). Before the acknowledgement a fetch would still see the failed row
// leased to us and apply it again.
type parking struct {
	until time.Time
	acked bool
}

// isParked reports whether the pair is held back, forgetting a parking that
// is over.
func (w *Worker) isParked(k pairKey) bool {
	w.parkedMu.Lock()
	defer w.parkedMu.Unlock()
	p, ok := w.parked[k]
	if !ok {
		return false
	}
	if p.acked && !w.now().Before(p.until) {
		delete(w.parked, k)
		return false
	}
	return true
}

func (w *Worker) park(k pairKey, until time.Time) {
	w.parkedMu.Lock()
	defer w.parkedMu.Unlock()
	w.parked[k] = parking{until: until}
}

// parkFor holds a pair back until until, and drains its stream again then.
func (w *Worker) parkFor(k pairKey, until time.Time) {
	w.parkedMu.Lock()
	w.parked[k] = parking{until: until, acked: true}
	w.parkedMu.Unlock()
	w.wakes.at(k.stream, until)
}

// staleFetch reports whether a fetch (by its sequence number) started before
// the latest acknowledged failure of the pair.
func (w *Worker) staleFetch(k pairKey, seq uint64) bool {
	w.parkedMu.Lock()
	defer w.parkedMu.Unlock()
	acked, ok := w.failAcked[k]
	if !ok {
		return false
	}
	if seq <= acked {
		return true
	}
	delete(w.failAcked, k) // fresh rows from now on
	return false
}

// parkAcked notes that the failure of a pair reached the backend: its
// parking ends at its retry time, when the stream is drained again.
func (w *Worker) parkAcked(k pairKey) {
	w.parkedMu.Lock()
	w.failAcked[k] = w.fetchSeq.Load()
	p, ok := w.parked[k]
	if ok {
		p.acked = true
		w.parked[k] = p
	}
	w.parkedMu.Unlock()
	if ok {
		w.wakes.at(k.stream, p.until)
	}
}

// failureRetryDelay is FailureRetryBase doubled per attempt used, capped at
// FailureRetryMax: 60s, 120s, 240s, 300s … with the defaults.
func (w *Worker) failureRetryDelay(attempts int) time.Duration {
	d := w.opts.FailureRetryBase
	for i := 0; i < attempts && d < w.opts.FailureRetryMax; i++ {
		d *= 2
	}
	return min(d, w.opts.FailureRetryMax)
}

// infraFailed holds a pair back after a backend call failed on its behalf,
// and drains it again after a short backoff. The rows stay leased and no
// attempt is counted: an infrastructure error is never the event's fault.
func (w *Worker) infraFailed(ctx context.Context, k pairKey, op string, err error) {
	if ctx.Err() != nil {
		return
	}
	w.parkedMu.Lock()
	b, ok := w.infraBackoff[k]
	if !ok {
		b = backoff.NewExponentialBackOff(
			backoff.WithInitialInterval(infraRetryInitial),
			backoff.WithMaxInterval(infraRetryMax),
			backoff.WithMaxElapsedTime(0),
			backoff.WithClockProvider(w.clock),
		)
		w.infraBackoff[k] = b
		w.infraPairs.Add(1)
	}
	delay := b.NextBackOff()
	w.parkedMu.Unlock()
	w.parkFor(k, w.now().Add(delay))
	w.faults.fail(ctx, op, err, append(pairAttrs(k.stream, k.perspective), slog.Duration("retry_in", delay))...)
}

// infraRecovered forgets the backoff of a pair whose drain went through.
func (w *Worker) infraRecovered(k pairKey) {
	if w.infraPairs.Load() == 0 {
		return
	}
	w.parkedMu.Lock()
	if _, ok := w.infraBackoff[k]; ok {
		delete(w.infraBackoff, k)
		w.infraPairs.Add(-1)
	}
	w.parkedMu.Unlock()
}

// retrySoon drains the pair's stream again at once (after its current
// drain).
func (w *Worker) retrySoon(k pairKey) { w.wakes.at(k.stream, w.now()) }

// saveEachFor saves the pair event by event until a drain of it completes.
func (w *Worker) saveEachFor(k pairKey) {
	w.parkedMu.Lock()
	if !w.saveEach[k] {
		w.saveEach[k] = true
		w.saveEachCount.Add(1)
	}
	w.parkedMu.Unlock()
}

// saveEachDone ends saveEachFor.
func (w *Worker) saveEachDone(k pairKey) {
	if w.saveEachCount.Load() == 0 {
		return
	}
	w.parkedMu.Lock()
	if w.saveEach[k] {
		delete(w.saveEach, k)
		w.saveEachCount.Add(-1)
	}
	w.parkedMu.Unlock()
}

// unknownPerspective holds back work of a perspective this instance does not
// know; it is logged once in a while, never charged to the events.
func (w *Worker) unknownPerspective(ctx context.Context, k pairKey) {
	w.parkFor(k, w.now().Add(unknownPerspectiveRetry))
	w.faults.fail(ctx, "draining perspective "+k.perspective,
		fmt.Errorf("no perspective named %q is registered in this instance; its work waits", k.perspective),
		slog.String("perspective", k.perspective))
}

// failureOutcome is what eventFailed made of a failed apply.
type failureOutcome int

const (
	// failureRetry: the event has attempts left; report the failure.
	failureRetry failureOutcome = iota
	// failureDeadLettered: it used up its attempts and was moved to dead
	// letters (or is gone already); its pair goes on with the next event.
	failureDeadLettered
	// failureInfra: moving it to dead letters failed; the pair retries.
	failureInfra
)

// eventFailed decides what a failed apply of row costs: one attempt, and
// when that was the last, the move to dead letters with the cause, at once,
// so the pair goes on without waiting for a retry.
func (w *Worker) eventFailed(ctx context.Context, k pairKey, row ports.WorkItem, cause error) failureOutcome {
	attempts := row.Attempts + 1
	limit := w.opts.MaxPerspectiveEventAttempts
	if limit == Unlimited || attempts < limit {
		return failureRetry
	}
	reason := failureReason(cause)
	res, err := w.backend.DeadLetters.DeadLetterMove(ctx, &ports.DeadLetterMoveParams{
		WorkID:     row.WorkID,
		InstanceID: w.opts.InstanceID,
		Generation: w.opts.Generation,
		Reason:     reason,
		Error:      cause.Error(),
		Attempts:   attempts,
		Now:        w.paramNow(),
	})
	if err != nil {
		w.infraFailed(ctx, k, "moving work to dead letters", err)
		return failureInfra
	}
	if res.Moved {
		w.deadLettered(ctx, res.DeadLetter)
	}
	return failureDeadLettered
}

// deadLettered logs and announces a dead letter.
func (w *Worker) deadLettered(ctx context.Context, dl ports.DeadLetter) {
	w.log.WarnContext(ctx, "event dead-lettered; its pair goes on with the next event",
		append(pairAttrs(dl.StreamID, dl.Perspective), slog.Int64("version", dl.EventVersion), slog.String("event_id", dl.EventID.String()),
			slog.Int("attempts", dl.Attempts), slog.String("reason", dl.Reason), slog.String("error", dl.Error))...)
	if h := w.opts.Hooks.OnDeadLettered; h != nil {
		h(dl)
	}
}

// failureReason classifies the cause of a failed apply for its dead letter.
func failureReason(cause error) string {
	switch {
	case errors.Is(cause, errApplyDeadline), errors.Is(cause, errApplyAbandoned):
		return ports.ReasonTimedOut
	case errors.Is(cause, ErrUnknownEventType), errors.Is(cause, ErrNoHandler):
		return ports.ReasonUnknownType
	case errors.Is(cause, ErrUndecodable):
		return ports.ReasonUndecodable
	}
	return ports.ReasonFailed
}

// reportFailure reports that row failed, after the rows in applied
// completed: the failed row is released and retried after a backoff, and
// the pair is held back until then.
func (w *Worker) reportFailure(ctx context.Context, k pairKey, row ports.WorkItem, applied []uuid.UUID, lastID uuid.UUID, lastVersion int64, cause error) {
	attempts := row.Attempts + 1
	retryAt := w.now().Add(w.failureRetryDelay(attempts))
	f := ports.Failure{
		StreamID:       k.stream,
		Perspective:    k.perspective,
		LastEventID:    lastID,
		LastVersion:    lastVersion,
		AppliedWorkIDs: applied,
		FailedWorkIDs:  []uuid.UUID{row.WorkID},
		Error:          cause.Error(),
		RetryAt:        retryAt,
	}
	w.failed(ctx, k, f, row.EventVersion, attempts, cause)
}

// failed parks the pair and reports f.
func (w *Worker) failed(ctx context.Context, k pairKey, f ports.Failure, version int64, attempts int, cause error) {
	ctx = context.WithoutCancel(ctx)
	if len(f.AppliedWorkIDs) > 0 {
		w.cache.AddRange(f.AppliedWorkIDs)
	}
	w.park(k, f.RetryAt)
	w.log.WarnContext(ctx, "perspective failed on event; will retry",
		append(pairAttrs(k.stream, k.perspective), slog.Int64("version", version), slog.Int("attempts", attempts),
			slog.Int("max_attempts", w.opts.MaxPerspectiveEventAttempts), slog.Time("retry_at", f.RetryAt), slog.Any("error", cause))...)
	if err := w.strategy.ReportFailure(ctx, f); err != nil {
		w.log.ErrorContext(ctx, "reporting failure failed; the event is retried after its lease", slog.Any("error", err))
	}
	if h := w.opts.Hooks.OnFailure; h != nil {
		h(f)
	}
}

// deadLetterExhausted moves rows whose attempts are used up (by takeovers
// from dead instances: a failure that uses up the last attempt
// dead-letters its row at once) to dead letters before paying for decoding
// and applying, and returns the others. An error of the backend is
// returned: the pair retries.
func (w *Worker) deadLetterExhausted(ctx context.Context, rows []ports.WorkItem) ([]ports.WorkItem, error) {
	limit := w.opts.MaxPerspectiveEventAttempts
	if limit == Unlimited || !slices.ContainsFunc(rows, func(r ports.WorkItem) bool { return r.Attempts >= limit }) {
		return rows, nil
	}
	return w.deadLetterRows(ctx, rows, func(r ports.WorkItem) (string, string, bool) {
		return ports.ReasonMaxAttemptsExceeded, "", r.Attempts >= limit
	})
}

// deadLetterLate moves the late rows below position to dead letters, when
// the engine cannot rewind: completing them would drop their events
// silently, and applying them out of order would corrupt the model. A
// requeue applies them in order once rewinds are on. It returns the other
// rows.
func (w *Worker) deadLetterLate(ctx context.Context, rows []ports.WorkItem, position int64) ([]ports.WorkItem, error) {
	return w.deadLetterRows(ctx, rows, func(r ports.WorkItem) (string, string, bool) {
		return ports.ReasonLate, fmt.Sprintf("event stored below the cursor (version %d, cursor at %d) while rewinds are off; requeue it once rewinds are on",
			r.EventVersion, position), r.Late && r.EventVersion <= position
	})
}

// deadLetterRows moves the rows that match selects to dead letters, with
// the reason and error it gives, and returns the other rows. An error of
// the backend is returned: the pair retries.
func (w *Worker) deadLetterRows(ctx context.Context, rows []ports.WorkItem, match func(ports.WorkItem) (reason, cause string, ok bool)) ([]ports.WorkItem, error) {
	keep := rows[:0:0]
	for _, r := range rows {
		reason, cause, ok := match(r)
		if !ok {
			keep = append(keep, r)
			continue
		}
		res, err := w.backend.DeadLetters.DeadLetterMove(ctx, &ports.DeadLetterMoveParams{
			WorkID:     r.WorkID,
			InstanceID: w.opts.InstanceID,
			Generation: w.opts.Generation,
			Reason:     reason,
			Error:      cause,
			Attempts:   r.Attempts,
			Now:        w.paramNow(),
		})
		if err != nil {
			return nil, err
		}
		if res.Moved {
			w.deadLettered(ctx, res.DeadLetter)
		}
	}
	return keep, nil
}
