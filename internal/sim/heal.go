package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// healAndCheck ends every fault, lets the clock run until the engine is
// quiescent (bounded in sim time), and checks the invariants.
func (w *world) healAndCheck() []Violation {
	H := w.now()
	w.healed.Store(true)
	w.rec.tracef("heal: every fault ends")
	w.plan.releaseHangs()
	for _, in := range w.instances("live") {
		w.heal(in)
	}
	// Dead and stopped slots: restart some; keep at least one live.
	w.mu.Lock()
	var down []int
	for i, in := range w.slots {
		if in == nil || in.state == "dead" || in.state == "stopped" {
			down = append(down, i)
		}
	}
	restart := map[int]bool{}
	for _, slot := range down {
		restart[slot] = w.live.IntN(2) == 0
	}
	w.mu.Unlock()
	if len(w.instances("live"))+len(w.instances("stopping")) == 0 && len(down) > 0 {
		restart[down[0]] = true
	}
	for _, slot := range down {
		if restart[slot] {
			w.restartSlot(slot)
		}
	}
	w.disturb(window{from: H, to: w.now() + w.settle(), what: "heal"})
	// The heal goes at a faster pace: what is left is mostly waiting for
	// retries and hung applies to time out.
	w.pace.Store(int64(2 * w.p.step))

	var vs []Violation
	if ok, why := w.waitQuiescent(w.healBound()); !ok {
		vs = append(vs, Violation{3, "not quiescent within " + w.healBound().String() + " of sim time after the heal: " + why})
	}
	// A perspective revived after retirement must be rebuilt: the events
	// appended meanwhile have no work rows.
	if w.retiredAny() {
		for _, r := range w.retireSpans() {
			vs = append(vs, w.finalRebuild(r.persp)...)
		}
		if ok, why := w.waitQuiescent(w.healBound()); !ok {
			vs = append(vs, Violation{3, "not quiescent after the final rebuild: " + why})
		}
	}
	t := w.gather()
	if missing := w.missingStages(t); len(missing) > 0 {
		// A stage that a crash interrupted, whose claim a backend error
		// failed, or whose readiness check ran before the last of its
		// perspectives' completions was acknowledged, is taken up by the
		// reconciliation every instance runs every minute. Let a minute and
		// more pass, quickly (nothing runs), then check that they fired at
		// least once. Stages that wait for the reconciliation in a run
		// without backend faults are noted: they fire late.
		if !w.backendFaults() {
			w.note(fmt.Sprintf("%d events waited for the lifecycle reconciliation in a run without backend faults (the first: %s v%d)",
				len(missing), w.streamName(missing[0].StreamID), missing[0].Version))
		}
		w.rec.tracef("fast-forward past the lifecycle reconciliation (%d events wait for a terminal stage)", len(missing))
		w.fastForward(65 * time.Second)
		if ok, why := w.waitQuiescent(w.healBound()); !ok {
			vs = append(vs, Violation{3, "not quiescent after the fast-forward: " + why})
		}
		t = w.gather()
	}
	vs = append(vs, w.waitStreams(t)...)
	vs = append(vs, w.check(t, H)...)
	_, _, _, _, spot := w.rec.snapshot()
	return append(spot, vs...)
}

// healBound bounds the wait for quiescence: the retries of the events
// whose faults end in dead letters, the thresholds.
func (w *world) healBound() time.Duration {
	o := &w.opts
	perEvent := o.Drain.ApplyTimeout + o.Drain.ApplyAbandonGrace + o.Retries.Event.Max
	// Generous: the hung events of one pair time out one after another;
	// waitQuiescent gives up early when nothing moves.
	return 120*time.Second + 4*time.Duration(o.Retries.MaxEventAttempts)*perEvent
}

