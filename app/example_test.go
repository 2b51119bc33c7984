package app_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"go.uber.org/fx"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/app"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

type TaskAdded struct {
	Title string `json:"title"`
}

type TaskDone struct {
	Title string `json:"title"`
}

type TaskList struct {
	Open []string `json:"open"`
	Done int      `json:"done"`
}

// newTasks registers the application's events and perspectives. It also
// provides the perspective, for the code that reads its models.
func newTasks() (*core.Registry, *core.Perspective[TaskList], error) {
	reg := core.NewRegistry()
	if err := core.RegisterEvent[TaskAdded](reg, "tasks.added"); err != nil {
		return nil, nil, err
	}
	if err := core.RegisterEvent[TaskDone](reg, "tasks.done"); err != nil {
		return nil, nil, err
	}
	tasks := core.NewPerspective[TaskList]("task_list")
	core.MustHandle(tasks, func(_ context.Context, m TaskList, e TaskAdded) (TaskList, error) {
		m.Open = append(m.Open, e.Title)
		return m, nil
	})
	core.MustHandle(tasks, func(_ context.Context, m TaskList, e TaskDone) (TaskList, error) {
		for i, t := range m.Open {
			if t == e.Title {
				m.Open = append(m.Open[:i], m.Open[i+1:]...)
				m.Done++
				break
			}
		}
		return m, nil
	})
	return reg, tasks, reg.AddPerspective(tasks)
}

// An fx application: memory.Module provides the backend, app.Module the
// worker, which starts and stops with the application; the application
// provides its registry and, optionally, core.Options. With PostgreSQL,
// postgres.Module takes memory.Module's place and nothing else changes.
func ExampleModule() {
	var (
		backend ports.Backend
		reg     *core.Registry
		worker  *core.Worker
		tasks   *core.Perspective[TaskList]
	)
	fxApp := fx.New(
		memory.Module,
		app.Module,
		fx.Provide(newTasks),
		fx.Supply(core.Options{
			// A single process's cadences: claim and drain an append at
			// once. The defaults coalesce the appends of many writers.
			Claims: core.ClaimOptions{Interval: time.Millisecond},
			Drain:  core.DrainOptions{Batcher: core.DrainBatcherOptions{SlidingWindow: time.Millisecond}},
		}),
		fx.Supply(slog.New(slog.DiscardHandler)), // the worker's logger
		fx.NopLogger,                             // fx's own
		fx.Populate(&backend, &reg, &worker, &tasks),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fxApp.Start(ctx); err != nil { // starts the worker
		log.Fatal(err)
	}
	defer func() {
		if err := fxApp.Stop(ctx); err != nil { // stops it, draining completions
			log.Fatal(err)
		}
	}()

	// A request handler gets the backend, the registry, the worker and the
	// perspective injected in the same way.
	list := uuid.New()
	res, err := reg.Append(ctx, backend.Events, list, ports.ExpectNoStream,
		TaskAdded{Title: "write docs"}, TaskAdded{Title: "run examples"}, TaskDone{Title: "write docs"})
	if err != nil {
		log.Fatal(err)
	}
	if err := worker.WaitForStream(ctx, list, res.Events[len(res.Events)-1].Version); err != nil {
		log.Fatal(err)
	}
	m, err := tasks.Load(ctx, backend.Models, list)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("applied %d events: open %v, done %d\n", m.LastVersion, m.Value.Open, m.Value.Done)
	// Output:
	// applied 3 events: open [run examples], done 1
}
