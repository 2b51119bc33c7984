package app_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/app"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type noted struct {
	Text string `json:"text"`
}

type notes struct {
	Count int `json:"count"`
}

func newRegistry() (*core.Registry, error) {
	reg := core.NewRegistry()
	if err := core.RegisterEvent[noted](reg, "noted"); err != nil {
		return nil, err
	}
	p := core.NewPerspective[notes]("notes")
	if err := core.Handle(p, func(_ context.Context, m notes, _ noted) (notes, error) {
		m.Count++
		return m, nil
	}); err != nil {
		return nil, err
	}
	return reg, reg.AddPerspective(p)
}

func TestModuleRunsTheWorker(t *testing.T) {
	t.Parallel()

	var (
		worker   *core.Worker
		backend  ports.Backend
		registry *core.Registry
	)
	processed := make(chan core.PerspectiveEventProcessed, 4)
	fxApp := fxtest.New(t,
		memory.Module,
		app.Module,
		fx.Provide(newRegistry),
		fx.Supply(&core.Options{
			PollingInterval: 10 * time.Millisecond,
			ClaimInterval:   10 * time.Millisecond,
			DrainBatcher:    core.DrainBatcherOptions{SlidingWindow: time.Millisecond, MaxWait: 5 * time.Millisecond},
			Hooks: core.Hooks{OnPerspectiveEventProcessed: func(e core.PerspectiveEventProcessed) {
				processed <- e
			}},
		}),
		fx.Populate(&worker, &backend, &registry),
	)
	fxApp.RequireStart()

	stream := uuid.New()
	_, err := registry.Append(t.Context(), backend.Events, stream, 0, noted{Text: "hello"})
	require.NoError(t, err)
	select {
	case e := <-processed:
		require.Equal(t, stream, e.StreamID)
	case <-time.After(20 * time.Second):
		t.Fatal("the fx-started worker did not apply the event")
	}
	m, err := backend.Models.ModelLoad(t.Context(), stream, "notes")
	require.NoError(t, err)
	var n notes
	require.NoError(t, json.Unmarshal(m.Data, &n))
	require.Equal(t, 1, n.Count)

	fxApp.RequireStop()
	instances, err := backend.Claimer.InstancesList(t.Context())
	require.NoError(t, err)
	require.Empty(t, instances, "stopping the app deregistered the instance")
	require.ErrorIs(t, worker.Start(t.Context()), core.ErrStopped)
}

func TestModuleRejectsInvalidOptions(t *testing.T) {
	t.Parallel()

	err := fx.New(
		fx.NopLogger,
		memory.Module,
		app.Module,
		fx.Provide(newRegistry),
		fx.Supply(&core.Options{PartitionCount: -3}),
	).Err()
	require.ErrorContains(t, err, "Options.PartitionCount must be positive")
}

func TestNewWorkerWithoutFx(t *testing.T) {
	t.Parallel()

	reg, err := newRegistry()
	require.NoError(t, err)
	w, err := app.NewWorker(app.Params{Backend: memory.New(memory.Options{}).Backend(), Registry: reg})
	require.NoError(t, err)
	require.NoError(t, w.Stop(t.Context()))
}
