package sim

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/vantage-go/vantage/ports"
)

// movePause is an instance paused right before its move of a row to dead
// letters reaches the backend (a stalled connection): its lease renewals
// and fetches wait too, and its claims are slowed, so its lease lapses and
// another instance takes its stream.
// The move lands once that instance applied the row and saved it, before
// it completes the row: the worst moment for a move that is not fenced to
// the stream's holder, which would put in dead letters an event the pair
// holds.
type movePause struct {
	in     *instance
	k      int64
	taken  chan struct{} // closed when another instance fetched the row
	saved  chan struct{} // closed when another instance saved the row's event
	landed chan struct{} // closed once the paused move returned
	// The row, once another instance fetched it (guarded by world.mu).
	row   pvKey
	by    string
	found bool
}

// maxMovePauses bounds the pauses of a seed.
const maxMovePauses = 4

// pauseAtMove is the DeadLetterMove hook of in's wrapper. It pauses in
// (its lease renewals and fetches held) before a move of an event that fails on
// in's slot only, when another instance could take the stream over and
// apply the event; then it runs move once another instance saved the
// event, or once that had time to happen, and resumes in. ok is false when
// it did not pause: the move goes through the wrapper as any call.
func (w *world) pauseAtMove(ctx context.Context, in *instance, p *ports.DeadLetterMoveParams, move func(context.Context) (*ports.DeadLetterMoveResult, error)) (res *ports.DeadLetterMoveResult, err error, ok bool) {
	k, bound := w.boundToSlot(p, in.slot)
	if !bound || w.healed.Load() || w.cfg.Calm || w.p.focus != "" || len(w.instances("live")) < 2 {
		return nil, nil, false
	}
	pz := &movePause{in: in, k: k, taken: make(chan struct{}), saved: make(chan struct{}), landed: make(chan struct{})}
	w.mu.Lock()
	if w.movePauses >= maxMovePauses {
		w.mu.Unlock()
		return nil, nil, false
	}
	w.movePauses++
	w.pauses[p.WorkID] = pz
	w.mu.Unlock()
	// Paused: its lease renewals and fetches wait from now on (its
	// heartbeats and claims go on: it stays live, and a peer that takes its
	// streams charges nothing).
	in.faults.mu.Lock()
	healthy := in.faults.mode == modeHealthy
	if healthy {
		in.faults.mode, in.faults.only = modeBlocked, map[string]bool{"WorkRenewLeases": true, "EventsFetchPending": true}
		close(in.faults.changed)
		in.faults.changed = make(chan struct{})
	}
	changed := in.faults.changed
	in.faults.mu.Unlock()
	if !healthy {
		w.mu.Lock()
		w.movePauses--
		delete(w.pauses, p.WorkID)
		w.mu.Unlock()
		return nil, nil, false
	}
	// A peer claims only the streams of its partitions, and the stream is
	// most likely in the paused instance's: a graceful stop of a third
	// instance deals the partitions out again, so that the stream may
	// fall to a peer once its lease lapsed. With no third instance, the
	// only peer restarts (under a new id, which ranks the instances
	// anew).
	var others []*instance
	for _, o := range w.instances("live") {
		if o != in {
			others = append(others, o)
		}
	}
	w.mu.Lock()
	other := others[w.live.IntN(len(others))]
	w.mu.Unlock()
	w.stop(other)
	if len(others) == 1 {
		w.restartSlot(other.slot)
	}

	from := w.now()
	o := &w.opts
	limit := o.Claims.StaleInstanceThreshold + o.Claims.HeartbeatInterval + o.Claims.LeaseDuration + 2*max(o.Claims.Interval, o.Claims.NotifyHealthyInterval) + time.Second
	w.rec.tracef("%s paused before its move of k%d to dead letters (work %s), for at most %s", in.name, k, short(p.WorkID), limit)
	timer := w.clock.NewTimer(limit)
	why, ended, taken := "nobody fetched the row", false, pz.taken
wait:
	for {
		select {
		case <-pz.saved:
			why = "another instance saved the row's event"
			break wait
		case <-taken:
			// The move waits for the save: landing before the apply, it
			// would leave the row's pending state to decide.
			why, taken = "another instance fetched the row, saved nothing", nil
		case <-timer.C():
			break wait
		case <-changed:
			// Another fault replaced the pause. A heal (the end of another
			// fault) pauses it again; any other fault decides the move's
			// fate (a crash ends the wait), which still waits for a
			// peer's save.
			in.faults.mu.Lock()
			m := in.faults.mode
			if m == modeHealthy {
				in.faults.mode, in.faults.only = modeBlocked, map[string]bool{"WorkRenewLeases": true, "EventsFetchPending": true}
				close(in.faults.changed)
				in.faults.changed = make(chan struct{})
				changed = in.faults.changed
			} else {
				changed = nil
			}
			in.faults.mu.Unlock()
			if m == modeHealthy {
				continue
			}
			why, ended = "another fault replaced the pause", true
			if m == modeDead {
				break wait
			}
		case <-ctx.Done():
			why = "the move's context ended"
			break wait
		}
	}
	timer.Stop()
	w.mu.Lock()
	delete(w.pauses, p.WorkID)
	row, by, saved := pz.row, pz.by, pz.found && isClosed(pz.saved)
	w.mu.Unlock()
	if ended {
		// The fault that replaced the pause decides the move's fate.
		res, err = call(ctx, in.faults, "DeadLetterMove", move)
	} else {
		res, err = move(ctx)
	}
	close(pz.landed)
	moved := err == nil && res != nil && res.Moved
	w.rec.tracef("%s resumes (%s); its move of k%d to dead letters: moved %t, %v", in.name, why, k, moved, err)
	if moved && saved {
		w.rec.violate(Violation{4, fmt.Sprintf("on the spot, at %s: %s, which no longer held stream %s, moved v%d (k=%d) of %s to dead letters after %s took the stream over and saved the event: the pair holds the event of a dead letter",
			fmtDur(w.now()), in.name, row.stream, row.version, k, row.persp, by)})
	}
	if !ended {
		w.heal(in)
	}
	w.disturb(window{from: from, to: w.now() + w.settleHeld(), what: "paused " + in.name, infra: true})
	return res, err, true
}

