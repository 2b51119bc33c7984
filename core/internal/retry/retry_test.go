package retry_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/retry"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

func TestBackoff(t *testing.T) {
	t.Parallel()

	t.Run("DelayDoublesUpToMax", func(t *testing.T) {
		t.Parallel()
		b := retry.Backoff{Initial: time.Second, Max: 60 * time.Second, Multiplier: 2}
		want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
		for n, secs := range want {
			require.Equal(t, secs*time.Second, b.Delay(n), "retry %d", n)
		}
	})

	t.Run("DelayOfEventRetries", func(t *testing.T) {
		t.Parallel()
		b := retry.Backoff{Initial: 60 * time.Second, Max: 300 * time.Second, Multiplier: 2}
		want := []time.Duration{60, 120, 240, 300, 300}
		for n, secs := range want {
			require.Equal(t, secs*time.Second, b.Delay(n), "retry %d", n)
		}
	})

	t.Run("DelayWithFractionalMultiplier", func(t *testing.T) {
		t.Parallel()
		b := retry.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 1.5}
		want := []time.Duration{100_000_000, 150_000_000, 225_000_000, 337_500_000, 506_250_000, 759_375_000}
		for n, d := range want {
			require.Equal(t, d, b.Delay(n), "retry %d", n)
		}
		require.Equal(t, 5*time.Second, b.Delay(10), "1.5^10 × 100ms is above 5s")
	})

	t.Run("MultiplierOneKeepsInitial", func(t *testing.T) {
		t.Parallel()
		b := retry.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 1}
		for _, n := range []int{0, 1, 10, 1000, math.MaxInt} {
			require.Equal(t, time.Second, b.Delay(n), "retry %d", n)
		}
	})

	t.Run("InitialEqualToMax", func(t *testing.T) {
		t.Parallel()
		b := retry.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 3}
		for n := range 5 {
			require.Equal(t, time.Second, b.Delay(n), "retry %d", n)
		}
	})

	t.Run("NegativeRetriesCountAsZero", func(t *testing.T) {
		t.Parallel()
		b := retry.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2}
		require.Equal(t, time.Second, b.Delay(-1))
		require.Equal(t, time.Second, b.Delay(math.MinInt))
	})

	t.Run("BigRetriesNeverOverflow", func(t *testing.T) {
		t.Parallel()
		b := retry.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2}
		for _, n := range []int{62, 63, 64, 1023, 1024, 2000, math.MaxInt32, math.MaxInt} {
			require.Equal(t, time.Minute, b.Delay(n), "retry %d", n)
		}
		huge := retry.Backoff{Initial: time.Second, Max: time.Duration(math.MaxInt64), Multiplier: math.MaxFloat64}
		require.Equal(t, time.Duration(math.MaxInt64), huge.Delay(1))
		require.Equal(t, time.Duration(math.MaxInt64), huge.Delay(math.MaxInt))
		inf := retry.Backoff{Initial: time.Second, Max: time.Hour, Multiplier: math.Inf(1)}
		require.Equal(t, time.Hour, inf.Delay(1))
	})

	t.Run("NewStepsThroughDelay", func(t *testing.T) {
		t.Parallel()
		for _, b := range []retry.Backoff{
			{Initial: time.Second, Max: 60 * time.Second, Multiplier: 2},
			{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 1.5},
			{Initial: 30 * time.Second, Max: 30 * time.Second, Multiplier: 2},
			{Initial: time.Millisecond, Max: time.Second, Multiplier: 1},
		} {
			bo := b.New(clocktest.NewFake())
			for n := range 20 {
				require.Equal(t, b.Delay(n), bo.NextBackOff(), "%+v: retry %d", b, n)
			}
			bo.Reset()
			require.Equal(t, b.Initial, bo.NextBackOff(), "%+v: Reset starts over", b)
		}
	})

	t.Run("NewNeverStopsOnElapsedTime", func(t *testing.T) {
		t.Parallel()
		clock := clocktest.NewFake()
		b := retry.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2}
		bo := b.New(clock)
		for range 100 {
			clock.Advance(24 * time.Hour)
			require.NotEqual(t, backoff.Stop, bo.NextBackOff())
		}
	})

	t.Run("NewWithRetryLoop", func(t *testing.T) {
		t.Parallel()
		b := retry.Backoff{Initial: time.Nanosecond, Max: time.Nanosecond, Multiplier: 1}
		calls := 0
		err := backoff.Retry(func() error {
			calls++
			return errors.New("flaky")
		}, backoff.WithMaxRetries(b.New(clocktest.NewFake()), 3))
		require.EqualError(t, err, "flaky")
		require.Equal(t, 4, calls, "one call and three retries")
	})

	t.Run("JitterStaysWithinBounds", func(t *testing.T) {
		t.Parallel()
		b := retry.Backoff{Initial: time.Second, Max: 8 * time.Second, Multiplier: 2, Jitter: 0.5}
		bo := b.New(clocktest.NewFake())
		for n := range 10 {
			base := min(time.Second<<n, 8*time.Second)
			lo, hi := base/2, base+base/2
			spread := map[time.Duration]bool{}
			for range 200 {
				d := b.Delay(n)
				require.GreaterOrEqual(t, d, lo, "retry %d", n)
				require.LessOrEqual(t, d, hi, "retry %d", n)
				spread[d] = true
			}
			require.Greater(t, len(spread), 1, "retry %d: jitter spreads the waits", n)
			d := bo.NextBackOff()
			require.GreaterOrEqual(t, d, lo, "New, retry %d", n)
			require.LessOrEqual(t, d, hi, "New, retry %d", n)
		}
	})

	t.Run("FullJitter", func(t *testing.T) {
		t.Parallel()
		b := retry.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 1, Jitter: 1}
		for range 200 {
			d := b.Delay(3)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.LessOrEqual(t, d, 2*time.Second)
		}
	})

	t.Run("Validate", func(t *testing.T) {
		t.Parallel()
		valid := retry.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2}
		require.NoError(t, valid.Validate())
		require.NoError(t, retry.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 1, Jitter: 1}.Validate())

		for _, tc := range []struct {
			b    retry.Backoff
			want []string
		}{
			{retry.Backoff{}, []string{"Initial must be positive, got 0s", "Max must be positive, got 0s", "Multiplier must be at least 1, got 0"}},
			{retry.Backoff{Initial: -time.Second, Max: time.Minute, Multiplier: 2}, []string{"Initial must be positive, got -1s"}},
			{retry.Backoff{Initial: time.Minute, Max: time.Second, Multiplier: 2}, []string{"Max (1s) must not be below Initial (1m0s)"}},
			{retry.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 0.5}, []string{"Multiplier must be at least 1, got 0.5"}},
			{retry.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: math.NaN()}, []string{"Multiplier must be at least 1, got NaN"}},
			{retry.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: -0.1}, []string{"Jitter must be within [0, 1], got -0.1"}},
			{retry.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 1.5}, []string{"Jitter must be within [0, 1], got 1.5"}},
			{retry.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: math.NaN()}, []string{"Jitter must be within [0, 1], got NaN"}},
		} {
			err := tc.b.Validate()
			require.Error(t, err, "%+v", tc.b)
			for _, want := range tc.want {
				require.ErrorContains(t, err, want, "%+v", tc.b)
			}
		}
	})
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("boom"), false},
		{ports.ErrTransient, false},
		{fmt.Errorf("completing work: %w", ports.ErrTransient), false},
		{ports.ErrVersionConflict, false},
		{ports.ErrInvalidArgument, true},
		{fmt.Errorf("completing work: nil stream id: %w", ports.ErrInvalidArgument), true},
		{fmt.Errorf("requeueing dead letter: %w", ports.ErrNotFound), true},
		{errors.Join(errors.New("a"), ports.ErrInvalidArgument), true},
	} {
		require.Equal(t, tc.want, retry.Permanent(tc.err), "%v", tc.err)
	}
}
