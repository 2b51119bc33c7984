package sim

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// check runs the invariants against the final state t; H is when the heal
// began.
func (w *world) check(t *truth, H time.Duration) []Violation {
	if t.err != nil {
		return []Violation{{0, t.err.Error()}}
	}
	var vs []Violation
	vs = append(vs, w.checkExactlyOnce(t)...)
	vs = append(vs, w.checkStaleBase(t)...)
	vs = append(vs, w.checkQuiet(t)...)
	vs = append(vs, w.checkDeadLetters(t)...)
	vs = append(vs, w.checkDelays(t, H)...)
	vs = append(vs, w.checkStages(t)...)
	vs = append(vs, w.checkRewinds(t)...)
	return vs
}

// checkRewinds: a rewind's RewindInfo.New counts the replayed events that
// had never been applied, so never more than the events of the pair past
// its start point that no save held before the rewind began.
func (w *world) checkRewinds(t *truth) []Violation {
	_, _, saved, _, _ := w.rec.snapshot()
	w.mu.Lock()
	rewinds := slices.Clone(w.rewinds)
	w.mu.Unlock()
	var vs []Violation
	for _, r := range rewinds {
		bound := 0
		var before []string
		for _, e := range t.events[r.info.StreamID] {
			if e.Version <= r.info.FromVersion || !handlesType(r.info.Perspective, e.Type) {
				continue
			}
			at, ok := saved[pvKey{r.info.StreamID, r.info.Perspective, e.Version}]
			if !ok || at >= r.start {
				bound++
			} else {
				before = append(before, fmt.Sprintf("v%d", e.Version))
			}
		}
		if r.info.New > bound {
			vs = append(vs, Violation{7, fmt.Sprintf("the rewind of %s %s by %s at %s reports %d new events of %d replayed, but at most %d had never been applied (applied before it began: %s)",
				r.info.Perspective, w.streamName(r.info.StreamID), r.inst, fmtDur(r.at), r.info.New, r.info.Replayed, bound, strings.Join(before, " "))})
		}
	}
	return vs
}

// checkExactlyOnce: every pair's final state holds exactly the events a
// clean replay without its dead letters holds, in order, each once.
func (w *world) checkExactlyOnce(t *truth) []Violation {
	_, _, _, appended, _ := w.rec.snapshot()
	var vs []Violation
	for _, s := range w.streams {
		for _, p := range allPerspectives {
			key := pairKey{s.id, p}
			exp := w.expected(t, s.id, p)
			want := make([]int64, len(exp))
			for i, e := range exp {
				want[i] = e.Version
			}
			var got []int64
			if p == gamma {
				rows := slices.Clone(t.rows[s.id])
				sortRows(rows)
				for _, r := range rows {
					got = append(got, r.Version)
				}
			} else if m := t.models[key]; m != nil {
				got = m.versions()
			}
			if !slices.Equal(got, want) {
				vs = append(vs, Violation{1, fmt.Sprintf("%s of %s holds versions %v, a clean replay without its dead letters holds %v (%s)",
					p, w.streamName(s.id), got, want, diff(got, want))})
			}
			if w.wasRetired(p) {
				// Events above the cursor were appended while the
				// perspective was retired: none after the revive.
				for _, e := range t.events[s.id] {
					if !handlesType(p, e.Type) || e.Version <= t.cursors[key].LastVersion || t.skip[key][e.ID] {
						continue
					}
					if a, ok := appended[keyOf(e.Data)]; ok && !w.retireAffected(p, a, true) {
						vs = append(vs, Violation{1, fmt.Sprintf("%s of %s never applied v%d (k%d), appended after the revive", p, w.streamName(s.id), e.Version, keyOf(e.Data))})
					}
				}
			}
		}
	}
	return vs
}