// fetchedRows is the EventsFetchPending hook of in's wrapper: it notes a
// row whose move a paused instance holds, fetched by another instance.
func (w *world) fetchedRows(in *instance, res *ports.EventsFetchPendingResult) {
	if res == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pauses) == 0 {
		return
	}
	for _, r := range res.Work {
		pz := w.pauses[r.WorkID]
		if pz == nil || pz.in == in || pz.found {
			continue
		}
		pz.row, pz.by, pz.found = pvKey{r.StreamID, r.Perspective, r.EventVersion}, in.name, true
		w.rec.tracef("%s fetched %s %s v%d (k%d), whose move to dead letters %s holds", in.name, r.Perspective, short(r.StreamID), r.EventVersion, pz.k, pz.in.name)
		close(pz.taken)
	}
}

// savedRows is the hook of in's wrapper on every save that went through
// (a model, or a table projection's rows): a save by another instance of
// the event of a row whose move a paused instance holds lets that move
// land now, and returns once it did, before in completes the row.
func (w *world) savedRows(ctx context.Context, in *instance, stream uuid.UUID, persp string, versions func() []int64) {
	w.mu.Lock()
	var held []*movePause
	for _, pz := range w.pauses {
		if pz.found && pz.in != in && pz.row.stream == stream && pz.row.persp == persp && !isClosed(pz.saved) {
			held = append(held, pz)
		}
	}
	w.mu.Unlock()
	if len(held) == 0 {
		return
	}
	vs := versions()
	for _, pz := range held {
		if !slices.Contains(vs, pz.row.version) {
			continue
		}
		w.mu.Lock()
		pz.by = in.name
		release := !isClosed(pz.saved)
		if release {
			close(pz.saved)
		}
		w.mu.Unlock()
		if !release {
			continue
		}
		w.rec.tracef("%s saved %s %s v%d (k%d), whose move to dead letters %s holds", in.name, persp, short(stream), pz.row.version, pz.k, pz.in.name)
		select {
		case <-pz.landed:
		case <-ctx.Done():
		}
	}
}

// claimGate is the WorkClaim hook of in's wrapper: while in is paused at
// a move and no other instance saved the row yet, each of its claims
// waits a quarter of the stale threshold first (within the bound past
// which its claim loop counts as stalled), so that its own claims do not
// lease its stream again the moment the lease lapsed, before any peer.
func (w *world) claimGate(ctx context.Context, in *instance) {
	w.mu.Lock()
	var pz *movePause
	for _, p := range w.pauses {
		if p.in == in && !isClosed(p.saved) {
			pz = p
			break
		}
	}
	w.mu.Unlock()
	if pz == nil {
		return
	}
	timer := w.clock.NewTimer(w.opts.Claims.StaleInstanceThreshold / 4)
	defer timer.Stop()
	select {
	case <-timer.C():
	case <-pz.saved:
	case <-pz.landed:
	case <-ctx.Done():
	}
}

// pausing reports whether in is paused at a move to dead letters, its
// claims slowed (see claimGate).
func (w *world) pausing(in *instance) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.pauses {
		if p.in == in && !isClosed(p.saved) {
			return true
		}
	}
	return false
}

// isClosed reports whether ch is closed.
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// boundToSlot returns the key of the event whose failure p reports, and
// whether that event fails on slot's instances only (another instance
// applies it).
func (w *world) boundToSlot(p *ports.DeadLetterMoveParams, slot int) (int64, bool) {
	const marker = "sim: flaky event k="
	i := strings.Index(p.Error, marker)
	if i < 0 {
		return 0, false
	}
	digits := p.Error[i+len(marker):]
	if j := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
		digits = digits[:j]
	}
	k, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	f, ok := w.plan.get(k)
	return k, ok && f.Kind == flaky && f.Inst == slot
}
