package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
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
			Drain: core.DrainOptions{
				PollingInterval: 10 * time.Millisecond,
				Batcher:         core.DrainBatcherOptions{SlidingWindow: time.Millisecond, MaxWait: 5 * time.Millisecond},
			},
			Claims: core.ClaimOptions{Interval: 10 * time.Millisecond},
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
	m, err := backend.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: stream, Perspective: "notes"})
	require.NoError(t, err)
	var n notes
	require.NoError(t, json.Unmarshal(m.Data, &n))
	require.Equal(t, 1, n.Count)

	fxApp.RequireStop()
	instances, err := backend.Admin.InstancesList(t.Context())
	require.NoError(t, err)
	require.Empty(t, instances, "stopping the app deregistered the instance")
	require.ErrorIs(t, worker.Start(t.Context()), core.ErrStopped)
}

func TestModuleRejectsInvalidOptions(t *testing.T) {
	t.Parallel()

	// A rejected option proves the options were read, in either form.
	for name, supply := range map[string]fx.Option{
		"Pointer": fx.Supply(&core.Options{Claims: core.ClaimOptions{PartitionCount: -3}}),
		"Value":   fx.Supply(core.Options{Claims: core.ClaimOptions{PartitionCount: -3}}),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := fx.New(fx.NopLogger, memory.Module, app.Module, fx.Provide(newRegistry), supply).Err()
			require.ErrorContains(t, err, "Options.Claims.PartitionCount must be positive")
		})
	}
}

func TestModuleRejectsOptionsInBothForms(t *testing.T) {
	t.Parallel()

	err := fx.New(fx.NopLogger, memory.Module, app.Module, fx.Provide(newRegistry),
		fx.Supply(core.Options{Claims: core.ClaimOptions{PartitionCount: 3}}, &core.Options{Claims: core.ClaimOptions{PartitionCount: 4}}),
		fx.Invoke(func(*core.Worker) {}),
	).Err()
	require.ErrorContains(t, err, "core.Options is supplied both as a value and as a pointer")
}

// recordHandler sends every record to its channel, without blocking: the
// engine logs from its loops, which must not wait on a test that stopped
// reading.
type recordHandler struct{ records chan<- slog.Record }

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.records <- r.Clone():
	default:
	}
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

// failingRegistry's perspective fails every event, which the engine logs
// as a warning: a record every test run produces.
func failingRegistry() (*core.Registry, error) {
	reg := core.NewRegistry()
	if err := core.RegisterEvent[noted](reg, "noted"); err != nil {
		return nil, err
	}
	p := core.NewPerspective[notes]("notes")
	if err := core.Handle(p, func(context.Context, notes, noted) (notes, error) {
		return notes{}, errors.New("refusing every note")
	}); err != nil {
		return nil, err
	}
	return reg, reg.AddPerspective(p)
}

const failureMessage = "perspective failed on event; will retry"

func TestModuleLogger(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		fxRecords, optionRecords chan slog.Record
	}
	// run starts the app with the fx logger and, if withOptionsLogger,
	// Options.Logger, appends an event the perspective fails on and
	// returns once the engine logged the failure to either logger.
	run := func(t *testing.T, withOptionsLogger bool) *testBundle {
		t.Helper()
		b := &testBundle{fxRecords: make(chan slog.Record, 100), optionRecords: make(chan slog.Record, 100)}
		opts := &core.Options{
			Drain: core.DrainOptions{
				PollingInterval: 10 * time.Millisecond,
				Batcher:         core.DrainBatcherOptions{SlidingWindow: time.Millisecond, MaxWait: 5 * time.Millisecond},
			},
			Claims: core.ClaimOptions{Interval: 10 * time.Millisecond},
		}
		if withOptionsLogger {
			opts.Logger = slog.New(recordHandler{b.optionRecords})
		}
		var (
			backend  ports.Backend
			registry *core.Registry
		)
		fxApp := fxtest.New(t,
			memory.Module,
			app.Module,
			fx.Provide(failingRegistry),
			fx.Supply(opts, slog.New(recordHandler{b.fxRecords})),
			fx.Populate(&backend, &registry),
		)
		fxApp.RequireStart()
		_, err := registry.Append(t.Context(), backend.Events, uuid.New(), 0, noted{Text: "no"})
		require.NoError(t, err)
		timeout := time.After(20 * time.Second)
		for logged := false; !logged; {
			select {
			case r := <-b.fxRecords:
				logged = r.Message == failureMessage
				if logged && withOptionsLogger {
					t.Fatal("the fx logger got the engine's records although Options.Logger is set")
				}
			case r := <-b.optionRecords:
				logged = r.Message == failureMessage
			case <-timeout:
				t.Fatal("the engine logged no failure")
			}
		}
		fxApp.RequireStop()
		return b
	}

	t.Run("FxLoggerWhenOptionsHaveNone", func(t *testing.T) {
		t.Parallel()
		b := run(t, false)
		require.Empty(t, b.optionRecords)
	})

	t.Run("OptionsLoggerWins", func(t *testing.T) {
		t.Parallel()
		b := run(t, true)
		for len(b.fxRecords) > 0 {
			require.NotEqual(t, failureMessage, (<-b.fxRecords).Message, "the engine logged to the fx logger")
		}
	})
}

func TestNewWorkerWithoutFx(t *testing.T) {
	t.Parallel()

	reg, err := newRegistry()
	require.NoError(t, err)
	w, err := app.NewWorker(app.Params{Backend: memory.New(memory.Options{}).Backend(), Registry: reg})
	require.NoError(t, err)
	require.NoError(t, w.Stop(t.Context()))
}
