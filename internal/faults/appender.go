package faults

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// Bounds and pacing of one append.
const (
	appendTimeout = 5 * time.Second
	appendBackoff = 100 * time.Millisecond
)

// appender appends healthy Steps to its streams at a steady rate. Each of
// its goroutines owns a share of the streams, so no two appends race for a
// stream's version; scenarios inject their events through the owner of the
// target stream, between its regular appends.
type appender struct {
	reg     *core.Registry
	store   ports.EventStore
	pool    *pgxpool.Pool
	schema  string
	streams []*streamState
	inject  []chan injection // per goroutine

	seq atomic.Int64

	appended  atomic.Int64 // appends known to be stored
	errs      atomic.Int64 // failed append calls
	recovered atomic.Int64 // appends that failed but were found stored

	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopOnce sync.Once
}

// streamState is a stream as its owning goroutine knows it.
type streamState struct {
	id      uuid.UUID
	version int64
}

// injection asks the owner of streams[stream] to append one event.
type injection struct {
	stream int
	// step is the event, its Seq assigned on append.
	step Step
	// at places the event: placeNext (the next version), placePastGap (one
	// version past the next, which stays free), or a positive free version
	// below the stream's head (a late event).
	at   int64
	done chan injected
}

// Placements of an injected event (see injection.at).
const (
	placeNext    int64 = 0
	placePastGap int64 = -1
)

// injected is the outcome of an injection.
type injected struct {
	stream  uuid.UUID
	version int64
	seq     int64
	err     error
}

// startAppender starts goroutines appending rate events a second in total,
// round robin over the given number of new streams.
func startAppender(ctx context.Context, reg *core.Registry, store ports.EventStore, pool *pgxpool.Pool, schema string, streams, goroutines, rate int) *appender {
	ctx, cancel := context.WithCancel(ctx)
	a := &appender{reg: reg, store: store, pool: pool, schema: schema, cancel: cancel}
	for range streams {
		a.streams = append(a.streams, &streamState{id: uuid.Must(uuid.NewV7())})
	}
	goroutines = max(1, min(goroutines, streams))
	interval := time.Duration(float64(time.Second) * float64(goroutines) / float64(max(rate, 1)))
	for g := range goroutines {
		ch := make(chan injection)
		a.inject = append(a.inject, ch)
		var owned []*streamState
		for i := g; i < streams; i += goroutines {
			owned = append(owned, a.streams[i])
		}
		a.wg.Go(func() { a.run(ctx, owned, ch, interval) })
	}
	return a
}

func (a *appender) run(ctx context.Context, owned []*streamState, injections <-chan injection, interval time.Duration) {
	// The ticker paces the appends; a slow append skips ticks rather than
	// bursting after an outage.
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	next := 0
	for {
		select {
		case <-ctx.Done():
			return
		case in := <-injections:
			s := a.streams[in.stream]
			step := in.step
			step.Seq = a.seq.Add(1)
			at := in.at
			if at == placePastGap {
				at = s.version + 2
			}
			v, err := a.appendOne(ctx, s, step, at)
			in.done <- injected{stream: s.id, version: v, seq: step.Seq, err: err}
		case <-ticker.C:
			s := owned[next%len(owned)]
			next++
			_, _ = a.appendOne(ctx, s, Step{Seq: a.seq.Add(1)}, placeNext)
		}
	}
}

// injectEvent appends step (its Seq assigned here) to streams[stream],
// through the stream's owner, and returns its version and seq. It returns
// when the event is stored or ctx ends.
func (a *appender) injectEvent(ctx context.Context, stream int, step Step) (injected, error) {
	return a.injectEventAt(ctx, stream, step, placeNext)
}

// injectEventAt is injectEvent placing the event as at says (see
// injection.at).
func (a *appender) injectEventAt(ctx context.Context, stream int, step Step, at int64) (injected, error) {
	in := injection{stream: stream, step: step, at: at, done: make(chan injected, 1)}
	select {
	case a.inject[stream%len(a.inject)] <- in:
	case <-ctx.Done():
		return injected{}, ctx.Err()
	}
	select {
	case r := <-in.done:
		return r, r.err
	case <-ctx.Done():
		return injected{}, ctx.Err()
	}
}

// appendOne appends step to s, at the explicit version at when it is
// positive, until it is stored or ctx ends. A failed append may still have
// committed (its connection broke after the commit): before retrying, it
// looks the step's seq up in the stream, so a step is never stored twice
// and the stream's version stays known.
func (a *appender) appendOne(ctx context.Context, s *streamState, step Step, at int64) (int64, error) {
	for {
		v, err := a.tryAppend(ctx, s, step, at)
		if err == nil {
			s.version = max(s.version, v)
			a.appended.Add(1)
			return v, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		a.errs.Add(1)
		if head, at, err := a.lookup(ctx, s.id, step); err == nil {
			s.version = head
			if at > 0 {
				a.appended.Add(1)
				a.recovered.Add(1)
				return at, nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(appendBackoff):
		}
	}
}

func (a *appender) tryAppend(ctx context.Context, s *streamState, step Step, at int64) (int64, error) {
	// An append in flight when the appender stops runs to its end: a
	// cancelled append may still commit, after the run has checked that
	// no work is pending, and its event would be left unapplied.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), appendTimeout)
	defer cancel()
	expected := s.version
	if expected == 0 {
		expected = ports.ExpectNoStream
	}
	var res *ports.EventsAppendResult
	var err error
	switch {
	case at > 0:
		// An explicit version: past a gap, or a late event filling one.
		// The owner's appends are the stream's only ones, so no check of
		// the expected version is needed.
		var ne ports.NewEvent
		if ne, err = a.reg.Encode(step); err != nil {
			return 0, err
		}
		ne.Version = at
		res, err = a.store.EventsAppend(ctx, &ports.EventsAppendParams{StreamID: s.id, Events: []ports.NewEvent{ne}})
	case step.Fault == FaultUndecodable:
		// Not through the registry, which would encode a valid Step. The
		// workers registered the subscriptions before the first append.
		res, err = a.store.EventsAppend(ctx, &ports.EventsAppendParams{
			StreamID:        s.id,
			ExpectedVersion: expected,
			Events:          []ports.NewEvent{{Type: EventType, Data: undecodablePayload(step.Seq)}},
		})
	default:
		res, err = a.reg.Append(ctx, a.store, s.id, expected, step)
	}
	if err != nil {
		return 0, err
	}
	if len(res.Events) != 1 {
		return 0, fmt.Errorf("appending to stream %s: %d events stored, want 1", s.id, len(res.Events))
	}
	return res.Events[0].Version, nil
}

// lookup returns the stream's head version and the version step is stored
// at (0 when it is not).
func (a *appender) lookup(ctx context.Context, stream uuid.UUID, step Step) (head, at int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, appendTimeout)
	defer cancel()
	seq := strconv.FormatInt(step.Seq, 10)
	if step.Fault == FaultUndecodable {
		seq = "u" + seq
	}
	err = a.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0), coalesce(max(version) FILTER (WHERE data->>'seq' = $2), 0)
		FROM `+pgx.Identifier{a.schema, "vantage_events"}.Sanitize()+` WHERE stream_id = $1`, stream, seq).Scan(&head, &at)
	if err != nil {
		return 0, 0, fmt.Errorf("looking up seq %s in stream %s: %w", seq, stream, err)
	}
	return head, at, nil
}

// stop ends the appends and waits for the goroutines. Idempotent.
func (a *appender) stop() {
	a.stopOnce.Do(func() {
		a.cancel()
		a.wg.Wait()
	})
}
