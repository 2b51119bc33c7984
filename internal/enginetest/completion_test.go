package enginetest_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/core/completion"
	"github.com/vantage-go/vantage/ports"
)

// countingStrategy wraps a built-in strategy and counts what it is given;
// reported is closed at the first completion.
type countingStrategy struct {
	completion.Strategy
	completions atomic.Int64
	acked       atomic.Int64
	reported    chan struct{}
	once        sync.Once
}

func (s *countingStrategy) ReportCompletion(ctx context.Context, c ports.Completion) error {
	s.completions.Add(1)
	s.once.Do(func() { close(s.reported) })
	return s.Strategy.ReportCompletion(ctx, c)
}

func (s *countingStrategy) MarkAcknowledged(ids []uuid.UUID) {
	s.acked.Add(int64(len(ids)))
	s.Strategy.MarkAcknowledged(ids)
}

// A strategy of the user's own carries the outcomes: here the default one,
// wrapped to observe it, and the instant one, which delivers through the
// Reporter the engine hands the factory.
func TestUserCompletionStrategy(t *testing.T) {
	t.Parallel()

	for name, inner := range map[string]completion.Factory{
		"Batched": completion.BatchedFactory,
		"Instant": completion.InstantFactory,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := memory.New(memory.Options{}).Backend()
			reg := testRegistry(t)
			var strategy *countingStrategy
			settled := make(chan struct{})
			var once sync.Once
			opts := quietOptions(t)
			opts.Hooks.OnCompletionsFlushed = func(core.CompletionsFlushed) {
				if strategy.acked.Load() >= strategy.completions.Load() {
					once.Do(func() { close(settled) })
				}
			}
			opts.Completion = func(c completion.Config) (completion.Strategy, error) {
				s, err := inner(c)
				strategy = &countingStrategy{Strategy: s, reported: make(chan struct{})}
				return strategy, err
			}
			w := startWorker(t, b, reg, opts)

			stream := uuid.New()
			res, err := reg.Append(t.Context(), b.Events, stream, 0, added{N: 1}, added{N: 2})
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			require.NoError(t, w.WaitForStream(ctx, stream, res.Events[len(res.Events)-1].Version))
			require.Equal(t, 3, loadTotal(t, b, stream).Sum)
			// The completion is handed over after the save WaitForStream saw.
			waitFor(t, strategy.reported, "the engine to report through the user's strategy")
			if name == "Batched" {
				// Every completion handed over is settled by its
				// acknowledgement, by identity.
				waitFor(t, settled, "the completions to be acknowledged")
			}
		})
	}
}

// A factory's error, or a factory that builds nothing, is refused by New
// with the option named.
func TestUserCompletionStrategyErrors(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	_, err := core.New(b, testRegistry(t), &core.Options{Completion: func(completion.Config) (completion.Strategy, error) {
		return nil, errors.New("no strategy today")
	}})
	require.ErrorContains(t, err, "Options.Completion: no strategy today")

	_, err = core.New(b, testRegistry(t), &core.Options{Completion: func(completion.Config) (completion.Strategy, error) {
		return nil, nil
	}})
	require.ErrorContains(t, err, "Options.Completion returned no strategy")
}
