package pair

import (
	"context"
	"time"
)

// Turn is one run's hold on a pair: a drain asks for it (Enter), runs the
// pair under its gate with the save settings it carries, and hands back
// how the run ended (End), which is what the pair's state records. The
// run itself never parks, backs off or retries its pair: it says why it
// stopped, and the Parking decides.
type Turn struct {
	p   *Parking
	Key Key
	// BatchSize is how many applied events one save of the run may cover:
	// one while the pair is saved event by event to find the event whose
	// model the store refuses.
	BatchSize int
	// SaveAlone is whether a table projection's saves go alone rather
	// than shared with other pairs' (see Parking.SaveAloneFor).
	SaveAlone bool
	release   func()
}

// Enter takes the turn of pair k for a run of rows fetched by the fetch
// numbered seq. It reports false, taking nothing, when the pair is to be
// skipped: it is held back, ctx ended while another run held its gate,
// or the rows are stale (a failure of the pair was acknowledged after the
// fetch started: the backend released the failed row since). The turn
// holds the pair's gate until End or Release.
func (p *Parking) Enter(ctx context.Context, k Key, seq uint64) (*Turn, bool) {
	if p.IsParked(k) {
		return nil, false
	}
	release, err := p.gates.Acquire(ctx, k, nil)
	if err != nil {
		return nil, false
	}
	// Check again: the run that held the gate may just have parked the
	// pair, or had its failure acknowledged.
	if p.IsParked(k) || p.StaleFetch(k, seq) {
		release()
		return nil, false
	}
	return p.turn(k, release), true
}

// Take takes the turn of pair k for work outside a drain (a rebuild, the
// start-up repair of a rewind), whatever its parking. It returns ctx's
// error when ctx ended while another run held the pair.
func (p *Parking) Take(ctx context.Context, k Key) (*Turn, error) {
	release, err := p.gates.Acquire(ctx, k, nil)
	if err != nil {
		return nil, err
	}
	return p.turn(k, release), nil
}

// Release lets go of the pair's gate (once; End releases it too). An
// abandoned run releases it early, while its apply runs on.
func (t *Turn) Release() { t.release() }

// SavedAlone records how long the writes of a save that went alone took
// (see Parking.SavedAlone).
func (t *Turn) SavedAlone(took time.Duration) {
	t.p.SavedAlone(t.Key, took)
	t.SaveAlone = t.p.SavesAlone(t.Key)
}

// End records how the run ended (see Parking.record) and releases the
// gate.
func (t *Turn) End(ctx context.Context, o Ending) {
	defer t.release()
	t.p.record(ctx, t.Key, o)
}

// record records how a run of pair k ended: the switch from each ending
// to what the Parking does with the pair.
func (p *Parking) record(ctx context.Context, k Key, o Ending) {
	switch o.kind {
	case endDone:
		p.InfraRecovered(k)
		p.SaveEachDone(k)
	case endAgain:
		p.RetrySoon(k)
	case endInfra:
		p.InfraFailed(ctx, k, o.op, o.err)
	case endSaveEach:
		p.SaveEachFor(k)
		p.RetrySoon(k)
	case endSaveAlone:
		p.SaveAloneFor(k)
		p.RetrySoon(k)
	case endUnknown:
		p.UnknownPerspective(ctx, k, o.events)
	case endRecovered:
		p.InfraRecovered(k)
	case endHold:
		p.ParkFor(k, o.until)
	case endFailed:
		// Held back before the report goes: its acknowledgement, however
		// quick, must find the pair held (see ParkAcked).
		p.park(k, o.until)
		o.report(context.WithoutCancel(ctx))
	}
}

// Ending is how a run of a pair ended, as its Turn reports it. The
// endings are the functions below; the zero Ending is Stopped.
type Ending struct {
	kind   endingKind
	op     string
	err    error
	events int
	until  time.Time
	report func(context.Context)
}

type endingKind int

const (
	endStopped endingKind = iota
	endDone
	endAgain
	endInfra
	endSaveEach
	endSaveAlone
	endUnknown
	endRecovered
	endHold
	endFailed
)

// Stopped: the run ended with nothing for the pair's state to do (it had
// no rows to apply, its failure was reported, the stream is another
// instance's now, the worker is stopping). It is the zero Ending.
func Stopped() Ending { return Ending{} }

// IsStopped reports whether o is Stopped.
func (o Ending) IsStopped() bool { return o.kind == endStopped }

// Done: every row was applied and reported. The pair's infrastructure
// backoff is over, and so is its saving event by event.
func Done() Ending { return Ending{kind: endDone} }

// Again: the pair moved under the run (another applier saved), or its
// model must be read afresh: it is drained again at once.
func Again() Ending { return Ending{kind: endAgain} }

// InfraFailed: a backend call made for the pair (op) failed with err. The
// pair is held back for its infrastructure backoff; its rows stay leased
// and no attempt is counted.
func InfraFailed(op string, err error) Ending { return Ending{kind: endInfra, op: op, err: err} }

// SaveEach: the model of several events could not be stored; the pair is
// drained again at once and saved event by event until a run of it is
// done, which finds the event at fault.
func SaveEach() Ending { return Ending{kind: endSaveEach} }

// SaveAlone: a table projection's writes ran past the patience of a save
// shared with other pairs; the pair is drained again at once and its
// saves go alone.
func SaveAlone() Ending { return Ending{kind: endSaveAlone} }

// UnknownPerspective: the pair's perspective is not registered here; its
// events rows are held back, never charged (see
// Parking.UnknownPerspective).
func UnknownPerspective(events int) Ending { return Ending{kind: endUnknown, events: events} }

// Recovered: the run (a rewind) went through; the pair's infrastructure
// backoff is over.
func Recovered() Ending { return Ending{kind: endRecovered} }

// HoldUntil: the pair waits until t (a rewind's debounce, or the lock of
// its rewind held elsewhere), then is drained again.
func HoldUntil(t time.Time) Ending { return Ending{kind: endHold, until: t} }

// Failed: an event of the run failed and has attempts left. The pair is
// held back until the backend acknowledged the failure (which releases
// the failed row: rows fetched before are stale, see Enter) and retryAt
// passed; report, called once the pair is held, sends the failure.
func Failed(retryAt time.Time, report func(context.Context)) Ending {
	return Ending{kind: endFailed, until: retryAt, report: report}
}
