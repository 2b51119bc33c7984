package core_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// The events and the model of the order examples: an order is placed with
// a number of items, then shipped by a carrier.

type OrderPlaced struct {
	Items int `json:"items"`
}

type OrderShipped struct {
	Carrier string `json:"carrier"`
}

type OrderSummary struct {
	Items   int    `json:"items"`
	Status  string `json:"status"`
	Carrier string `json:"carrier,omitempty"`
}

// newOrderRegistry registers the order events and the order_summary
// perspective, as ExampleNew shows step by step.
func newOrderRegistry() (*core.Registry, *core.Perspective[OrderSummary]) {
	reg := core.NewRegistry()
	core.MustRegisterEvent[OrderPlaced](reg, "orders.order_placed")
	core.MustRegisterEvent[OrderShipped](reg, "orders.order_shipped")
	summary := core.NewPerspective[OrderSummary]("order_summary")
	core.MustHandle(summary, func(_ context.Context, m OrderSummary, e OrderPlaced) (OrderSummary, error) {
		m.Items, m.Status = e.Items, "open"
		return m, nil
	})
	core.MustHandle(summary, func(_ context.Context, m OrderSummary, e OrderShipped) (OrderSummary, error) {
		if e.Carrier == "" {
			return m, errors.New("shipped without a carrier")
		}
		m.Status, m.Carrier = "shipped", e.Carrier
		return m, nil
	})
	if err := reg.AddPerspective(summary); err != nil {
		panic(err)
	}
	return reg, summary
}

