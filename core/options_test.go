package core

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/failure"
)

func TestOptionsDefaults(t *testing.T) {
	t.Parallel()

	o, err := (*Options)(nil).withDefaults()
	require.NoError(t, err)
	require.Equal(t, PollingIntervalDefault, o.Drain.PollingInterval)
	require.Equal(t, NotifyHealthyPollingIntervalDefault, o.Drain.NotifyHealthyPollingInterval)
	require.Equal(t, MaxEventAttemptsDefault, o.Retries.MaxEventAttempts)
	require.Equal(t, 300*time.Second, o.Claims.LeaseDuration)
	require.Equal(t, 30*time.Second, o.Claims.StaleInstanceThreshold)
	require.Equal(t, 10_000, o.Claims.PartitionCount)
	require.Equal(t, 2, o.Drain.IdleThresholdPolls)
	require.Equal(t, 100, o.Drain.PerspectiveBatchSize)
	require.Equal(t, 30, o.Drain.MaxConcurrentStreams)
	require.Equal(t, 4, o.Drain.MaxPerspectivesPerStream)
	require.Equal(t, 4, o.Drain.Consumers)
	require.Equal(t, 300, o.Claims.MaxStreamsPerBatch)
	require.Equal(t, 5, o.Drain.LoopMaxIterations)
	require.Equal(t, 2, o.Drain.LoopRefetchMinBatch)
	require.Equal(t, 5*time.Second, o.Rewind.RebuildPollInterval)
	require.Equal(t, DrainBatcherOptions{SlidingWindow: 300 * time.Millisecond, MaxWait: 3 * time.Second, MaxSize: 1000}, o.Drain.Batcher)
	require.Equal(t, Backoff{Initial: time.Second, Max: 60 * time.Second, Multiplier: 2}, o.Retries.CompletionResend)
	require.Equal(t, FlushRetryOptions{Backoff: Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2}, MaxAttempts: 5}, o.Retries.Flush)
	require.Equal(t, Backoff{Initial: 60 * time.Second, Max: 300 * time.Second, Multiplier: 2}, o.Retries.Event)
	require.Equal(t, Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 1.5}, o.Retries.Infra)
	require.NotZero(t, o.InstanceID)
	require.NotNil(t, o.Logger)
}

func TestOptionsDoNotMutateCaller(t *testing.T) {
	t.Parallel()

	in := &Options{}
	_, err := in.withDefaults()
	require.NoError(t, err)
	require.Zero(t, in.Drain.PollingInterval)
	require.Zero(t, in.InstanceID)
}

