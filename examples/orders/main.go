// Command orders is the Vantage demo: customers place orders, add items and
// ship them; two perspectives (an order summary and per-customer statistics)
// are materialized in the background by one or more engine instances. It
// prints progress, then a check line comparing events appended with events
// applied per perspective, and exits non-zero if they differ.
//
//	go run ./examples/orders                 # in-memory backend
//	go run ./examples/orders -customers 2000 -instances 3
//	go run ./examples/orders -postgres postgres://localhost/test -instances 3
//	go run ./examples/orders -metrics :9464 -wait   # Prometheus at /metrics
//	go run ./examples/orders -trace                 # print one order's trace
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

// config holds the command-line flags.
type config struct {
	customers int
	orders    int
	items     int
	instances int
	writers   int
	timeout   time.Duration
	verbose   bool
	profile   string
	postgres  string
	schema    string
	metrics   string
	trace     bool
	wait      bool
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&c.customers, "customers", 500, "number of customers (one stream each)")
	fs.IntVar(&c.orders, "orders", 4, "orders per customer")
	fs.IntVar(&c.items, "items", 3, "items added per order")
	fs.IntVar(&c.instances, "instances", 1, "engine instances sharing the backend")
	fs.IntVar(&c.writers, "writers", 8, "concurrent appenders")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "give up if not caught up by then")
	fs.BoolVar(&c.verbose, "v", false, "log the engine's warnings and errors")
	fs.StringVar(&c.profile, "cpuprofile", "", "write a CPU profile to this file")
	fs.StringVar(&c.postgres, "postgres", os.Getenv("DATABASE_URL"), "PostgreSQL connection string (default $DATABASE_URL); empty runs in memory")
	fs.StringVar(&c.schema, "schema", "orders_demo", "PostgreSQL schema of the demo")
	fs.StringVar(&c.metrics, "metrics", "", "serve the engine's metrics for Prometheus at http://ADDR/metrics (e.g. :9464)")
	fs.BoolVar(&c.trace, "trace", false, "print the trace of one order: its append and the engine's spans linked to it")
	fs.BoolVar(&c.wait, "wait", false, "with -metrics: keep serving after the check until interrupted")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"customers", c.customers}, {"orders", c.orders}, {"items", c.items}, {"instances", c.instances}, {"writers", c.writers}} {
		if f.v < 1 {
			return c, fmt.Errorf("-%s must be at least 1, got %d", f.name, f.v)
		}
	}
	if c.timeout <= 0 {
		return c, fmt.Errorf("-timeout must be positive, got %s", c.timeout)
	}
	if c.wait && c.metrics == "" {
		return c, errors.New("-wait needs -metrics")
	}
	return c, nil
}

