// Command fxapp runs Vantage inside an uber-go/fx application: the memory
// backend (or PostgreSQL, from a connection string), app.Module and a
// registry with one perspective, a shopping cart. When the application
// starts it appends a few events to one cart; the program waits until the
// perspective applied them, prints the cart and stops the application.
//
//	go run ./examples/fxapp                       # in-memory backend
//	go run ./examples/fxapp -postgres "$DATABASE_URL"
//	go run ./examples/fxapp -v                    # fx's and the engine's logs
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/app"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fxapp:", err)
		os.Exit(1)
	}
}

// config holds the command-line flags.
type config struct {
	postgres string
	schema   string
	timeout  time.Duration
	verbose  bool
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("fxapp", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.postgres, "postgres", os.Getenv("DATABASE_URL"), "PostgreSQL connection string (default $DATABASE_URL); empty runs in memory")
	fs.StringVar(&c.schema, "schema", "fxapp_demo", "PostgreSQL schema of the demo")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "give up if the cart is not applied by then")
	fs.BoolVar(&c.verbose, "v", false, "log fx's events and the engine's at info level")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.timeout <= 0 {
		return c, fmt.Errorf("-timeout must be positive, got %s", c.timeout)
	}
	return c, nil
}

func run(ctx context.Context, args []string, out io.Writer) (err error) {
	cfg, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if cfg.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	// The backend module is the only line that differs between the two
	// backends: postgres.Module builds its pool from the connection string,
	// migrates the schema on start and closes the pool on stop.
	backendModule, where := memory.Module, "the memory backend"
	if cfg.postgres != "" {
		backendModule = fx.Options(
			postgres.Module,
			fx.Supply(&postgres.ModuleOptions{PoolConnString: cfg.postgres}, &postgres.Options{Schema: cfg.schema}),
		)
		where = fmt.Sprintf("PostgreSQL (schema %q)", cfg.schema)
	}
	var (
		worker  *core.Worker
		backend ports.Backend
		demo    *cartDemo
	)
	fxApp := fx.New(
		// One logger for fx's own events, the engine (app.Module) and the
		// PostgreSQL adapter (postgres.Module).
		fx.Supply(logger),
		fx.WithLogger(func(l *slog.Logger) fxevent.Logger { return &fxevent.SlogLogger{Logger: l} }),
		backendModule,
		app.Module,
		fx.Provide(newRegistry, newCartDemo),
		fx.Populate(&worker, &backend, &demo),
	)
	if err := fxApp.Err(); err != nil {
		return err
	}

	startCtx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	if err := fxApp.Start(startCtx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.timeout)
		defer cancel()
		err = errors.Join(err, fxApp.Stop(stopCtx))
	}()
	fmt.Fprintf(out, "fxapp: appended %d events to cart %s on %s\n", len(demo.events), demo.stream, where)

	waitCtx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	if err := worker.WaitForStream(waitCtx, demo.stream, demo.version); err != nil {
		return fmt.Errorf("waiting for the cart to be applied: %w", err)
	}
	stored, err := backend.Models.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: demo.stream, Perspective: cartName})
	if err != nil {
		return fmt.Errorf("loading the cart: %w", err)
	}
	var c Cart
	if err := json.Unmarshal(stored.Data, &c); err != nil {
		return fmt.Errorf("decoding the cart: %w", err)
	}
	fmt.Fprintf(out, "cart: %s (%d events applied)\n", c, c.Events)
	return nil
}

// Events of a cart stream.

// ItemAdded puts items of a SKU into the cart.
type ItemAdded struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// ItemRemoved takes items of a SKU out of the cart.
type ItemRemoved struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// Cart is the cart perspective's model: the quantity of each SKU, and the
// number of events applied.
type Cart struct {
	Items  map[string]int `json:"items"`
	Events int            `json:"events"`
}

// String lists the items by SKU.
func (c Cart) String() string {
	items := make([]string, 0, len(c.Items))
	for _, sku := range slices.Sorted(maps.Keys(c.Items)) {
		items = append(items, fmt.Sprintf("%s=%d", sku, c.Items[sku]))
	}
	return strings.Join(items, " ")
}

const cartName = "cart"

// newRegistry registers the events and the cart perspective. Under fx it is
// a plain constructor: app.Module reads the *core.Registry it returns.
func newRegistry() (*core.Registry, error) {
	reg := core.NewRegistry()
	cart := core.NewPerspective[Cart](cartName)
	move := func(c Cart, sku string, quantity int) Cart {
		if c.Items == nil {
			c.Items = map[string]int{}
		}
		c.Items[sku] += quantity
		if c.Items[sku] <= 0 {
			delete(c.Items, sku)
		}
		c.Events++
		return c
	}
	err := errors.Join(
		core.RegisterEvent[ItemAdded](reg, "cart.item_added"),
		core.RegisterEvent[ItemRemoved](reg, "cart.item_removed"),
		core.Handle(cart, func(_ context.Context, c Cart, e ItemAdded) (Cart, error) {
			return move(c, e.SKU, e.Quantity), nil
		}),
		core.Handle(cart, func(_ context.Context, c Cart, e ItemRemoved) (Cart, error) {
			return move(c, e.SKU, -e.Quantity), nil
		}),
	)
	if err != nil {
		return nil, err
	}
	return reg, reg.AddPerspective(cart)
}

// cartDemo is the cart the application fills when it starts.
type cartDemo struct {
	stream  uuid.UUID
	events  []any
	version int64 // the last appended version, set by the start hook
}

// newCartDemo registers a start hook that appends the demo's events. It
// depends on the backend, so the backend's own start hook (PostgreSQL's
// migrations) is registered, and runs, before it.
func newCartDemo(lc fx.Lifecycle, reg *core.Registry, backend ports.Backend) *cartDemo {
	d := &cartDemo{
		stream: uuid.New(),
		events: []any{
			ItemAdded{SKU: "apple", Quantity: 3},
			ItemAdded{SKU: "pear", Quantity: 1},
			ItemRemoved{SKU: "apple", Quantity: 1},
			ItemAdded{SKU: "plum", Quantity: 2},
		},
	}
	lc.Append(fx.StartHook(func(ctx context.Context) error {
		res, err := reg.Append(ctx, backend.Events, d.stream, 0, d.events...)
		if err != nil {
			return fmt.Errorf("appending the cart's events: %w", err)
		}
		d.version = res.Events[len(res.Events)-1].Version
		return nil
	}))
	return d
}
