package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
	require.Equal(t, 4, o.MaxConcurrentDrainConsumers)
	require.Equal(t, 300, o.MaxStreamsPerBatch)
	require.Equal(t, 5, o.DrainLoopMaxIterations)
	require.Equal(t, 2, o.DrainLoopRefetchMinBatch)
	require.Equal(t, DrainBatcherOptions{SlidingWindow: 300 * time.Millisecond, MaxWait: 3 * time.Second, MaxSize: 1000}, o.DrainBatcher)
	require.Equal(t, time.Second, o.Retry.RetryTimeout)
	require.InDelta(t, 2.0, o.Retry.BackoffMultiplier, 0)
	require.Equal(t, 60*time.Second, o.Retry.MaxBackoff)
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
		{"negative batch size", Options{PerspectiveBatchSize: -5}, "Options.PerspectiveBatchSize must be positive"},
		{"negative lease", Options{LeaseDuration: -1}, "Options.LeaseDuration must not be negative"},
		{"window above max wait", Options{DrainBatcher: DrainBatcherOptions{SlidingWindow: 5 * time.Second}}, "Options.DrainBatcher.SlidingWindow (5s) must not exceed"},
		{"heartbeat not below stale", Options{HeartbeatInterval: time.Minute}, "Options.HeartbeatInterval (1m0s) must be below Options.StaleInstanceThreshold"},
		{"multiplier below one", Options{Retry: RetryOptions{BackoffMultiplier: 0.5}}, "Options.Retry.BackoffMultiplier must be at least 1"},
		{"unknown completion mode", Options{Completion: 7}, "Options.Completion has unknown value 7"},
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
