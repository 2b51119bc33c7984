// Package pair holds the state this instance keeps per (stream,
// perspective) pair, and is its one owner: a run of a pair asks for its
// Turn (refused while the pair is held back, or for rows fetched before
// its failure was acknowledged), which holds the gate that serializes the
// pair's load-apply-save and carries how the run saves (event by event, or
// alone), and hands the turn back with how it ended (an Ending: done,
// again, a failure to report, a backend error, save event by event, save
// alone, unknown perspective, hold until). The Parking records it: holds
// the pair back after a failure (and only then lets its report go), a
// backend error or a debounce, and drains it again when due.
package pair

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/faultlog"
	"github.com/vantage-go/vantage/core/internal/queue"
	"github.com/vantage-go/vantage/core/internal/retry"
)

// Parking holds pairs back and drains them again when their time comes: a
// pair whose failure waits for its acknowledgement and retry time, one
// whose drain met an infrastructure error (with its backoff), one being
// saved event by event, one whose rewind waits for its debounce or its
// lock. It owns the wakes that push a held pair's stream into the drain
// queue when it is due, and numbers the fetches, since rows fetched before
// a failure was acknowledged are stale for its pair.
type Parking struct {
	*base.Env
	cfg      Config
	schedule *schedule
	// fetchSeq numbers fetches (see StaleFetch).
	fetchSeq atomic.Uint64

	mu     sync.Mutex
	parked map[Key]held
	// failAcked holds, per pair, the fetch sequence number current when its
	// latest failure was acknowledged.
	failAcked map[Key]uint64
	// infraBackoff holds the backoff of each pair whose drain meets
	// infrastructure errors; givenUpBackoff that of each pair with a
	// report given up on (see ReportGivenUp), until a report of the pair
	// lands; saveEach the pairs saved event by event; saveAlone the table
	// projections' pairs saved alone (see SaveAloneFor).
	infraBackoff, givenUpBackoff counted[backoff.BackOff]
	saveEach, saveAlone          counted[struct{}]
	// gates serialize the runs of each pair (see Enter and Gate).
	gates *Gates
}

// counted is a map of pairs, guarded by the Parking's mu, that counts its
// entries atomically, so that the paths that find it empty take no lock.
type counted[V any] struct {
	n atomic.Int32
	m map[Key]V
}

// empty reports whether the map has no entry; it needs no lock.
func (c *counted[V]) empty() bool { return c.n.Load() == 0 }

// get returns the entry of k. The caller holds mu.
func (c *counted[V]) get(k Key) (V, bool) {
	v, ok := c.m[k]
	return v, ok
}

// put sets the entry of k. The caller holds mu.
func (c *counted[V]) put(k Key, v V) {
	if c.m == nil {
		c.m = map[Key]V{}
	}
	if _, ok := c.m[k]; !ok {
		c.n.Add(1)
	}
	c.m[k] = v
}

