package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// The event types and perspectives of the simulated application. alpha
// handles every type, beta only typeA (so subscriptions per type matter),
// gamma is a table projection over typeA and typeB.
const (
	typeA = "sim.a"
	typeB = "sim.b"
	typeC = "sim.c"

	alpha = "alpha"
	beta  = "beta"
	gamma = "gamma"
)

var (
	allTypes        = []string{typeA, typeB, typeC}
	allPerspectives = []string{alpha, beta, gamma}
	handles         = map[string][]string{alpha: {typeA, typeB, typeC}, beta: {typeA}, gamma: {typeA, typeB}}
)

// handlesType reports whether perspective p applies events of type typ.
func handlesType(p, typ string) bool { return slices.Contains(handles[p], typ) }

// perspectivesOf returns the perspectives that apply events of type typ.
func perspectivesOf(typ string) []string {
	var out []string
	for _, p := range allPerspectives {
		if handlesType(p, typ) {
			out = append(out, p)
		}
	}
	return out
}

// The events. K is the simulator's key of the event: the fault plan, the
// apply log and the checks know an event by it. X is an int, so that a
// payload with a string there does not decode (an undecodable event).
type (
	// EvA is an event of type sim.a.
	EvA struct {
		K int64 `json:"k"`
		X int   `json:"x"`
	}
	// EvB is an event of type sim.b.
	EvB struct {
		K int64 `json:"k"`
		X int   `json:"x"`
	}
	// EvC is an event of type sim.c.
	EvC struct {
		K int64 `json:"k"`
		X int   `json:"x"`
	}
)

// newEvent returns the Go value of an event of type typ with key k.
func newEvent(typ string, k int64) any {
	switch typ {
	case typeA:
		return EvA{K: k, X: int(k)}
	case typeB:
		return EvB{K: k, X: int(k)}
	}
	return EvC{K: k, X: int(k)}
}

// keyOf reads the key of a stored event from its payload, whether or not
// the payload decodes into the event's Go type.
func keyOf(data []byte) int64 {
	var p struct {
		K int64 `json:"k"`
	}
	_ = json.Unmarshal(data, &p)
	return p.K
}

// Model is the model of the model perspectives: every event applied to
// it, in the order it was applied.
type Model struct {
	E []Entry `json:"e"`
}

// Entry is one applied event: its version, its key, and the code version
// (the simulator's stamp of "the apply functions as deployed") it was
// applied under.
type Entry struct {
	V int64 `json:"v"`
	K int64 `json:"k"`
	S int64 `json:"s"`
}

// versions returns the versions of m's entries.
func (m Model) versions() []int64 {
	out := make([]int64, len(m.E))
	for i, e := range m.E {
		out[i] = e.V
	}
	return out
}

// Row is one row the table projection wrote: one per applied event.
type Row struct {
	Seq     int64
	Stream  uuid.UUID
	Version int64
	K       int64
	Stamp   int64
}

// faultKind is what the plan makes an event's apply (or table write) do.
type faultKind int

const (
	healthy faultKind = iota
	// flaky fails the first Times applies (on Inst only, when set).
	flaky
	// poison always fails, with an error naming the event.
	poison
	// panicky panics: the first Times applies, or always when Times is 0.
	panicky
	// hangCtx blocks until the apply's context is done: a timeout.
	hangCtx
	// hangIgnore blocks for Hold ignoring its context: an abandonment.
	hangIgnore
	// undecodable: the payload does not decode into the event's type.
	undecodable
	// writeTransient: the table write loses its connection the first Times
	// writes: an infrastructure error, never the event's.
	writeTransient
	// writePoison: the table write always fails.
	writePoison
	// writeHang: the table write blocks until its context is done.
	writeHang
)

var faultNames = map[faultKind]string{
	healthy: "healthy", flaky: "flaky", poison: "poison", panicky: "panicky", hangCtx: "hang-ctx",
	hangIgnore: "hang-ignore", undecodable: "undecodable", writeTransient: "write-transient",
	writePoison: "write-poison", writeHang: "write-hang",
}