// diff says how got differs from want: missing, extra and repeated
// versions, or the order.
func diff(got, want []int64) string {
	count := map[int64]int{}
	for _, v := range got {
		count[v]++
	}
	var missing, extra, twice []int64
	for _, v := range want {
		if count[v] == 0 {
			missing = append(missing, v)
		}
	}
	inWant := map[int64]bool{}
	for _, v := range want {
		inWant[v] = true
	}
	for v, n := range count {
		if !inWant[v] {
			extra = append(extra, v)
		}
		if n > 1 {
			twice = append(twice, v)
		}
	}
	slices.Sort(extra)
	slices.Sort(twice)
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, fmt.Sprintf("missing %v", missing))
	}
	if len(extra) > 0 {
		parts = append(parts, fmt.Sprintf("extra %v", extra))
	}
	if len(twice) > 0 {
		parts = append(parts, fmt.Sprintf("applied more than once %v", twice))
	}
	if len(parts) == 0 {
		parts = append(parts, "out of order")
	}
	return strings.Join(parts, ", ")
}

// checkStaleBase: after a successful rebuild of a pair asked for at code
// version C, every entry of the pair's final state was applied under code
// C or later: an entry of an older code means that an instance applied an
// event on a model from before the rebuild and saved it over the rebuilt
// one.
func (w *world) checkStaleBase(t *truth) []Violation {
	w.mu.Lock()
	asks := slices.Clone(w.requested)
	done := slices.Clone(w.rebuilt)
	w.mu.Unlock()
	for i := range asks {
		asks[i].matched = map[uuid.UUID]bool{}
	}
	floor := map[pairKey]int64{}
	floorAt := map[pairKey]time.Duration{}
	for _, d := range done {
		// The earliest ask that covers the pair, made before the rebuild
		// ended and not matched yet: its code is a lower bound of the
		// code the rebuild replayed under.
		for i := range asks {
			a := &asks[i]
			if a.persp != d.persp || a.at > d.at || a.matched[d.stream] || (len(a.streams) > 0 && !slices.Contains(a.streams, d.stream)) {
				continue
			}
			a.matched[d.stream] = true
			k := pairKey{d.stream, d.persp}
			if a.code >= floor[k] {
				floor[k], floorAt[k] = a.code, d.at
			}
			break
		}
	}
	var vs []Violation
	for k, c := range floor {
		var stale []string
		if k.persp == gamma {
			for _, r := range t.rows[k.stream] {
				if r.Stamp < c {
					stale = append(stale, fmt.Sprintf("v%d@code%d", r.Version, r.Stamp))
				}
			}
		} else if m := t.models[k]; m != nil {
			for _, e := range m.E {
				if e.S < c {
					stale = append(stale, fmt.Sprintf("v%d@code%d", e.V, e.S))
				}
			}
		}
		if len(stale) > 0 {
			// The saves since the rebuild that brought older code back.
			var culprits []string
			for _, s := range w.rec.savesOf(k) {
				if s.At >= floorAt[k] && slices.ContainsFunc(s.Entries, func(e Entry) bool { return e.S < c }) {
					culprits = append(culprits, s.String())
				}
			}
			vs = append(vs, Violation{2, fmt.Sprintf("%s of %s was rebuilt under code v%d or later (at %s), but holds %s: a model from before the rebuild was saved over it; saves since: %s",
				k.persp, w.streamName(k.stream), c, fmtDur(floorAt[k]), strings.Join(stale, " "), strings.Join(culprits, "; "))})
		}
	}
	return vs
}

