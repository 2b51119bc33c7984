package sim

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/vantage-go/vantage/ports"
)

// movePause is an instance paused right before its move of a row to dead
// letters reaches the backend (a stalled connection): its lease renewals
// and fetches wait too, its lease lapses and another instance takes its
// stream.
// The move lands when that instance fetched the row, before it applies it:
// the worst moment for a move that is not fenced to the stream's holder.
type movePause struct {
	in     *instance
	k      int64
	taken  chan struct{} // closed when another instance fetched the row
	landed chan struct{} // closed once the paused move returned
}

// maxMovePauses bounds the pauses of a seed.
const maxMovePauses = 2

// pauseAtMove is the DeadLetterMove hook of in's wrapper. It pauses in
// (its lease renewals and fetches held) before a move of an event that fails on
// in's slot only, when another instance could take the stream over and
// apply the event; then it runs move once another instance fetched the
// row, or once that had time to happen, and resumes in. ok is false when
// it did not pause: the move goes through the wrapper as any call.
func (w *world) pauseAtMove(ctx context.Context, in *instance, p *ports.DeadLetterMoveParams, move func(context.Context) (*ports.DeadLetterMoveResult, error)) (res *ports.DeadLetterMoveResult, err error, ok bool) {
	k, bound := w.boundToSlot(p, in.slot)
	if !bound || w.healed.Load() || w.cfg.Calm || w.p.focus != "" || len(w.instances("live")) < 2 {
		return nil, nil, false
	}
	pz := &movePause{in: in, k: k, taken: make(chan struct{}), landed: make(chan struct{})}
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
	// A peer claims only the streams of its partitions: a graceful stop of
	// a third instance deals the partitions out again, so that the stream
	// may fall to a peer once its lease lapsed.
	var others []*instance
	for _, o := range w.instances("live") {
		if o != in {
			others = append(others, o)
		}
	}
	if len(others) >= 2 {
		w.mu.Lock()
		other := others[w.live.IntN(len(others))]
		w.mu.Unlock()
		w.stop(other)
	}

	from := w.now()
	o := &w.opts
	limit := o.StaleInstanceThreshold + o.HeartbeatInterval + o.LeaseDuration + 2*max(o.ClaimInterval, o.ClaimNotifyHealthyInterval) + time.Second
	w.rec.tracef("%s paused before its move of k%d to dead letters (work %s), for at most %s", in.name, k, short(p.WorkID), limit)
	timer := w.clock.NewTimer(limit)
	why, ended := "nobody fetched the row", false
	select {
	case <-pz.taken:
		why = "another instance fetched the row"
	case <-timer.C():
	case <-changed:
		why, ended = "another fault replaced the pause", true
	case <-ctx.Done():
		why = "the move's context ended"
	}
	timer.Stop()
	w.mu.Lock()
	delete(w.pauses, p.WorkID)
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
	if !ended {
		w.heal(in)
	}
	w.disturb(window{from: from, to: w.now() + w.settleHeld(), what: "paused " + in.name, infra: true})
	return res, err, true
}

// fetchedRows is the EventsFetchPending hook of in's wrapper: a row whose
// move a paused instance holds, fetched by another instance, lets that
// move land now, before in applies the row.
func (w *world) fetchedRows(ctx context.Context, in *instance, res *ports.EventsFetchPendingResult) {
	if res == nil {
		return
	}
	for _, r := range res.Work {
		w.mu.Lock()
		pz := w.pauses[r.WorkID]
		if pz != nil && pz.in != in {
			delete(w.pauses, r.WorkID)
		} else {
			pz = nil
		}
		w.mu.Unlock()
		if pz == nil {
			continue
		}
		w.rec.tracef("%s fetched %s %s v%d (k%d), whose move to dead letters %s holds", in.name, r.Perspective, short(r.StreamID), r.EventVersion, pz.k, pz.in.name)
		close(pz.taken)
		select {
		case <-pz.landed:
		case <-ctx.Done():
		}
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
