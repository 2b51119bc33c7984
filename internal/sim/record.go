package sim

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// applyRec is one call of an apply function (or a table write).
type applyRec struct {
	Seq     int64
	Start   time.Duration // when the apply began
	At      time.Duration // when it returned
	Inst    string
	Slot    int
	Persp   string
	Stream  uuid.UUID
	Version int64
	K       int64
	Input   []int64 // the versions of the model the apply was given
	Fault   faultKind
	Err     string
	Stamp   int64
	Known   bool // the instance was known from the context
	Write   bool // a table write
}

// receptorRec is one call of a receptor.
type receptorRec struct {
	Seq     int64
	At      time.Duration
	Inst    string
	Stage   core.Stage
	Persp   string
	Event   uuid.UUID
	K       int64
	Version int64
}

// appendRec is a successful append of one event, as the simulator saw it
// return.
type appendRec struct {
	Issued time.Duration // when the append was called
	At     time.Duration // when the append returned
	Stream uuid.UUID
	K      int64
	Clean  bool
}

type pvKey struct {
	stream  uuid.UUID
	persp   string
	version int64
}

// Violation is an invariant that did not hold.
type Violation struct {
	// Invariant is the number of the invariant (see the package doc).
	Invariant int
	// What names the pair, event or instance concerned, and what was
	// expected.
	What string
}

// Kind names the kind of a violation in a word or two, to sum runs up.
func (v Violation) Kind() string {
	for _, k := range violationKinds {
		if v.Invariant == k.invariant && strings.Contains(v.What, k.text) {
			return k.kind
		}
	}
	return fmt.Sprintf("invariant-%d", v.Invariant)
}

var violationKinds = []struct {
	invariant  int
	text, kind string
}{
	{1, "on the spot", "input-model"},
	{1, "after the revive", "revive-missing"},
	{1, "holds versions", "replay-mismatch"},
	{2, "", "stale-base"},
	{3, "cannot be rebuilt after its revive", "revive-unrebuildable"},
	{3, "did not return within 2 minutes", "stop-hangs"},
	{3, "", "stuck"},
	{4, "infrastructure error", "charged-infra"},
	{4, "lost connection", "charged-infra"},
	{4, "hung apply is dead-lettered as failed", "hung-failed"},
	{4, "the pair holds the event", "dead-letter-applied"},
	{4, "", "dead-letter-cause"},
	{5, "while nothing was disturbed", "quiet-delay"},
	{5, "claims must resume", "claims-held"},
	{5, "", "heal-delay"},
	{6, "PrePerspective", "pre-stage"},
	{6, "without a crash", "stage-twice"},
	{6, "never fired", "stage-lost"},
	{6, "", "stage-order"},
	{7, "", "rewind-new"},
}

func (v Violation) String() string {
	return fmt.Sprintf("invariant %d (%s): %s", v.Invariant, invariantNames[v.Invariant], v.What)
}

var invariantNames = map[int]string{
	1: "exactly once, in order",
	2: "no model from a stale base",
	3: "nothing pending, nothing parked",
	4: "dead letters carry their cause",
	5: "bounded delay",
	6: "stage receptors",
	7: "rewind reports",
}

// recorder keeps what the simulation observed: the trace of operations,
// every apply and receptor call, the first save of every event per
// perspective, the appends, and the violations found on the spot. Safe for
// concurrent use.
type recorder struct {
	clock func() time.Duration
	start time.Time // real time at the start, for the trace

	mu        sync.Mutex
	seq       int64
	trace     []string
	applies   []applyRec
	receptors []receptorRec
	saved     map[pvKey]time.Duration
	saves     map[pairKey][]saveRec
	appended  map[int64]appendRec
	spot      []Violation
	// dead are the events in dead letters that were not requeued since,
	// by (stream, perspective, version); held are those a save held
	// already (reported once).
	dead map[pvKey]deadRec
	held map[pvKey]bool
	// locked is when each instance last took each pair's rewind lock.
	locked map[instPair]time.Duration
}

// instPair is a pair as one instance sees it.
type instPair struct {
	inst string
	pair pairKey
}

// deadRec is a move to dead letters that went through a wrapper.
type deadRec struct {
	id   uuid.UUID
	gen  string
	inst string
	at   time.Duration
}

func newRecorder(clock func() time.Duration) *recorder {
	return &recorder{clock: clock, start: time.Now(), saved: map[pvKey]time.Duration{}, saves: map[pairKey][]saveRec{}, appended: map[int64]appendRec{},
		dead: map[pvKey]deadRec{}, held: map[pvKey]bool{}, locked: map[instPair]time.Duration{}}
}

// rewindLocked records when an instance took a pair's rewind lock.
func (r *recorder) rewindLocked(inst string, stream uuid.UUID, persp string) {
	at := r.clock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.locked[instPair{inst, pairKey{stream, persp}}] = at
}

// rewindStart returns when the rewind of a pair that an instance reports
// at "at", having taken duration, began: when it took the pair's lock, the
// latest time before at - duration. at - duration alone may fall after the
// rewind's own save: the hook reads the clock a little after the engine
// measured the duration, and the clock moves on meanwhile.
func (r *recorder) rewindStart(inst string, stream uuid.UUID, persp string, at, duration time.Duration) time.Duration {
	start := at - duration
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.locked[instPair{inst, pairKey{stream, persp}}]; ok && t < start {
		start = t
	}
	return start
}