func (k faultKind) String() string { return faultNames[k] }

// eventFault is the plan of one event. Persp names the perspective it
// hits (the table projection for the write faults); Undecodable hits
// every perspective of the type.
type eventFault struct {
	Kind  faultKind
	Persp string
	Times int           // flaky, panicky, hangs, writeTransient: how many applies fail (0: all)
	Inst  int           // flaky: only on this slot's instances (-1: any; firstSlot: the first that applies it)
	Hold  time.Duration // hangIgnore: how long it ignores its context
}

func (f eventFault) String() string {
	s := f.Kind.String()
	if f.Persp != "" {
		s += "@" + f.Persp
	}
	if f.Times > 0 {
		s += fmt.Sprintf("x%d", f.Times)
	}
	if f.Inst >= 0 && f.Kind == flaky {
		s += fmt.Sprintf("/slot%d", f.Inst)
	}
	if f.Inst == firstSlot {
		s += "/first"
	}
	if f.Hold > 0 {
		s += "/" + f.Hold.String()
	}
	return s
}

// firstSlot as eventFault.Inst binds a flaky fault to the slot of the
// instance that applies the event first: the holder of its stream, which
// then fails it on every retry while any other instance applies it.
const firstSlot = -2

// permanent reports whether the fault makes the event fail on every
// attempt: it must end in dead letters unless fixed.
func (f eventFault) permanent() bool {
	switch f.Kind {
	case poison, undecodable, writePoison:
		return true
	case panicky, hangCtx, hangIgnore, writeHang:
		return f.Times == 0
	}
	return false
}

// plan holds the fault of every event that has one, by key, with what
// happened to it so far.
type plan struct {
	mu      sync.Mutex
	faults  map[int64]eventFault
	fixed   map[int64]bool
	failed  map[keyPersp]int // failures served so far per (key, perspective)
	release chan struct{}    // closed at the heal: hangIgnore applies hung before it return
	final   chan struct{}    // closed at the end of the run: every hangIgnore apply returns
}

type keyPersp struct {
	k int64
	p string
}

func newPlan() *plan {
	return &plan{faults: map[int64]eventFault{}, fixed: map[int64]bool{}, failed: map[keyPersp]int{}, release: make(chan struct{}), final: make(chan struct{})}
}

func (pl *plan) set(k int64, f eventFault) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.faults[k] = f
}

// get returns the fault of k ("healthy" when it has none).
func (pl *plan) get(k int64) (eventFault, bool) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	f, ok := pl.faults[k]
	return f, ok
}

// fix makes k healthy from now on ("the apply function was fixed") and
// reports whether it had a fault.
func (pl *plan) fix(k int64) bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	_, ok := pl.faults[k]
	pl.fixed[k] = true
	return ok
}

// failures returns how many failures the plan served for (k, p).
func (pl *plan) failures(k int64, p string) int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.failed[keyPersp{k, p}]
}

// decide returns the fault the apply of k by perspective p on slot inst
// meets now: healthy once fixed or once a flaky fault has served its
// failures.
func (pl *plan) decide(k int64, p string, inst int, write bool) eventFault {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	f, ok := pl.faults[k]
	if !ok || pl.fixed[k] || f.Persp != p {
		return eventFault{Kind: healthy}
	}
	isWrite := f.Kind == writeTransient || f.Kind == writePoison || f.Kind == writeHang
	if isWrite != write {
		return eventFault{Kind: healthy}
	}
	key := keyPersp{k, p}
	switch f.Kind {
	case flaky, panicky, writeTransient, hangCtx, hangIgnore, writeHang:
		if f.Kind == flaky && f.Inst == firstSlot && inst >= 0 {
			f.Inst = inst
			pl.faults[k] = f
		}
		if f.Kind == flaky && f.Inst >= 0 && f.Inst != inst {
			return eventFault{Kind: healthy}
		}
		if f.Times > 0 && pl.failed[key] >= f.Times {
			return eventFault{Kind: healthy}
		}
	}
	pl.failed[key]++
	return f
}

