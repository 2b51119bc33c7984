package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/modelstore"
	"github.com/vantage-go/vantage/core/internal/pair"
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
// Each write is bounded by Options.ApplyTimeout: past it its context is
// cancelled and the event counts a failed attempt, as a slow apply does.
// While the save shares a commit (or a sender) with the saves of other
// pairs, its writes together get min(ApplyTimeout/4, 1s): past that they
// are cut, which charges nothing, and the pair is drained again at once
// and saved alone, under ApplyTimeout only, until a save of it alone takes
// less than that; so a hung write delays the saves sharing with it by that
// much at most. The retry of a failed event is saved alone too. A write
// that ignores its context holds the transaction until it returns.
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

// projectionModel is the "model" of a projection: the events applied since
// the last save, whose writes run when the save's transaction is open. It
// is a value; each apply returns a longer copy, so a run's model is
// exactly its unsaved events.
type projectionModel []pendingWrite

// pendingWrite is one event waiting for its projection's transaction.
type pendingWrite struct {
	// ectx carries the event's values (EventFromContext, its scope); the
	// transaction's context supplies cancellation.
	ectx  context.Context //nolint:containedctx // values only, read while the save that owns it runs
	typ   string
	event any
}

// projectionData is what a projection stores as its model: the cursor
// position is what counts.
var projectionData = []byte(`{}`)

func (p *Projection) decodeModel([]byte) (any, error) { return projectionModel(nil), nil }

func (p *Projection) encodeModel(any) ([]byte, error) { return projectionData, nil }

// apply defers the event's writes to the save (see projectionModel).
func (p *Projection) apply(ctx context.Context, model any, typ string, event any) (any, error) {
	if _, ok := p.byName[typ]; !ok { // immutable after bind
		return model, fmt.Errorf("projection %q, event type %q: %w", p.name, typ, ErrNoHandler)
	}
	m := model.(projectionModel)
	return append(m[:len(m):len(m)], pendingWrite{ectx: ctx, typ: typ, event: event}), nil
}