// A whole application in one function: register the event types and a
// perspective, start a Worker on the in-memory backend, append to a stream,
// wait until the perspective applied it and read the typed model.
func ExampleNew() {
	// The deadline bounds every wait below.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	reg := core.NewRegistry()
	core.MustRegisterEvent[OrderPlaced](reg, "orders.order_placed")
	core.MustRegisterEvent[OrderShipped](reg, "orders.order_shipped")
	summary := core.NewPerspective[OrderSummary]("order_summary")
	core.MustHandle(summary, func(_ context.Context, m OrderSummary, e OrderPlaced) (OrderSummary, error) {
		m.Items, m.Status = e.Items, "open"
		return m, nil
	})
	core.MustHandle(summary, func(_ context.Context, m OrderSummary, e OrderShipped) (OrderSummary, error) {
		m.Status, m.Carrier = "shipped", e.Carrier
		return m, nil
	})
	if err := reg.AddPerspective(summary); err != nil {
		log.Fatal(err)
	}

	backend := memory.New(memory.Options{}).Backend()
	w, err := core.New(backend, reg, &core.Options{
		// A single process's cadences: claim and drain an append at once.
		// The defaults coalesce the appends of many writers instead.
		Claims: core.ClaimOptions{Interval: time.Millisecond},
		Drain:  core.DrainOptions{Batcher: core.DrainBatcherOptions{SlidingWindow: time.Millisecond}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		// Stop drains what is in flight, flushes completions and
		// deregisters the instance.
		if err := w.Stop(ctx); err != nil {
			log.Fatal(err)
		}
	}()

	order := uuid.New()
	res, err := reg.Append(ctx, backend.Events, order, ports.ExpectNoStream,
		OrderPlaced{Items: 3}, OrderShipped{Carrier: "DHL"})
	if err != nil {
		log.Fatal(err)
	}
	// Read your own writes: wait until every perspective applied the
	// stream up to the last appended version.
	last := res.Events[len(res.Events)-1].Version
	if err := w.WaitForStream(ctx, order, last); err != nil {
		log.Fatal(err)
	}

	m, err := summary.Load(ctx, backend.Models, order)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%+v at version %d\n", m.Value, m.LastVersion)
	// Output:
	// {Items:3 Status:shipped Carrier:DHL} at version 2
}

// Receptors run at the lifecycle stages of an event: here one after the
// perspective saved the model that includes the event (PostPerspective),
// and one once every perspective applied it (PostLifecycle), the place for
// an effect outside the process such as a notification.
func ExampleAddReceptor() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg, summary := newOrderRegistry()
	backend := memory.New(memory.Options{}).Backend()

	err := core.AddReceptor(reg, core.PostPerspective, core.Inline,
		func(ctx context.Context, e OrderShipped, info core.StageInfo) error {
			m, err := summary.Load(ctx, backend.Models, info.Event.StreamID)
			if err != nil {
				return err
			}
			fmt.Printf("%s: %s saved version %d, status %s\n",
				info.Stage, info.Perspective, m.LastVersion, m.Value.Status)
			return nil
		})
	if err != nil {
		log.Fatal(err)
	}
	notified := make(chan struct{}, 1)
	err = core.AddReceptor(reg, core.PostLifecycle, core.Inline,
		func(_ context.Context, e OrderShipped, info core.StageInfo) error {
			// info.DeliveryKey() is the same if a crash makes this stage
			// run again: the idempotency key of an outside effect.
			fmt.Printf("%s: notify the customer of version %d, sent with %s\n",
				info.Stage, info.Event.Version, e.Carrier)
			select {
			case notified <- struct{}{}:
			default:
			}
			return nil
		})
	if err != nil {
		log.Fatal(err)
	}

	w, err := core.New(backend, reg, &core.Options{
		Claims: core.ClaimOptions{Interval: time.Millisecond},
		Drain:  core.DrainOptions{Batcher: core.DrainBatcherOptions{SlidingWindow: time.Millisecond}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := w.Stop(ctx); err != nil {
			log.Fatal(err)
		}
	}()

	order := uuid.New()
	if _, err := reg.Append(ctx, backend.Events, order, ports.ExpectNoStream,
		OrderPlaced{Items: 1}, OrderShipped{Carrier: "UPS"}); err != nil {
		log.Fatal(err)
	}
	select {
	case <-notified:
	case <-ctx.Done():
		log.Fatal(ctx.Err())
	}
	// Output:
	// PostPerspective: order_summary saved version 2, status shipped
	// PostLifecycle: notify the customer of version 2, sent with UPS
}

// Deposited is the event of the rewind example: money paid into an
// account, imported from another system with its original versions.
type Deposited struct {
	Cents int `json:"cents"`
}

// Balance is the model of the rewind example: the sum of the deposits and
// the versions it reflects, in the order they were applied.
type Balance struct {
	Cents    int     `json:"cents"`
	Versions []int64 `json:"versions"`
}

// An event stored below a stream's cursor is late: here version 2 of an
// import arrives after versions 1 and 3 were applied. The engine never
// applies it out of order nor skips it: it rewinds the (stream,
// perspective), replaying the stream from the start (or from a snapshot,
// see RewindOptions.SnapshotEvery) so that the model equals the fold of
// the stream in version order.
func ExampleRewindOptions() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg := core.NewRegistry()
	core.MustRegisterEvent[Deposited](reg, "accounts.deposited")
	balance := core.NewPerspective[Balance]("balance")
	core.MustHandle(balance, func(ctx context.Context, m Balance, e Deposited) (Balance, error) {
		ev, _ := core.EventFromContext(ctx)
		m.Cents += e.Cents
		m.Versions = append(m.Versions, ev.Version)
		return m, nil
	})
	if err := reg.AddPerspective(balance); err != nil {
		log.Fatal(err)
	}

	rewound := make(chan core.RewindInfo, 1)
	backend := memory.New(memory.Options{}).Backend()
	w, err := core.New(backend, reg, &core.Options{
		Claims: core.ClaimOptions{Interval: time.Millisecond},
		Drain:  core.DrainOptions{Batcher: core.DrainBatcherOptions{SlidingWindow: time.Millisecond}},
		// Rewind at once: the defaults wait for a burst of late events to
		// end, so that it costs one rewind.
		Rewind: core.RewindOptions{Debounce: time.Millisecond, MaxDebounce: 10 * time.Millisecond},
		Hooks: core.Hooks{OnRewind: func(info core.RewindInfo) {
			select { // hooks run on the engine's loops: never block them
			case rewound <- info:
			default:
			}
		}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := w.Stop(ctx); err != nil {
			log.Fatal(err)
		}
	}()

	// importAt appends deposits at explicit versions through the
	// EventStore port (Registry.Append always appends at the stream's
	// head). The subscriptions make the store fan the events out to the
	// registry's perspectives.
	account := uuid.New()
	importAt := func(versions ...int64) {
		var events []ports.NewEvent
		for _, v := range versions {
			ne, err := reg.Encode(Deposited{Cents: 100 * int(v)})
			if err != nil {
				log.Fatal(err)
			}
			ne.Version = v
			events = append(events, ne)
		}
		if _, err := backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{
			StreamID:      account,
			Events:        events,
			Subscriptions: reg.Subscriptions(),
		}); err != nil {
			log.Fatal(err)
		}
	}
	show := func() {
		m, err := balance.Load(ctx, backend.Models, account)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d cents from versions %v\n", m.Value.Cents, m.Value.Versions)
	}

	importAt(1, 3)
	if err := w.WaitForStream(ctx, account, 3); err != nil {
		log.Fatal(err)
	}
	show()

	importAt(2) // below the cursor, at 3: late
	var info core.RewindInfo
	select {
	case info = <-rewound:
	case <-ctx.Done():
		log.Fatal(ctx.Err())
	}
	fmt.Printf("rewound from version %d: replayed %d events, %d new\n",
		info.FromVersion, info.Replayed, info.New)
	show()
	// Output:
	// 400 cents from versions [1 3]
	// rewound from version 0: replayed 3 events, 1 new
	// 600 cents from versions [1 2 3]
}

// An event whose apply keeps failing is retried with backoff while the
// rest of its (stream, perspective) waits, and moved to dead letters by
// the failure that uses up Options.Retries.MaxEventAttempts; the pair
// then goes on with the next event. The dead letter keeps the reason and
// the last error, for an operator to requeue or ignore it.
func ExampleOptions_deadLetters() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg, summary := newOrderRegistry() // OrderShipped without a carrier fails
	backend := memory.New(memory.Options{}).Backend()

	deadLettered := make(chan ports.DeadLetter, 1)
	w, err := core.New(backend, reg, &core.Options{
		Claims: core.ClaimOptions{Interval: time.Millisecond},
		Drain:  core.DrainOptions{Batcher: core.DrainBatcherOptions{SlidingWindow: time.Millisecond}},
		Retries: core.RetryOptions{
			// Three attempts, retried after 2ms and 4ms; the defaults retry
			// for over half an hour before they give up.
			MaxEventAttempts: 3,
			Event:            core.Backoff{Initial: 2 * time.Millisecond, Max: 10 * time.Millisecond},
		},
		Hooks: core.Hooks{OnDeadLettered: func(dl ports.DeadLetter) {
			select { // hooks run on the engine's loops: never block them
			case deadLettered <- dl:
			default:
			}
		}},
		Logger: slog.New(slog.DiscardHandler), // failures are logged at Warn and Error
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := w.Stop(ctx); err != nil {
			log.Fatal(err)
		}
	}()

	order := uuid.New()
	if _, err := reg.Append(ctx, backend.Events, order, ports.ExpectNoStream,
		OrderPlaced{Items: 2}, OrderShipped{}, OrderPlaced{Items: 5}); err != nil {
		log.Fatal(err)
	}
	select {
	case <-deadLettered:
	case <-ctx.Done():
		log.Fatal(ctx.Err())
	}
	if err := w.WaitForStream(ctx, order, 3); err != nil {
		log.Fatal(err)
	}

	dls, err := backend.DeadLetters.DeadLettersList(ctx, &ports.DeadLettersListParams{StreamID: order})
	if err != nil {
		log.Fatal(err)
	}
	for _, dl := range dls {
		fmt.Printf("dead letter: %s version %d, %s after %d attempts: %s\n",
			dl.Perspective, dl.EventVersion, dl.Reason, dl.Attempts, dl.Error)
	}
	m, err := summary.Load(ctx, backend.Models, order)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("model: %+v at version %d\n", m.Value, m.LastVersion)
	// Output:
	// dead letter: order_summary version 2, failed after 3 attempts: shipped without a carrier
	// model: {Items:5 Status:open Carrier:} at version 3
}

// Checkout is the model of the metadata example: the last order and the
// request and channel that placed it.
type Checkout struct {
	Items         int       `json:"items"`
	CorrelationID uuid.UUID `json:"correlation_id"`
	Source        string    `json:"source"`
}

// Every event stores the metadata of the context it is appended under: a
// correlation id (WithCorrelationID), headers (WithHeaders) and a scope
// (WithScope). An apply function finds the stored metadata of its event
// with EventFromContext.
func ExampleRegistry_Append() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg := core.NewRegistry()
	core.MustRegisterEvent[OrderPlaced](reg, "orders.order_placed")
	checkouts := core.NewPerspective[Checkout]("checkouts")
	core.MustHandle(checkouts, func(ctx context.Context, m Checkout, e OrderPlaced) (Checkout, error) {
		ev, _ := core.EventFromContext(ctx)
		m.Items = e.Items
		m.CorrelationID = ev.Metadata.CorrelationID
		m.Source = ev.Metadata.Headers["source"]
		// An event appended here, under ctx, would carry ev as its
		// causation and inherit its correlation id, but not its headers.
		next := core.MetadataFromContext(ctx)
		if next.CausationID != ev.ID || next.CorrelationID != m.CorrelationID {
			return m, errors.New("unexpected metadata")
		}
		return m, nil
	})
	if err := reg.AddPerspective(checkouts); err != nil {
		log.Fatal(err)
	}

	backend := memory.New(memory.Options{}).Backend()
	w, err := core.New(backend, reg, &core.Options{
		Claims: core.ClaimOptions{Interval: time.Millisecond},
		Drain:  core.DrainOptions{Batcher: core.DrainBatcherOptions{SlidingWindow: time.Millisecond}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := w.Stop(ctx); err != nil {
			log.Fatal(err)
		}
	}()

	// The request's context, say in an HTTP handler.
	requestID := uuid.MustParse("0193a1b2-0000-7000-8000-000000000001")
	ctx = core.WithCorrelationID(ctx, requestID)
	ctx = core.WithHeaders(ctx, map[string]string{"source": "checkout"})
	md := core.MetadataFromContext(ctx) // what the append stores
	fmt.Println("appending with", md.CorrelationID, md.Headers)

	order := uuid.New()
	res, err := reg.Append(ctx, backend.Events, order, ports.ExpectNoStream, OrderPlaced{Items: 2})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.WaitForStream(ctx, order, res.Events[0].Version); err != nil {
		log.Fatal(err)
	}
	m, err := checkouts.Load(ctx, backend.Models, order)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("applied: %+v\n", m.Value)
	// Output:
	// appending with 0193a1b2-0000-7000-8000-000000000001 map[source:checkout]
	// applied: {Items:2 CorrelationID:0193a1b2-0000-7000-8000-000000000001 Source:checkout}
}

// Rebuild replays a perspective from the start for every stream (or the
// streams named), for example after a deploy changed its apply functions:
// here the first version of order_summary kept the items only, the second
// keeps the status too, and a rebuild brings the stored models up to date
// while the worker keeps serving everything else.
func ExampleWorker_Rebuild() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := memory.New(memory.Options{}) // both deploys share the backend
	backend := store.Backend()
	options := &core.Options{
		Claims: core.ClaimOptions{Interval: time.Millisecond},
		Drain:  core.DrainOptions{Batcher: core.DrainBatcherOptions{SlidingWindow: time.Millisecond}},
		Logger: slog.New(slog.DiscardHandler),
	}
	start := func(reg *core.Registry) *core.Worker {
		w, err := core.New(backend, reg, options)
		if err != nil {
			log.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			log.Fatal(err)
		}
		return w
	}
	show := func(p *core.Perspective[OrderSummary], order uuid.UUID) {
		m, err := p.Load(ctx, backend.Models, order)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%+v\n", m.Value)
	}

	// The first deploy.
	oldReg := core.NewRegistry()
	core.MustRegisterEvent[OrderPlaced](oldReg, "orders.order_placed")
	oldSummary := core.NewPerspective[OrderSummary]("order_summary")
	core.MustHandle(oldSummary, func(_ context.Context, m OrderSummary, e OrderPlaced) (OrderSummary, error) {
		m.Items = e.Items
		return m, nil
	})
	if err := oldReg.AddPerspective(oldSummary); err != nil {
		log.Fatal(err)
	}
	w := start(oldReg)
	order := uuid.New()
	if _, err := oldReg.Append(ctx, backend.Events, order, ports.ExpectNoStream, OrderPlaced{Items: 4}); err != nil {
		log.Fatal(err)
	}
	if err := w.WaitForStream(ctx, order, 1); err != nil {
		log.Fatal(err)
	}
	if err := w.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	show(oldSummary, order)

	// The second deploy: same perspective name, new apply function.
	reg, summary := newOrderRegistry()
	w = start(reg)
	defer func() {
		if err := w.Stop(ctx); err != nil {
			log.Fatal(err)
		}
	}()
	n, err := w.Rebuild(ctx, "order_summary")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("rebuilt streams:", n)
	show(summary, order)
	// Output:
	// {Items:4 Status: Carrier:}
	// rebuilt streams: 1
	// {Items:4 Status:open Carrier:}
}

// Find the models of a perspective by their fields, in order, page by
// page: the open orders, the largest first, two at a time. The perspective
// declares the fields it is queried by; on PostgreSQL a Worker builds a
// matching index of each declaration when it starts.
func ExamplePerspective_Find() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	reg := core.NewRegistry()
	core.MustRegisterEvent[OrderPlaced](reg, "orders.order_placed")
	core.MustRegisterEvent[OrderShipped](reg, "orders.order_shipped")
	summary := core.NewPerspective[OrderSummary]("order_summary")
	core.MustHandle(summary, func(_ context.Context, m OrderSummary, e OrderPlaced) (OrderSummary, error) {
		m.Items, m.Status = e.Items, "open"
		return m, nil
	})
	core.MustHandle(summary, func(_ context.Context, m OrderSummary, e OrderShipped) (OrderSummary, error) {
		m.Status, m.Carrier = "shipped", e.Carrier
		return m, nil
	})
	// Orders are found by status, ordered by items.
	if err := summary.Index(core.TextField("status"), core.NumberField("items")); err != nil {
		log.Fatal(err)
	}
	if err := reg.AddPerspective(summary); err != nil {
		log.Fatal(err)
	}

	backend := memory.New(memory.Options{}).Backend()
	w, err := core.New(backend, reg, &core.Options{
		Claims: core.ClaimOptions{Interval: time.Millisecond},
		Drain:  core.DrainOptions{Batcher: core.DrainBatcherOptions{SlidingWindow: time.Millisecond}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := w.Stop(ctx); err != nil {
			log.Fatal(err)
		}
	}()

	for _, items := range []int{3, 1, 4, 1, 5} {
		events := []any{OrderPlaced{Items: items}}
		if items == 4 {
			events = append(events, OrderShipped{Carrier: "DHL"})
		}
		order := uuid.New()
		if _, err := reg.Append(ctx, backend.Events, order, ports.ExpectNoStream, events...); err != nil {
			log.Fatal(err)
		}
		if err := w.WaitForStream(ctx, order, int64(len(events))); err != nil {
			log.Fatal(err)
		}
	}

	q := core.Query{
		Where:   []core.Filter{core.Eq("status", "open")},
		OrderBy: core.ByField("items").Desc(),
		Limit:   2,
	}
	for {
		page, err := summary.Find(ctx, backend.ModelQuery, q)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Print("page:")
		for _, m := range page.Models {
			fmt.Printf(" %d items (version %d)", m.Value.Items, m.LastVersion)
		}
		fmt.Println()
		if page.Next == "" {
			break
		}
		q.After = page.Next
	}
	// Output:
	// page: 5 items (version 1) 3 items (version 1)
	// page: 1 items (version 1) 1 items (version 1)
}