// heartbeatLapse notes a live instance whose heartbeats went through at
// prev and at, further apart than the stale threshold although no fault
// held them (a starved process, or a pause the machine running the
// simulator imposed): peers may have taken it for dead meanwhile, taken
// its streams and its lifecycle claims, as after a crash.
func (w *world) heartbeatLapse(in *instance, prev, at time.Duration) {
	if prev == 0 || at-prev < w.opts.Claims.StaleInstanceThreshold {
		return
	}
	w.disturb(window{from: prev, to: at + w.settle(), what: fmt.Sprintf("heartbeats of %s lapsed for %s", in.name, (at - prev).Round(time.Millisecond)), crashLike: true})
	w.rec.tracef("heartbeats of %s lapsed for %s", in.name, (at - prev).Round(time.Millisecond))
}

// crashy reports whether the run had a crash, or a fault that may have
// made instances abandon a live one (which then counts as crashed).
func (w *world) crashy() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, win := range w.windows {
		if win.crashLike {
			return true
		}
	}
	return false
}

// backendFaults reports whether the run had a backend fault: a crash, a
// failing or blocked backend, a lock.
func (w *world) backendFaults() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, win := range w.windows {
		if win.infra {
			return true
		}
	}
	return false
}

// crashLikes counts the faults that may have charged an event an attempt
// by a takeover.
func (w *world) crashLikes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, win := range w.windows {
		if win.crashLike {
			// An instance whose backend fails for a while may flap: a
			// heartbeat or a fetch that took effect although it failed
			// makes it live again, and holding streams, until it goes
			// stale once more. Each time, a peer that takes a stream over
			// charges the rows handed out to it.
			n += 1 + int((win.to-win.from)/w.opts.Claims.StaleInstanceThreshold)
		}
	}
	return n
}

func (w *world) retiredAny() bool { return len(w.retireSpans()) > 0 }

func (w *world) retireSpans() []retireSpan {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.retires)
}

// finalRebuild rebuilds persp for every stream on a live instance, as an
// operator does after reviving it: stream by stream, so that one that
// cannot be rebuilt does not keep the others from it. A stream that still
// cannot be rebuilt after some tries is a violation.
func (w *world) finalRebuild(persp string) []Violation {
	code := w.code.Add(1)
	w.mu.Lock()
	w.requested = append(w.requested, rebuildAsk{persp: persp, code: code, at: w.now()})
	w.mu.Unlock()
	var vs []Violation
	for _, s := range w.streams {
		var err error
		for range 10 {
			in := w.anyLive()
			if in == nil {
				return vs
			}
			ctx, cancel := context.WithTimeout(context.WithValue(w.ctx, instKey{}, in), time.Minute)
			_, err = in.worker.Rebuild(ctx, persp, s.id)
			cancel()
			if err == nil || !w.sleep(200*time.Millisecond) {
				break
			}
		}
		if err != nil {
			w.rec.tracef("code v%d: final rebuild of %s %s failed: %v", code, persp, w.streamName(s.id), err)
			vs = append(vs, Violation{3, fmt.Sprintf("%s of %s cannot be rebuilt after its revive: %v", persp, w.streamName(s.id), err)})
		}
	}
	w.rec.tracef("code v%d: final rebuild of %s done", code, persp)
	return vs
}

// fastForward lets d of sim time pass at a fast pace.
func (w *world) fastForward(d time.Duration) {
	old := w.pace.Load()
	w.pace.Store(int64(20 * time.Millisecond))
	w.sleep(d)
	w.pace.Store(old)
}

// waitQuiescent polls until the engine is quiescent twice in a row, at
// most bound of sim time: every live worker idle, no pending work row, no
// cursor waiting for a rewind, no rebuild request pending or running. It
// gives up early when nothing moved for stuckAfter: no apply returned and
// the backlog did not change (every retry, lease and hung apply of the run
// is shorter than that).
func (w *world) waitQuiescent(bound time.Duration) (bool, string) {
	deadline := w.now() + bound
	o := &w.opts
	gap := 2*max(o.Drain.PollingInterval, o.Drain.NotifyHealthyPollingInterval, o.Claims.Interval, o.Claims.NotifyHealthyInterval) + o.Drain.Batcher.MaxWait
	stuckAfter := 2*(o.Drain.ApplyTimeout+o.Drain.ApplyAbandonGrace) + o.Claims.LeaseDuration + o.Claims.StaleInstanceThreshold + 5*time.Second
	streak := 0
	why := ""
	lastMove, lastSig := w.now(), ""
	for w.now() < deadline {
		var ok bool
		ok, why = w.quiescent()
		if ok {
			streak++
			if streak >= 2 {
				return true, ""
			}
		} else {
			streak = 0
			if sig := w.progress() + why; sig != lastSig {
				lastMove, lastSig = w.now(), sig
			} else if w.now()-lastMove > stuckAfter {
				return false, fmt.Sprintf("%s (nothing moved for %s)", why, stuckAfter)
			}
		}
		if !w.sleep(gap) {
			return false, "cancelled"
		}
	}
	return false, why
}