// writes returns the Apply of a ModelSaveTx that runs the reset of stream
// when reset is set, then the pending writes of m in order, each within
// limit. A write's error, panic or deadline is returned as a *modelstore.WriteFailure.
func (p *Projection) writes(m projectionModel, stream uuid.UUID, reset bool, limit modelstore.WriteLimit) func(ctx context.Context, tx ports.Tx) error {
	key := pair.Key{Stream: stream, Perspective: p.name}
	return func(ctx context.Context, tx ports.Tx) error {
		if reset {
			if err := p.call(ctx, limit, func(ctx context.Context) error { return p.reset(ctx, tx, stream) }); err != nil {
				return &modelstore.WriteFailure{Key: key, Index: -1, Cause: fmt.Errorf("resetting projection %q of stream %s: %w", p.name, stream, err)}
			}
		}
		for i, w := range m {
			h := p.byName[w.typ]
			if err := p.call(&valuesContext{Context: ctx, values: w.ectx}, limit, func(ctx context.Context) error { return h(ctx, tx, w.event) }); err != nil {
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

func isProjection(p perspective) bool {
	_, ok := p.(*Projection)
	return ok
}

// saveProjection is save for a table projection: the cursor moves and the
// unsaved events' writes run in one transaction. When the write of one
// event fails, the transaction rolls back, the events before it are saved
// again without it, and the failure is charged to that event (failAt); if
// it was dead-lettered, the events after it stay unsaved and the run goes
// on. A write the backend failed (modelstore.BackendFailedWrite) is charged to no
// event: the pair is retried after the infrastructure backoff, as after
// any failed save. The save is shared with those of other pairs (see
// modelstore.GroupPatience) unless the pair is saved alone or one of the unsaved
// events was tried before; writes cut at the patience of a shared save are
// charged to no event either: the pair is drained again at once and saved
// alone. It reports false when the run must stop.
func (r *pairRun) saveProjection(ctx context.Context, p *Projection) bool {
	pending := r.model.(projectionModel)
	_, savedVersion := r.position()
	// The position after the unsaved events: r.last may be past them when
	// a failed write left only those before it to save.
	last := r.last
	if ei := r.sw.event(r.rows[r.unsaved[len(r.unsaved)-1]], 0); ei >= 0 {
		last = &r.sw.events[ei]
	}
	apply := p.writes(pending, r.key.Stream, false, r.dr.writeLimit())
	// An event that failed before (or whose instance died) may be the one
	// whose writes hang: it is saved alone, not shared.
	alone := r.dr.parking.SavesAlone(r.key) || slices.ContainsFunc(r.unsaved, func(i int) bool { return r.rows[i].Attempts > 0 })
	var took time.Duration // how long the writes of a save alone ran
	if alone {
		writes := apply
		apply = func(ctx context.Context, tx ports.Tx) error {
			start := r.dr.Now()
			defer func() { took = r.dr.Now().Sub(start) }()
			return writes(ctx, tx)
		}
	}
	err := r.dr.store.SaveTx(ctx, alone, &ports.ModelSaveTxParams{
		Apply: apply,
		Save: ports.ModelSaveParams{
			StreamID:        r.key.Stream,
			Perspective:     r.key.Perspective,
			Data:            projectionData,
			LastEventID:     last.ID,
			LastVersion:     last.Version,
			ExpectedVersion: savedVersion,
			ExpectedEpoch:   r.stored.Epoch,
			AppliedLate:     r.appliedLate(),
			InstanceID:      r.dr.opts.InstanceID,
			Now:             r.dr.ParamNow(),
		},
	})
	var wf *modelstore.WriteFailure
	switch {
	case err == nil:
		if alone {
			r.dr.parking.SavedAlone(r.key, took)
		}
	case errors.Is(err, ports.ErrLeaseLost):
		r.unsaved, r.model = nil, projectionModel(nil)
		r.lost(ctx, err)
		return false
	case errors.As(err, &wf) && wf.Key == r.key && errors.Is(err, modelstore.ErrGroupPatience):
		r.stop(ctx)
		r.dr.parking.SaveAloneFor(r.key)
		r.dr.parking.RetrySoon(r.key)
		r.dr.Log.WarnContext(ctx, "a table projection's writes ran past the patience of the save they shared with other pairs; saving the pair alone",
			append(pair.Attrs(r.key.Stream, r.key.Perspective), slog.Duration("patience", r.dr.savePatience()), slog.Any("error", err))...)
		return false
	case errors.As(err, &wf) && wf.Key == r.key && wf.Index >= 0 && wf.Index < len(r.unsaved) && !modelstore.BackendFailedWrite(err):
		k := wf.Index
		failed, after := r.unsaved[k], slices.Clone(r.unsaved[k+1:])
		r.unsaved, r.model = r.unsaved[:k], pending[:k:k]
		if !r.failAt(ctx, failed, wf.Cause) {
			return false
		}
		// Dead-lettered: the events after it are saved without it.
		r.unsaved, r.model = append(r.unsaved, after...), slices.Clone(pending[k+1:])
		return len(r.unsaved) == 0 || r.save(ctx)
	case errors.Is(err, ports.ErrInvalidArgument):
		return r.saveRefused(ctx, err)
	case errors.Is(err, ports.ErrVersionConflict):
		r.dr.Log.WarnContext(ctx, "projection moved under this run; dropping its unsaved part",
			append(pair.Attrs(r.key.Stream, r.key.Perspective), slog.Int64("expected_version", savedVersion), slog.Any("error", err))...)
		r.unsaved, r.model = nil, projectionModel(nil)
		r.complete(ctx)
		r.dr.parking.RetrySoon(r.key) // see pairRun.moved
		return false
	default:
		if ctx.Err() == nil {
			r.stop(ctx)
			r.dr.parking.InfraFailed(ctx, r.key, "saving projection", err)
		}
		return false
	}
	r.lastSaved = last
	for _, i := range r.unsaved {
		r.done = append(r.done, r.rows[i].WorkID)
	}
	r.saved = append(r.saved, r.unsaved...)
	r.unsaved = r.unsaved[:0]
	r.model = projectionModel(nil)
	return true
}

// saveProjection is replayRun.save for a table projection: one transaction
// moves the cursor, resets the stream's rows and runs the writes of every
// replayed event, so the tables end as a clean replay leaves them or
// unchanged. A failed write is a *replayFailure of its event. A failed
// reset is one too, of the earliest pending event (the late one that
// triggered a rewind), or of the first replayed event for a rebuild: the
// projection's code failed, not the backend, so it must not be retried
// forever; the event is retried, then dead-lettered, with the reset's
// error. A write or reset the backend failed (modelstore.BackendFailedWrite) is the
// backend's error, charged to no event. The save goes alone, never shared
// with those of other pairs: its writes are the reset and every event of
// the stream, whose time grows with the stream, so no patience fit for a
// drain's save applies to them (see modelstore.GroupPatience).
func (r *replayRun) saveProjection(ctx context.Context, p *Projection, toReplay []ports.Event) error {
	pending := r.model.(projectionModel)
	if r.lastVer < r.stored.LastVersion {
		r.lastID, r.lastVer = r.stored.LastEventID, r.stored.LastVersion
	}
	err := r.rw.store.SaveTx(ctx, true, &ports.ModelSaveTxParams{
		Apply: p.writes(pending, r.key.Stream, true, r.rw.writeLimit()),
		Save: ports.ModelSaveParams{
			StreamID: r.key.Stream, Perspective: r.key.Perspective, Data: projectionData,
			LastEventID: r.lastID, LastVersion: r.lastVer, ExpectedVersion: r.stored.LastVersion,
			ExpectedEpoch: r.stored.Epoch, Rebase: true, AppliedLate: r.appliedLate(toReplay), Now: r.rw.ParamNow(),
		},
	})
	var wf *modelstore.WriteFailure
	if errors.As(err, &wf) && wf.Key == r.key && !modelstore.BackendFailedWrite(err) {
		switch {
		case wf.Index >= 0 && wf.Index < len(toReplay):
			return &replayFailure{event: toReplay[wf.Index], cause: wf.Cause}
		case wf.Index < 0 && len(r.rows) > 0:
			first := slices.MinFunc(r.rows, func(a, b ports.WorkItem) int { return cmp.Compare(a.EventVersion, b.EventVersion) })
			return &replayFailure{event: ports.Event{ID: first.EventID, StreamID: first.StreamID, Version: first.EventVersion}, cause: wf.Cause}
		case wf.Index < 0 && len(toReplay) > 0:
			return &replayFailure{event: toReplay[0], cause: wf.Cause}
		}
	}
	if err != nil {
		return fmt.Errorf("saving rewound projection: %w", err)
	}
	return nil
}
