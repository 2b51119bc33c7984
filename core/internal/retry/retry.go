// Package retry is the engine's one backoff: the growing wait between the
// retries of something that failed, and the rule of which errors are never
// retried.
//
// A Backoff waits Initial before the first retry, Multiplier times longer
// before each next one, never longer than Max, optionally spread by Jitter.
// Delay computes one wait from the number of retries so far, for callers
// that keep that count themselves (a tracked completion's re-sends, a
// failed event's attempts); New returns a backoff.BackOff, stepped by each
// retry, for retry loops. Both follow github.com/cenkalti/backoff/v4's
// ExponentialBackOff, which New configures.
package retry

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/vantage-go/vantage/ports"
)

// Backoff describes the waits between retries. The zero value is not
// valid: see Validate.
type Backoff struct {
	// Initial is the wait before the first retry. Must be positive.
	Initial time.Duration
	// Max caps the wait. Must not be below Initial. With Jitter it caps the
	// wait before it is spread, as in backoff.ExponentialBackOff.
	Max time.Duration
	// Multiplier grows the wait per retry; 1 keeps every wait at Initial.
	// Must be at least 1.
	Multiplier float64
	// Jitter spreads every wait at random by up to ±Jitter of it (0.5: from
	// half to one and a half times the wait), so that many retries started
	// by one outage do not all come back at once. 0, the deterministic
	// default, spreads nothing. Must be within [0, 1].
	Jitter float64
}

// Validate returns an error naming every invalid field, or nil.
func (b Backoff) Validate() error {
	var errs []error
	if b.Initial <= 0 {
		errs = append(errs, fmt.Errorf("Initial must be positive, got %s", b.Initial))
	}
	if b.Max <= 0 {
		errs = append(errs, fmt.Errorf("Max must be positive, got %s", b.Max))
	}
	if b.Initial > 0 && b.Max > 0 && b.Max < b.Initial {
		errs = append(errs, fmt.Errorf("Max (%s) must not be below Initial (%s)", b.Max, b.Initial))
	}
	if !(b.Multiplier >= 1) { // also rejects NaN
		errs = append(errs, fmt.Errorf("Multiplier must be at least 1, got %g", b.Multiplier))
	}
	if !(b.Jitter >= 0 && b.Jitter <= 1) {
		errs = append(errs, fmt.Errorf("Jitter must be within [0, 1], got %g", b.Jitter))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid backoff: %w", err)
	}
	return nil
}

// Delay returns the wait before the retry that follows retries earlier
// ones: Initial × Multiplier^retries, capped at Max, then spread by Jitter.
// Delay(0) is the wait before the first retry; a negative retries counts as
// 0. It never overflows: a growth past Max, however large retries is, yields
// Max. Without Jitter it is deterministic and the wait the (retries+1)-th
// NextBackOff of New returns; with Jitter both are drawn the same way. b
// must be valid.
func (b Backoff) Delay(retries int) time.Duration {
	d := b.interval(retries)
	if b.Jitter == 0 {
		return d
	}
	// One step of an ExponentialBackOff that starts at d spreads d by its
	// randomization, the same as New's steps.
	eb := b.exponential(backoff.SystemClock)
	eb.InitialInterval = d
	eb.Reset()
	return eb.NextBackOff()
}

// interval is the wait before it is spread by Jitter.
func (b Backoff) interval(retries int) time.Duration {
	if retries <= 0 || b.Multiplier == 1 {
		return min(b.Initial, b.Max)
	}
	t := float64(b.Initial) * math.Pow(b.Multiplier, float64(retries))
	if math.IsNaN(t) || t >= float64(b.Max) { // +Inf included
		return b.Max
	}
	return time.Duration(t)
}

// New returns a backoff.BackOff whose n-th NextBackOff is a Delay(n-1),
// timed by clock, that never stops on its own (MaxElapsedTime 0): callers
// bound their retries by count or context, for example with
// backoff.WithMaxRetries, and stop on Permanent errors. b must be valid.
// The result is not safe for concurrent use.
func (b Backoff) New(clock ports.Clock) backoff.BackOff {
	eb := b.exponential(clock)
	eb.Reset()
	return eb
}

func (b Backoff) exponential(clock backoff.Clock) *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     b.Initial,
		RandomizationFactor: b.Jitter,
		Multiplier:          b.Multiplier,
		MaxInterval:         b.Max,
		MaxElapsedTime:      0,
		Stop:                backoff.Stop,
		Clock:               clock,
	}
}

// Permanent reports whether err can never succeed when retried as is, so
// that it must not be: a request the backend refused as malformed
// (ports.ErrInvalidArgument) or that addresses a row that does not exist
// (ports.ErrNotFound). Any other error, ports.ErrTransient above all, may
// be retried. A nil err is not permanent.
func Permanent(err error) bool {
	return errors.Is(err, ports.ErrInvalidArgument) || errors.Is(err, ports.ErrNotFound)
}
