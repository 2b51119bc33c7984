package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// op is one scheduled operation: at a sim time, run does it (and returns
// at once: what blocks runs in the background).
type op struct {
	at  time.Duration
	run func()
}

// makeStreams draws the run's streams.
func (w *world) makeStreams() {
	add := func(n int, kind string) {
		for range n {
			w.streams = append(w.streams, &simStream{id: w.newUUID(), kind: kind})
		}
	}
	add(w.p.clean, "clean")
	add(w.p.dirty, "dirty")
	add(w.p.imports, "import")
}

func (w *world) streamsOf(kind string) []*simStream {
	var out []*simStream
	for _, s := range w.streams {
		if s.kind == kind {
			out = append(out, s)
		}
	}
	return out
}

// streamName names a stream in the trace: its kind, its index and its id.
func (w *world) streamName(id uuid.UUID) string {
	for i, s := range w.streams {
		if s.id == id {
			return fmt.Sprintf("%s#%d(%s)", s.kind, i, short(id))
		}
	}
	return short(id)
}

// newKey returns a fresh event key.
func (w *world) newKey() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nextK++
	return w.nextK
}

// schedule draws the operations of the fault phase from the run's random
// source. The schedule is the same on every replay of a run; what the
// operations meet (which instance is live, which dead letters exist) is
// not.
func (w *world) schedule() []op {
	rng := w.rng
	F := w.p.faultPhase
	var ops []op
	add := func(at time.Duration, run func()) { ops = append(ops, op{at: at, run: run}) }

	// Ordinary appends until the end of the fault phase.
	ordinary := append(w.streamsOf("clean"), w.streamsOf("dirty")...)
	for at := time.Duration(0); ; {
		at += between(rng, w.p.appendGap/2, w.p.appendGap*3/2)
		if at >= F-200*time.Millisecond {
			break
		}
		s := ordinary[rng.IntN(len(ordinary))]
		n := 1 + rng.IntN(3)
		types := make([]string, n)
		faults := make([]eventFault, n)
		for i := range n {
			types[i] = allTypes[rng.IntN(len(allTypes))]
			if s.kind == "dirty" && rng.Float64() < w.p.faultP {
				faults[i] = w.drawFault(types[i])
			}
		}
		add(at, func() { w.appendEvents(s, types, faults) })
	}
	// Late imports: explicit versions with gaps, filled later.
	for _, s := range w.streamsOf("import") {
		n := 4 + rng.IntN(5)
		gaps := map[int64]bool{}
		for range 1 + rng.IntN(2) {
			gaps[int64(2+rng.IntN(n-2))] = true
		}
		types := make([]string, n+1)
		for v := 1; v <= n; v++ {
			types[v] = allTypes[rng.IntN(len(allTypes))]
		}
		at := between(rng, 0, F/2)
		add(at, func() { w.importEvents(s, types, func(v int64) bool { return !gaps[v] }) })
		for _, g := range sortedKeys(gaps) {
			add(at+between(rng, 300*time.Millisecond, 1500*time.Millisecond), func() {
				w.importEvents(s, types, func(v int64) bool { return v == g })
			})
		}
	}
	// Transactional appends (PostgreSQL), committed in reverse order.
	for range w.p.txAppends {
		at := between(rng, 0, F-500*time.Millisecond)
		n := 2 + rng.IntN(2)
		var batches []txSpec
		for _, i := range rng.Perm(len(ordinary))[:n] {
			batches = append(batches, txSpec{stream: ordinary[i], types: []string{pick(rng, typeA, typeB, typeC), pick(rng, typeA, typeB)}, rollback: rng.IntN(5) == 0})
		}
		add(at, func() { w.appendTx(batches) })
	}
	// Instance faults and clock jumps.
	for range w.p.episodes {
		at := between(rng, F/10, F*85/100)
		k := rng.IntN(11)
		if f, ok := focusKinds[w.p.focus]; ok {
			k = f
		}
		switch {
		case k < 2:
			restart := between(rng, 300*time.Millisecond, 2*time.Second)
			slot := -1
			add(at, func() { slot = w.crashOne() })
			if rng.IntN(5) > 0 {
				add(at+restart, func() { w.restartSlot(slot) })
			}
		case k < 4:
			back := between(rng, 100*time.Millisecond, time.Second)
			bounce := rng.IntN(3) == 0
			quick := between(rng, 20*time.Millisecond, 300*time.Millisecond)
			slot := -1
			add(at, func() { slot = w.stopOne() })
			add(at+back, func() { w.restartSlot(slot) })
			if bounce {
				// Stopped again right after it started: what its start-up
				// queued must still be done by someone.
				add(at+back+quick, func() { w.stopSlot(slot) })
				add(at+back+quick+between(rng, 200*time.Millisecond, time.Second), func() { w.restartSlot(slot) })
			}
		case k < 6:
			dur := between(rng, 200*time.Millisecond, 3*time.Second)
			failP, afterP := pick(rng, 0.3, 0.7, 1.0), pick(rng, 0.0, 0.3, 0.6)
			add(at, func() { w.failOne(dur, failP, afterP) })
		case k < 7:
			dur := between(rng, 300*time.Millisecond, 4*time.Second)
			if w.p.focus == "block" {
				// Over before the fault phase ends, like a lock: the
				// claims after it meet the appends that follow.
				at, dur = between(rng, F/10, F/4), between(rng, 300*time.Millisecond, max(F/3, 300*time.Millisecond))
			}
			add(at, func() { w.blockOne(dur) })
		case k < 8:
			// A lock on the lease table, early enough that appends go on
			// for a while after it.
			at = between(rng, F/10, F/4)
			dur := between(rng, F/8, F/3)
			add(at, func() { w.lockLeases(dur) })
		case k < 10:
			d := between(rng, 200*time.Millisecond, w.p.jumpMax)
			add(at, func() { w.jump(d) })
		default:
			dur := between(rng, 200*time.Millisecond, 2*time.Second)
			if w.p.focus == "reports" {
				// Until the heal, over the last appends: a report that
				// fails is then the last of its pair, and only a report
				// sent again completes its rows (a later one would have
				// the backend flag them for a rewind).
				at = between(rng, F/2, F*3/4)
				dur = F - at
			}
			failP, afterP := pick(rng, 0.3, 0.7, 1.0), pick(rng, 0.0, 0.3, 0.6)
			add(at, func() { w.failReports(dur, failP, afterP) })
		}
	}
	// Half the unfocused seeds also lock the lease table early on, so
	// that the claims after a lock are checked (see watchClaims) among
	// the other faults too.
	if w.p.focus == "" && w.p.episodes > 0 && rng.IntN(2) == 0 {
		at, dur := between(rng, F/10, F/4), between(rng, F/8, F/3)
		add(at, func() { w.lockLeases(dur) })
	}
	// Rebuilds after "deploying new apply functions".
	for range w.p.rebuilds {
		at := between(rng, F/10, F*9/10)
		persp := allPerspectives[rng.IntN(len(allPerspectives))]
		var streams []uuid.UUID
		if rng.IntN(2) == 0 {
			for _, i := range rng.Perm(len(w.streams))[:1+rng.IntN(min(3, len(w.streams)))] {
				streams = append(streams, w.streams[i].id)
			}
		}
		viaRequest := rng.IntN(5) < 2
		add(at, func() { w.rebuild(persp, streams, viaRequest) })
	}
	// Dead-letter requeues, after fixing the apply function or not.
	for range w.p.requeues {
		at := between(rng, F/3, F*95/100)
		fix := rng.IntN(10) < 7
		add(at, func() { w.requeueOne(fix) })
	}
	// Retire and revive a perspective.
	if w.p.retire {
		at := between(rng, F/5, F/2)
		drop := rng.IntN(2) == 0
		add(at, func() { w.retire(beta, drop) })
		add(at+between(rng, 300*time.Millisecond, 1500*time.Millisecond), func() { w.revive(beta) })
	}
	slices.SortStableFunc(ops, func(a, b op) int { return int(a.at - b.at) })
	return ops
}

