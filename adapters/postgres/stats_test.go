package postgres_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// TestPerspectivesLagReadsTheDatabaseClock stores rows an hour before the
// database clock and reads the backlog figures without a Now: ages are
// measured on the database clock, as every statement without a Now reads
// its time.
func TestPerspectivesLagReadsTheDatabaseClock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	subscribe(t, b, testPerspective)
	var dbNow time.Time
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow))
	_, err := b.backend.Events.EventsAppend(ctx, &ports.EventsAppendParams{
		StreamID: newUUID(t), Events: newEvents(2), Now: dbNow.Add(-time.Hour),
	})
	require.NoError(t, err)

	lags, err := b.backend.Stats.PerspectivesLag(ctx, &ports.PerspectivesLagParams{})

	require.NoError(t, err)
	require.Len(t, lags, 1)
	require.Equal(t, testPerspective, lags[0].Perspective)
	require.Equal(t, int64(2), lags[0].Pending)
	require.GreaterOrEqual(t, lags[0].OldestAge, time.Hour, "measured at the database clock, after the rows")
	require.Less(t, lags[0].OldestAge, time.Hour+time.Minute)
}
