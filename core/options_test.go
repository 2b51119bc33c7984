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
	require.Equal(t, PollingIntervalDefault, o.PollingInterval)
	require.Equal(t, NotifyHealthyPollingIntervalDefault, o.NotifyHealthyPollingInterval)
	require.Equal(t, MaxPerspectiveEventAttemptsDefault, o.MaxPerspectiveEventAttempts)
	require.Equal(t, 300*time.Second, o.LeaseDuration)
	require.Equal(t, 30*time.Second, o.StaleInstanceThreshold)
	require.Equal(t, 10_000, o.PartitionCount)
	require.Equal(t, 2, o.IdleThresholdPolls)
	require.Equal(t, 100, o.PerspectiveBatchSize)
	require.Equal(t, 30, o.MaxConcurrentStreams)
	require.Equal(t, 4, o.MaxPerspectivesPerStream)
	require.Equal(t, 4, o.MaxConcurrentDrainConsumers)
	require.Equal(t, 300, o.MaxStreamsPerBatch)
	require.Equal(t, 5, o.DrainLoopMaxIterations)
	require.Equal(t, 2, o.DrainLoopRefetchMinBatch)
	require.Equal(t, 5*time.Second, o.RebuildPollInterval)
	require.Equal(t, DrainBatcherOptions{SlidingWindow: 300 * time.Millisecond, MaxWait: 3 * time.Second, MaxSize: 1000}, o.DrainBatcher)
	require.Equal(t, Backoff{Initial: time.Second, Max: 60 * time.Second, Multiplier: 2}, o.CompletionResend)
	require.Equal(t, FlushRetryOptions{Backoff: Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2}, MaxAttempts: 5}, o.FlushRetry)
	require.Equal(t, Backoff{Initial: 60 * time.Second, Max: 300 * time.Second, Multiplier: 2}, o.EventRetry)
	require.Equal(t, Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 1.5}, o.InfraRetry)
	require.NotZero(t, o.InstanceID)
	require.NotNil(t, o.Logger)
}

func TestOptionsDoNotMutateCaller(t *testing.T) {
	t.Parallel()

	in := &Options{}
	_, err := in.withDefaults()
	require.NoError(t, err)
	require.Zero(t, in.PollingInterval)
	require.Zero(t, in.InstanceID)
}

func TestOptionsInvalid(t *testing.T) {
	t.Parallel()

	cases := []struct {
		name string
		opts Options
		want string
	}{
		{"negative polling", Options{PollingInterval: -time.Second}, "Options.PollingInterval must not be negative"},
		{"negative attempts", Options{MaxPerspectiveEventAttempts: -2}, "Options.MaxPerspectiveEventAttempts must be positive"},
		{"negative consumers", Options{MaxConcurrentDrainConsumers: -1}, "Options.MaxConcurrentDrainConsumers must be positive"},
		{"negative perspectives", Options{MaxPerspectivesPerStream: -1}, "Options.MaxPerspectivesPerStream must be positive, got -1"},
		{"unlimited perspectives", Options{MaxPerspectivesPerStream: Unlimited}, "Options.MaxPerspectivesPerStream must be positive, got -1"},
		{"negative batch size", Options{PerspectiveBatchSize: -5}, "Options.PerspectiveBatchSize must be positive"},
		{"negative lease", Options{LeaseDuration: -1}, "Options.LeaseDuration must not be negative"},
		{"window above max wait", Options{DrainBatcher: DrainBatcherOptions{SlidingWindow: 5 * time.Second}}, "Options.DrainBatcher.SlidingWindow (5s) must not exceed"},
		{"heartbeat not below stale", Options{HeartbeatInterval: time.Minute}, "Options.HeartbeatInterval (1m0s) must be below Options.StaleInstanceThreshold"},
		{"multiplier below one", Options{CompletionResend: Backoff{Multiplier: 0.5}}, "Options.CompletionResend.Multiplier must be at least 1, got 0.5"},
		{"multiplier NaN", Options{InfraRetry: Backoff{Multiplier: math.NaN()}}, "Options.InfraRetry.Multiplier must be at least 1, got NaN"},
		{"negative resend max", Options{CompletionResend: Backoff{Max: -time.Second}}, "Options.CompletionResend.Max must not be negative, got -1s"},
		{"negative flush retry", Options{FlushRetry: FlushRetryOptions{Backoff: Backoff{Initial: -1}}}, "Options.FlushRetry.Initial must not be negative"},
		{"negative flush attempts", Options{FlushRetry: FlushRetryOptions{MaxAttempts: -1}}, "Options.FlushRetry.MaxAttempts must be positive, got -1"},
		{"event retry above max", Options{EventRetry: Backoff{Initial: time.Hour}}, "Options.EventRetry.Initial (1h0m0s) must not exceed Options.EventRetry.Max (5m0s)"},
		{"infra retry above max", Options{InfraRetry: Backoff{Initial: time.Second, Max: time.Millisecond}}, "Options.InfraRetry.Initial (1s) must not exceed Options.InfraRetry.Max (1ms)"},
		{"negative max size", Options{DrainBatcher: DrainBatcherOptions{MaxSize: -1}}, "Options.DrainBatcher.MaxSize must be positive"},
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

	o, err := (&Options{MaxPerspectiveEventAttempts: Unlimited}).withDefaults()
	require.NoError(t, err)
	require.Equal(t, Unlimited, o.MaxPerspectiveEventAttempts)
}

func TestOptionsReportEveryInvalidField(t *testing.T) {
	t.Parallel()

	_, err := (&Options{PollingInterval: -1, PartitionCount: -1}).withDefaults()
	require.ErrorContains(t, err, "Options.PollingInterval")
	require.ErrorContains(t, err, "Options.PartitionCount")
}

func TestOptionsNameEveryBadRetryField(t *testing.T) {
	t.Parallel()

	_, err := (&Options{
		CompletionResend: Backoff{Initial: -1},
		FlushRetry:       FlushRetryOptions{Backoff: Backoff{Multiplier: 0.5}},
		EventRetry:       Backoff{Max: -1},
		InfraRetry:       Backoff{Initial: time.Minute},
	}).withDefaults()
	for _, want := range []string{
		"Options.CompletionResend.Initial must not be negative",
		"Options.FlushRetry.Multiplier must be at least 1",
		"Options.EventRetry.Max must not be negative",
		"Options.InfraRetry.Initial (1m0s) must not exceed Options.InfraRetry.Max (5s)",
	} {
		require.ErrorContains(t, err, want)
	}
}

func TestFailureRetryDelay(t *testing.T) {
	t.Parallel()

	o, err := (*Options)(nil).withDefaults()
	require.NoError(t, err)
	w := failure.New(nil, failure.Config{Retry: o.EventRetry.internal(0)}, nil, nil, nil)
	// The delay after the n-th failed attempt of an event.
	want := []time.Duration{60, 120, 240, 300, 300, 300}
	for i, secs := range want {
		require.Equal(t, secs*time.Second, w.RetryDelay(i+1), "attempt %d", i+1)
	}
	require.Equal(t, 300*time.Second, w.RetryDelay(1_000_000), "capped, never overflowed")

	o, err = (&Options{EventRetry: Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 1}}).withDefaults()
	require.NoError(t, err)
	w = failure.New(nil, failure.Config{Retry: o.EventRetry.internal(0)}, nil, nil, nil)
	for attempts := 1; attempts <= 5; attempts++ {
		require.Equal(t, time.Second, w.RetryDelay(attempts), "Multiplier 1: attempt %d", attempts)
	}
}
