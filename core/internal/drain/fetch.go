package drain

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/dedup"
	"github.com/vantage-go/vantage/core/internal/pair"
	"github.com/vantage-go/vantage/core/internal/telemetry"
	"github.com/vantage-go/vantage/ports"
)

// FetchConfig is what the Fetcher reads.
type FetchConfig struct {
	Fetcher        ports.EventFetcher
	InstanceID     uuid.UUID
	LeaseDuration  time.Duration
	StaleThreshold time.Duration
	MaxRows        int // 0: no limit
	Metrics        *telemetry.Metrics
	// OnDeduped reports the rows NotApplied passed over; nil for none.
	OnDeduped func(workIDs []uuid.UUID, perspective string, stream uuid.UUID)
}

// Fetcher leases and fetches the pending events of streams, and sorts a
// pair's rows into those to apply and those this instance applied already
// (their completion on its way).
type Fetcher struct {
	*base.Env
	cfg     FetchConfig
	parking *pair.Parking
	cache   *dedup.Cache
}

// NewFetcher returns a Fetcher numbering its fetches on parking and
// filtering rows through cache.
func NewFetcher(env *base.Env, cfg FetchConfig, parking *pair.Parking, cache *dedup.Cache) *Fetcher {
	return &Fetcher{Env: env, cfg: cfg, parking: parking, cache: cache}
}

// Fetch leases and fetches the pending events of streams. It returns the
// fetch's sequence number, taken before the call: results of a fetch that
// started before a failure of a pair was acknowledged are stale for that
// pair (see pair.Parking.StaleFetch).
func (f *Fetcher) Fetch(ctx context.Context, ids []uuid.UUID) (*ports.EventsFetchPendingResult, uint64, error) {
	seq := f.parking.NextFetch()
	cctx, cancel := base.LeaseCallContext(ctx)
	defer cancel()
	res, err := f.cfg.Fetcher.EventsFetchPending(cctx, &ports.EventsFetchPendingParams{
		InstanceID:     f.cfg.InstanceID,
		StreamIDs:      ids,
		LeaseDuration:  f.cfg.LeaseDuration,
		StaleThreshold: f.cfg.StaleThreshold,
		MaxRows:        f.cfg.MaxRows,
		Now:            f.ParamNow(),
	})
	if err != nil {
		if ctx.Err() == nil {
			f.Faults.Fail(ctx, "fetching pending events", err, "streams", len(ids))
		}
		return nil, seq, err
	}
	f.Faults.OK(ctx, "fetching pending events")
	return res, seq, nil
}

// NotApplied splits the rows of a pair into those the processed-event
// cache does not hold and the ids of those it holds (applied, their
// completion not acknowledged yet, or acknowledged recently), which it
// reports to the metrics and the DedupObserver.
func (f *Fetcher) NotApplied(ctx context.Context, key pair.Key, rows []ports.WorkItem) ([]ports.WorkItem, []uuid.UUID) {
	fresh, deduped := dedup.Partition(f.cache, key.Dedup(), rows, workID)
	f.cfg.Metrics.Deduped(ctx, key.Perspective, len(deduped))
	if len(deduped) > 0 && f.cfg.OnDeduped != nil {
		f.cfg.OnDeduped(deduped, key.Perspective, key.Stream)
	}
	return fresh, deduped
}

func workID(r *ports.WorkItem) uuid.UUID { return r.WorkID }