// focusKinds maps Config.Focus to the kind of instance fault drawn.
var focusKinds = map[string]int{"crash": 0, "stop": 2, "fail": 4, "block": 6, "lock": 7, "jump": 8, "reports": 10}

// drawFault draws the fault of an event of type typ on a dirty stream. In
// a run that retires beta, beta meets no bad event: its rebuild after the
// revive must be able to replay every stream.
func (w *world) drawFault(typ string) eventFault {
	rng := w.rng
	var persps []string
	for _, p := range perspectivesOf(typ) {
		if !w.p.retire || p != beta {
			persps = append(persps, p)
		}
	}
	persp := persps[rng.IntN(len(persps))]
	attempts := w.opts.Retries.MaxEventAttempts
	some := func() int { return 1 + rng.IntN(attempts-1) } // fewer failures than attempts
	// maybe is Times for a fault that is permanent one time in three.
	maybe := func() int {
		if rng.IntN(3) == 0 {
			return 0
		}
		return some()
	}
	if persp == gamma {
		switch k := rng.IntN(10); {
		case k < 5:
			// Sometimes as many lost connections as attempts: an event
			// charged for them would be dead-lettered.
			return eventFault{Kind: writeTransient, Persp: gamma, Times: pick(rng, some(), some(), attempts), Inst: -1}
		case k < 9 || w.p.focus != "":
			return eventFault{Kind: writePoison, Persp: gamma, Inst: -1}
		default:
			return eventFault{Kind: writeHang, Persp: gamma, Times: maybe(), Inst: -1}
		}
	}
	// A focused run has no hung events: they hold drain consumers, which
	// hides how long the instance faults delay the other events.
	hangs := 2
	if w.p.focus != "" {
		hangs = 0
	}
	switch k := rng.IntN(22 - 2 + hangs); {
	case k < 6:
		return eventFault{Kind: flaky, Persp: persp, Times: some(), Inst: -1}
	case k < 10:
		// Failing on one instance only, mostly for good there: another
		// instance that takes the stream over applies it. The instance is
		// drawn now, or is the first that applies the event (its stream's
		// holder, which then fails it on every retry).
		inst := pick(rng, rng.IntN(w.p.instances), firstSlot, firstSlot)
		return eventFault{Kind: flaky, Persp: persp, Times: pick(rng, some(), attempts, attempts), Inst: inst}
	case k < 13:
		return eventFault{Kind: poison, Persp: persp, Inst: -1}
	case k < 16:
		return eventFault{Kind: panicky, Persp: persp, Times: maybe(), Inst: -1}
	case k < 20:
		if w.p.retire && typ == typeA {
			return eventFault{Kind: flaky, Persp: alpha, Times: some(), Inst: -1}
		}
		return eventFault{Kind: undecodable, Inst: -1}
	case k < 21:
		return eventFault{Kind: hangCtx, Persp: persp, Times: maybe(), Inst: -1}
	default:
		return eventFault{Kind: hangIgnore, Persp: persp, Times: maybe(), Inst: -1, Hold: w.opts.Drain.ApplyTimeout + w.opts.Drain.ApplyAbandonGrace + between(rng, 200*time.Millisecond, time.Second)}
	}
}

