package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// mode is how an instance's fault wrapper treats the calls that go through
// it.
type mode int

const (
	// modeHealthy passes every call through.
	modeHealthy mode = iota
	// modeFailing fails calls with an error wrapping ports.ErrTransient:
	// some before they reach the backend, some after they took effect (a
	// lost acknowledgement); only the calls named by only, when set.
	modeFailing
	// modeBlocked holds every call until the mode changes or the call's
	// context is done: a lock held, a paused process.
	modeBlocked
	// modeDead fails every call at once; nothing more reaches the backend:
	// a crashed process.
	modeDead
)

func (m mode) String() string {
	return [...]string{"healthy", "failing", "blocked", "dead"}[m]
}

// errCrashed is the error of the calls of a crashed instance.
var errCrashed = errors.New("sim: the instance crashed")

// faults is the state of one instance's fault wrapper.
type faults struct {
	name string
	obs  saveObserver

	mu     sync.Mutex
	mode   mode
	failP  float64         // modeFailing: probability that a call fails
	afterP float64         // modeFailing: of the failures, those after the effect
	only   map[string]bool // modeBlocked, modeFailing: the calls it holds or fails (nil: every call)
	// changes counts the mode changes; claimedAt is the sim time of the
	// latest WorkClaim call, maxGap the longest time between two calls (or
	// gapFrom and a call) since gapFrom (now tells sim time).
	changes   int
	claimedAt time.Duration
	gapFrom   time.Duration
	maxGap    time.Duration
	now       func() time.Duration
	changed   chan struct{}
	rng       *rand.Rand
	// injected counts the failures injected since the last report, by
	// "op before" or "op after".
	injected map[string]int
	// watch, when set, traces the calls about the streams whose id starts
	// with it (see Config.Watch).
	watch  string
	tracef func(format string, args ...any)
	// pause, when set, may pause the instance at a move to dead letters
	// and run the move itself (ok true); fetched sees every fetch's rows,
	// saved every save that went through (the versions it holds), and
	// claiming every claim before it is made (see movePause).
	pause    func(ctx context.Context, p *ports.DeadLetterMoveParams, move func(context.Context) (*ports.DeadLetterMoveResult, error)) (*ports.DeadLetterMoveResult, error, bool)
	fetched  func(res *ports.EventsFetchPendingResult)
	saved    func(ctx context.Context, stream uuid.UUID, persp string, versions func() []int64)
	claiming func(ctx context.Context)
	// beat sees every heartbeat that went through; beatAt is the sim time
	// of the latest (see noteBeat).
	beat   func(prev, at time.Duration)
	beatAt time.Duration
}

// noteBeat passes a heartbeat that went through to the beat hook, with
// the time of the one before it (0 for the first).
func (f *faults) noteBeat() {
	if f.beat == nil || f.now == nil {
		return
	}
	at := f.now()
	f.mu.Lock()
	prev := f.beatAt
	f.beatAt = at
	f.mu.Unlock()
	f.beat(prev, at)
}

// savedModel passes a model save that went through to the saved hook.
func (f *faults) savedModel(ctx context.Context, stream uuid.UUID, persp string, data []byte) {
	if f.saved == nil {
		return
	}
	f.saved(ctx, stream, persp, func() []int64 {
		var m Model
		if json.Unmarshal(data, &m) != nil {
			return nil
		}
		return m.versions()
	})
}

// savedRows passes a table projection's commit to the saved hook.
func (f *faults) savedRows(ctx context.Context, stream uuid.UUID, persp string, written func() []int64) {
	if f.saved != nil {
		f.saved(ctx, stream, persp, written)
	}
}

// watching reports whether the calls about stream are traced.
func (f *faults) watching(stream uuid.UUID) bool {
	return f.watch == "*" || f.watch != "" && strings.HasPrefix(stream.String(), f.watch)
}

// saveObserver learns what the backend stored through a wrapper: the
// model saves and the table projection's commits, with the versions they
// applied.
type saveObserver interface {
	modelSaved(inst string, stream uuid.UUID, persp string, data []byte)
	rowsCommitted(inst string, stream uuid.UUID, persp string, versions []int64)
	// deadLettered learns a move to dead letters that took effect;
	// requeuing, before a requeue is made, which dead letters it may
	// store again.
	deadLettered(inst string, dl ports.DeadLetter)
	requeuing(requeued func(id uuid.UUID, gen string) bool)
	// rewindLocked learns that an instance took a pair's rewind lock: its
	// rewind begins there, before any save of it.
	rewindLocked(inst string, stream uuid.UUID, persp string)
}

