package core

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/faultlog"
	"github.com/vantage-go/vantage/core/internal/queue"
)

// parking holds pairs back and drains them again when their time comes: a
// pair whose failure waits for its acknowledgement and retry time, one
// whose drain met an infrastructure error (with its backoff), one being
// saved event by event, one whose rewind waits for its debounce or its
// lock. It owns the wakes that push a held pair's stream into the drain
// queue when it is due, and numbers the fetches, since rows fetched before
// a failure was acknowledged are stale for its pair.
type parking struct {
	*engine
	schedule *schedule
	// fetchSeq numbers fetches (see staleFetch); infraPairs counts the
	// pairs in infraBackoff, givenUpPairs those in givenUpBackoff,
	// saveEachCount those in saveEach and saveAloneCount those in
	// saveAlone, so that the paths that find none take no lock.
	fetchSeq       atomic.Uint64
	infraPairs     atomic.Int32
	givenUpPairs   atomic.Int32
	saveEachCount  atomic.Int32
	saveAloneCount atomic.Int32

	mu     sync.Mutex
	parked map[pairKey]held
	// failAcked holds, per pair, the fetch sequence number current when its
	// latest failure was acknowledged.
	failAcked map[pairKey]uint64
	// infraBackoff holds the backoff of each pair whose drain meets
	// infrastructure errors; saveEach the pairs saved event by event;
	// saveAlone the table projections' pairs saved alone (see
	// saveAloneFor).
	infraBackoff map[pairKey]backoff.BackOff
	saveEach     map[pairKey]bool
	saveAlone    map[pairKey]bool
	// givenUpBackoff holds the backoff of each pair with a report given
	// up on (see reportGivenUp), until a report of the pair lands.
	givenUpBackoff map[pairKey]backoff.BackOff
}

func newParking(e *engine, queue *queue.Queue) *parking {
	return &parking{
		engine:         e,
		schedule:       newSchedule(e.Clock, queue),
		parked:         map[pairKey]held{},
		failAcked:      map[pairKey]uint64{},
		infraBackoff:   map[pairKey]backoff.BackOff{},
		saveEach:       map[pairKey]bool{},
		saveAlone:      map[pairKey]bool{},
		givenUpBackoff: map[pairKey]backoff.BackOff{},
	}
}

// Start launches the wakes of held pairs; they run until Stop or until
// ctx ends.
func (p *parking) Start(ctx context.Context) { p.schedule.Start(ctx) }

// Stop ends the wakes and waits for them.
func (p *parking) Stop(ctx context.Context) error { return p.schedule.Stop(ctx) }

// nextFetch returns the sequence number of a fetch about to start.
func (p *parking) nextFetch() uint64 { return p.fetchSeq.Add(1) }

// wakeAt drains stream again at t (see wakes.at).
func (p *parking) wakeAt(stream uuid.UUID, t time.Time) { p.schedule.at(stream, t) }

// Backoff of a pair whose drain met an infrastructure error (a backend call
// failed): Options.InfraRetry, its waits spread by infraRetryJitter so that
// the pairs of one outage do not all come back at once, for as long as the
// pair keeps failing. The pair keeps its rows and no attempt is counted:
// the event is not at fault.
const (
	infraRetryJitter = 0.5
	// unknownPerspectiveRetry holds back work of a perspective this
	// instance does not know (another instance may, during a deploy).
	unknownPerspectiveRetry = 30 * time.Second
	// unknownPerspectiveLogEvery is the least time between two lines
	// about the work of one unknown perspective: its rows come back every
	// unknownPerspectiveRetry, per stream, for as long as they stay.
	unknownPerspectiveLogEvery = time.Minute
)

// held says until when a pair is held back: until its failure is
// acknowledged by the backend (which releases the failed row and schedules
// it) and its retry time passed, or until a time (an infrastructure retry,
// a debounce, a lock retry). Before the acknowledgement a fetch would still see the failed row
// leased to us and apply it again.
type held struct {
	until time.Time
	acked bool
}

// isParked reports whether the pair is held back, forgetting a parking that
// is over.
func (p *parking) isParked(k pairKey) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.parked[k]
	if !ok {
		return false
	}
	if h.acked && !p.Now().Before(h.until) {
		delete(p.parked, k)
		return false
	}
	return true
}

func (p *parking) park(k pairKey, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parked[k] = held{until: until}
}

// parkFor holds a pair back until until, and drains its stream again then.
func (p *parking) parkFor(k pairKey, until time.Time) {
	p.mu.Lock()
	p.parked[k] = held{until: until, acked: true}
	p.mu.Unlock()
	p.schedule.at(k.stream, until)
}

// staleFetch reports whether a fetch (by its sequence number) started before
// the latest acknowledged failure of the pair.
func (p *parking) staleFetch(k pairKey, seq uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	acked, ok := p.failAcked[k]
	if !ok {
		return false
	}
	if seq <= acked {
		return true
	}
	delete(p.failAcked, k) // fresh rows from now on
	return false
}

// parkAcked notes that the failure of a pair reached the backend: its
// parking ends at its retry time, when the stream is drained again.
func (p *parking) parkAcked(k pairKey) {
	p.mu.Lock()
	p.failAcked[k] = p.fetchSeq.Load()
	h, ok := p.parked[k]
	if ok {
		h.acked = true
		p.parked[k] = h
	}
	p.mu.Unlock()
	if ok {
		p.schedule.at(k.stream, h.until)
	}
}

