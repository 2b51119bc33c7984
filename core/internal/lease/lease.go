// Package lease renews the leases of the streams this instance drains, for
// as long as it drains them.
package lease

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/startstop"
	"github.com/vantage-go/vantage/ports"
)

// renewChunk bounds the stream ids of one renewal call.
const renewChunk = 5000

// Renewer renews the leases of the streams this instance is draining, for
// as long as it drains them: from a stream's fetch until its completions
// are acknowledged. A stream whose applies legitimately take longer than a
// lease (a slow handler, a long backlog behind a semaphore) thus never
// loses its lease; a stream another instance took meanwhile is simply not
// renewed by the backend (the renewal is fenced to the caller's leases).
//
// A fetch guarantees every stream it returns at least half a lease, so a
// stream renewed, or fetched, within the last quarter of a lease needs
// nothing; the loop runs every quarter lease and renews the older ones.
type Renewer struct {
	*base.Env
	startstop.Base
	cfg   Config
	every time.Duration

	mu      sync.Mutex
	streams map[uuid.UUID]time.Time // stream -> when its lease was last granted (fetch or renewal)
}

// Config is what a Renewer reads.
type Config struct {
	// Claimer is the backend's port that renews leases.
	Claimer ports.WorkClaimer
	// InstanceID is the instance that holds the leases.
	InstanceID uuid.UUID
	// LeaseDuration is how long a renewal extends a lease.
	LeaseDuration time.Duration
	// OnRenewed, when set, sees how many leases each round renewed.
	OnRenewed func(renewed int)
}

// New returns a Renewer of env configured by cfg.
func New(env *base.Env, cfg Config) *Renewer {
	return &Renewer{Env: env, cfg: cfg, every: cfg.LeaseDuration / 4, streams: map[uuid.UUID]time.Time{}}
}

// Start launches the renewals; they run until Stop or until ctx (the
// drains' work context) ends.
func (r *Renewer) Start(ctx context.Context) error {
	ctx, wg, ok := r.StartInit(ctx)
	if ok {
		wg.Go(func() { r.run(ctx) })
	}
	return nil
}

// Hold starts renewing the lease of a stream fetched at the given time.
func (r *Renewer) Hold(stream uuid.UUID, at time.Time) {
	r.mu.Lock()
	if cur, ok := r.streams[stream]; !ok || at.Before(cur) {
		r.streams[stream] = at
	}
	r.mu.Unlock()
}

// Drop stops renewing a stream's lease.
func (r *Renewer) Drop(stream uuid.UUID) {
	r.mu.Lock()
	delete(r.streams, stream)
	r.mu.Unlock()
}

// run renews due leases every quarter lease until ctx is done.
func (r *Renewer) run(ctx context.Context) {
	base.Every(ctx, r.Clock, r.every, func() { r.renewDue(ctx) })
}

// renewDue renews the lease of every stream granted more than a quarter
// lease ago.
func (r *Renewer) renewDue(ctx context.Context) {
	now := r.Now()
	var ids []uuid.UUID
	r.mu.Lock()
	for id, at := range r.streams {
		if now.Sub(at) >= r.every {
			ids = append(ids, id)
		}
	}
	r.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	renewed := 0
	for chunk := range slices.Chunk(ids, renewChunk) {
		n, err := r.cfg.Claimer.WorkRenewLeases(ctx, &ports.WorkRenewLeasesParams{
			InstanceID:    r.cfg.InstanceID,
			StreamIDs:     chunk,
			LeaseDuration: r.cfg.LeaseDuration,
			Now:           r.ParamNow(),
		})
		if err != nil {
			if ctx.Err() == nil {
				r.Faults.Fail(ctx, "renewing leases", err)
			}
			return
		}
		renewed += n
	}
	r.Faults.OK(ctx, "renewing leases")
	r.mu.Lock()
	for _, id := range ids {
		if _, ok := r.streams[id]; ok {
			r.streams[id] = now
		}
	}
	r.mu.Unlock()
	if r.cfg.OnRenewed != nil {
		r.cfg.OnRenewed(renewed)
	}
}

// Renewing reports whether the lease of stream is being renewed.
func (r *Renewer) Renewing(stream uuid.UUID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.streams[stream]
	return ok
}