// progress is a signature of what the engine did so far.
func (w *world) progress() string {
	w.rec.mu.Lock()
	defer w.rec.mu.Unlock()
	return fmt.Sprintf("%d/%d/%d", len(w.rec.applies), len(w.rec.receptors), len(w.rec.saved))
}

func (w *world) quiescent() (bool, string) {
	ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
	defer cancel()
	b := w.kit.direct()
	var busy []string
	for _, in := range w.instances("live") {
		if !in.worker.IsIdle() {
			busy = append(busy, in.name)
		}
	}
	if len(busy) > 0 {
		return false, "instances not idle: " + strings.Join(busy, ",")
	}
	if len(w.instances("stopping")) > 0 {
		return false, "instances stopping"
	}
	lag, err := b.Stats.PerspectivesLag(ctx, &ports.PerspectivesLagParams{Now: w.clock.Now()})
	if err != nil {
		return false, err.Error()
	}
	if len(lag) > 0 {
		var parts []string
		for _, l := range lag {
			parts = append(parts, fmt.Sprintf("%s: %d pending (oldest %s)", l.Perspective, l.Pending, l.OldestAge))
		}
		return false, "work pending: " + strings.Join(parts, "; ")
	}
	status, err := b.Admin.PerspectivesStatus(ctx, &ports.PerspectivesStatusParams{Now: w.clock.Now()})
	if err != nil {
		return false, err.Error()
	}
	for _, s := range status {
		if s.RewindRequired > 0 && !w.opts.Rewind.Disabled {
			return false, fmt.Sprintf("%s: %d cursors wait for a rewind", s.Perspective, s.RewindRequired)
		}
	}
	reqs, err := b.Admin.RebuildsList(ctx, &ports.RebuildsListParams{})
	if err != nil {
		return false, err.Error()
	}
	for _, r := range reqs {
		if r.Status == ports.RebuildPending || r.Status == ports.RebuildRunning {
			return false, fmt.Sprintf("rebuild request %s of %s is %s", short(r.ID), r.Perspective, r.Status)
		}
	}
	return true, ""
}

// pairKey names a (stream, perspective).
type pairKey struct {
	stream uuid.UUID
	persp  string
}

// truth is the backend's final state.
type truth struct {
	events   map[uuid.UUID][]ports.Event
	byKey    map[int64]ports.Event
	models   map[pairKey]*Model
	modelAt  map[pairKey]int64 // the stored model's LastVersion
	cursors  map[pairKey]ports.Cursor
	rows     map[uuid.UUID][]Row
	dls      []ports.DeadLetter
	skip     map[pairKey]map[uuid.UUID]bool // dead or ignored dead letters
	lag      []ports.PerspectiveLag
	status   []ports.PerspectiveStatus
	rebuilds []ports.RebuildRequest
	err      error
}