// appendVia returns the handle an append goes through: a live instance's
// (its process appends), or the simulator's own when none is live.
func (w *world) appendVia() (ports.Backend, string) {
	if in := w.anyLive(); in != nil {
		return in.backend, in.name
	}
	return w.kit.direct(), "direct"
}

// appendEvents appends events of the given types to s, in the background:
// through Registry.Append, or, when one of them must not decode, through
// EventsAppend with ids given up front (retried the same way).
func (w *world) appendEvents(s *simStream, types []string, faults []eventFault) {
	keys := make([]int64, len(types))
	raw := false
	for i := range types {
		keys[i] = w.newKey()
		if faults[i].Kind != healthy {
			w.plan.set(keys[i], faults[i])
		}
		raw = raw || faults[i].Kind == undecodable
	}
	b, via := w.appendVia()
	issued := w.now()
	w.ops.Go(func() {
		ctx, cancel := context.WithTimeout(w.ctx, time.Minute)
		defer cancel()
		var (
			res *ports.EventsAppendResult
			err error
		)
		if raw {
			news := make([]ports.NewEvent, len(types))
			for i, typ := range types {
				data := fmt.Sprintf(`{"k":%d,"x":%d}`, keys[i], keys[i])
				if faults[i].Kind == undecodable {
					data = fmt.Sprintf(`{"k":%d,"x":"not a number"}`, keys[i])
				}
				news[i] = ports.NewEvent{ID: uuid.Must(uuid.NewV7()), Type: typ, Data: []byte(data)}
			}
			res, err = w.rawAppend(ctx, b.Events, s.id, news)
		} else {
			events := make([]any, len(types))
			for i, typ := range types {
				events[i] = newEvent(typ, keys[i])
			}
			res, err = w.reg.Append(ctx, b.Events, s.id, 0, events...)
		}
		w.appended(s, via, issued, keys, faults, res, err)
	})
}

