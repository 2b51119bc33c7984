package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/vantage-go/vantage/ports"
)

var _ ports.Stats = (*Store)(nil)

// sqlPerspectivesLag returns, per perspective with pending rows, their
// count, the oldest one's creation time, and the time ages are measured at
// ($1, else the database clock). Counting reads every pending row whatever
// the index, so what matters is how many pages it reads:
// vantage_work_pending_idx has an entry per pending row and carries
// created_at (migration 006), so it answers with an index-only scan, which
// reads fewer pages than the table and none of its heap where the
// visibility map is set. Under sqlWorkSettings' random_page_cost the planner takes it
// whenever the visibility map covers most of the table, as autovacuum
// keeps it on a backlog that stays; on a table whose pages were mostly
// rewritten since the last vacuum, an index-only scan would visit the heap
// too, and the planner rightly reads the table instead.
const sqlPerspectivesLag = `SELECT w.perspective, count(*), min(w.created_at), coalesce($1::timestamptz, now())
FROM /* SCHEMA */.vantage_work w
WHERE w.processed_at IS NULL
GROUP BY w.perspective
ORDER BY w.perspective COLLATE "C"`

// PerspectivesLag implements ports.Stats in one round trip, under the
// planner settings of the work statements (see sqlPerspectivesLag). The
// figures come from one snapshot; perspectives are ordered by the bytes of
// their names, as the memory adapter orders them.
func (s *Store) PerspectivesLag(ctx context.Context, params *ports.PerspectivesLagParams) ([]ports.PerspectiveLag, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	out := []ports.PerspectiveLag{}
	b := &pgx.Batch{}
	b.Queue(s.sql(sqlPerspectivesLag), nowArg(params.Now))
	err := s.sendWork(ctx, b, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		var (
			lag         ports.PerspectiveLag
			oldest, now pgtype.Timestamptz
		)
		_, err = pgx.ForEachRow(rows, []any{&lag.Perspective, &lag.Pending, &oldest, &now}, func() error {
			lag.OldestAge = max(now.Time.Sub(oldest.Time), 0)
			out = append(out, lag)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the backlog of each perspective: %w", translate(err))
	}
	return out, nil
}