// deadLettered records a move to dead letters that took effect.
func (r *recorder) deadLettered(inst string, dl ports.DeadLetter) {
	at := r.clock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dead[pvKey{dl.StreamID, dl.Perspective, dl.EventVersion}] = deadRec{id: dl.ID, gen: dl.Generation, inst: inst, at: at}
}

// requeuing forgets the dead letters that a requeue about to be made may
// store again: those requeued match. It runs before the requeue, so that
// an apply of a requeued event is never taken for one of a dead letter.
func (r *recorder) requeuing(requeued func(id uuid.UUID, gen string) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, d := range r.dead {
		if requeued(d.id, d.gen) {
			delete(r.dead, k)
		}
	}
}

// holdsDead checks, on the spot, a save of the pair (stream, persp) by
// inst that holds the given versions: none is in a dead letter that was
// not requeued since. Called with r.mu held.
func (r *recorder) holdsDead(inst string, stream uuid.UUID, persp string, versions []int64, at time.Duration) {
	for _, v := range versions {
		k := pvKey{stream, persp, v}
		d, ok := r.dead[k]
		if !ok || r.held[k] {
			continue
		}
		r.held[k] = true
		r.spot = append(r.spot, Violation{4, fmt.Sprintf("on the spot, %s at %s: a save of %s of stream %s holds v%d, which %s moved to dead letters at %s (not requeued since): the pair holds the event of a dead letter",
			inst, fmtDur(at), persp, stream, v, d.inst, fmtDur(d.at))})
	}
}

// tracef adds a line to the trace, stamped with the sim time.
func (r *recorder) tracef(format string, args ...any) {
	line := fmt.Sprintf("%9s %7s  %s", fmtDur(r.clock()), fmt.Sprintf("(%.1fs)", time.Since(r.start).Seconds()), fmt.Sprintf(format, args...))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trace = append(r.trace, line)
}

func fmtDur(d time.Duration) string { return fmt.Sprintf("+%.3fs", d.Seconds()) }

func (r *recorder) traceText() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.trace, "\n")
}

func (r *recorder) applied(a applyRec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	a.Seq = r.seq
	r.applies = append(r.applies, a)
}

func (r *recorder) fired(f receptorRec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	f.Seq = r.seq
	r.receptors = append(r.receptors, f)
}

// checkInput checks, on the spot, the model an apply is given: its
// versions strictly increase and are all below the event's.
func (r *recorder) checkInput(at time.Duration, inst, persp string, ev ports.Event, k int64, m Model) {
	prev := int64(0)
	for _, e := range m.E {
		if e.V <= prev || e.V >= ev.Version {
			r.violate(Violation{1, fmt.Sprintf("on the spot, %s at %s: the apply of %s version %d (k=%d) by %s was given a model with versions %v",
				persp, fmtDur(at), ev.StreamID, ev.Version, k, inst, m.versions())})
			return
		}
		prev = e.V
	}
}

func (r *recorder) violate(v Violation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spot = append(r.spot, v)
}

func (r *recorder) appendedEvent(a appendRec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.appended[a.K]; !ok {
		r.appended[a.K] = a
	}
}

// saveRec is a model save an instance made.
type saveRec struct {
	At      time.Duration
	Inst    string
	Entries []Entry
}

func (s saveRec) String() string {
	parts := make([]string, len(s.Entries))
	for i, e := range s.Entries {
		parts[i] = fmt.Sprintf("v%d@code%d", e.V, e.S)
	}
	return fmt.Sprintf("%s at %s: [%s]", s.Inst, fmtDur(s.At), strings.Join(parts, " "))
}

// modelSaved records a model save, and the first save of each version a
// model holds.
func (r *recorder) modelSaved(inst string, stream uuid.UUID, persp string, data []byte) {
	var m Model
	if err := json.Unmarshal(data, &m); err != nil {
		return
	}
	at := r.clock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.saves[pairKey{stream, persp}] = append(r.saves[pairKey{stream, persp}], saveRec{At: at, Inst: inst, Entries: m.E})
	r.holdsDead(inst, stream, persp, m.versions(), at)
	for _, e := range m.E {
		k := pvKey{stream, persp, e.V}
		if _, ok := r.saved[k]; !ok {
			r.saved[k] = at
		}
	}
}

// rowsCommitted records the first commit of each version a table
// projection wrote.
func (r *recorder) rowsCommitted(inst string, stream uuid.UUID, persp string, versions []int64) {
	at := r.clock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holdsDead(inst, stream, persp, versions, at)
	for _, v := range versions {
		k := pvKey{stream, persp, v}
		if _, ok := r.saved[k]; !ok {
			r.saved[k] = at
		}
	}
}

// snapshot returns copies of what was recorded.
func (r *recorder) snapshot() (applies []applyRec, receptors []receptorRec, saved map[pvKey]time.Duration, appended map[int64]appendRec, spot []Violation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	saved = make(map[pvKey]time.Duration, len(r.saved))
	for k, v := range r.saved {
		saved[k] = v
	}
	appended = make(map[int64]appendRec, len(r.appended))
	for k, v := range r.appended {
		appended[k] = v
	}
	return append([]applyRec(nil), r.applies...), append([]receptorRec(nil), r.receptors...), saved, appended, append([]Violation(nil), r.spot...)
}

// savesOf returns the saves of a pair.
func (r *recorder) savesOf(k pairKey) []saveRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]saveRec(nil), r.saves[k]...)
}