func run(ctx context.Context, args []string, out io.Writer) error {
	cfg, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	reg, err := newRegistry()
	if err != nil {
		return err
	}
	if cfg.postgres != "" {
		lines, err := newOrderLines(cfg.schema)
		if err != nil {
			return err
		}
		if err := reg.AddPerspective(lines); err != nil {
			return err
		}
	}
	if cfg.profile != "" {
		f, err := os.Create(cfg.profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	backends := make([]ports.Backend, cfg.instances)
	where := "the memory backend"
	if cfg.postgres == "" {
		store := memory.New(memory.Options{})
		for i := range backends {
			backends[i] = store.Backend()
		}
	} else {
		closeAll, err := openPostgres(ctx, cfg, backends)
		if err != nil {
			return err
		}
		defer closeAll()
		where = fmt.Sprintf("PostgreSQL (schema %q, one pool per instance)", cfg.schema)
	}
	fmt.Fprintf(out, "orders: %d customers × %d orders × (%d items + place + ship) on %s, %d instance(s)\n",
		cfg.customers, cfg.orders, cfg.items, where, cfg.instances)
	return runDemo(ctx, cfg, reg, backends, out)
}

func runDemo(ctx context.Context, cfg config, reg *core.Registry, backends []ports.Backend, out io.Writer) error {
	logLevel := slog.LevelError + 4 // silent unless -v
	if cfg.verbose {
		logLevel = slog.LevelWarn
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel}))
	tel, err := newTelemetry(cfg, out)
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tel.Close(closeCtx); err != nil {
			fmt.Fprintln(out, "orders: closing telemetry:", err)
		}
	}()

	var applied [2]atomic.Int64 // by perspective index
	perspectiveIndex := map[string]int{orderSummaryName: 0, customerStatsName: 1}
	progress := make(chan struct{}, 1)
	workers := make([]*core.Worker, 0, len(backends))
	for _, b := range backends {
		w, err := core.New(b, reg, &core.Options{
			Logger: logger,
			Telemetry: core.TelemetryOptions{
				MeterProvider:  tel.meters,
				TracerProvider: tel.tracers,
				StatsInterval:  50 * time.Millisecond, // the demo waits on the backlog below
			},
			Hooks: core.Hooks{OnPerspectiveEventProcessed: func(e core.PerspectiveEventProcessed) {
				if i, ok := perspectiveIndex[e.Perspective]; ok { // the models; order_lines is checked in its table
					applied[i].Add(int64(e.EventCount))
				}
				select {
				case progress <- struct{}{}:
				default:
				}
			}},
		})
		if err != nil {
			return err
		}
		if err := w.Start(ctx); err != nil {
			return err
		}
		if len(workers) == 0 {
			tel.serveHealth(w)
		}
		workers = append(workers, w)
	}
	var stopOnce sync.Once
	stopAll := func() {
		stopOnce.Do(func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			for _, w := range workers {
				if err := w.Stop(stopCtx); err != nil {
					fmt.Fprintln(out, "orders: stopping worker:", err)
				}
			}
		})
	}
	defer stopAll()

	start := time.Now()
	customers, appended, err := appendOrders(ctx, cfg, reg, backends[0].Events, tel.tracers.Tracer("orders-demo"))
	if err != nil {
		return err
	}
	appendTime := time.Since(start)
	fmt.Fprintf(out, "appended %d events to %d streams in %s (%.0f events/s)\n", appended, len(customers), appendTime.Round(time.Millisecond), float64(appended)/appendTime.Seconds())

	deadline := time.NewTimer(cfg.timeout)
	defer deadline.Stop()
	report := time.NewTicker(500 * time.Millisecond)
	defer report.Stop()
	for applied[0].Load() < appended || applied[1].Load() < appended {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("not caught up after %s: applied %d and %d of %d", cfg.timeout, applied[0].Load(), applied[1].Load(), appended)
		case <-report.C:
			fmt.Fprintf(out, "  progress: %s %d/%d, %s %d/%d\n", orderSummaryName, applied[0].Load(), appended, customerStatsName, applied[1].Load(), appended)
		case <-progress:
		}
	}
	elapsed := time.Since(start)
	fmt.Fprintf(out, "caught up in %s: %.0f events/s appended and applied by both perspectives\n", elapsed.Round(time.Millisecond), float64(appended)/elapsed.Seconds())

	// Completions are acknowledged in batches after the applies: wait
	// until the backlog is empty, so that the metrics show nothing pending.
	if err := waitNothingPending(ctx, workers[0], deadline.C); err != nil {
		return err
	}

	// The check reads the stored models: each counts the events it applied.
	summaries, stats, err := countStored(ctx, backends[0].Models, customers)
	if err != nil {
		return err
	}
	ok := summaries == appended && stats == appended
	verdict := "OK"
	if !ok {
		verdict = "MISMATCH"
	}
	fmt.Fprintf(out, "check: appended=%d %s=%d %s=%d %s\n", appended, orderSummaryName, summaries, customerStatsName, stats, verdict)
	if !ok {
		return errors.New("applied events do not match appended events")
	}
	if err := printTopSpenders(ctx, backends[0].ModelQuery, out); err != nil {
		return err
	}
	if cfg.postgres != "" {
		if err := checkOrderLines(ctx, cfg, customers, out); err != nil {
			return err
		}
	}
	if err := tel.printMetrics(ctx, out); err != nil {
		return err
	}
	if cfg.trace {
		stopAll() // every batch span ends
		tel.printTrace(out)
	}
	if cfg.wait {
		fmt.Fprintf(out, "serving http://%s/metrics until interrupted\n", tel.addr)
		<-ctx.Done()
	}
	return nil
}