// gather reads the backend's final state through the simulator's own
// handle.
func (w *world) gather() *truth {
	ctx, cancel := context.WithTimeout(w.ctx, time.Minute)
	defer cancel()
	b := w.kit.direct()
	t := &truth{
		events: map[uuid.UUID][]ports.Event{}, byKey: map[int64]ports.Event{}, models: map[pairKey]*Model{},
		modelAt: map[pairKey]int64{}, cursors: map[pairKey]ports.Cursor{}, skip: map[pairKey]map[uuid.UUID]bool{},
	}
	var errs []string
	note := func(err error) {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	ids := make([]uuid.UUID, len(w.streams))
	for i, s := range w.streams {
		ids[i] = s.id
		evs, err := b.Fetcher.EventsReadStream(ctx, &ports.EventsReadStreamParams{StreamID: s.id})
		note(err)
		t.events[s.id] = evs
		for _, e := range evs {
			t.byKey[keyOf(e.Data)] = e
		}
		for _, p := range []string{alpha, beta} {
			m, err := b.Models.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: s.id, Perspective: p})
			if err != nil {
				continue
			}
			var model Model
			if err := jsonUnmarshal(m.Data, &model); err != nil {
				note(fmt.Errorf("decoding model %s of %s: %w", p, short(s.id), err))
				continue
			}
			t.models[pairKey{s.id, p}] = &model
			t.modelAt[pairKey{s.id, p}] = m.LastVersion
		}
		if m, err := b.Models.ModelLoad(ctx, &ports.ModelLoadParams{StreamID: s.id, Perspective: gamma}); err == nil {
			t.modelAt[pairKey{s.id, gamma}] = m.LastVersion
		}
	}
	cs, err := b.Cursors.CursorsGet(ctx, &ports.CursorsGetParams{StreamIDs: ids})
	note(err)
	for _, c := range cs {
		t.cursors[pairKey{c.StreamID, c.Perspective}] = c
	}
	t.rows, err = w.table.rows(ctx)
	note(err)
	t.dls, err = b.DeadLetters.DeadLettersList(ctx, &ports.DeadLettersListParams{})
	note(err)
	for _, dl := range t.dls {
		if dl.Status == ports.DeadLetterDead || dl.Status == ports.DeadLetterIgnored {
			k := pairKey{dl.StreamID, dl.Perspective}
			if t.skip[k] == nil {
				t.skip[k] = map[uuid.UUID]bool{}
			}
			t.skip[k][dl.EventID] = true
		}
	}
	t.lag, err = b.Stats.PerspectivesLag(ctx, &ports.PerspectivesLagParams{Now: w.clock.Now()})
	note(err)
	t.status, err = b.Admin.PerspectivesStatus(ctx, &ports.PerspectivesStatusParams{Now: w.clock.Now()})
	note(err)
	t.rebuilds, err = b.Admin.RebuildsList(ctx, &ports.RebuildsListParams{})
	note(err)
	if len(errs) > 0 {
		t.err = fmt.Errorf("reading the final state: %s", strings.Join(errs, "; "))
	}
	n := 0
	for _, evs := range t.events {
		n += len(evs)
	}
	w.eventsStored = n
	return t
}

// waitStreams calls Worker.WaitForStream on a live instance for every
// stream and perspective, up to the newest version the perspective must
// have applied, all at once; each must return within a bound of sim time.
func (w *world) waitStreams(t *truth) []Violation {
	in := w.anyLive()
	if in == nil {
		return []Violation{{3, "no live instance at the end"}}
	}
	bound := 5*time.Second + 4*max(w.opts.Drain.PollingInterval, w.opts.Drain.NotifyHealthyPollingInterval)
	ctx, cancel := context.WithCancel(context.WithValue(w.ctx, instKey{}, in))
	defer cancel()
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		vs []Violation
	)
	timer := w.clock.NewTimer(bound)
	defer timer.Stop()
	stop := make(chan struct{})
	wg.Go(func() {
		select {
		case <-timer.C():
			cancel()
		case <-stop:
		}
	})
	var calls sync.WaitGroup
	for _, s := range w.streams {
		for _, p := range allPerspectives {
			exp := w.expected(t, s.id, p)
			if len(exp) == 0 {
				continue
			}
			v := exp[len(exp)-1].Version
			calls.Go(func() {
				if err := in.worker.WaitForStream(ctx, s.id, v, p); err != nil {
					mu.Lock()
					vs = append(vs, Violation{3, fmt.Sprintf("WaitForStream(%s, v%d, %s) on %s did not return within %s of sim time: %v", w.streamName(s.id), v, p, in.name, bound, err)})
					mu.Unlock()
				}
			})
		}
	}
	calls.Wait()
	close(stop)
	wg.Wait()
	slices.SortFunc(vs, func(a, b Violation) int { return strings.Compare(a.What, b.What) })
	return vs
}

