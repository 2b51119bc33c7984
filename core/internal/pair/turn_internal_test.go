package pair

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/core/internal/queue"
	"github.com/vantage-go/vantage/core/internal/retry"
	"github.com/vantage-go/vantage/internal/clocktest"
)

func newTestParking(t *testing.T) (*Parking, *clocktest.Fake) {
	t.Helper()
	clock := clocktest.NewFake()
	p := NewParking(base.NewEnv(clock, true, slog.New(slog.DiscardHandler)), Config{
		BatchSize: 100, SavePatience: time.Second,
		InfraRetry: retry.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2},
	}, queue.New(queue.Hooks{}))
	return p, clock
}

// A turn is refused for a pair held back, and for rows fetched before the
// pair's failure was acknowledged; it holds the pair's gate until it ends,
// so a second run of the pair waits for the first.
func TestTurnEnter(t *testing.T) {
	t.Parallel()

	p, clock := newTestParking(t)
	k := Key{Stream: uuid.New(), Perspective: "c"}
	seq := p.NextFetch()

	turn, ok := p.Enter(t.Context(), k, seq)
	require.True(t, ok)
	require.Equal(t, 100, turn.BatchSize)
	require.False(t, turn.SaveAlone)
	waiting, cancel := context.WithCancel(t.Context())
	cancel()
	_, ok = p.Enter(waiting, k, seq)
	require.False(t, ok, "the gate is held: a run whose context ends while it waits gets no turn")
	turn.End(t.Context(), Stopped())

	turn, ok = p.Enter(t.Context(), k, p.NextFetch())
	require.True(t, ok)
	turn.End(t.Context(), Failed(clock.Now().Add(time.Minute), func(context.Context) {}))
	_, ok = p.Enter(t.Context(), k, p.NextFetch())
	require.False(t, ok, "parked")
	p.ParkAcked(k)
	clock.Advance(time.Minute)
	_, ok = p.Enter(t.Context(), k, seq)
	require.False(t, ok, "rows fetched before the failure was acknowledged are stale")
	turn, ok = p.Enter(t.Context(), k, p.NextFetch())
	require.True(t, ok, "fresh rows after the retry time")
	turn.Release()
	turn.End(t.Context(), Stopped()) // a second release is a no-op
	require.Zero(t, p.gates.Len(), "the gate was let go")
}