// rawAppend is EventsAppend with the registry's subscriptions, retried
// after transient errors with the same ids.
func (w *world) rawAppend(ctx context.Context, store ports.EventStore, stream uuid.UUID, news []ports.NewEvent) (*ports.EventsAppendResult, error) {
	var subs []ports.Subscription
	for _, sub := range w.reg.Subscriptions() {
		if slices.ContainsFunc(news, func(e ports.NewEvent) bool { return e.Type == sub.EventType }) {
			subs = append(subs, sub)
		}
	}
	params := &ports.EventsAppendParams{StreamID: stream, Events: news, Subscriptions: subs}
	var err error
	for range 5 {
		var res *ports.EventsAppendResult
		if res, err = store.EventsAppend(ctx, params); err == nil || !errors.Is(err, ports.ErrTransient) {
			return res, err
		}
		if !w.sleep(50 * time.Millisecond) {
			break
		}
	}
	return nil, err
}

// appended records what an append stored.
func (w *world) appended(s *simStream, via string, issued time.Duration, keys []int64, faults []eventFault, res *ports.EventsAppendResult, err error) {
	desc := make([]string, len(keys))
	for i, k := range keys {
		desc[i] = fmt.Sprintf("k%d", k)
		if faults != nil && faults[i].Kind != healthy {
			desc[i] += "[" + faults[i].String() + "]"
		}
	}
	if err != nil {
		w.rec.tracef("append %s to %s via %s failed: %v", strings.Join(desc, ","), w.streamName(s.id), via, err)
		return
	}
	at := w.now()
	var vs []string
	for _, e := range res.Events {
		w.rec.appendedEvent(appendRec{Issued: issued, At: at, Stream: s.id, K: keyOf(e.Data), Clean: s.kind == "clean"})
		vs = append(vs, fmt.Sprintf("v%d", e.Version))
	}
	w.rec.tracef("append %s to %s via %s: %s", strings.Join(desc, ","), w.streamName(s.id), via, strings.Join(vs, ","))
}

// importEvents appends the events of an import stream whose versions
// match keep, at their explicit versions (a late import when a later
// version is stored already).
func (w *world) importEvents(s *simStream, types []string, keep func(int64) bool) {
	var (
		news []ports.NewEvent
		keys []int64
	)
	for v := int64(1); v < int64(len(types)); v++ {
		if !keep(v) {
			continue
		}
		k := w.newKey()
		keys = append(keys, k)
		news = append(news, ports.NewEvent{ID: uuid.Must(uuid.NewV7()), Type: types[v], Version: v, Data: fmt.Appendf(nil, `{"k":%d,"x":%d}`, k, k)})
	}
	b, via := w.appendVia()
	issued := w.now()
	w.ops.Go(func() {
		ctx, cancel := context.WithTimeout(w.ctx, time.Minute)
		defer cancel()
		res, err := w.rawAppend(ctx, b.Events, s.id, news)
		w.appended(s, via+" (import)", issued, keys, nil, res, err)
	})
}

// txSpec is one transaction of a transactional append.
type txSpec struct {
	stream   *simStream
	types    []string
	rollback bool
}