// expected returns the events of stream that perspective p must hold, in
// version order: those of the types it handles, its dead letters left
// out; for a perspective that was retired, those up to its cursor (the
// final rebuild made them whole; those above it were appended while it was
// retired and have no work rows).
func (w *world) expected(t *truth, stream uuid.UUID, p string) []ports.Event {
	var out []ports.Event
	key := pairKey{stream, p}
	limit := int64(-1)
	if w.wasRetired(p) {
		limit = t.cursors[key].LastVersion
	}
	for _, e := range t.events[stream] {
		if !handlesType(p, e.Type) || t.skip[key][e.ID] {
			continue
		}
		if limit >= 0 && e.Version > limit {
			continue
		}
		out = append(out, e)
	}
	return out
}

func (w *world) wasRetired(p string) bool {
	for _, r := range w.retireSpans() {
		if r.persp == p {
			return true
		}
	}
	return false
}

// retireAffected reports whether the append of event k may have met p
// retired (or its work rows deleted by the retirement).
func (w *world) retireAffected(p string, a appendRec, known bool) bool {
	for _, r := range w.retireSpans() {
		if r.persp != p {
			continue
		}
		// An append issued at the very time the revive returned (the
		// clock stood still, as on a busy machine) may have met the
		// perspective retired.
		if !known || a.Issued <= r.to || r.to == 0 {
			return true
		}
	}
	return false
}

// belowDroppedPosition reports whether e, appended after p was revived
// from a retirement that dropped its state, lies below a position p's
// saves reached in e's stream before that retirement. A completion sent
// before the retirement may land after the revival and bring that
// position back without its model: the replay that repairs the pair (or
// the revival's rebuild) then applies such an event as one the pair held,
// without its stages (the documented limit of retiring with DropState
// while instances run the perspective).
func (w *world) belowDroppedPosition(p string, e ports.Event, a appendRec, known bool, saved map[pvKey]time.Duration) bool {
	if !known {
		return false
	}
	for _, r := range w.retireSpans() {
		if r.persp != p || !r.drop || r.to == 0 || a.Issued <= r.to {
			continue
		}
		for k, at := range saved {
			if k.stream == e.StreamID && k.persp == p && at < r.from && k.version > e.Version {
				return true
			}
		}
	}
	return false
}

// missingStages returns the events whose terminal stages must have fired
// and did not.
func (w *world) missingStages(t *truth) []ports.Event {
	_, receptors, saved, appended, _ := w.rec.snapshot()
	fired := map[uuid.UUID]map[core.Stage]int{}
	for _, r := range receptors {
		if fired[r.Event] == nil {
			fired[r.Event] = map[core.Stage]int{}
		}
		fired[r.Event][r.Stage]++
	}
	var out []ports.Event
	for _, s := range w.streams {
		for _, e := range t.events[s.id] {
			if w.appliedByAll(t, e, appended, saved) && (fired[e.ID][core.PostAllPerspectives] == 0 || fired[e.ID][core.PostLifecycle] == 0) {
				out = append(out, e)
			}
		}
	}
	return out
}

// appliedByAll reports whether every perspective of e's type holds e, and
// none of them may have missed it while retired or taken it for applied
// after a revival (see belowDroppedPosition).
func (w *world) appliedByAll(t *truth, e ports.Event, appended map[int64]appendRec, saved map[pvKey]time.Duration) bool {
	a, known := appended[keyOf(e.Data)]
	for _, p := range perspectivesOf(e.Type) {
		if !w.holds(t, e, p) || w.retireAffected(p, a, known) || w.belowDroppedPosition(p, e, a, known, saved) {
			return false
		}
	}
	return true
}

// holds reports whether perspective p's final state holds e.
func (w *world) holds(t *truth, e ports.Event, p string) bool {
	if p == gamma {
		return slices.ContainsFunc(t.rows[e.StreamID], func(r Row) bool { return r.Version == e.Version })
	}
	m := t.models[pairKey{e.StreamID, p}]
	return m != nil && slices.ContainsFunc(m.E, func(en Entry) bool { return en.V == e.Version })
}
