package core

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/ports"
)

// renewChunk bounds the work ids of one renewal call.
const renewChunk = 5000

// renewer renews the leases of the work this instance is draining, for as
// long as it drains it: the rows a fetch handed out, per stream, from the
// fetch until the stream's completions are acknowledged. A stream whose
// applies legitimately take longer than a lease (a slow handler, a long
// backlog behind a semaphore) thus never loses its rows' leases; rows
// already completed are simply not renewed by the backend (the renewal is
// fenced to pending rows the caller holds).
//
// A fetch guarantees every row it returns at least half a lease, so a row
// renewed, or fetched, within the last quarter of a lease needs nothing;
// the loop runs every quarter lease and renews the older ones.
type renewer struct {
	*engine
	startStop
	every time.Duration

	mu      sync.Mutex
	streams map[uuid.UUID]*renewal
}

type renewal struct {
	work    [][]ports.WorkItem // the stream's rows of each fetch, shared with the drain (read only)
	renewed time.Time          // when the leases were last granted (fetch or renewal)
}

func newRenewer(e *engine) *renewer {
	return &renewer{engine: e, every: e.opts.LeaseDuration / 4, streams: map[uuid.UUID]*renewal{}}
}

// Start launches the renewals; they run until Stop or until ctx (the
// drains' work context) ends.
func (r *renewer) Start(ctx context.Context) {
	ctx, wg, ok := r.startInit(ctx)
	if ok {
		wg.Go(func() { r.run(ctx) })
	}
}

// hold starts renewing the leases of a stream's fetched rows.
func (r *renewer) hold(stream uuid.UUID, work []ports.WorkItem, at time.Time) {
	r.mu.Lock()
	if cur, ok := r.streams[stream]; ok {
		cur.work = append(cur.work, work)
		cur.renewed = minTime(cur.renewed, at)
	} else {
		r.streams[stream] = &renewal{work: [][]ports.WorkItem{work}, renewed: at}
	}
	r.mu.Unlock()
}

// drop stops renewing a stream's rows.
func (r *renewer) drop(stream uuid.UUID) {
	r.mu.Lock()
	delete(r.streams, stream)
	r.mu.Unlock()
}

// run renews due leases every quarter lease until ctx is done.
func (r *renewer) run(ctx context.Context) {
	every(ctx, r.clock, r.every, func() { r.renewDue(ctx) })
}

// renewDue renews the rows of every stream whose leases were granted more
// than a quarter lease ago.
func (r *renewer) renewDue(ctx context.Context) {
	now := r.now()
	var (
		ids     []uuid.UUID
		streams []*renewal
	)
	r.mu.Lock()
	for _, s := range r.streams {
		if now.Sub(s.renewed) >= r.every {
			for _, work := range s.work {
				for i := range work {
					ids = append(ids, work[i].WorkID)
				}
			}
			streams = append(streams, s)
		}
	}
	r.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	renewed := 0
	for chunk := range slices.Chunk(ids, renewChunk) {
		n, err := r.backend.Claimer.WorkRenewLeases(ctx, &ports.WorkRenewLeasesParams{
			InstanceID:    r.opts.InstanceID,
			WorkIDs:       chunk,
			LeaseDuration: r.opts.LeaseDuration,
			Now:           r.paramNow(),
		})
		if err != nil {
			if ctx.Err() == nil {
				r.faults.fail(ctx, "renewing leases", err)
			}
			return
		}
		renewed += n
	}
	r.faults.ok(ctx, "renewing leases")
	r.mu.Lock()
	for _, s := range streams {
		s.renewed = now
	}
	r.mu.Unlock()
	if h := r.opts.Hooks.OnLeasesRenewed; h != nil {
		h(renewed)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