// appendTx appends to several streams, each in a transaction of its own,
// committed in the reverse order of their opening. The transactions open
// in stream id order: an append holds its stream's append lock until its
// transaction ends, so two concurrent groups that opened a shared pair
// of streams in opposite orders would each hold one and wait for the
// other, a wait the database cannot see as a deadlock (each group holds
// its open transactions until its own appends return).
func (w *world) appendTx(specs []txSpec) {
	specs = slices.Clone(specs)
	slices.SortFunc(specs, func(a, b txSpec) int { return strings.Compare(a.stream.id.String(), b.stream.id.String()) })
	batches := make([]txBatch, len(specs))
	keys := make([][]int64, len(specs))
	for i, s := range specs {
		batches[i] = txBatch{stream: s.stream.id, rollback: s.rollback}
		for _, typ := range s.types {
			k := w.newKey()
			keys[i] = append(keys[i], k)
			batches[i].events = append(batches[i].events, newEvent(typ, k))
		}
	}
	issued := w.now()
	w.ops.Go(func() {
		ctx, cancel := context.WithTimeout(w.ctx, time.Minute)
		defer cancel()
		stored, ok, err := w.kit.appendTx(ctx, w.reg, batches)
		if !ok {
			return
		}
		if err != nil {
			w.rec.tracef("transactional append failed: %v", err)
		}
		for i, s := range specs {
			if stored == nil || stored[i] == nil {
				w.rec.tracef("transactional append to %s rolled back", w.streamName(s.stream.id))
				continue
			}
			w.appended(s.stream, "a transaction", issued, keys[i], nil, &ports.EventsAppendResult{Events: stored[i]}, nil)
		}
	})
}

// crashOne crashes a live instance (never the last one) and returns its
// slot, -1 when none was crashed.
func (w *world) crashOne() int {
	if len(w.instances("live")) < 2 {
		w.rec.tracef("crash skipped: a single live instance")
		return -1
	}
	in := w.anyLive()
	from := w.now()
	w.crash(in)
	o := &w.opts
	w.disturb(window{from: from, to: from + o.Claims.StaleInstanceThreshold + o.Claims.HeartbeatInterval + w.settle(), what: "crash " + in.name, infra: true, crashLike: true})
	return in.slot
}

// stopOne stops a live instance gracefully (never the last one).
func (w *world) stopOne() int {
	if len(w.instances("live")) < 2 {
		w.rec.tracef("stop skipped: a single live instance")
		return -1
	}
	in := w.anyLive()
	w.stop(in)
	return in.slot
}

// stopSlot stops the instance of slot gracefully, when it is live.
func (w *world) stopSlot(slot int) {
	if slot < 0 {
		return
	}
	w.mu.Lock()
	in := w.slots[slot]
	w.mu.Unlock()
	if in != nil && in.state == "live" && len(w.instances("live")) > 1 {
		w.stop(in)
	}
}

// restartSlot starts a new instance in slot once its previous one is
// dead or stopped.
func (w *world) restartSlot(slot int) {
	if slot < 0 {
		return
	}
	w.mu.Lock()
	in := w.slots[slot]
	state := ""
	if in != nil {
		state = in.state
	}
	w.mu.Unlock()
	if state != "dead" && state != "stopped" {
		w.rec.tracef("restart of slot %d skipped: its instance is %s", slot, state)
		return
	}
	from := w.now()
	if _, err := w.startInstance(slot); err != nil {
		w.rec.violate(Violation{3, fmt.Sprintf("restarting slot %d: %v", slot, err)})
		return
	}
	w.disturb(window{from: from, to: w.now() + w.settle(), what: fmt.Sprintf("start in slot %d", slot)})
}