// checkQuiet: nothing pending, nothing parked, every request finished.
func (w *world) checkQuiet(t *truth) []Violation {
	var vs []Violation
	for _, l := range t.lag {
		vs = append(vs, Violation{3, fmt.Sprintf("%s has %d work rows pending (the oldest %s old)", l.Perspective, l.Pending, l.OldestAge)})
	}
	// Without rewinds a late event goes to dead letters and its cursor
	// keeps the flag until the pair's next completion, for the rewind that
	// applies it once rewinds are on (and it is requeued).
	rewinds := !w.opts.Rewind.Disabled
	for _, s := range t.status {
		if s.RewindRequired > 0 && rewinds {
			vs = append(vs, Violation{3, fmt.Sprintf("%s has %d cursors waiting for a rewind", s.Perspective, s.RewindRequired)})
		}
	}
	for k, c := range t.cursors {
		if c.Status.Has(ports.CursorRewindRequired) && rewinds {
			vs = append(vs, Violation{3, fmt.Sprintf("the cursor of %s on %s is %s (trigger v%d)", k.persp, w.streamName(k.stream), c.Status, c.RewindTriggerVersion)})
		}
		if c.Status.Has(ports.CursorFailed) && !failureExplained(t, k, c) {
			vs = append(vs, Violation{3, fmt.Sprintf("the cursor of %s on %s is %s at v%d (%q) with no dead letter past it", k.persp, w.streamName(k.stream), c.Status, c.LastVersion, c.Error)})
		}
	}
	for _, r := range t.rebuilds {
		if r.Status == ports.RebuildPending || r.Status == ports.RebuildRunning {
			vs = append(vs, Violation{3, fmt.Sprintf("rebuild request %s of %s is still %s", short(r.ID), r.Perspective, r.Status)})
		}
	}
	for _, in := range w.instances("live") {
		if !w.settlesIdle(in) {
			vs = append(vs, Violation{3, in.name + " is not idle"})
		}
	}
	return vs
}

// settlesIdle reports whether the instance is idle, or becomes idle within
// a few polling gaps: a poll or a wake that finds nothing makes a consumer
// busy for a moment, which is not work left undone.
func (w *world) settlesIdle(in *instance) bool {
	o := &w.opts
	gap := max(o.Drain.PollingInterval, o.Drain.NotifyHealthyPollingInterval, o.Claims.Interval, o.Claims.NotifyHealthyInterval) + o.Drain.Batcher.MaxWait
	for range 5 {
		if in.worker.IsIdle() {
			return true
		}
		if !w.sleep(gap) {
			return false
		}
	}
	return in.worker.IsIdle()
}

// failureExplained reports whether a cursor flagged Failed records the
// failure of an event that then went to dead letters, with nothing
// applied after it (the flag clears with the pair's next completion).
func failureExplained(t *truth, k pairKey, c ports.Cursor) bool {
	for _, dl := range t.dls {
		if dl.StreamID == k.stream && dl.Perspective == k.persp && dl.EventVersion > c.LastVersion {
			return true
		}
	}
	return false
}

