package core

import (
	"context"
	"time"

	"github.com/vantage-go/vantage/ports"
)

// signal wakes the reader of c, a channel buffered 1, without blocking:
// wakes coalesce while one is pending.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// resetTimer re-arms t for d, draining a fire nobody received, so that
// the next receive waits for the new deadline.
func resetTimer(t ports.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C():
		default:
		}
	}
	t.Reset(d)
}

// lazyTimer is a ports.Timer created on its first reset, so that a loop
// that has nothing to wait for holds no timer (which tests on a fake clock
// count).
type lazyTimer struct{ t ports.Timer }

func (l *lazyTimer) reset(clock ports.Clock, d time.Duration) {
	if l.t == nil {
		l.t = clock.NewTimer(d)
		return
	}
	resetTimer(l.t, d)
}

// c is the timer's channel, nil (never ready) before the first reset.
func (l *lazyTimer) c() <-chan time.Time {
	if l.t == nil {
		return nil
	}
	return l.t.C()
}

func (l *lazyTimer) stop() {
	if l.t != nil {
		l.t.Stop()
	}
}

// every calls fn each interval after the previous call returned, on clock,
// until ctx is done.
func every(ctx context.Context, clock ports.Clock, interval time.Duration, fn func()) {
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