// failOne makes a live instance's backend calls fail for dur.
func (w *world) failOne(dur time.Duration, failP, afterP float64) {
	in := w.anyLive()
	if in == nil {
		return
	}
	from := w.now()
	in.faults.set(modeFailing, failP, afterP)
	w.rec.tracef("backend of %s failing for %s (p=%.1f, after the effect %.1f)", in.name, dur, failP, afterP)
	w.disturb(window{from: from, to: from + dur + w.settle(), what: "failing " + in.name, infra: true, crashLike: dur+w.opts.Claims.HeartbeatInterval >= w.opts.Claims.StaleInstanceThreshold})
	w.ops.Go(func() {
		w.sleep(dur)
		w.heal(in)
	})
}

// reportOps are the calls that report what an instance applied or failed.
var reportOps = []string{"WorkComplete", "WorkFail"}

// failReports makes the completions of a live instance fail for dur (some
// after they took effect), while its heartbeats, claims, renewals and
// fetches go through: it keeps its streams, so only its own re-sends can
// deliver what it applied.
func (w *world) failReports(dur time.Duration, failP, afterP float64) {
	in := w.anyLive()
	if in == nil {
		return
	}
	from := w.now()
	in.faults.failOnly(failP, afterP, reportOps...)
	w.rec.tracef("reports of %s failing for %s (p=%.1f, after the effect %.1f)", in.name, dur, failP, afterP)
	w.disturb(window{from: from, to: from + dur + w.settle(), what: "reports of " + in.name + " failing", infra: true})
	w.ops.Go(func() {
		w.sleep(dur)
		w.heal(in)
	})
}

// blockOne holds every backend call of a live instance for dur.
func (w *world) blockOne(dur time.Duration) {
	in := w.anyLive()
	if in == nil {
		return
	}
	from := w.now()
	in.faults.set(modeBlocked, 0, 0)
	w.rec.tracef("backend of %s blocked for %s", in.name, dur)
	w.disturb(window{from: from, to: from + dur + w.settleHeld(), what: "blocked " + in.name, infra: true, crashLike: dur+w.opts.Claims.HeartbeatInterval >= w.opts.Claims.StaleInstanceThreshold})
	w.ops.Go(func() {
		w.sleep(dur)
		w.heal(in)
		w.burst(dur)
	})
}

// leaseOps are the calls that write stream leases or instance rows: a
// lock held on those tables holds them.
var leaseOps = []string{"InstanceHeartbeat", "InstanceDeregister", "WorkClaim", "WorkRenewLeases", "EventsFetchPending"}

// lockLeases holds the lease-writing calls of every live instance for dur,
// as a lock held on the lease table does.
func (w *world) lockLeases(dur time.Duration) {
	from := w.now()
	live := w.instances("live")
	for _, in := range live {
		in.faults.blockOnly(leaseOps...)
	}
	w.rec.tracef("lease table locked for %s", dur)
	w.disturb(window{from: from, to: from + dur + w.settleHeld(), what: "lease lock", infra: true, crashLike: dur+w.opts.Claims.HeartbeatInterval >= w.opts.Claims.StaleInstanceThreshold})
	w.ops.Go(func() {
		w.sleep(dur)
		for _, in := range live {
			w.heal(in)
		}
		w.burst(dur)
	})
}

// heal ends the fault of in's wrapper (a crash stays). After calls held
// during the fault phase, it watches in's claims resume (see
// watchClaims).
func (w *world) heal(in *instance) {
	m := in.faults.current()
	if m == modeDead || m == modeHealthy {
		return
	}
	in.faults.set(modeHealthy, 0, 0)
	w.rec.tracef("backend of %s healthy again; calls failed: %s", in.name, in.faults.report())
	if m == modeBlocked && !w.healed.Load() {
		w.watchClaims(in)
	}
}

// claimBound is how soon after its calls were held an instance claims
// again: its claim cadence (the longer one), the drain window and a
// margin for the goroutines to wake.
func (w *world) claimBound() time.Duration {
	o := &w.opts
	return max(o.Claims.Interval, o.Claims.NotifyHealthyInterval) + o.Drain.Batcher.MaxWait + 500*time.Millisecond
}

