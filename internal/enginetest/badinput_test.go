package enginetest_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

type shippedOut struct{}

type removed struct {
	N int `json:"n"`
}

// A rolling deploy: another version of the service registered "total" for
// more event types than this instance knows. Work for an event type this
// instance cannot decode, or has no apply function for, fails with a clear
// error and is dead-lettered; the events around it are applied.
func TestUnknownTypesAreDeadLettered(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	newer := core.NewRegistry()
	require.NoError(t, core.RegisterEvent[added](newer, "added"))
	require.NoError(t, core.RegisterEvent[removed](newer, "removed"))
	require.NoError(t, core.RegisterEvent[shippedOut](newer, "shipped_out"))
	p := core.NewPerspective[total]("total")
	core.MustHandle(p, func(_ context.Context, m total, e added) (total, error) { m.Sum += e.N; return m, nil })
	core.MustHandle(p, func(_ context.Context, m total, e removed) (total, error) { m.Sum -= e.N; return m, nil })
	core.MustHandle(p, func(_ context.Context, m total, _ shippedOut) (total, error) { return m, nil })
	require.NoError(t, newer.AddPerspective(p))

	// This instance knows "removed" as an event type but its "total" has no
	// apply function for it, and does not know "shipped_out" at all.
	older := testRegistry(t)
	require.NoError(t, core.RegisterEvent[removed](older, "removed"))

	stream := uuid.New()
	_, err := newer.Append(t.Context(), b.Events, stream, 0, added{N: 1}, removed{N: 5}, shippedOut{}, added{N: 2})
	require.NoError(t, err)

	failures := make(chan ports.Failure, 20)
	deadLetters := make(chan ports.DeadLetter, 20)
	done := make(chan struct{})
	opts := quietOptions(t)
	opts.Retries.MaxEventAttempts = 1
	opts.Hooks.OnFailure = func(f ports.Failure) { failures <- f }
	opts.Hooks.OnDeadLettered = func(d ports.DeadLetter) { deadLetters <- d }
	opts.Hooks.OnPerspectiveEventProcessed = func(e core.PerspectiveEventProcessed) {
		if e.LastVersion == 4 {
			close(done)
		}
	}
	startWorker(t, b, older, opts)

	// With one attempt, each failure dead-letters its event at once, with
	// the error, and the pair goes on: no failure is retried.
	d1 := waitFor(t, deadLetters, "the first dead letter")
	require.Contains(t, d1.Error, `event type "removed"`)
	require.Contains(t, d1.Error, "no apply function")
	d2 := waitFor(t, deadLetters, "the second dead letter")
	require.Contains(t, d2.Error, `unknown event type: "shipped_out"`)
	waitFor(t, done, "the events after them to be applied")
	require.Equal(t, 3, loadTotal(t, b, stream).Sum)
	require.Empty(t, failures, "nothing was scheduled for a retry")
	dls, err := b.DeadLetters.DeadLettersList(t.Context(), &ports.DeadLettersListParams{StreamID: stream})
	require.NoError(t, err)
	require.Len(t, dls, 2)
	for _, d := range dls {
		require.Equal(t, ports.ReasonUnknownType, d.Reason)
		require.Equal(t, 1, d.Attempts, "attempts equal the applies that ran")
	}
}

// nullPayloads is an EventFetcher that hands out the payload of the events
// at version nullAt as JSON null, as a row stored before appends refused
// such payloads, or by another writer, would read.
type nullPayloads struct {
	ports.EventFetcher
	nullAt int64
}

func (f nullPayloads) EventsFetchPending(ctx context.Context, p *ports.EventsFetchPendingParams) (*ports.EventsFetchPendingResult, error) {
	res, err := f.EventFetcher.EventsFetchPending(ctx, p)
	if err != nil {
		return res, err
	}
	for i := range res.Events {
		if res.Events[i].Version == f.nullAt {
			res.Events[i].Data = []byte(`null`)
		}
	}
	return res, nil
}

// A stored event whose payload is JSON null does not decode: it is
// dead-lettered as undecodable, never applied as a zero value, and the
// events around it are applied.
func TestNullPayloadIsUndecodable(t *testing.T) {
	t.Parallel()

	mem := memory.New(memory.Options{}).Backend()
	b := mem
	b.Fetcher = nullPayloads{EventFetcher: mem.Fetcher, nullAt: 2}
	reg := testRegistry(t)
	stream := uuid.New()
	appendAdded(t, reg, mem, stream, 1, 2, 4)
	opts := quietOptions(t)
	opts.Retries.MaxEventAttempts = 1
	deadLetters := make(chan ports.DeadLetter, 4)
	opts.Hooks.OnDeadLettered = func(d ports.DeadLetter) { deadLetters <- d }
	processed := reportProcessed(&opts, 10)
	startWorker(t, b, reg, opts)

	d := waitFor(t, deadLetters, "the null payload's dead letter")
	require.Equal(t, int64(2), d.EventVersion)
	require.Equal(t, ports.ReasonUndecodable, d.Reason)
	require.Contains(t, d.Error, "JSON null")
	for e := waitFor(t, processed, "the events around it"); e.LastVersion < 3; e = waitFor(t, processed, "the events around it") {
	}
	tot := loadTotal(t, b, stream)
	require.Equal(t, []int64{1, 3}, tot.Seen, "never applied as a zero value")
	require.Equal(t, 5, tot.Sum)
}