// remove deletes the entry of k, taking mu unless the map is empty.
func (c *counted[V]) remove(mu *sync.Mutex, k Key) {
	if c.empty() {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	if _, ok := c.m[k]; ok {
		delete(c.m, k)
		c.n.Add(-1)
	}
}

// has reports whether k has an entry, taking mu unless the map is empty.
func (c *counted[V]) has(mu *sync.Mutex, k Key) bool {
	if c.empty() {
		return false
	}
	mu.Lock()
	defer mu.Unlock()
	_, ok := c.m[k]
	return ok
}

// Config is what Parking reads.
type Config struct {
	// InfraRetry is the backoff of a pair whose drain meets backend
	// errors (without jitter: Parking spreads it by infraRetryJitter).
	InfraRetry retry.Backoff
	// BatchSize is how many applied events one save may cover.
	BatchSize int
	// SavePatience is how long the writes of a shared save may take
	// before the pair's saves go alone (see SavedAlone).
	SavePatience time.Duration
	// OnBackendError, when set, counts a backend error met on behalf of a
	// pair of perspective.
	OnBackendError func(ctx context.Context, perspective string)
}

// NewParking returns the Parking of env configured by cfg, which drains a
// pair again by pushing its stream into drainQ.
func NewParking(env *base.Env, cfg Config, drainQ *queue.Queue) *Parking {
	cfg.InfraRetry.Jitter = infraRetryJitter
	return &Parking{
		Env:       env,
		cfg:       cfg,
		schedule:  newSchedule(env.Clock, drainQ),
		parked:    map[Key]held{},
		failAcked: map[Key]uint64{},
		gates:     NewGates(),
	}
}

// Start launches the wakes of held pairs; they run until Stop or until
// ctx ends.
func (p *Parking) Start(ctx context.Context) error { p.schedule.Start(ctx); return nil }

// Stop ends the wakes and waits for them.
func (p *Parking) Stop(ctx context.Context) error { return p.schedule.Stop(ctx) }

// NextFetch returns the sequence number of a fetch about to start.
func (p *Parking) NextFetch() uint64 { return p.fetchSeq.Add(1) }

// WakeAt drains stream again at t (see schedule.at).
func (p *Parking) WakeAt(stream uuid.UUID, t time.Time) { p.schedule.at(stream, t) }

// Backoff of a pair whose drain met an infrastructure error (a backend call
// failed): Config.InfraRetry, its waits spread by infraRetryJitter so that
// the pairs of one outage do not all come back at once, for as long as the
// pair keeps failing. The pair keeps its rows and no attempt is counted:
// the event is not at fault.
const (
	infraRetryJitter = 0.5
	// UnknownPerspectiveRetry holds back work of a perspective this
	// instance does not know (another instance may, during a deploy).
	UnknownPerspectiveRetry = 30 * time.Second
	// unknownPerspectiveLogEvery is the least time between two lines
	// about the work of one unknown perspective: its rows come back every
	// UnknownPerspectiveRetry, per stream, for as long as they stay.
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

// IsParked reports whether the pair is held back, forgetting a parking that
// is over.
func (p *Parking) IsParked(k Key) bool {
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

// Held returns until when the pair is held back and whether the wait for
// its acknowledgement is over; ok is false when it is not held.
func (p *Parking) Held(k Key) (until time.Time, acked, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.parked[k]
	return h.until, h.acked, ok
}

// park holds a pair back until its failure is acknowledged and until has
// passed (see Failed).
func (p *Parking) park(k Key, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parked[k] = held{until: until}
}

// ParkFor holds a pair back until until, and drains its stream again then.
func (p *Parking) ParkFor(k Key, until time.Time) {
	p.mu.Lock()
	p.parked[k] = held{until: until, acked: true}
	p.mu.Unlock()
	p.schedule.at(k.Stream, until)
}

// StaleFetch reports whether a fetch (by its sequence number) started before
// the latest acknowledged failure of the pair.
func (p *Parking) StaleFetch(k Key, seq uint64) bool {
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

// ParkAcked notes that the failure of a pair reached the backend: its
// parking ends at its retry time, when the stream is drained again.
func (p *Parking) ParkAcked(k Key) {
	p.mu.Lock()
	p.failAcked[k] = p.fetchSeq.Load()
	h, ok := p.parked[k]
	if ok {
		h.acked = true
		p.parked[k] = h
	}
	p.mu.Unlock()
	if ok {
		p.schedule.at(k.Stream, h.until)
	}
}

// InfraFailed holds a pair back after a backend call failed on its behalf,
// and drains it again after a short backoff. The rows stay leased and no
// attempt is counted: an infrastructure error is never the event's fault.
func (p *Parking) InfraFailed(ctx context.Context, k Key, op string, err error) {
	if ctx.Err() != nil {
		return
	}
	delay := p.parkBackingOff(&p.infraBackoff, k)
	if p.cfg.OnBackendError != nil {
		p.cfg.OnBackendError(ctx, k.Perspective)
	}
	p.Faults.Fail(ctx, op, err, slog.String("stream_id", k.Stream.String()), slog.String("perspective", k.Perspective), slog.Duration("retry_in", delay))
}

// InfraRecovered forgets the backoff of a pair whose drain went through.
func (p *Parking) InfraRecovered(k Key) { p.infraBackoff.remove(&p.mu, k) }

// ReportGivenUp holds a pair back after the report of one of its outcomes
// was given up on (the completer gives it up), ending any parking it had (a
// failure waiting for its acknowledgement included), and drains it again
// after the next wait of its backoff, which it returns. The backoff is
// InfraRetry's, grown by every report of the pair given up on until one
// lands (ReportLanded): a drain that goes through does not reset it, since
// the report of that drain is what the backend refuses.
func (p *Parking) ReportGivenUp(k Key) time.Duration {
	return p.parkBackingOff(&p.givenUpBackoff, k)
}

// parkBackingOff holds the pair back for the next wait of its backoff in
// backoffs (InfraRetry's, started on its first use), and returns the wait.
func (p *Parking) parkBackingOff(backoffs *counted[backoff.BackOff], k Key) time.Duration {
	p.mu.Lock()
	b, ok := backoffs.get(k)
	if !ok {
		b = p.cfg.InfraRetry.New(p.Clock)
		backoffs.put(k, b)
	}
	delay := b.NextBackOff()
	p.mu.Unlock()
	p.ParkFor(k, p.Now().Add(delay))
	return delay
}

// ReportLanded forgets the backoff of reports given up on of a pair, one
// of whose reports the backend acknowledged.
func (p *Parking) ReportLanded(k Key) { p.givenUpBackoff.remove(&p.mu, k) }

// RetrySoon drains the pair's stream again at once (after its current
// drain).
func (p *Parking) RetrySoon(k Key) { p.schedule.at(k.Stream, p.Now()) }

// SaveEachFor saves the pair event by event until a drain of it completes.
func (p *Parking) SaveEachFor(k Key) {
	p.mu.Lock()
	p.saveEach.put(k, struct{}{})
	p.mu.Unlock()
}

// SaveEachDone ends SaveEachFor.
func (p *Parking) SaveEachDone(k Key) { p.saveEach.remove(&p.mu, k) }

// SaveAloneFor saves the table projection of a pair alone, not shared
// with the saves of other pairs, from its next save on: its writes ran past
// the patience of a shared save (Config.SavePatience). Alone, only
// ApplyTimeout bounds them, and they hold no other pair's save.
func (p *Parking) SaveAloneFor(k Key) {
	p.mu.Lock()
	p.saveAlone.put(k, struct{}{})
	p.mu.Unlock()
}

// SavesAlone reports whether the pair's saves go alone (SaveAloneFor).
func (p *Parking) SavesAlone(k Key) bool { return p.saveAlone.has(&p.mu, k) }

// SavedAlone records that a save of the pair went alone and its writes
// took took: past the patience of a shared save, the pair's saves stay
// alone (its writes are still slow, and would be cut again); within it,
// they are shared again.
func (p *Parking) SavedAlone(k Key, took time.Duration) {
	if took > p.cfg.SavePatience {
		p.SaveAloneFor(k)
		return
	}
	p.saveAlone.remove(&p.mu, k)
}

// UnknownPerspective holds back the events of a perspective this instance
// does not know, never charging them; it is logged once per perspective
// and unknownPerspectiveLogEvery, with the events skipped since.
func (p *Parking) UnknownPerspective(ctx context.Context, k Key, events int) {
	p.ParkFor(k, p.Now().Add(UnknownPerspectiveRetry))
	p.Faults.Recur(ctx, faultlog.Recurrence{
		Key: "unknown perspective " + k.Perspective, Every: unknownPerspectiveLogEvery, Level: slog.LevelWarn, CountKey: "events_skipped",
		Msg: "skipping the work of a perspective this instance does not have; it waits for an instance that has it",
	}, events, slog.String("perspective", k.Perspective))
}

// turn returns the turn of pair k, whose gate release lets go of, with
// the pair's save settings.
func (p *Parking) turn(k Key, release func()) *Turn {
	return &Turn{p: p, Key: k, BatchSize: p.SaveBatchSize(k), SaveAlone: p.SavesAlone(k), release: sync.OnceFunc(release)}
}

// SaveBatchSize is how many applied events one save of the pair may cover:
// Config.BatchSize, or one while the pair is being saved event by event
// to find the event whose model the store refuses (the engine finds it).
func (p *Parking) SaveBatchSize(k Key) int {
	if p.saveEach.has(&p.mu, k) {
		return 1
	}
	return p.cfg.BatchSize
}