// watchClaims checks that in calls WorkClaim again within claimBound
// after a block or lock of its calls ended, and then at least as often, for
// three times claimBound: a claim loop that counted the time its claim was
// held against its next claims, or that stalled, would leave the
// instance's streams undrained while it heartbeats. A span of claimBound
// in which something else happened to in (a new fault, a crash, a stop, a
// pause at a move to dead letters), the clock jumped or the heal began
// ends the watch unchecked.
func (w *world) watchClaims(in *instance) {
	ended := w.now()
	changes := in.faults.watchGaps(ended)
	jumps := w.jumps.Load()
	bound := w.claimBound()
	w.ops.Go(func() {
		for span := range 3 {
			from := ended + time.Duration(span)*bound
			if !w.sleepUntil(from + bound) {
				return
			}
			now := w.now()
			at, gap, ch := in.faults.claimGaps(now)
			w.mu.Lock()
			live := in.state == "live"
			w.mu.Unlock()
			if ch != changes || !live || w.jumps.Load() != jumps || w.healed.Load() || w.pausing(in) {
				w.rec.tracef("claims of %s after its held calls were let go at %s: unchecked past %s, something else happened", in.name, ended, from)
				return
			}
			if gap > bound {
				w.rec.violate(Violation{5, fmt.Sprintf("%s went %s without calling WorkClaim (the latest call at %s) after its held calls were let go at %s: its claims must resume within %s and go on at least as often (its claim cadence, the drain window and a margin)",
					in.name, gap, at, ended, bound)})
				return
			}
		}
		_, gap, _ := in.faults.claimGaps(w.now())
		w.rec.tracef("claims of %s after its held calls were let go at %s: at most %s between two WorkClaim calls", in.name, ended, gap)
	})
}

// burst appends single events to clean streams, three times as often as
// the run's appends, for d after a lock or a block ended (until the end
// of the fault phase): every append notifies every instance, and a claim
// loop whose notified claims wait for a budget that the held claim
// emptied must still claim.
func (w *world) burst(d time.Duration) {
	clean := w.streamsOf("clean")
	end := min(w.now()+d, w.phase+w.p.faultPhase-200*time.Millisecond)
	for w.now() < end {
		w.mu.Lock()
		s := clean[w.live.IntN(len(clean))]
		typ := allTypes[w.live.IntN(len(allTypes))]
		w.mu.Unlock()
		w.appendEvents(s, []string{typ}, []eventFault{{Inst: -1}})
		if !w.sleep(max(w.p.appendGap/3, 5*time.Millisecond)) {
			return
		}
	}
}

// jump moves the clock d ahead at once.
func (w *world) jump(d time.Duration) {
	from := w.now()
	w.jumps.Add(1)
	w.clock.Advance(d)
	w.rec.tracef("clock jumped %s ahead", d)
	w.disturb(window{from: from, to: w.now() + w.settle(), what: "jump " + d.String(), crashLike: d+w.opts.Claims.HeartbeatInterval >= w.opts.Claims.StaleInstanceThreshold})
}

// rebuild deploys new apply functions (the code version goes up) and
// rebuilds persp: in a live instance (Worker.Rebuild), or through a
// request the running instances carry out.
func (w *world) rebuild(persp string, streams []uuid.UUID, viaRequest bool) {
	code := w.code.Add(1)
	in := w.liveHealthy()
	if in == nil {
		return
	}
	from := w.now()
	w.mu.Lock()
	w.requested = append(w.requested, rebuildAsk{persp: persp, streams: streams, code: code, at: from})
	w.mu.Unlock()
	names := make([]string, len(streams))
	for i, s := range streams {
		names[i] = w.streamName(s)
	}
	what := "all streams"
	if len(streams) > 0 {
		what = strings.Join(names, ",")
	}
	if viaRequest {
		w.ops.Go(func() {
			err := w.retryOp(func(ctx context.Context) error {
				r, err := in.backend.Admin.RebuildRequest(ctx, &ports.RebuildRequestParams{Perspective: persp, StreamIDs: streams, RequestedBy: "sim", Now: w.clock.Now()})
				if err == nil {
					w.rec.tracef("code v%d: rebuild request %s of %s (%s) stored via %s", code, short(r.ID), persp, what, in.name)
				}
				return err
			})
			if err != nil {
				w.rec.tracef("code v%d: rebuild request of %s via %s failed: %v", code, persp, in.name, err)
			}
			w.disturb(window{from: from, to: w.phase + w.p.faultPhase + w.settle(), what: "rebuild request " + persp, persp: persp})
		})
		return
	}
	w.rec.tracef("code v%d: rebuild %s (%s) on %s", code, persp, what, in.name)
	w.ops.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithValue(w.ctx, instKey{}, in), 2*time.Minute)
		defer cancel()
		n, err := in.worker.Rebuild(ctx, persp, streams...)
		w.rec.tracef("rebuild of %s on %s returned: %d streams, error %v", persp, in.name, n, err)
		w.disturb(window{from: from, to: w.now() + w.settle(), what: "rebuild " + persp, persp: persp})
	})
}