// infraFailed holds a pair back after a backend call failed on its behalf,
// and drains it again after a short backoff. The rows stay leased and no
// attempt is counted: an infrastructure error is never the event's fault.
func (p *parking) infraFailed(ctx context.Context, k pairKey, op string, err error) {
	if ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	b, ok := p.infraBackoff[k]
	if !ok {
		b = p.opts.InfraRetry.internal(infraRetryJitter).New(p.Clock)
		p.infraBackoff[k] = b
		p.infraPairs.Add(1)
	}
	delay := b.NextBackOff()
	p.mu.Unlock()
	p.parkFor(k, p.Now().Add(delay))
	p.metrics.backendError(ctx, k.perspective)
	p.Faults.Fail(ctx, op, err, append(pairAttrs(k.stream, k.perspective), slog.Duration("retry_in", delay))...)
}

// infraRecovered forgets the backoff of a pair whose drain went through.
func (p *parking) infraRecovered(k pairKey) {
	if p.infraPairs.Load() == 0 {
		return
	}
	p.mu.Lock()
	if _, ok := p.infraBackoff[k]; ok {
		delete(p.infraBackoff, k)
		p.infraPairs.Add(-1)
	}
	p.mu.Unlock()
}

// reportGivenUp holds a pair back after the report of one of its outcomes
// was given up on (see completer.givenUp), ending any parking it had (a
// failure waiting for its acknowledgement included), and drains it again
// after the next wait of its backoff, which it returns. The backoff is
// InfraRetry's, grown by every report of the pair given up on until one
// lands (reportLanded): a drain that goes through does not reset it, since
// the report of that drain is what the backend refuses.
func (p *parking) reportGivenUp(k pairKey) time.Duration {
	p.mu.Lock()
	b, ok := p.givenUpBackoff[k]
	if !ok {
		b = p.opts.InfraRetry.internal(infraRetryJitter).New(p.Clock)
		p.givenUpBackoff[k] = b
		p.givenUpPairs.Add(1)
	}
	delay := b.NextBackOff()
	p.mu.Unlock()
	p.parkFor(k, p.Now().Add(delay))
	return delay
}

// reportLanded forgets the backoff of reports given up on of a pair, one
// of whose reports the backend acknowledged.
func (p *parking) reportLanded(k pairKey) {
	if p.givenUpPairs.Load() == 0 {
		return
	}
	p.mu.Lock()
	if _, ok := p.givenUpBackoff[k]; ok {
		delete(p.givenUpBackoff, k)
		p.givenUpPairs.Add(-1)
	}
	p.mu.Unlock()
}

// retrySoon drains the pair's stream again at once (after its current
// drain).
func (p *parking) retrySoon(k pairKey) { p.schedule.at(k.stream, p.Now()) }

// saveEachFor saves the pair event by event until a drain of it completes.
func (p *parking) saveEachFor(k pairKey) {
	p.mu.Lock()
	if !p.saveEach[k] {
		p.saveEach[k] = true
		p.saveEachCount.Add(1)
	}
	p.mu.Unlock()
}

// saveEachDone ends saveEachFor.
func (p *parking) saveEachDone(k pairKey) {
	if p.saveEachCount.Load() == 0 {
		return
	}
	p.mu.Lock()
	if p.saveEach[k] {
		delete(p.saveEach, k)
		p.saveEachCount.Add(-1)
	}
	p.mu.Unlock()
}

// saveAloneFor saves the table projection of a pair alone, not shared
// with the saves of other pairs, from its next save on: its writes ran past
// the patience of a shared save (see groupPatience). Alone, only
// ApplyTimeout bounds them, and they hold no other pair's save.
func (p *parking) saveAloneFor(k pairKey) {
	p.mu.Lock()
	if !p.saveAlone[k] {
		p.saveAlone[k] = true
		p.saveAloneCount.Add(1)
	}
	p.mu.Unlock()
}

// savesAlone reports whether the pair's saves go alone (saveAloneFor).
func (p *parking) savesAlone(k pairKey) bool {
	if p.saveAloneCount.Load() == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.saveAlone[k]
}

// savedAlone records that a save of the pair went alone and its writes
// took took: past the patience of a shared save, the pair's saves stay
// alone (its writes are still slow, and would be cut again); within it,
// they are shared again.
func (p *parking) savedAlone(k pairKey, took time.Duration) {
	if took > p.savePatience() {
		p.saveAloneFor(k)
		return
	}
	if p.saveAloneCount.Load() == 0 {
		return
	}
	p.mu.Lock()
	if p.saveAlone[k] {
		delete(p.saveAlone, k)
		p.saveAloneCount.Add(-1)
	}
	p.mu.Unlock()
}

// unknownPerspective holds back the events of a perspective this instance
// does not know, never charging them; it is logged once per perspective
// and unknownPerspectiveLogEvery, with the events skipped since.
func (p *parking) unknownPerspective(ctx context.Context, k pairKey, events int) {
	p.parkFor(k, p.Now().Add(unknownPerspectiveRetry))
	p.Faults.Recur(ctx, faultlog.Recurrence{
		Key: "unknown perspective " + k.perspective, Every: unknownPerspectiveLogEvery, Level: slog.LevelWarn, CountKey: "events_skipped",
		Msg: "skipping the work of a perspective this instance does not have; it waits for an instance that has it",
	}, events, slog.String("perspective", k.perspective))
}

// saveBatchSize is how many applied events one save of the pair may cover:
// PerspectiveBatchSize, or one while the pair is being saved event by event
// to find the event whose model the store refuses (see saveRefused).
func (p *parking) saveBatchSize(k pairKey) int {
	if p.saveEachCount.Load() > 0 {
		p.mu.Lock()
		each := p.saveEach[k]
		p.mu.Unlock()
		if each {
			return 1
		}
	}
	return p.opts.PerspectiveBatchSize
}
