package modelstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/ports"
)

// ErrWriteDeadline is the cause of a projection write's context cancelled
// at Options.Drain.ApplyTimeout.
var ErrWriteDeadline = errors.New("projection write ran past its deadline")

// ErrGroupPatience is the cause of the writes of a shared save cut at its
// patience (see GroupPatience). It is not their event's fault: the pair is
// saved alone from then on, where only ApplyTimeout bounds its writes.
var ErrGroupPatience = errors.New("projection writes ran past the patience of a shared save")

// GroupPatience returns how long the writes of a table projection's save,
// all together, may run while the save is shared: grouped with the saves
// of other pairs into one transaction, every one of which waits for its
// commit, or sent by one of the two senders of grouped saves, which every
// save queued behind it waits for. Past the patience they are cut (see
// WithPatience), and the pair is saved alone, bounded by ApplyTimeout only.
//
// One second is far more than the writes of a healthy save take (a
// drain's save covers at most PerspectiveBatchSize events, milliseconds of
// statements), so only a stuck write meets it (a row lock an application
// transaction holds, a statement gone slow); and it keeps what a stuck
// write costs the pairs sharing its save below the lag an operator notices.
// A quarter of ApplyTimeout applies when that is shorter: an application
// that gives its writes a short deadline expects them quicker still, and
// the cut pair's own delay (the patience, then its save alone) stays a
// small part of the deadline it chose.
func GroupPatience(applyTimeout time.Duration) time.Duration {
	return min(applyTimeout/4, time.Second)
}

// WithPatience returns apply bounded by patience on clock: past it, its
// context is cancelled with ErrGroupPatience, and an error it returns then
// wraps ErrGroupPatience, whatever the writes made of their context (a
// cancelled statement may close its connection, which the adapter reports
// as the backend's failure).
func WithPatience(apply func(context.Context, ports.Tx) error, patience time.Duration, clock ports.Clock) func(context.Context, ports.Tx) error {
	return func(ctx context.Context, tx ports.Tx) error {
		pctx, release := ClockDeadline(ctx, clock, patience, ErrGroupPatience)
		err := apply(pctx, tx)
		release()
		if err != nil && ctx.Err() == nil && errors.Is(context.Cause(pctx), ErrGroupPatience) {
			return fmt.Errorf("%w (%s): %w", ErrGroupPatience, patience, err)
		}
		return err
	}
}

// ClockDeadline returns ctx cancelled with cause once d passed on clock,
// and the function that stops its timer, which must be called; the
// returned context's cause stays cause once it fired.
func ClockDeadline(ctx context.Context, clock ports.Clock, d time.Duration, cause error) (context.Context, func()) {
	cctx, cancel := context.WithCancelCause(ctx)
	timer := clock.NewTimer(d)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-timer.C():
			cancel(cause)
		case <-stop:
		}
	}()
	return cctx, func() {
		close(stop)
		timer.Stop()
		<-stopped
		cancel(nil)
	}
}

// WriteFailure is the failure of a projection's write: whose (the pair),
// which of the pending writes failed (-1: the reset) and why.
type WriteFailure struct {
	Key   pair.Key
	Index int
	Cause error
}

func (f *WriteFailure) Error() string { return f.Cause.Error() }
func (f *WriteFailure) Unwrap() error { return f.Cause }

// BackendFailedWrite reports whether err, the failure of a projection's
// save, is the backend's rather than its write's: the TxModelStore marks
// an Apply that failed because of the backend (a lost connection, a
// serialization failure, a deadlock) with ports.ErrTransient. A write
// cancelled at its deadline is its event's failure even so: cancelling a
// statement may close its connection, which the adapter cannot tell from
// a connection lost under it.
func BackendFailedWrite(err error) bool {
	return errors.Is(err, ports.ErrTransient) && !errors.Is(err, ErrWriteDeadline)
}

// WriteLimit bounds each write of a projection: timeout on clock.
type WriteLimit struct {
	Timeout time.Duration
	Clock   ports.Clock
}