// retryOp runs an operator's action through an instance's handle, trying
// again after transient errors, for at most 20 tries.
func (w *world) retryOp(fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(w.ctx, time.Minute)
	defer cancel()
	var err error
	for range 20 {
		if err = fn(ctx); err == nil || !errors.Is(err, ports.ErrTransient) {
			return err
		}
		if !w.sleep(100 * time.Millisecond) {
			break
		}
	}
	return err
}

// requeueOne requeues a dead letter of a dirty stream, after fixing the
// event's apply function when fix is set.
func (w *world) requeueOne(fix bool) {
	in := w.liveHealthy()
	if in == nil {
		return
	}
	w.ops.Go(func() {
		ctx, cancel := context.WithTimeout(w.ctx, time.Minute)
		defer cancel()
		dls, err := w.kit.direct().DeadLetters.DeadLettersList(ctx, &ports.DeadLettersListParams{Status: ports.DeadLetterDead})
		if err != nil || len(dls) == 0 {
			w.rec.tracef("requeue skipped: no dead letter (%v)", err)
			return
		}
		w.mu.Lock()
		dl := dls[w.live.IntN(len(dls))]
		w.mu.Unlock()
		events, err := w.kit.direct().Fetcher.EventsReadStream(ctx, &ports.EventsReadStreamParams{StreamID: dl.StreamID, AfterVersion: dl.EventVersion - 1, Limit: 1})
		if err != nil || len(events) == 0 {
			return
		}
		k := keyOf(events[0].Data)
		fixed := ""
		if fix && w.plan.fix(k) {
			fixed = " after fixing its apply function"
		}
		err = w.retryOp(func(ctx context.Context) error {
			return in.backend.Admin.DeadLetterRequeue(ctx, &ports.DeadLetterRequeueParams{ID: dl.ID, Now: w.clock.Now()})
		})
		w.rec.tracef("requeue dead letter of %s %s v%d (k%d, %s)%s via %s: %v", dl.Perspective, w.streamName(dl.StreamID), dl.EventVersion, k, dl.Reason, fixed, in.name, err)
	})
}

// retire retires persp (dropping its state when drop is set), as an
// operator's tool does: through the simulator's own handle.
func (w *world) retire(persp string, drop bool) {
	from := w.now()
	w.mu.Lock()
	w.retires = append(w.retires, retireSpan{persp: persp, from: from, drop: drop})
	w.mu.Unlock()
	err := w.retryOp(func(ctx context.Context) error {
		_, err := w.kit.direct().Admin.PerspectiveRetire(ctx, &ports.PerspectiveRetireParams{Perspective: persp, DropState: drop})
		return err
	})
	w.rec.tracef("retire %s (drop state %t): %v", persp, drop, err)
}

// revive revives persp.
func (w *world) revive(persp string) {
	err := w.retryOp(func(ctx context.Context) error {
		return w.kit.direct().Admin.PerspectiveRevive(ctx, &ports.PerspectiveReviveParams{Perspective: persp})
	})
	w.mu.Lock()
	for i := range w.retires {
		if w.retires[i].persp == persp && w.retires[i].to == 0 {
			w.retires[i].to = w.now()
		}
	}
	w.mu.Unlock()
	w.rec.tracef("revive %s: %v", persp, err)
}
