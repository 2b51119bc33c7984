package core

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/modelstore"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/core/internal/perspective"
	"github.com/vantage-go/vantage/ports"
)

// Projection is a perspective that writes the events of each stream into
// the application's own tables instead of a stored model. Its apply
// functions run inside the transaction that moves the projection's cursor
// (ports.TxModelStore), so their inserts, updates and deletes commit or
// roll back with the position: each event takes effect on the tables
// exactly once, the guarantee models have. A rewind or a rebuild calls the
// projection's reset function, then replays the stream, in one
// transaction. Register it with Registry.AddPerspective; a worker whose
// backend has no TxModelStore (the memory adapter) refuses it.
type Projection struct {
	name     string
	reset    func(ctx context.Context, tx ports.Tx, streamID uuid.UUID) error
	mu       sync.Mutex
	handlers map[reflect.Type]func(ctx context.Context, tx ports.Tx, e any) error
	byName   map[string]func(ctx context.Context, tx ports.Tx, e any) error
}

// NewProjection returns an empty table projection with a stable name
// (stored with every work row and cursor; renaming it starts over). reset
// deletes the rows the projection wrote for one stream, in tx: a rewind or
// a rebuild calls it before replaying the stream in the same transaction,
// so the tables end equal to a clean replay. It must delete every row an
// apply function may have written for the stream, and nothing else.
func NewProjection(name string, reset func(ctx context.Context, tx ports.Tx, streamID uuid.UUID) error) *Projection {
	return &Projection{name: name, reset: reset, handlers: map[reflect.Type]func(context.Context, ports.Tx, any) error{}}
}

// Name returns the projection's name.
func (p *Projection) Name() string { return p.name }

// HandleTx adds the apply function for events of type E. The function
// writes the event's effect with tx, the transaction the backend opened
// (postgres.TxOf returns its pgx.Tx); it must not commit or roll back tx,
// nor keep it. The events of a stream come in version order, each once
// (the dead-lettered ones left out), and several events of one stream may
// share a transaction. An error or a panic fails the event: the whole
// transaction rolls back, what came before the event is saved again
// without it, and the event is retried with backoff, then dead-lettered.
// Each write is bounded by Options.Drain.ApplyTimeout: past it its context is
// cancelled and the event counts a failed attempt, as a slow apply does.
// While the save shares a commit (or a sender) with the saves of other
// pairs, its writes together get min(ApplyTimeout/4, 1s): past that they
// are cut, which charges nothing, and the pair is drained again at once
// and saved alone, under ApplyTimeout only, until a save of it alone takes
// less than that; so a hung write delays the saves sharing with it by that
// much at most. The retry of a failed event is saved alone too. A write
// that ignores its context holds the transaction until it returns, or
// until the transaction has idled for ApplyTimeout plus ApplyAbandonGrace:
// past that the backend may end it (see ports.ModelSaveTxParams.IdleTimeout),
// and the save fails as the backend's failure, charged to no event.
// Use EventFromContext for the event's id, stream, version and metadata.
// HandleTx returns ErrDuplicate if E already has a function.
func HandleTx[E any](p *Projection, apply func(ctx context.Context, tx ports.Tx, event E) error) error {
	if p == nil || apply == nil {
		return errors.New("core.HandleTx: nil projection or apply function")
	}
	t := reflect.TypeFor[E]()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byName != nil {
		return fmt.Errorf("projection %q: handlers cannot be added after the projection was registered", p.name)
	}
	if _, ok := p.handlers[t]; ok {
		return fmt.Errorf("projection %q: %w: apply function for %s", p.name, ErrDuplicate, t)
	}
	p.handlers[t] = func(ctx context.Context, tx ports.Tx, e any) error { return apply(ctx, tx, e.(E)) }
	return nil
}

// MustHandleTx is HandleTx that panics on error, for set-up code.
func MustHandleTx[E any](p *Projection, apply func(ctx context.Context, tx ports.Tx, event E) error) {
	if err := HandleTx(p, apply); err != nil {
		panic(err)
	}
}

func (p *Projection) bind(r *Registry) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byName != nil {
		return nil, fmt.Errorf("projection %q: %w: already registered", p.name, ErrDuplicate)
	}
	if p.reset == nil {
		return nil, fmt.Errorf("projection %q has no reset function", p.name)
	}
	if len(p.handlers) == 0 {
		return nil, fmt.Errorf("projection %q has no apply functions", p.name)
	}
	byName := make(map[string]func(context.Context, ports.Tx, any) error, len(p.handlers))
	for t, h := range p.handlers {
		et, ok := r.byGoType[t]
		if !ok {
			return nil, fmt.Errorf("projection %q handles %s: %w (call RegisterEvent first)", p.name, t, ErrUnknownEventType)
		}
		byName[et.name] = h
	}
	p.byName = byName
	return slices.Sorted(maps.Keys(byName)), nil
}

