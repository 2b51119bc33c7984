package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// Events. Each customer is one stream.

// OrderPlaced starts an order.
type OrderPlaced struct {
	OrderID    uuid.UUID `json:"order_id"`
	CustomerID uuid.UUID `json:"customer_id"`
}

// ItemAdded adds a line to an order.
type ItemAdded struct {
	OrderID    uuid.UUID `json:"order_id"`
	SKU        string    `json:"sku"`
	Quantity   int       `json:"quantity"`
	PriceCents int64     `json:"price_cents"`
}

// OrderShipped ends an order.
type OrderShipped struct {
	OrderID uuid.UUID `json:"order_id"`
	Carrier string    `json:"carrier"`
}

// Models.

// OrderSummary is one order as the order-summary perspective sees it.
type OrderSummary struct {
	Lines      int    `json:"lines"`
	Quantity   int    `json:"quantity"`
	TotalCents int64  `json:"total_cents"`
	Status     string `json:"status"`
	Carrier    string `json:"carrier,omitempty"`
}

// OrderBook is the order-summary perspective's model of a customer: every
// order by id, plus the number of events applied (for the demo's check).
type OrderBook struct {
	Orders map[uuid.UUID]OrderSummary `json:"orders"`
	Events int64                      `json:"events"`
}

// CustomerStats is the per-customer perspective's model.
type CustomerStats struct {
	Orders     int   `json:"orders"`
	Shipped    int   `json:"shipped"`
	Items      int   `json:"items"`
	SpentCents int64 `json:"spent_cents"`
	Events     int64 `json:"events"`
}

const (
	orderSummaryName  = "order_summary"
	customerStatsName = "customer_stats"
)

var errUnknownOrder = errors.New("unknown order")

func newRegistry() (*core.Registry, error) {
	reg := core.NewRegistry()
	for _, err := range []error{
		core.RegisterEvent[OrderPlaced](reg, "orders.order_placed"),
		core.RegisterEvent[ItemAdded](reg, "orders.item_added"),
		core.RegisterEvent[OrderShipped](reg, "orders.order_shipped"),
	} {
		if err != nil {
			return nil, err
		}
	}

	summary := core.NewPerspective[OrderBook](orderSummaryName)
	book := func(b OrderBook) OrderBook {
		if b.Orders == nil {
			b.Orders = map[uuid.UUID]OrderSummary{}
		}
		b.Events++
		return b
	}
	if err := errors.Join(
		core.Handle(summary, func(_ context.Context, b OrderBook, e OrderPlaced) (OrderBook, error) {
			b = book(b)
			b.Orders[e.OrderID] = OrderSummary{Status: "open"}
			return b, nil
		}),
		core.Handle(summary, func(_ context.Context, b OrderBook, e ItemAdded) (OrderBook, error) {
			b = book(b)
			o, ok := b.Orders[e.OrderID]
			if !ok {
				return b, fmt.Errorf("item for order %s: %w", e.OrderID, errUnknownOrder)
			}
			o.Lines++
			o.Quantity += e.Quantity
			o.TotalCents += int64(e.Quantity) * e.PriceCents
			b.Orders[e.OrderID] = o
			return b, nil
		}),
		core.Handle(summary, func(_ context.Context, b OrderBook, e OrderShipped) (OrderBook, error) {
			b = book(b)
			o, ok := b.Orders[e.OrderID]
			if !ok {
				return b, fmt.Errorf("shipping order %s: %w", e.OrderID, errUnknownOrder)
			}
			o.Status, o.Carrier = "shipped", e.Carrier
			b.Orders[e.OrderID] = o
			return b, nil
		}),
	); err != nil {
		return nil, err
	}

	stats, err := newCustomerStats()
	if err != nil {
		return nil, err
	}
	if err := reg.AddPerspective(summary); err != nil {
		return nil, err
	}
	if err := reg.AddPerspective(stats); err != nil {
		return nil, err
	}
	return reg, nil
}

// newCustomerStats returns the customer_stats perspective: per customer,
// orders placed and shipped, items and money spent, indexed by spend.
func newCustomerStats() (*core.Perspective[CustomerStats], error) {
	stats := core.NewPerspective[CustomerStats](customerStatsName)
	if err := errors.Join(
		core.Handle(stats, func(_ context.Context, s CustomerStats, _ OrderPlaced) (CustomerStats, error) {
			s.Orders++
			s.Events++
			return s, nil
		}),
		core.Handle(stats, func(_ context.Context, s CustomerStats, e ItemAdded) (CustomerStats, error) {
			s.Items += e.Quantity
			s.SpentCents += int64(e.Quantity) * e.PriceCents
			s.Events++
			return s, nil
		}),
		core.Handle(stats, func(_ context.Context, s CustomerStats, _ OrderShipped) (CustomerStats, error) {
			s.Shipped++
			s.Events++
			return s, nil
		}),
	); err != nil {
		return nil, err
	}
	// Queried by spend (topSpenders): on PostgreSQL the workers build the
	// index at start.
	if err := stats.Index(core.NumberField("spent_cents")); err != nil {
		return nil, err
	}
	return stats, nil
}

func loadModel[M any](ctx context.Context, models ports.ModelStore, stream uuid.UUID, perspective string) (M, error) {
	var m M
	stored, err := models.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: stream, Perspective: perspective})
	if errors.Is(err, ports.ErrNotFound) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("loading %s of %s: %w", perspective, stream, err)
	}
	if err := json.Unmarshal(stored.Data, &m); err != nil {
		return m, fmt.Errorf("decoding %s of %s: %w", perspective, stream, err)
	}
	return m, nil
}

// orderLinesName names the order_lines table projection.
const orderLinesName = "order_lines"

// orderLinesTable returns the quoted name of schema's order_lines table.
func orderLinesTable(schema string) string { return pgx.Identifier{schema, "order_lines"}.Sanitize() }

// orderLinesDDL creates the table the order_lines projection writes.
const orderLinesDDL = `CREATE TABLE IF NOT EXISTS %s (
    customer_id uuid   NOT NULL,
    version     bigint NOT NULL,
    order_id    uuid   NOT NULL,
    sku         text   NOT NULL,
    quantity    int    NOT NULL,
    price_cents bigint NOT NULL,
    PRIMARY KEY (customer_id, version)
)`

// newOrderLines returns the order_lines table projection: a row of the
// application's own table per item added, written in the transaction that
// moves the projection's cursor (PostgreSQL only). A rewind or rebuild
// deletes a customer's rows before replaying them.
func newOrderLines(schema string) (*core.Projection, error) {
	table := orderLinesTable(schema)
	lines := core.NewProjection(orderLinesName, func(ctx context.Context, tx ports.Tx, customer uuid.UUID) error {
		_, err := postgres.TxOf(tx).Exec(ctx, `DELETE FROM `+table+` WHERE customer_id = $1`, customer)
		return err
	})
	err := core.HandleTx(lines, func(ctx context.Context, tx ports.Tx, e ItemAdded) error {
		ev, _ := core.EventFromContext(ctx)
		_, err := postgres.TxOf(tx).Exec(ctx,
			`INSERT INTO `+table+` (customer_id, version, order_id, sku, quantity, price_cents) VALUES ($1, $2, $3, $4, $5, $6)`,
			ev.StreamID, ev.Version, e.OrderID, e.SKU, e.Quantity, e.PriceCents)
		return err
	})
	if err != nil {
		return nil, err
	}
	return lines, nil
}