func TestOptionsInvalid(t *testing.T) {
	t.Parallel()

	cases := []struct {
		name string
		opts Options
		want string
	}{
		{"negative polling", Options{Drain: DrainOptions{PollingInterval: -time.Second}}, "Options.Drain.PollingInterval must not be negative"},
		{"negative attempts", Options{Retries: RetryOptions{MaxEventAttempts: -2}}, "Options.Retries.MaxEventAttempts must be positive"},
		{"negative consumers", Options{Drain: DrainOptions{Consumers: -1}}, "Options.Drain.Consumers must be positive"},
		{"negative perspectives", Options{Drain: DrainOptions{MaxPerspectivesPerStream: -1}}, "Options.Drain.MaxPerspectivesPerStream must be positive, got -1"},
		{"unlimited perspectives", Options{Drain: DrainOptions{MaxPerspectivesPerStream: Unlimited}}, "Options.Drain.MaxPerspectivesPerStream must be positive, got -1"},
		{"negative batch size", Options{Drain: DrainOptions{PerspectiveBatchSize: -5}}, "Options.Drain.PerspectiveBatchSize must be positive"},
		{"negative lease", Options{Claims: ClaimOptions{LeaseDuration: -1}}, "Options.Claims.LeaseDuration must not be negative"},
		{"window above max wait", Options{Drain: DrainOptions{Batcher: DrainBatcherOptions{SlidingWindow: 5 * time.Second}}}, "Options.Drain.Batcher.SlidingWindow (5s) must not exceed"},
		{"heartbeat not below stale", Options{Claims: ClaimOptions{HeartbeatInterval: time.Minute}}, "Options.Claims.HeartbeatInterval (1m0s) must be below Options.Claims.StaleInstanceThreshold"},
		{"multiplier below one", Options{Retries: RetryOptions{CompletionResend: Backoff{Multiplier: 0.5}}}, "Options.Retries.CompletionResend.Multiplier must be at least 1, got 0.5"},
		{"multiplier NaN", Options{Retries: RetryOptions{Infra: Backoff{Multiplier: math.NaN()}}}, "Options.Retries.Infra.Multiplier must be at least 1, got NaN"},
		{"negative resend max", Options{Retries: RetryOptions{CompletionResend: Backoff{Max: -time.Second}}}, "Options.Retries.CompletionResend.Max must not be negative, got -1s"},
		{"negative flush retry", Options{Retries: RetryOptions{Flush: FlushRetryOptions{Backoff: Backoff{Initial: -1}}}}, "Options.Retries.Flush.Initial must not be negative"},
		{"negative flush attempts", Options{Retries: RetryOptions{Flush: FlushRetryOptions{MaxAttempts: -1}}}, "Options.Retries.Flush.MaxAttempts must be positive, got -1"},
		{"event retry above max", Options{Retries: RetryOptions{Event: Backoff{Initial: time.Hour}}}, "Options.Retries.Event.Initial (1h0m0s) must not exceed Options.Retries.Event.Max (5m0s)"},
		{"infra retry above max", Options{Retries: RetryOptions{Infra: Backoff{Initial: time.Second, Max: time.Millisecond}}}, "Options.Retries.Infra.Initial (1s) must not exceed Options.Retries.Infra.Max (1ms)"},
		{"negative max size", Options{Drain: DrainOptions{Batcher: DrainBatcherOptions{MaxSize: -1}}}, "Options.Drain.Batcher.MaxSize must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.opts.withDefaults()
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestOptionsUnlimitedAttempts(t *testing.T) {
	t.Parallel()

	o, err := (&Options{Retries: RetryOptions{MaxEventAttempts: Unlimited}}).withDefaults()
	require.NoError(t, err)
	require.Equal(t, Unlimited, o.Retries.MaxEventAttempts)
}

func TestOptionsReportEveryInvalidField(t *testing.T) {
	t.Parallel()

	_, err := (&Options{Drain: DrainOptions{PollingInterval: -1}, Claims: ClaimOptions{PartitionCount: -1}}).withDefaults()
	require.ErrorContains(t, err, "Options.Drain.PollingInterval")
	require.ErrorContains(t, err, "Options.Claims.PartitionCount")
}

func TestOptionsNameEveryBadRetryField(t *testing.T) {
	t.Parallel()

	_, err := (&Options{
		Retries: RetryOptions{
			CompletionResend: Backoff{Initial: -1},
			Flush:            FlushRetryOptions{Backoff: Backoff{Multiplier: 0.5}},
			Event:            Backoff{Max: -1},
			Infra:            Backoff{Initial: time.Minute},
		},
	}).withDefaults()
	for _, want := range []string{
		"Options.Retries.CompletionResend.Initial must not be negative",
		"Options.Retries.Flush.Multiplier must be at least 1",
		"Options.Retries.Event.Max must not be negative",
		"Options.Retries.Infra.Initial (1m0s) must not exceed Options.Retries.Infra.Max (5s)",
	} {
		require.ErrorContains(t, err, want)
	}
}

func TestFailureRetryDelay(t *testing.T) {
	t.Parallel()

	o, err := (*Options)(nil).withDefaults()
	require.NoError(t, err)
	w := failure.New(nil, failure.Config{Retry: o.Retries.Event.internal(0)}, nil, nil)
	// The delay after the n-th failed attempt of an event.
	want := []time.Duration{60, 120, 240, 300, 300, 300}
	for i, secs := range want {
		require.Equal(t, secs*time.Second, w.RetryDelay(i+1), "attempt %d", i+1)
	}
	require.Equal(t, 300*time.Second, w.RetryDelay(1_000_000), "capped, never overflowed")

	o, err = (&Options{Retries: RetryOptions{Event: Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 1}}}).withDefaults()
	require.NoError(t, err)
	w = failure.New(nil, failure.Config{Retry: o.Retries.Event.internal(0)}, nil, nil)
	for attempts := 1; attempts <= 5; attempts++ {
		require.Equal(t, time.Second, w.RetryDelay(attempts), "Multiplier 1: attempt %d", attempts)
	}
}