func (p *Projection) eventTypes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.byName))
}

// Indexes returns nil: a projection has no model to index.
func (p *Projection) Indexes() []ports.ModelIndex { return nil }

// The model of a projection is the events applied since its last save,
// whose writes run when the save's transaction is open (a
// perspective.Writes); it stores perspective.TableData.

func (p *Projection) decodeModel([]byte) (any, error) { return perspective.Writes(nil), nil }

func (p *Projection) encodeModel(any) ([]byte, error) { return perspective.TableData, nil }

// apply defers the event's writes to the save (see perspective.Writes).
func (p *Projection) apply(ctx context.Context, model any, typ string, event any) (any, error) {
	if _, ok := p.byName[typ]; !ok { // immutable after bind
		return model, fmt.Errorf("projection %q, event type %q: %w", p.name, typ, ErrNoHandler)
	}
	m := model.(perspective.Writes)
	return append(m[:len(m):len(m)], perspective.Write{Values: ctx, Type: typ, Event: event}), nil
}

// writes returns the Apply of a ModelSaveTx that runs the reset of stream
// when reset is set, then the pending writes of m in order, each within
// limit. A write's error, panic or deadline is returned as a *modelstore.WriteFailure.
func (p *Projection) writes(m perspective.Writes, stream uuid.UUID, reset bool, limit modelstore.WriteLimit) func(ctx context.Context, tx ports.Tx) error {
	key := pair.Key{Stream: stream, Perspective: p.name}
	return func(ctx context.Context, tx ports.Tx) error {
		if reset {
			if err := p.call(ctx, limit, func(ctx context.Context) error { return p.reset(ctx, tx, stream) }); err != nil {
				return &modelstore.WriteFailure{Key: key, Index: -1, Cause: fmt.Errorf("resetting projection %q of stream %s: %w", p.name, stream, err)}
			}
		}
		for i, w := range m {
			h := p.byName[w.Type]
			if err := p.call(&valuesContext{Context: ctx, values: w.Values}, limit, func(ctx context.Context) error { return h(ctx, tx, w.Event) }); err != nil {
				return &modelstore.WriteFailure{Key: key, Index: i, Cause: err}
			}
		}
		return nil
	}
}

// call runs fn under a context cancelled past limit, turning a panic into
// an error. An error once that deadline passed (and not ctx's) wraps
// modelstore.ErrWriteDeadline: the write was too slow, whatever it returned.
func (p *Projection) call(ctx context.Context, limit modelstore.WriteLimit, fn func(context.Context) error) (err error) {
	wctx, release := modelstore.ClockDeadline(ctx, limit.Clock, limit.Timeout, modelstore.ErrWriteDeadline)
	defer func() {
		release()
		if r := recover(); r != nil {
			err = fmt.Errorf("projection %q panicked: %v", p.name, r)
		}
		if err != nil && ctx.Err() == nil && errors.Is(context.Cause(wctx), modelstore.ErrWriteDeadline) {
			err = fmt.Errorf("projection %q: %w (ApplyTimeout %s): %w", p.name, modelstore.ErrWriteDeadline, limit.Timeout, err)
		}
	}()
	return fn(wctx)
}

// valuesContext is Context with the values of another context.
type valuesContext struct {
	context.Context
	values context.Context //nolint:containedctx // a source of values only
}

func (c *valuesContext) Value(key any) any { return c.values.Value(key) }

// checkProjections returns an error wrapping errors.ErrUnsupported when reg
// has a table projection and backend no TxModelStore to run it with.
func checkProjections(backend ports.Backend, reg *Registry) error {
	if backend.ModelTx != nil {
		return nil
	}
	for _, name := range reg.Perspectives() {
		if p, _ := reg.perspective(name); isProjection(p) {
			return fmt.Errorf("perspective %q is a table projection, which needs a backend with a ports.TxModelStore (the PostgreSQL adapter; the memory adapter has none): %w", name, errors.ErrUnsupported)
		}
	}
	return nil
}

func isProjection(p registered) bool {
	_, ok := p.(*Projection)
	return ok
}