// checkDeadLetters: no healthy event is dead-lettered, every dead letter
// carries the cause its event's fault gives, and no dead letter names an
// event its pair holds.
func (w *world) checkDeadLetters(t *truth) []Violation {
	var vs []Violation
	takeovers := w.crashLikes()
	attempts := w.opts.Retries.MaxEventAttempts
	for _, dl := range t.dls {
		e, ok := eventAt(t, dl.StreamID, dl.EventVersion)
		if !ok {
			vs = append(vs, Violation{4, fmt.Sprintf("dead letter of %s v%d names no stored event", w.streamName(dl.StreamID), dl.EventVersion)})
			continue
		}
		k := keyOf(e.Data)
		f, _ := w.plan.get(k)
		where := fmt.Sprintf("dead letter of %s %s v%d (k%d, fault %s, status %s, reason %s, attempts %d, by %s): %q",
			dl.Perspective, w.streamName(dl.StreamID), dl.EventVersion, k, f, dl.Status, dl.Reason, dl.Attempts, w.instanceName(dl.InstanceID), dl.Error)
		if (dl.Status == ports.DeadLetterDead || dl.Status == ports.DeadLetterIgnored) && w.holds(t, e, dl.Perspective) {
			held := ""
			for _, s := range w.rec.savesOf(pairKey{dl.StreamID, dl.Perspective}) {
				if slices.ContainsFunc(s.Entries, func(en Entry) bool { return en.V == e.Version }) {
					held = fmt.Sprintf(" (first saved by %s at %s; dead-lettered at %s)", s.Inst, fmtDur(s.At), fmtDur(dl.DeadLetteredAt.Sub(w.origin)))
					break
				}
			}
			vs = append(vs, Violation{4, "the pair holds the event of a " + where + held})
		}
		mine := f.Persp == dl.Perspective
		failed := w.plan.failures(k, dl.Perspective)
		switch dl.Reason {
		case ports.ReasonFailed:
			switch {
			case mine && (f.Kind == poison || f.Kind == writePoison || f.Kind == panicky && f.Times == 0):
				if !strings.Contains(dl.Error, errText(f, k)) {
					vs = append(vs, Violation{4, "the error does not name the fault: " + where})
				}
			case mine && (f.Kind == flaky || f.Kind == panicky) && failed+takeovers >= attempts:
			case mine && f.Kind == writeTransient:
				vs = append(vs, Violation{4, "a lost connection during a table write was charged to the event: " + where})
			case mine && (f.Kind == writeHang || f.Kind == hangCtx || f.Kind == hangIgnore) && (f.permanent() || failed+takeovers >= attempts):
				vs = append(vs, Violation{4, "a hung apply is dead-lettered as failed, not timed out: " + where})
			default:
				vs = append(vs, Violation{4, "an event that did not fail that often was dead-lettered: " + where})
			}
		case ports.ReasonTimedOut:
			switch {
			case !mine || (f.Kind != hangCtx && f.Kind != hangIgnore && f.Kind != writeHang):
				vs = append(vs, Violation{4, "an event that never hung timed out: " + where})
			case !f.permanent() && failed+takeovers < attempts:
				vs = append(vs, Violation{4, fmt.Sprintf("an event that hung %d times (and at most %d takeovers) was dead-lettered: %s", failed, takeovers, where)})
			}
		case ports.ReasonUndecodable:
			if f.Kind != undecodable {
				vs = append(vs, Violation{4, "a decodable event is dead-lettered as undecodable: " + where})
			}
		case ports.ReasonLate:
			if !w.opts.Rewind.Disabled {
				vs = append(vs, Violation{4, "a late event is dead-lettered although rewinds are on: " + where})
			}
		case ports.ReasonMaxAttemptsExceeded:
			if f.Kind == undecodable && takeovers > 0 {
				break // its decodes failed, then takeovers used up the rest
			}
			if failed+takeovers < attempts {
				vs = append(vs, Violation{4, fmt.Sprintf("attempts used up by %d failures and at most %d takeovers: %s", failed, takeovers, where)})
			}
		default:
			vs = append(vs, Violation{4, "unexpected reason: " + where})
		}
	}
	return vs
}

func eventAt(t *truth, stream uuid.UUID, version int64) (ports.Event, bool) {
	for _, e := range t.events[stream] {
		if e.Version == version {
			return e, true
		}
	}
	return ports.Event{}, false
}

func (w *world) instanceName(id uuid.UUID) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, in := range w.all {
		if in.id == id {
			return in.name
		}
	}
	return short(id)
}