// appendOrders appends every customer's orders with cfg.writers concurrent
// writers and returns the streams and the number of events appended.
func appendOrders(ctx context.Context, cfg config, reg *core.Registry, store ports.EventStore, tracer trace.Tracer) ([]uuid.UUID, int64, error) {
	customers := make([]uuid.UUID, cfg.customers)
	for i := range customers {
		customers[i] = uuid.Must(uuid.NewV7())
	}
	var appended atomic.Int64
	var firstErr error
	var once sync.Once
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range cfg.writers {
		wg.Go(func() {
			for i := range jobs {
				n, err := appendCustomer(ctx, cfg, reg, store, tracer, customers[i], i)
				appended.Add(n)
				if err != nil {
					once.Do(func() { firstErr = err })
				}
			}
		})
	}
	for i := range customers {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return customers, appended.Load(), firstErr
}

// appendCustomer appends the customer's orders; the first customer's first
// order is appended under a span of its own, the one -trace prints.
func appendCustomer(ctx context.Context, cfg config, reg *core.Registry, store ports.EventStore, tracer trace.Tracer, customer uuid.UUID, seed int) (int64, error) {
	var n int64
	version := int64(0)
	for o := range cfg.orders {
		order := uuid.Must(uuid.NewV7())
		events := []any{OrderPlaced{OrderID: order, CustomerID: customer}}
		for i := range cfg.items {
			events = append(events, ItemAdded{OrderID: order, SKU: fmt.Sprintf("SKU-%03d", (seed+o+i)%250), Quantity: 1 + (seed*o+i)%3, PriceCents: int64(199 + 100*((seed*(o+1)+i)%7) + (seed*37)%97)})
		}
		events = append(events, OrderShipped{OrderID: order, Carrier: carriers[(seed+o)%len(carriers)]})
		expected := version
		if expected == 0 {
			expected = ports.ExpectNoStream
		}
		actx, span := ctx, trace.SpanFromContext(ctx)
		if seed == 0 && o == 0 {
			actx, span = tracer.Start(ctx, tracedOrder, trace.WithAttributes(
				attribute.String("order.id", order.String()), attribute.String("customer.id", customer.String())))
		}
		res, err := reg.Append(actx, store, customer, expected, events...)
		span.End()
		if err != nil {
			return n, fmt.Errorf("appending order %d of customer %s: %w", o, customer, err)
		}
		version = res.Events[len(res.Events)-1].Version
		n += int64(len(res.Events))
	}
	return n, nil
}

var carriers = []string{"post", "courier", "freight"}

func countStored(ctx context.Context, models ports.ModelStore, customers []uuid.UUID) (summaries, stats int64, err error) {
	for _, c := range customers {
		s, err := loadModel[OrderBook](ctx, models, c, orderSummaryName)
		if err != nil {
			return 0, 0, err
		}
		summaries += s.Events
		st, err := loadModel[CustomerStats](ctx, models, c, customerStatsName)
		if err != nil {
			return 0, 0, err
		}
		stats += st.Events
	}
	return summaries, stats, nil
}

// checkOrderLines counts the rows the order_lines table projection wrote
// for the customers of this run: one per item added, each exactly once.
func checkOrderLines(ctx context.Context, cfg config, customers []uuid.UUID, out io.Writer) error {
	conn, err := pgx.Connect(ctx, cfg.postgres)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }() // a read: nothing to lose
	var rows int64
	err = conn.QueryRow(ctx, `SELECT count(*) FROM `+orderLinesTable(cfg.schema)+` WHERE customer_id = ANY($1)`, customers).Scan(&rows)
	if err != nil {
		return fmt.Errorf("counting order lines: %w", err)
	}
	want := int64(len(customers) * cfg.orders * cfg.items)
	verdict := "OK"
	if rows != want {
		verdict = "MISMATCH"
	}
	fmt.Fprintf(out, "%s (a table projection): %d rows for %d items added %s\n", orderLinesName, rows, want, verdict)
	if rows != want {
		return errors.New("order lines do not match the items added")
	}
	return nil
}

// topSpendersShown is how many customers printTopSpenders prints.
const topSpendersShown = 3

// printTopSpenders prints the customers who spent most, from a query of
// customer_stats ordered by its indexed spent_cents field.
func printTopSpenders(ctx context.Context, models ports.ModelQuery, out io.Writer) error {
	stats, err := newCustomerStats()
	if err != nil {
		return err
	}
	page, err := stats.Find(ctx, models, core.Query{OrderBy: core.ByField("spent_cents").Desc(), Limit: topSpendersShown})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "top %d customers by spend (a query on %s):\n", len(page.Models), customerStatsName)
	for _, m := range page.Models {
		fmt.Fprintf(out, "  customer %s: %d.%02d spent on %d orders, %d shipped\n",
			m.StreamID, m.Value.SpentCents/100, m.Value.SpentCents%100, m.Value.Orders, m.Value.Shipped)
	}
	return nil
}

// openPostgres migrates the schema and fills backends with one Store per
// instance, each on its own pool, as separate processes would have.
func openPostgres(ctx context.Context, cfg config, backends []ports.Backend) (func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	for i := range backends {
		pc, err := pgxpool.ParseConfig(cfg.postgres)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("parsing -postgres: %w", err)
		}
		if !strings.Contains(cfg.postgres, "pool_max_conns") {
			// The engine drains up to Options.Drain.MaxConcurrentStreams
			// streams at once; pgxpool's default (4 connections) would
			// serialize them.
			pc.MaxConns = 16
		}
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
		}
		closers = append(closers, pool.Close)
		if i == 0 {
			if err := postgres.Migrate(ctx, pool, cfg.schema); err != nil {
				closeAll()
				return nil, err // names the schema and the step
			}
			if _, err := pool.Exec(ctx, fmt.Sprintf(orderLinesDDL, orderLinesTable(cfg.schema))); err != nil {
				closeAll()
				return nil, fmt.Errorf("creating the order_lines table: %w", err)
			}
		}
		store, err := postgres.New(pool, postgres.Options{Schema: cfg.schema})
		if err != nil {
			closeAll()
			return nil, err
		}
		closers = append(closers, func() { _ = store.Close() })
		backends[i] = store.Backend()
	}
	return closeAll, nil
}

// waitNothingPending waits until the backlog figures show no pending work
// row. A backend without them has nothing to wait for.
func waitNothingPending(ctx context.Context, w *core.Worker, deadline <-chan time.Time) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		lag, err := w.Lag(ctx)
		if errors.Is(err, core.ErrNoStats) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the backlog: %w", err)
		}
		pending := int64(0)
		for _, p := range lag.Perspectives {
			pending += p.Pending
		}
		if pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("%d work rows still pending", pending)
		case <-tick.C:
		}
	}
}