func newFaults(name string, seed uint64, obs saveObserver) *faults {
	return &faults{name: name, obs: obs, changed: make(chan struct{}), rng: rand.New(rand.NewPCG(seed, 0x5eed)), injected: map[string]int{}}
}

// blockOnly holds the calls named in ops (a lock on the tables they
// write), until the mode changes.
func (f *faults) blockOnly(ops ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mode == modeDead {
		return
	}
	f.mode, f.only = modeBlocked, map[string]bool{}
	f.changes++
	for _, op := range ops {
		f.only[op] = true
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// failOnly fails the calls named in ops as modeFailing does, and passes
// every other call through, until the mode changes.
func (f *faults) failOnly(failP, afterP float64, ops ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mode == modeDead {
		return
	}
	f.mode, f.failP, f.afterP, f.only = modeFailing, failP, afterP, map[string]bool{}
	for _, op := range ops {
		f.only[op] = true
	}
	f.changes++
	close(f.changed)
	f.changed = make(chan struct{})
}

// claimed records a WorkClaim call.
func (f *faults) claimed() {
	if f.now == nil {
		return
	}
	at := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.maxGap = max(f.maxGap, at-max(f.claimedAt, f.gapFrom))
	f.claimedAt = at
}

// watchGaps starts measuring the gaps between WorkClaim calls at from,
// and returns the number of mode changes so far.
func (f *faults) watchGaps(from time.Duration) (changes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gapFrom, f.maxGap = from, 0
	return f.changes
}

// claimGaps returns the sim time of the latest WorkClaim call, the longest
// gap between calls since watchGaps (up to now), and the number of mode
// changes so far.
func (f *faults) claimGaps(now time.Duration) (at, gap time.Duration, changes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.claimedAt, max(f.maxGap, now-max(f.claimedAt, f.gapFrom)), f.changes
}

// set changes the mode, waking the calls a block holds.
func (f *faults) set(m mode, failP, afterP float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mode == modeDead {
		return // a crash is for good
	}
	f.mode, f.failP, f.afterP, f.only = m, failP, afterP, nil
	f.changes++
	close(f.changed)
	f.changed = make(chan struct{})
}

// report returns the failures injected since the last report, and
// forgets them.
func (f *faults) report() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var parts []string
	for _, op := range sortedKeys(f.injected) {
		parts = append(parts, fmt.Sprintf("%s %d", op, f.injected[op]))
	}
	clear(f.injected)
	return strings.Join(parts, ", ")
}

func (f *faults) current() mode {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mode
}

// decision is what a call does.
type decision int

const (
	proceed decision = iota
	failAfter
)

// before decides the fate of a call: it returns an error for a call that
// fails before reaching the backend, waits while the wrapper is blocked,
// and otherwise tells whether the call's acknowledgement is lost.
func (f *faults) before(ctx context.Context, op string) (decision, error) {
	for {
		f.mu.Lock()
		m, changed := f.mode, f.changed
		var u, v float64
		held := f.only == nil || f.only[op]
		if m == modeFailing && held {
			u, v = f.rng.Float64(), f.rng.Float64()
			if u < f.failP {
				if v < f.afterP {
					f.injected[op+" (after)"]++
				} else {
					f.injected[op]++
				}
			}
		}
		failP, afterP := f.failP, f.afterP
		f.mu.Unlock()
		switch m {
		case modeHealthy:
			return proceed, nil
		case modeDead:
			return proceed, fmt.Errorf("sim: %s by %s: %w: %w", op, f.name, errCrashed, ports.ErrTransient)
		case modeFailing:
			if !held || u >= failP {
				return proceed, nil
			}
			if v < afterP {
				return failAfter, nil
			}
			return proceed, fmt.Errorf("sim: %s by %s: connection refused: %w", op, f.name, ports.ErrTransient)
		case modeBlocked:
			if !held {
				return proceed, nil
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return proceed, ctx.Err()
			}
		}
	}
}

func (f *faults) lostAck(op string) error {
	return fmt.Errorf("sim: %s by %s: connection lost after the call took effect: %w", op, f.name, ports.ErrTransient)
}

// call runs fn through the wrapper.
func call[T any](ctx context.Context, f *faults, op string, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	d, err := f.before(ctx, op)
	if err != nil {
		return zero, err
	}
	v, err := fn(ctx)
	if err == nil && d == failAfter {
		return zero, f.lostAck(op)
	}
	return v, err
}

// call0 is call for a function that returns only an error.
func call0(ctx context.Context, f *faults, op string, fn func(context.Context) error) error {
	_, err := call(ctx, f, op, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}

// wrap returns b with every port that is set wrapped by f.
func wrap(b ports.Backend, f *faults) ports.Backend {
	out := ports.Backend{
		Claimer:     &fClaimer{f, b.Claimer},
		Fetcher:     &fFetcher{f, b.Fetcher},
		Cursors:     &fCursors{f, b.Cursors},
		DeadLetters: &fDeadLetters{f, b.DeadLetters},
		Events:      &fEvents{f, b.Events},
		Models:      &fModels{f, b.Models},
	}
	if b.Notifier != nil {
		out.Notifier = &fNotifier{f, b.Notifier}
	}
	if b.ModelBatch != nil {
		out.ModelBatch = &fModelBatch{f, b.ModelBatch}
	}
	if b.ModelTx != nil {
		out.ModelTx = &fModelTx{f, b.ModelTx}
	}
	if b.ModelQuery != nil {
		out.ModelQuery = &fModelQuery{f, b.ModelQuery}
	}
	if b.Lifecycle != nil {
		out.Lifecycle = &fLifecycle{f, b.Lifecycle}
	}
	if b.Rewind != nil {
		out.Rewind = &fRewind{f, b.Rewind}
	}
	if b.Snapshots != nil {
		out.Snapshots = &fSnapshots{f, b.Snapshots}
	}
	if b.Admin != nil {
		out.Admin = &fAdmin{f, b.Admin}
	}
	if b.Stats != nil {
		out.Stats = &fStats{f, b.Stats}
	}
	if b.Rebuilds != nil {
		out.Rebuilds = &fRebuilds{f, b.Rebuilds}
	}
	return out
}

type fClaimer struct {
	f     *faults
	inner ports.WorkClaimer
}

func (w *fClaimer) InstanceHeartbeat(ctx context.Context, p *ports.InstanceHeartbeatParams) (*ports.InstanceHeartbeatResult, error) {
	res, err := call(ctx, w.f, "InstanceHeartbeat", func(ctx context.Context) (*ports.InstanceHeartbeatResult, error) {
		return w.inner.InstanceHeartbeat(ctx, p)
	})
	if err == nil {
		w.f.noteBeat()
	}
	return res, err
}

func (w *fClaimer) InstanceDeregister(ctx context.Context, p *ports.InstanceDeregisterParams) error {
	return call0(ctx, w.f, "InstanceDeregister", func(ctx context.Context) error { return w.inner.InstanceDeregister(ctx, p) })
}

func (w *fClaimer) WorkClaim(ctx context.Context, p *ports.WorkClaimParams) (*ports.WorkClaimResult, error) {
	w.f.claimed()
	if w.f.claiming != nil {
		w.f.claiming(ctx)
	}
	return call(ctx, w.f, "WorkClaim", func(ctx context.Context) (*ports.WorkClaimResult, error) { return w.inner.WorkClaim(ctx, p) })
}

func (w *fClaimer) WorkRenewLeases(ctx context.Context, p *ports.WorkRenewLeasesParams) (int, error) {
	return call(ctx, w.f, "WorkRenewLeases", func(ctx context.Context) (int, error) { return w.inner.WorkRenewLeases(ctx, p) })
}

type fFetcher struct {
	f     *faults
	inner ports.EventFetcher
}

func (w *fFetcher) EventsFetchPending(ctx context.Context, p *ports.EventsFetchPendingParams) (*ports.EventsFetchPendingResult, error) {
	res, err := call(ctx, w.f, "EventsFetchPending", func(ctx context.Context) (*ports.EventsFetchPendingResult, error) {
		return w.inner.EventsFetchPending(ctx, p)
	})
	if err == nil && w.f.fetched != nil {
		w.f.fetched(res)
	}
	if res != nil && w.f.watch != "" {
		for _, r := range res.Work {
			if w.f.watching(r.StreamID) {
				w.f.tracef("watch: %s %s fetched %s v%d attempts %d late %t", short(r.StreamID), w.f.name, r.Perspective, r.EventVersion, r.Attempts, r.Late)
			}
		}
		for _, c := range res.Cursors {
			if w.f.watching(c.StreamID) {
				w.f.tracef("watch: %s %s fetched cursor %s at v%d %s", short(c.StreamID), w.f.name, c.Perspective, c.LastVersion, c.Status)
			}
		}
	}
	return res, err
}

func (w *fFetcher) EventsReadStream(ctx context.Context, p *ports.EventsReadStreamParams) ([]ports.Event, error) {
	return call(ctx, w.f, "EventsReadStream", func(ctx context.Context) ([]ports.Event, error) { return w.inner.EventsReadStream(ctx, p) })
}

type fCursors struct {
	f     *faults
	inner ports.CursorStore
}

func (w *fCursors) CursorsGet(ctx context.Context, p *ports.CursorsGetParams) ([]ports.Cursor, error) {
	return call(ctx, w.f, "CursorsGet", func(ctx context.Context) ([]ports.Cursor, error) { return w.inner.CursorsGet(ctx, p) })
}

func (w *fCursors) WorkComplete(ctx context.Context, p *ports.WorkCompleteParams) (*ports.WorkCompleteResult, error) {
	res, err := call(ctx, w.f, "WorkComplete", func(ctx context.Context) (*ports.WorkCompleteResult, error) { return w.inner.WorkComplete(ctx, p) })
	for _, c := range p.Completions {
		if w.f.watching(c.StreamID) {
			w.f.tracef("watch: %s %s WorkComplete %s to v%d, %d rows: %+v, %v", short(c.StreamID), w.f.name, c.Perspective, c.LastVersion, len(c.WorkIDs), res, err)
		}
	}
	return res, err
}

func (w *fCursors) WorkFail(ctx context.Context, p *ports.WorkFailParams) error {
	err := call0(ctx, w.f, "WorkFail", func(ctx context.Context) error { return w.inner.WorkFail(ctx, p) })
	for _, f := range p.Failures {
		if w.f.watching(f.StreamID) {
			w.f.tracef("watch: %s %s WorkFail %s at v%d, %d applied, %d failed, event v%d: %q: %v", short(f.StreamID), w.f.name, f.Perspective, f.LastVersion, len(f.AppliedWorkIDs), len(f.FailedWorkIDs), f.FailedEventVersion, f.Error, err)
		}
	}
	return err
}

type fNotifier struct {
	f     *faults
	inner ports.Notifier
}

// NotifierListen relays the backend's wakes while the wrapper is healthy
// or failing; a blocked or dead instance hears nothing, and one that comes
// back from a block is told it may have missed wakes.
func (w *fNotifier) NotifierListen(ctx context.Context, p *ports.NotifierListenParams) (<-chan ports.Wake, error) {
	in, err := call(ctx, w.f, "NotifierListen", func(ctx context.Context) (<-chan ports.Wake, error) { return w.inner.NotifierListen(ctx, p) })
	if err != nil {
		return nil, err
	}
	out := make(chan ports.Wake, 1)
	go func() { // ends when the backend closes in, once ctx is done
		defer close(out)
		missed := false
		for wake := range in {
			switch w.f.current() {
			case modeBlocked, modeDead:
				missed = true
				continue
			}
			if missed {
				wake.Reconnected, missed = true, false
			}
			ports.OfferWake(out, wake)
		}
	}()
	return out, nil
}

func (w *fNotifier) NotifierHealthy() bool {
	return w.f.current() == modeHealthy && w.inner.NotifierHealthy()
}

type fDeadLetters struct {
	f     *faults
	inner ports.DeadLetterStore
}

func (w *fDeadLetters) DeadLetterMove(ctx context.Context, p *ports.DeadLetterMoveParams) (*ports.DeadLetterMoveResult, error) {
	move := func(ctx context.Context) (*ports.DeadLetterMoveResult, error) {
		res, err := w.inner.DeadLetterMove(ctx, p)
		if err == nil && res != nil && res.Moved {
			w.f.obs.deadLettered(w.f.name, res.DeadLetter)
		}
		return res, err
	}
	if w.f.pause != nil {
		if res, err, ok := w.f.pause(ctx, p, move); ok {
			return res, err
		}
	}
	return call(ctx, w.f, "DeadLetterMove", move)
}

func (w *fModels) watchSave(p *ports.ModelSaveParams, err error) {
	if w.f.watching(p.StreamID) {
		w.f.tracef("watch: %s %s ModelSave %s v%d (expected v%d): %v", short(p.StreamID), w.f.name, p.Perspective, p.LastVersion, p.ExpectedVersion, err)
	}
}

func (w *fDeadLetters) DeadLettersList(ctx context.Context, p *ports.DeadLettersListParams) ([]ports.DeadLetter, error) {
	return call(ctx, w.f, "DeadLettersList", func(ctx context.Context) ([]ports.DeadLetter, error) { return w.inner.DeadLettersList(ctx, p) })
}

func (w *fDeadLetters) DeadLettersRecover(ctx context.Context, p *ports.DeadLettersRecoverParams) ([]ports.DeadLetter, error) {
	w.f.obs.requeuing(func(_ uuid.UUID, gen string) bool { return gen != p.Generation })
	return call(ctx, w.f, "DeadLettersRecover", func(ctx context.Context) ([]ports.DeadLetter, error) {
		return w.inner.DeadLettersRecover(ctx, p)
	})
}

type fEvents struct {
	f     *faults
	inner ports.EventStore
}

func (w *fEvents) EventsAppend(ctx context.Context, p *ports.EventsAppendParams) (*ports.EventsAppendResult, error) {
	return call(ctx, w.f, "EventsAppend", func(ctx context.Context) (*ports.EventsAppendResult, error) { return w.inner.EventsAppend(ctx, p) })
}

func (w *fEvents) SubscriptionsRegister(ctx context.Context, p *ports.SubscriptionsRegisterParams) error {
	return call0(ctx, w.f, "SubscriptionsRegister", func(ctx context.Context) error { return w.inner.SubscriptionsRegister(ctx, p) })
}

type fModels struct {
	f     *faults
	inner ports.ModelStore
}

func (w *fModels) ModelLoad(ctx context.Context, p *ports.ModelLoadParams) (ports.StoredModel, error) {
	return call(ctx, w.f, "ModelLoad", func(ctx context.Context) (ports.StoredModel, error) { return w.inner.ModelLoad(ctx, p) })
}

func (w *fModels) ModelSave(ctx context.Context, p *ports.ModelSaveParams) error {
	return call0(ctx, w.f, "ModelSave", func(ctx context.Context) error {
		err := w.inner.ModelSave(ctx, p)
		if err == nil {
			w.f.obs.modelSaved(w.f.name, p.StreamID, p.Perspective, p.Data)
			w.f.savedModel(ctx, p.StreamID, p.Perspective, p.Data)
		}
		w.watchSave(p, err)
		return err
	})
}

type fModelBatch struct {
	f     *faults
	inner ports.ModelBatchStore
}

func (w *fModelBatch) ModelLoadMany(ctx context.Context, p *ports.ModelLoadManyParams) ([]ports.StoredModel, error) {
	return call(ctx, w.f, "ModelLoadMany", func(ctx context.Context) ([]ports.StoredModel, error) { return w.inner.ModelLoadMany(ctx, p) })
}

func (w *fModelBatch) ModelSaveMany(ctx context.Context, p *ports.ModelSaveManyParams) ([]error, error) {
	return call(ctx, w.f, "ModelSaveMany", func(ctx context.Context) ([]error, error) {
		errs, err := w.inner.ModelSaveMany(ctx, p)
		if err == nil {
			for i, s := range p.Saves {
				if i < len(errs) && errs[i] == nil {
					w.f.obs.modelSaved(w.f.name, s.StreamID, s.Perspective, s.Data)
					w.f.savedModel(ctx, s.StreamID, s.Perspective, s.Data)
				}
				if w.f.watching(s.StreamID) && i < len(errs) {
					w.f.tracef("watch: %s %s ModelSaveMany %s v%d (expected v%d): %v", short(s.StreamID), w.f.name, s.Perspective, s.LastVersion, s.ExpectedVersion, errs[i])
				}
			}
		}
		return errs, err
	})
}

type fModelTx struct {
	f     *faults
	inner ports.TxModelStore
}

// withTx returns params with its Apply handed a *simTx, which collects the
// versions the table projection writes.
func withTx(params *ports.ModelSaveTxParams) (*ports.ModelSaveTxParams, *simTx) {
	st := &simTx{}
	apply := params.Apply
	out := *params
	if apply != nil {
		out.Apply = func(ctx context.Context, tx ports.Tx) error {
			st.mu.Lock()
			st.inner, st.vers = tx, nil
			st.mu.Unlock()
			return apply(ctx, st)
		}
	}
	return &out, st
}

func (w *fModelTx) ModelSaveTx(ctx context.Context, p *ports.ModelSaveTxParams) error {
	return call0(ctx, w.f, "ModelSaveTx", func(ctx context.Context) error {
		wp, st := withTx(p)
		err := w.inner.ModelSaveTx(ctx, wp)
		if w.f.watching(p.Save.StreamID) {
			w.f.tracef("watch: %s %s ModelSaveTx %s v%d (expected v%d), rows %v: %v", short(p.Save.StreamID), w.f.name, p.Save.Perspective, p.Save.LastVersion, p.Save.ExpectedVersion, st.written(), err)
		}
		if err == nil {
			w.f.obs.rowsCommitted(w.f.name, p.Save.StreamID, p.Save.Perspective, st.written())
			w.f.savedRows(ctx, p.Save.StreamID, p.Save.Perspective, st.written)
		}
		return err
	})
}

func (w *fModelTx) ModelSaveTxMany(ctx context.Context, p *ports.ModelSaveTxManyParams) ([]error, error) {
	return call(ctx, w.f, "ModelSaveTxMany", func(ctx context.Context) ([]error, error) {
		wp := &ports.ModelSaveTxManyParams{Saves: make([]*ports.ModelSaveTxParams, len(p.Saves))}
		sts := make([]*simTx, len(p.Saves))
		for i, s := range p.Saves {
			wp.Saves[i], sts[i] = withTx(s)
		}
		errs, err := w.inner.ModelSaveTxMany(ctx, wp)
		for i, s := range p.Saves {
			if w.f.watching(s.Save.StreamID) {
				e := err
				if err == nil && i < len(errs) {
					e = errs[i]
				}
				w.f.tracef("watch: %s %s ModelSaveTxMany %s v%d (expected v%d), rows %v: %v", short(s.Save.StreamID), w.f.name, s.Save.Perspective, s.Save.LastVersion, s.Save.ExpectedVersion, sts[i].written(), e)
			}
		}
		if err == nil {
			for i, s := range p.Saves {
				if i < len(errs) && errs[i] == nil {
					w.f.obs.rowsCommitted(w.f.name, s.Save.StreamID, s.Save.Perspective, sts[i].written())
					w.f.savedRows(ctx, s.Save.StreamID, s.Save.Perspective, sts[i].written)
				}
			}
		}
		return errs, err
	})
}

type fModelQuery struct {
	f     *faults
	inner ports.ModelQuery
}

func (w *fModelQuery) ModelsFind(ctx context.Context, p *ports.ModelsFindParams) (ports.ModelsFindResult, error) {
	return call(ctx, w.f, "ModelsFind", func(ctx context.Context) (ports.ModelsFindResult, error) { return w.inner.ModelsFind(ctx, p) })
}

func (w *fModelQuery) ModelIndexesEnsure(ctx context.Context, p *ports.ModelIndexesEnsureParams) error {
	return call0(ctx, w.f, "ModelIndexesEnsure", func(ctx context.Context) error { return w.inner.ModelIndexesEnsure(ctx, p) })
}

type fLifecycle struct {
	f     *faults
	inner ports.LifecycleStore
}

func (w *fLifecycle) LifecycleClaim(ctx context.Context, p *ports.LifecycleClaimParams) ([]uuid.UUID, error) {
	return call(ctx, w.f, "LifecycleClaim", func(ctx context.Context) ([]uuid.UUID, error) { return w.inner.LifecycleClaim(ctx, p) })
}

func (w *fLifecycle) LifecycleComplete(ctx context.Context, p *ports.LifecycleCompleteParams) error {
	return call0(ctx, w.f, "LifecycleComplete", func(ctx context.Context) error { return w.inner.LifecycleComplete(ctx, p) })
}

func (w *fLifecycle) LifecycleStages(ctx context.Context, p *ports.LifecycleStagesParams) (map[uuid.UUID]ports.LifecycleStage, error) {
	return call(ctx, w.f, "LifecycleStages", func(ctx context.Context) (map[uuid.UUID]ports.LifecycleStage, error) {
		return w.inner.LifecycleStages(ctx, p)
	})
}

func (w *fLifecycle) LifecycleReady(ctx context.Context, p *ports.LifecycleReadyParams) ([]uuid.UUID, error) {
	return call(ctx, w.f, "LifecycleReady", func(ctx context.Context) ([]uuid.UUID, error) { return w.inner.LifecycleReady(ctx, p) })
}

func (w *fLifecycle) LifecycleOrphans(ctx context.Context, p *ports.LifecycleOrphansParams) ([]ports.Event, error) {
	return call(ctx, w.f, "LifecycleOrphans", func(ctx context.Context) ([]ports.Event, error) { return w.inner.LifecycleOrphans(ctx, p) })
}

type fRewind struct {
	f     *faults
	inner ports.RewindStore
}

func (w *fRewind) CursorsRewindRequired(ctx context.Context, p *ports.CursorsRewindRequiredParams) ([]ports.Cursor, error) {
	return call(ctx, w.f, "CursorsRewindRequired", func(ctx context.Context) ([]ports.Cursor, error) {
		return w.inner.CursorsRewindRequired(ctx, p)
	})
}

func (w *fRewind) StreamLockAcquire(ctx context.Context, p *ports.StreamLockParams) (bool, error) {
	ok, err := call(ctx, w.f, "StreamLockAcquire", func(ctx context.Context) (bool, error) { return w.inner.StreamLockAcquire(ctx, p) })
	if ok && err == nil && p.Reason == "rewind" {
		w.f.obs.rewindLocked(w.f.name, p.StreamID, p.Perspective)
	}
	return ok, err
}

func (w *fRewind) StreamLockRelease(ctx context.Context, p *ports.StreamLockParams) error {
	return call0(ctx, w.f, "StreamLockRelease", func(ctx context.Context) error { return w.inner.StreamLockRelease(ctx, p) })
}

func (w *fRewind) WorkLate(ctx context.Context, p *ports.WorkLateParams) ([]ports.WorkItem, error) {
	return call(ctx, w.f, "WorkLate", func(ctx context.Context) ([]ports.WorkItem, error) {
		return w.inner.WorkLate(ctx, p)
	})
}

func (w *fRewind) StreamsWithEventTypes(ctx context.Context, p *ports.StreamsWithEventTypesParams) ([]uuid.UUID, error) {
	return call(ctx, w.f, "StreamsWithEventTypes", func(ctx context.Context) ([]uuid.UUID, error) {
		return w.inner.StreamsWithEventTypes(ctx, p)
	})
}

type fSnapshots struct {
	f     *faults
	inner ports.SnapshotStore
}

func (w *fSnapshots) SnapshotSave(ctx context.Context, p *ports.SnapshotSaveParams) error {
	return call0(ctx, w.f, "SnapshotSave", func(ctx context.Context) error { return w.inner.SnapshotSave(ctx, p) })
}

func (w *fSnapshots) SnapshotLatestBefore(ctx context.Context, p *ports.SnapshotLatestBeforeParams) (ports.Snapshot, error) {
	return call(ctx, w.f, "SnapshotLatestBefore", func(ctx context.Context) (ports.Snapshot, error) {
		return w.inner.SnapshotLatestBefore(ctx, p)
	})
}

func (w *fSnapshots) SnapshotsDeleteFrom(ctx context.Context, p *ports.SnapshotsDeleteFromParams) (int, error) {
	return call(ctx, w.f, "SnapshotsDeleteFrom", func(ctx context.Context) (int, error) { return w.inner.SnapshotsDeleteFrom(ctx, p) })
}

type fAdmin struct {
	f     *faults
	inner ports.Admin
}

func (w *fAdmin) InstancesList(ctx context.Context) ([]ports.Instance, error) {
	return call(ctx, w.f, "InstancesList", w.inner.InstancesList)
}

func (w *fAdmin) DeadLetterRequeue(ctx context.Context, p *ports.DeadLetterRequeueParams) error {
	w.f.obs.requeuing(func(id uuid.UUID, _ string) bool { return id == p.ID })
	return call0(ctx, w.f, "DeadLetterRequeue", func(ctx context.Context) error { return w.inner.DeadLetterRequeue(ctx, p) })
}

func (w *fAdmin) DeadLettersRequeue(ctx context.Context, p *ports.DeadLettersRequeueParams) (int, error) {
	w.f.obs.requeuing(func(uuid.UUID, string) bool { return true })
	return call(ctx, w.f, "DeadLettersRequeue", func(ctx context.Context) (int, error) { return w.inner.DeadLettersRequeue(ctx, p) })
}

func (w *fAdmin) DeadLetterGet(ctx context.Context, p *ports.DeadLetterGetParams) (ports.DeadLetter, error) {
	return call(ctx, w.f, "DeadLetterGet", func(ctx context.Context) (ports.DeadLetter, error) { return w.inner.DeadLetterGet(ctx, p) })
}

func (w *fAdmin) DeadLetterIgnore(ctx context.Context, p *ports.DeadLetterIgnoreParams) error {
	return call0(ctx, w.f, "DeadLetterIgnore", func(ctx context.Context) error { return w.inner.DeadLetterIgnore(ctx, p) })
}

func (w *fAdmin) PerspectiveRetire(ctx context.Context, p *ports.PerspectiveRetireParams) (*ports.RetireResult, error) {
	return call(ctx, w.f, "PerspectiveRetire", func(ctx context.Context) (*ports.RetireResult, error) { return w.inner.PerspectiveRetire(ctx, p) })
}

func (w *fAdmin) PerspectiveRevive(ctx context.Context, p *ports.PerspectiveReviveParams) error {
	return call0(ctx, w.f, "PerspectiveRevive", func(ctx context.Context) error { return w.inner.PerspectiveRevive(ctx, p) })
}

func (w *fAdmin) PerspectivesRetired(ctx context.Context) ([]string, error) {
	return call(ctx, w.f, "PerspectivesRetired", w.inner.PerspectivesRetired)
}

func (w *fAdmin) RebuildRequest(ctx context.Context, p *ports.RebuildRequestParams) (ports.RebuildRequest, error) {
	return call(ctx, w.f, "RebuildRequest", func(ctx context.Context) (ports.RebuildRequest, error) { return w.inner.RebuildRequest(ctx, p) })
}

func (w *fAdmin) RebuildGet(ctx context.Context, p *ports.RebuildGetParams) (ports.RebuildRequest, error) {
	return call(ctx, w.f, "RebuildGet", func(ctx context.Context) (ports.RebuildRequest, error) { return w.inner.RebuildGet(ctx, p) })
}

func (w *fAdmin) RebuildsList(ctx context.Context, p *ports.RebuildsListParams) ([]ports.RebuildRequest, error) {
	return call(ctx, w.f, "RebuildsList", func(ctx context.Context) ([]ports.RebuildRequest, error) { return w.inner.RebuildsList(ctx, p) })
}

func (w *fAdmin) RebuildCancel(ctx context.Context, p *ports.RebuildCancelParams) error {
	return call0(ctx, w.f, "RebuildCancel", func(ctx context.Context) error { return w.inner.RebuildCancel(ctx, p) })
}

func (w *fAdmin) PerspectivesStatus(ctx context.Context, p *ports.PerspectivesStatusParams) ([]ports.PerspectiveStatus, error) {
	return call(ctx, w.f, "PerspectivesStatus", func(ctx context.Context) ([]ports.PerspectiveStatus, error) {
		return w.inner.PerspectivesStatus(ctx, p)
	})
}

type fStats struct {
	f     *faults
	inner ports.Stats
}

func (w *fStats) PerspectivesLag(ctx context.Context, p *ports.PerspectivesLagParams) ([]ports.PerspectiveLag, error) {
	return call(ctx, w.f, "PerspectivesLag", func(ctx context.Context) ([]ports.PerspectiveLag, error) { return w.inner.PerspectivesLag(ctx, p) })
}

type fRebuilds struct {
	f     *faults
	inner ports.RebuildQueue
}

func (w *fRebuilds) RebuildClaim(ctx context.Context, p *ports.RebuildClaimParams) (*ports.RebuildClaimResult, error) {
	return call(ctx, w.f, "RebuildClaim", func(ctx context.Context) (*ports.RebuildClaimResult, error) { return w.inner.RebuildClaim(ctx, p) })
}

func (w *fRebuilds) RebuildProgress(ctx context.Context, p *ports.RebuildProgressParams) error {
	return call0(ctx, w.f, "RebuildProgress", func(ctx context.Context) error { return w.inner.RebuildProgress(ctx, p) })
}

func (w *fRebuilds) RebuildFinish(ctx context.Context, p *ports.RebuildFinishParams) error {
	return call0(ctx, w.f, "RebuildFinish", func(ctx context.Context) error { return w.inner.RebuildFinish(ctx, p) })
}

// Compile-time checks that the wrappers implement their ports.
var (
	_ ports.WorkClaimer     = (*fClaimer)(nil)
	_ ports.EventFetcher    = (*fFetcher)(nil)
	_ ports.CursorStore     = (*fCursors)(nil)
	_ ports.Notifier        = (*fNotifier)(nil)
	_ ports.DeadLetterStore = (*fDeadLetters)(nil)
	_ ports.EventStore      = (*fEvents)(nil)
	_ ports.ModelStore      = (*fModels)(nil)
	_ ports.ModelBatchStore = (*fModelBatch)(nil)
	_ ports.TxModelStore    = (*fModelTx)(nil)
	_ ports.ModelQuery      = (*fModelQuery)(nil)
	_ ports.LifecycleStore  = (*fLifecycle)(nil)
	_ ports.RewindStore     = (*fRewind)(nil)
	_ ports.SnapshotStore   = (*fSnapshots)(nil)
	_ ports.Admin           = (*fAdmin)(nil)
	_ ports.Stats           = (*fStats)(nil)
	_ ports.RebuildQueue    = (*fRebuilds)(nil)
)