// Each outcome a run reports is what the pair's next turn sees.
func TestTurnEnd(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	enter := func(t *testing.T, p *Parking, k Key) *Turn {
		t.Helper()
		turn, ok := p.Enter(ctx, k, p.NextFetch())
		require.True(t, ok)
		return turn
	}

	t.Run("InfraFailed holds the pair back for its backoff, Done forgets it", func(t *testing.T) {
		t.Parallel()
		p, clock := newTestParking(t)
		k := Key{Stream: uuid.New(), Perspective: "c"}
		enter(t, p, k).End(ctx, InfraFailed("loading model", errors.New("connection refused")))
		until, _, held := p.Held(k)
		require.True(t, held)
		require.Greater(t, until, clock.Now())
		_, ok := p.Enter(ctx, k, p.NextFetch())
		require.False(t, ok, "held back")
		clock.Advance(time.Hour)
		enter(t, p, k).End(ctx, Done())
		_, ok = p.infraBackoff.get(k)
		require.False(t, ok, "the backoff starts over after a run went through")
	})

	t.Run("SaveEach saves event by event until a run is done", func(t *testing.T) {
		t.Parallel()
		p, _ := newTestParking(t)
		k := Key{Stream: uuid.New(), Perspective: "c"}
		enter(t, p, k).End(ctx, SaveEach())
		turn := enter(t, p, k)
		require.Equal(t, 1, turn.BatchSize)
		turn.End(ctx, Stopped())
		turn = enter(t, p, k)
		require.Equal(t, 1, turn.BatchSize, "a run that stopped short leaves it on")
		turn.End(ctx, Done())
		require.Equal(t, 100, enter(t, p, k).BatchSize)
	})

	t.Run("SaveAlone saves alone until a save alone is fast again", func(t *testing.T) {
		t.Parallel()
		p, _ := newTestParking(t)
		k := Key{Stream: uuid.New(), Perspective: "c"}
		enter(t, p, k).End(ctx, SaveAlone())
		turn := enter(t, p, k)
		require.True(t, turn.SaveAlone)
		turn.SavedAlone(2 * time.Second)
		require.True(t, turn.SaveAlone, "past the patience: still alone")
		turn.SavedAlone(time.Millisecond)
		require.False(t, turn.SaveAlone, "within it: shared again")
		turn.End(ctx, Done())
		require.False(t, enter(t, p, k).SaveAlone)
	})

	t.Run("UnknownPerspective holds the rows back", func(t *testing.T) {
		t.Parallel()
		p, clock := newTestParking(t)
		k := Key{Stream: uuid.New(), Perspective: "gone"}
		enter(t, p, k).End(ctx, UnknownPerspective(3))
		until, _, held := p.Held(k)
		require.True(t, held)
		require.Equal(t, clock.Now().Add(UnknownPerspectiveRetry), until)
	})

	t.Run("HoldUntil holds the pair back until then, Recovered ends its backoff", func(t *testing.T) {
		t.Parallel()
		p, clock := newTestParking(t)
		k := Key{Stream: uuid.New(), Perspective: "c"}
		enter(t, p, k).End(ctx, InfraFailed("rewinding", errors.New("connection refused")))
		clock.Advance(time.Hour)
		turn, err := p.Take(ctx, k)
		require.NoError(t, err)
		turn.End(ctx, HoldUntil(clock.Now().Add(5*time.Second)))
		until, _, held := p.Held(k)
		require.True(t, held)
		require.Equal(t, clock.Now().Add(5*time.Second), until)
		clock.Advance(5 * time.Second)
		enter(t, p, k).End(ctx, Recovered())
		_, ok := p.infraBackoff.get(k)
		require.False(t, ok)
	})

	t.Run("Failed holds the pair back before its report goes, until acknowledged and due", func(t *testing.T) {
		t.Parallel()
		p, clock := newTestParking(t)
		k := Key{Stream: uuid.New(), Perspective: "c"}
		fetched := p.NextFetch()
		retryAt := clock.Now().Add(time.Minute)
		reported := 0
		turn := enter(t, p, k)
		stopping, cancel := context.WithCancel(ctx)
		cancel()
		turn.End(stopping, Failed(retryAt, func(ctx context.Context) {
			reported++
			require.NoError(t, ctx.Err(), "the report outlives the run's context")
			until, acked, held := p.Held(k)
			require.True(t, held, "held back before the report goes")
			require.False(t, acked)
			require.Equal(t, retryAt, until)
			// An acknowledgement as quick as an Instant report's.
			p.ParkAcked(k)
		}))
		require.Equal(t, 1, reported)
		_, ok := p.Enter(ctx, k, p.NextFetch())
		require.False(t, ok, "acknowledged, but its retry time has not come")
		clock.Set(retryAt)
		_, ok = p.Enter(ctx, k, fetched)
		require.False(t, ok, "rows fetched before the acknowledgement are stale")
		enter(t, p, k).End(ctx, Stopped())
	})

	t.Run("Again drains the stream again at once and holds nothing back", func(t *testing.T) {
		t.Parallel()
		p, clock := newTestParking(t)
		k := Key{Stream: uuid.New(), Perspective: "c"}
		enter(t, p, k).End(ctx, Again())
		_, _, held := p.Held(k)
		require.False(t, held)
		p.schedule.mu.Lock()
		due, ok := p.schedule.due[k.Stream]
		p.schedule.mu.Unlock()
		require.True(t, ok, "a wake is scheduled")
		require.Equal(t, clock.Now(), due, "now")
		enter(t, p, k).End(ctx, Stopped())
	})
}