// checkDelays: the events of clean streams are applied by every
// perspective within the quiet bound when no disturbance was under way;
// those still waiting when the faults ended, within the thresholds after
// the heal. It also records the worst delay.
func (w *world) checkDelays(t *truth, H time.Duration) []Violation {
	applies, _, saved, appended, _ := w.rec.snapshot()
	firstTry := map[pvKey]applyRec{} // the first apply call of each (event, perspective)
	for _, a := range applies {
		k := pvKey{a.Stream, a.Persp, a.Version}
		if f, ok := firstTry[k]; !ok || a.Seq < f.Seq {
			firstTry[k] = a
		}
	}
	w.mu.Lock()
	windows := slices.Clone(w.windows)
	w.mu.Unlock()
	held := w.consumersHeld(applies)
	windows = append(windows, held...)
	if debugDelays {
		for _, win := range windows {
			w.rec.tracef("window: %s..%s %s %s", fmtDur(win.from), fmtDur(win.to), win.what, win.persp)
		}
	}
	Q := w.quietBound()
	o := &w.opts
	healBound := o.Claims.StaleInstanceThreshold + o.Claims.HeartbeatInterval + o.Claims.LeaseDuration + o.Rewind.LockTimeout + w.settle() + time.Second
	var vs []Violation
	for _, s := range w.streamsOf("clean") {
		for _, e := range t.events[s.id] {
			a, ok := appended[keyOf(e.Data)]
			if !ok {
				continue // its append failed: when it was stored is unknown
			}
			for _, p := range perspectivesOf(e.Type) {
				if w.retireAffected(p, a, true) || w.belowDroppedPosition(p, e, a, true, saved) {
					continue // applied by the revival's rebuild
				}
				at, ok := saved[pairKey3(e, p)]
				if !ok {
					continue // not applied: checkExactlyOnce tells
				}
				delay := at - a.At
				quiet := !slices.ContainsFunc(windows, func(win window) bool {
					return (win.persp == "" || win.persp == p) && win.from <= a.At+Q && a.At <= win.to
				})
				what := fmt.Sprintf("%s of %s v%d (k%d) appended at %s, saved at %s", p, w.streamName(s.id), e.Version, keyOf(e.Data), fmtDur(a.At), fmtDur(at))
				if f, ok := firstTry[pairKey3(e, p)]; ok {
					what += fmt.Sprintf(" (first apply call by %s at %s)", f.Inst, fmtDur(f.At))
				}
				if debugDelays {
					w.rec.tracef("delay: %s %s: %s quiet=%t", fmtDur(a.At), what, delay, quiet)
				}
				switch {
				case quiet:
					w.noteDelay(delay, what+" (quiet)")
					if delay > Q {
						vs = append(vs, Violation{5, fmt.Sprintf("%s: waited %s while nothing was disturbed, bound %s", what, delay.Round(time.Millisecond), Q)})
					}
				case at > H:
					// Hung applies that hold every drain consumer of the
					// instance that drained the event, after the heal,
					// delay the streams it claimed until one of them
					// ends, as documented: the bound counts from then.
					from := max(H, a.At)
					if f, ok := firstTry[pairKey3(e, p)]; ok {
						for _, win := range held {
							if win.inst == f.Inst && win.from <= at && win.to > from {
								from = min(win.to, at)
							}
						}
					}
					late := at - from
					w.noteDelay(late, what+" (after the heal)")
					if late > healBound {
						vs = append(vs, Violation{5, fmt.Sprintf("%s: applied %s after the faults ended, bound %s", what, late.Round(time.Millisecond), healBound)})
					}
				}
			}
		}
	}
	return vs
}

// debugDelays traces every delay checkDelays measures (SIM_DEBUG_DELAYS=1).
var debugDelays = os.Getenv("SIM_DEBUG_DELAYS") != ""

func pairKey3(e ports.Event, p string) pvKey { return pvKey{e.StreamID, p, e.Version} }

// consumersHeld returns the times an instance had as many hung applies
// running as it has drain consumers: each holds a consumer for its whole
// batch, so the streams the instance claims meanwhile wait for one.
func (w *world) consumersHeld(applies []applyRec) []window {
	consumers := w.opts.Drain.Consumers
	if consumers == 0 {
		consumers = core.DrainConsumersDefault
	}
	type edge struct {
		at    time.Duration
		delta int
	}
	byInst := map[string][]edge{}
	for _, a := range applies {
		if a.Fault == hangCtx || a.Fault == hangIgnore || a.Fault == writeHang {
			byInst[a.Inst] = append(byInst[a.Inst], edge{a.Start, 1}, edge{a.At, -1})
		}
	}
	var out []window
	for inst, edges := range byInst {
		slices.SortFunc(edges, func(a, b edge) int { return cmp.Compare(a.at, b.at) })
		n := 0
		var from time.Duration
		for _, e := range edges {
			n += e.delta
			switch {
			case e.delta > 0 && n == consumers:
				from = e.at
			case e.delta < 0 && n == consumers-1:
				out = append(out, window{from: from, to: e.at + w.settleHeld(), what: "consumers of " + inst + " held by hung applies", inst: inst})
			}
		}
	}
	return out
}

