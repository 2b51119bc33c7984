package base

import (
	"context"
	"time"

	"github.com/vantage-go/vantage/ports"
)

// Signal wakes the reader of c, a channel buffered 1, without blocking:
// wakes coalesce while one is pending.
func Signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// ResetTimer re-arms t for d, draining a fire nobody received, so that
// the next receive waits for the new deadline.
func ResetTimer(t ports.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C():
		default:
		}
	}
	t.Reset(d)
}

// LazyTimer is a ports.Timer created on its first Reset, so that a loop
// that has nothing to wait for holds no timer (which tests on a fake clock
// count).
type LazyTimer struct{ t ports.Timer }

// Reset arms the timer for d, creating it on clock the first time.
func (l *LazyTimer) Reset(clock ports.Clock, d time.Duration) {
	if l.t == nil {
		l.t = clock.NewTimer(d)
		return
	}
	ResetTimer(l.t, d)
}

// C is the timer's channel, nil (never ready) before the first Reset.
func (l *LazyTimer) C() <-chan time.Time {
	if l.t == nil {
		return nil
	}
	return l.t.C()
}

// Stop stops the timer, if it was created.
func (l *LazyTimer) Stop() {
	if l.t != nil {
		l.t.Stop()
	}
}

// Every calls fn each interval after the previous call returned, on clock,
// until ctx is done.
func Every(ctx context.Context, clock ports.Clock, interval time.Duration, fn func()) {
	t := clock.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		fn()
		t.Reset(interval)
	}
}

// ewmaWeight is the weight of a new sample in the moving averages of EWMA:
// an eighth, so one outlier moves an average little and a change of load
// shows within a few dozen samples.
const ewmaWeight = 8

// EWMA folds sample into the moving average avg; a zero avg (no sample
// yet) takes the sample as it is.
func EWMA(avg, sample time.Duration) time.Duration {
	if avg == 0 {
		return max(sample, 1)
	}
	return avg + (sample-avg)/ewmaWeight
}
