package memory_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// heartbeatTime heartbeats a new instance without a Now, so the store takes
// the time from its Clock, and returns the time it recorded.
func heartbeatTime(t *testing.T, b ports.Backend) time.Time {
	t.Helper()
	id := uuid.New()
	_, err := b.Claimer.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{InstanceID: id, StaleThreshold: time.Minute})
	require.NoError(t, err)
	instances, err := b.Admin.InstancesList(t.Context())
	require.NoError(t, err)
	require.Len(t, instances, 1)
	return instances[0].LastHeartbeatAt
}

func TestModule(t *testing.T) {
	t.Parallel()

	t.Run("BothFormsIsAnError", func(t *testing.T) {
		t.Parallel()
		err := fx.New(fx.NopLogger, memory.Module,
			fx.Supply(memory.Options{PartitionCount: 3}, &memory.Options{PartitionCount: 4}),
			fx.Invoke(func(ports.Backend) {}),
		).Err()
		require.ErrorContains(t, err, "memory.Options is supplied both as a value and as a pointer")
	})

	t.Run("DefaultsWithoutOptions", func(t *testing.T) {
		t.Parallel()
		var backend ports.Backend
		app := fxtest.New(t, memory.Module, fx.Populate(&backend))
		app.RequireStart()
		require.NoError(t, backend.Validate())
		require.NotEqual(t, clocktest.Start, heartbeatTime(t, backend), "the system clock is no fake's")
		app.RequireStop()
	})

	// The options are observed through the clock: a heartbeat without a
	// Now records the supplied clock's time.
	for name, supply := range map[string]func(memory.Options) fx.Option{
		"OptionsHonouredAsPointer": func(o memory.Options) fx.Option { return fx.Supply(&o) },
		"OptionsHonouredAsValue":   func(o memory.Options) fx.Option { return fx.Supply(o) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var backend ports.Backend
			app := fxtest.New(t, memory.Module, supply(memory.Options{Clock: clocktest.NewFake()}), fx.Populate(&backend))
			app.RequireStart()
			require.Equal(t, clocktest.Start, heartbeatTime(t, backend))
			app.RequireStop()
		})
	}
}