func (w *world) noteDelay(d time.Duration, what string) {
	if d > w.worstDelay {
		w.worstDelay, w.worstWhat = d, what
	}
}

// checkStages: PostPerspective fires per (event, perspective) held,
// PostAllPerspectives and PostLifecycle per event every perspective
// holds, PrePerspective per event any holds and before its first apply;
// at least once, and exactly once in a run without crashes.
func (w *world) checkStages(t *truth) []Violation {
	applies, receptors, saved, appended, _ := w.rec.snapshot()
	crashy := w.crashy()
	type fireKey struct {
		event uuid.UUID
		stage core.Stage
		persp string
	}
	fired := map[fireKey][]receptorRec{}
	for _, r := range receptors {
		k := fireKey{r.Event, r.Stage, r.Persp}
		fired[k] = append(fired[k], r)
	}
	firstApply := map[int64]applyRec{} // key -> the first successful apply
	for _, a := range applies {
		if a.Err == "" {
			if f, ok := firstApply[a.K]; !ok || a.Seq < f.Seq {
				firstApply[a.K] = a
			}
		}
	}
	var vs []Violation
	count := func(e ports.Event, stage core.Stage, persp string, required bool) {
		n := len(fired[fireKey{e.ID, stage, persp}])
		what := fmt.Sprintf("%s of %s v%d (k%d)", stage, w.streamName(e.StreamID), e.Version, keyOf(e.Data))
		if persp != "" {
			what += " for " + persp
		}
		switch {
		case required && n == 0:
			if stage == core.PrePerspective {
				if first, ok := firstApply[keyOf(e.Data)]; ok {
					what += fmt.Sprintf(" (first applied by %s on %s at %s)", first.Persp, first.Inst, fmtDur(first.At))
				}
			}
			vs = append(vs, Violation{6, what + " never fired"})
		case !crashy && n > 1:
			var by []string
			for _, r := range fired[fireKey{e.ID, stage, persp}] {
				by = append(by, r.Inst+"@"+fmtDur(r.At))
			}
			vs = append(vs, Violation{6, fmt.Sprintf("%s fired %d times without a crash (%s)", what, n, strings.Join(by, ", "))})
		}
	}
	for _, s := range w.streams {
		for _, e := range t.events[s.id] {
			a, known := appended[keyOf(e.Data)]
			anyHeld := false
			for _, p := range perspectivesOf(e.Type) {
				held := w.holds(t, e, p) && !w.retireAffected(p, a, known) && !w.belowDroppedPosition(p, e, a, known, saved)
				anyHeld = anyHeld || held
				count(e, core.PostPerspective, p, held)
			}
			all := w.appliedByAll(t, e, appended, saved)
			count(e, core.PostAllPerspectives, "", all)
			count(e, core.PostLifecycle, "", all)
			count(e, core.PrePerspective, "", anyHeld)
			pre := fired[fireKey{e.ID, core.PrePerspective, ""}]
			if first, ok := firstApply[keyOf(e.Data)]; ok && len(pre) > 0 && pre[0].Seq > first.Seq {
				vs = append(vs, Violation{6, fmt.Sprintf("PrePerspective of %s v%d (k%d) fired (%s at %s) after its first apply (%s by %s at %s)",
					w.streamName(e.StreamID), e.Version, keyOf(e.Data), pre[0].Inst, fmtDur(pre[0].At), first.Persp, first.Inst, fmtDur(first.At))})
			}
			post, last := fired[fireKey{e.ID, core.PostAllPerspectives, ""}], fired[fireKey{e.ID, core.PostLifecycle, ""}]
			if len(last) > 0 && (len(post) == 0 || post[0].Seq > last[0].Seq) {
				vs = append(vs, Violation{6, fmt.Sprintf("PostLifecycle of %s v%d (k%d) fired before PostAllPerspectives", w.streamName(e.StreamID), e.Version, keyOf(e.Data))})
			}
		}
	}
	return vs
}