// errText is the error an apply returns for fault f of event k: the dead
// letter of the event must carry it.
func errText(f eventFault, k int64) string {
	switch f.Kind {
	case flaky:
		return fmt.Sprintf("sim: flaky event k=%d", k)
	case poison:
		return fmt.Sprintf("sim: poison event k=%d", k)
	case panicky:
		return fmt.Sprintf("sim: panicking event k=%d", k)
	case writePoison:
		return fmt.Sprintf("sim: poison write k=%d", k)
	}
	return ""
}

// instKey carries the *instance a Worker runs as in the contexts of its
// applies and receptors (a Worker's handlers derive their contexts from
// the one it was started with).
type instKey struct{}

func instanceOf(ctx context.Context) *instance {
	in, _ := ctx.Value(instKey{}).(*instance)
	return in
}

// slotOf returns the slot of the instance running ctx, -1 when unknown.
func slotOf(ctx context.Context) int {
	if in := instanceOf(ctx); in != nil {
		return in.slot
	}
	return -1
}

// nameOf returns the name of the instance running ctx.
func nameOf(ctx context.Context) string {
	if in := instanceOf(ctx); in != nil {
		return in.name
	}
	return "?"
}

// newRegistry builds the application's registry: the event types, the two
// model perspectives, the table projection and a receptor at every stage.
func (w *world) newRegistry() (*core.Registry, error) {
	reg := core.NewRegistry()
	if err := errors.Join(
		core.RegisterEvent[EvA](reg, typeA),
		core.RegisterEvent[EvB](reg, typeB),
		core.RegisterEvent[EvC](reg, typeC),
	); err != nil {
		return nil, err
	}
	pa := core.NewPerspective[Model](alpha)
	pb := core.NewPerspective[Model](beta)
	if err := errors.Join(
		core.Handle(pa, func(ctx context.Context, m Model, e EvA) (Model, error) { return w.applyModel(ctx, alpha, m, e.K) }),
		core.Handle(pa, func(ctx context.Context, m Model, e EvB) (Model, error) { return w.applyModel(ctx, alpha, m, e.K) }),
		core.Handle(pa, func(ctx context.Context, m Model, e EvC) (Model, error) { return w.applyModel(ctx, alpha, m, e.K) }),
		core.Handle(pb, func(ctx context.Context, m Model, e EvA) (Model, error) { return w.applyModel(ctx, beta, m, e.K) }),
		reg.AddPerspective(pa),
		reg.AddPerspective(pb),
	); err != nil {
		return nil, err
	}
	pg := core.NewProjection(gamma, func(ctx context.Context, tx ports.Tx, stream uuid.UUID) error {
		return w.table.reset(ctx, innerTx(tx), stream)
	})
	if err := errors.Join(
		core.HandleTx(pg, func(ctx context.Context, tx ports.Tx, e EvA) error { return w.applyRow(ctx, tx, e.K) }),
		core.HandleTx(pg, func(ctx context.Context, tx ports.Tx, e EvB) error { return w.applyRow(ctx, tx, e.K) }),
		reg.AddPerspective(pg),
	); err != nil {
		return nil, err
	}
	for _, stage := range []core.Stage{core.PrePerspective, core.PostPerspective, core.PostAllPerspectives, core.PostLifecycle} {
		if err := errors.Join(
			core.AddReceptor(reg, stage, core.Inline, func(ctx context.Context, e EvA, info core.StageInfo) error {
				return w.receptor(ctx, info, e.K)
			}),
			core.AddReceptor(reg, stage, core.Inline, func(ctx context.Context, e EvB, info core.StageInfo) error {
				return w.receptor(ctx, info, e.K)
			}),
			core.AddReceptor(reg, stage, core.Inline, func(ctx context.Context, e EvC, info core.StageInfo) error {
				return w.receptor(ctx, info, e.K)
			}),
		); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// applyModel is the apply function of the model perspectives: it checks
// the model it is given against the event (on the spot), serves the
// event's fault, logs the apply and appends the event to the model.
func (w *world) applyModel(ctx context.Context, persp string, m Model, k int64) (Model, error) {
	ev, _ := core.EventFromContext(ctx)
	inst := instanceOf(ctx)
	stamp := w.code.Load()
	start := w.now()
	w.rec.checkInput(w.now(), nameOf(ctx), persp, ev, k, m)
	f := w.plan.decide(k, persp, slotOf(ctx), false)
	err := w.serveFault(ctx, f, k)
	w.rec.applied(applyRec{
		Start: start, At: w.now(), Inst: nameOf(ctx), Slot: slotOf(ctx), Persp: persp, Stream: ev.StreamID, Version: ev.Version, K: k,
		Input: m.versions(), Fault: f.Kind, Err: errString(err), Stamp: stamp, Known: inst != nil,
	})
	if err != nil {
		return m, err
	}
	return Model{E: append(slices.Clip(m.E), Entry{V: ev.Version, K: k, S: stamp})}, nil
}

// serveFault does what fault f makes an apply of k do: nothing, fail,
// panic, or hang.
func (w *world) serveFault(ctx context.Context, f eventFault, k int64) error {
	switch f.Kind {
	case flaky, poison, writePoison:
		return errors.New(errText(f, k))
	case panicky:
		panic(errText(f, k))
	case hangCtx, writeHang:
		<-ctx.Done()
		return fmt.Errorf("sim: hung event k=%d: %w", k, context.Cause(ctx))
	case hangIgnore:
		// It ignores its context for Hold, then gives up once the context
		// is done (the engine abandoned it, or Hold was past its deadline
		// anyway). The heal releases the applies hung before it; those that
		// start after it hang for their Hold.
		t := w.clock.NewTimer(f.Hold)
		defer t.Stop()
		release := w.plan.release
		select {
		case <-release:
			release = nil
		default:
		}
		select {
		case <-t.C():
		case <-release:
		case <-w.plan.final:
		}
		<-ctx.Done()
		return fmt.Errorf("sim: event k=%d hung ignoring its context: %w", k, context.Cause(ctx))
	}
	return nil
}

// applyRow is the apply function of the table projection: it serves the
// event's write fault, then inserts the event's row in tx.
func (w *world) applyRow(ctx context.Context, tx ports.Tx, k int64) error {
	ev, _ := core.EventFromContext(ctx)
	stamp := w.code.Load()
	start := w.now()
	f := w.plan.decide(k, gamma, slotOf(ctx), true)
	var err error
	if f.Kind == writeTransient {
		err = w.table.breakConn(ctx, innerTx(tx))
	} else {
		err = w.serveFault(ctx, f, k)
	}
	if err == nil {
		err = w.table.insert(ctx, innerTx(tx), Row{Stream: ev.StreamID, Version: ev.Version, K: k, Stamp: stamp})
		if err == nil {
			if st, ok := tx.(*simTx); ok {
				st.wrote(ev.Version)
			}
		}
	}
	w.rec.applied(applyRec{
		Start: start, At: w.now(), Inst: nameOf(ctx), Slot: slotOf(ctx), Persp: gamma, Stream: ev.StreamID, Version: ev.Version, K: k,
		Fault: f.Kind, Err: errString(err), Stamp: stamp, Known: instanceOf(ctx) != nil, Write: true,
	})
	return err
}

// receptor records a stage's receptor call.
func (w *world) receptor(ctx context.Context, info core.StageInfo, k int64) error {
	w.rec.fired(receptorRec{At: w.now(), Inst: nameOf(ctx), Stage: info.Stage, Persp: info.Perspective, Event: info.Event.ID, K: k, Version: info.Event.Version})
	return nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
