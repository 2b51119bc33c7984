package enginetest_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/ports"
)

// warnings keeps the messages of the records at Warn and above.
type warnings struct {
	mu   *sync.Mutex
	msgs *[]string
}

func newWarnings() warnings { return warnings{mu: &sync.Mutex{}, msgs: &[]string{}} }

func (h warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h warnings) Handle(_ context.Context, r slog.Record) error {
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		msg += " " + a.Key + "=" + a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.msgs = append(*h.msgs, msg)
	return nil
}
func (h warnings) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h warnings) WithGroup(string) slog.Handler      { return h }

func (h warnings) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), *h.msgs...)
}

// An instance that lost its stream while an apply of its was running
// cannot dead-letter that apply's event, whose attempts it used up: the
// holder that took the stream may have applied and saved it already. Its
// move is refused; it stops the pair's run without applying the later
// events, charging anything or counting a backend failure, and the rows
// stay with the new holder.
func TestLostStreamIsNotDeadLettered(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	applying := make(chan struct{})
	release := make(chan struct{})
	var poisoned sync.Once
	var laterApplied atomic.Int64
	reg := registryWith(t, func(_ context.Context, m total, e added) (total, error) {
		if e.N == 1 {
			poisoned.Do(func() { close(applying) })
			<-release
			return m, errors.New("poison")
		}
		laterApplied.Add(1)
		m.Sum += e.N
		return m, nil
	})
	logged := newWarnings()
	opts := quietOptions(t)
	opts.Logger = slog.New(logged)
	opts.Retries.MaxEventAttempts = 1
	failures := make(chan ports.Failure, 10)
	opts.Hooks.OnFailure = func(f ports.Failure) { failures <- f }
	w := startWorker(t, b, reg, opts)
	stream := uuid.New()
	appendAdded(t, reg, b, stream, 1, 2)
	waitFor(t, applying, "the apply of the first event")

	// Another instance takes the stream, two hours on: by then the
	// worker's lease has expired and it is stale to the backend.
	other, later := uuid.New(), time.Now().Add(2*time.Hour)
	_, err := b.Claimer.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{InstanceID: other, StaleThreshold: time.Hour, Now: later})
	require.NoError(t, err)
	fetch := func() []ports.WorkItem {
		t.Helper()
		res, err := b.Fetcher.EventsFetchPending(t.Context(), &ports.EventsFetchPendingParams{
			InstanceID: other, StreamIDs: []uuid.UUID{stream}, LeaseDuration: time.Hour, StaleThreshold: time.Hour, Now: later,
		})
		require.NoError(t, err)
		return res.Work
	}
	taken := fetch()
	require.Len(t, taken, 2, "the other instance took the stream")
	close(release)
	// Stop lets the batch in flight finish.
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	require.NoError(t, w.Stop(ctx))

	dls, err := b.DeadLetters.DeadLettersList(t.Context(), &ports.DeadLettersListParams{StreamID: stream})
	require.NoError(t, err)
	require.Empty(t, dls, "the event was not dead-lettered by the instance that lost its stream")
	require.Zero(t, laterApplied.Load(), "the worker stopped the pair's run: the later event is the new holder's")
	require.Empty(t, failures, "nothing was charged")
	for _, msg := range logged.all() {
		require.NotContains(t, msg, "dead letters", "a lost stream is not a backend failure")
	}
	require.Equal(t, workIDs(taken), workIDs(fetch()), "the rows are still the new holder's")
}

// workIDs returns the work ids of items.
func workIDs(items []ports.WorkItem) []uuid.UUID {
	out := make([]uuid.UUID, len(items))
	for i, w := range items {
		out[i] = w.WorkID
	}
	return out
}

// An instance that lost its stream while an apply of its was running
// cannot save that apply's model: the holder that took the stream may have
// dead-lettered the event meanwhile (its attempts used up by the
// takeovers), which moves neither the model's version nor its epoch. The
// save is refused; the instance stops the pair's run, charging nothing and
// reporting no failure, and the model holds no event that is a dead
// letter.
func TestLostStreamSavesNothing(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	applying := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	reg := registryWith(t, func(_ context.Context, m total, e added) (total, error) {
		if e.N == 1 {
			once.Do(func() { close(applying) })
			<-release
		}
		m.Sum += e.N
		m.Events++
		return m, nil
	})
	logged := newWarnings()
	opts := quietOptions(t)
	opts.Logger = slog.New(logged)
	failures := make(chan ports.Failure, 10)
	opts.Hooks.OnFailure = func(f ports.Failure) { failures <- f }
	w := startWorker(t, b, reg, opts)
	stream := uuid.New()
	appendAdded(t, reg, b, stream, 1, 2)
	waitFor(t, applying, "the apply of the first event")

	// Another instance takes the stream, two hours on: by then the
	// worker's lease has expired and it is stale to the backend. It gives
	// up on the first event.
	other, later := uuid.New(), time.Now().Add(2*time.Hour)
	_, err := b.Claimer.InstanceHeartbeat(t.Context(), &ports.InstanceHeartbeatParams{InstanceID: other, StaleThreshold: time.Hour, Now: later})
	require.NoError(t, err)
	fetch := func() []ports.WorkItem {
		t.Helper()
		res, err := b.Fetcher.EventsFetchPending(t.Context(), &ports.EventsFetchPendingParams{
			InstanceID: other, StreamIDs: []uuid.UUID{stream}, LeaseDuration: time.Hour, StaleThreshold: time.Hour, Now: later,
		})
		require.NoError(t, err)
		return res.Work
	}
	taken := fetch()
	require.Len(t, taken, 2, "the other instance took the stream")
	res, err := b.DeadLetters.DeadLetterMove(t.Context(), &ports.DeadLetterMoveParams{
		WorkID: taken[0].WorkID, InstanceID: other, Reason: ports.ReasonMaxAttemptsExceeded, Now: later,
	})
	require.NoError(t, err)
	require.True(t, res.Moved, "the new holder dead-lettered the first event")
	close(release)
	// Stop lets the batch in flight finish.
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	require.NoError(t, w.Stop(ctx))

	_, err = b.Models.ModelLoad(t.Context(), &ports.ModelLoadParams{StreamID: stream, Perspective: "total"})
	require.ErrorIs(t, err, ports.ErrNotFound, "the instance that lost its stream saved nothing")
	require.Empty(t, failures, "nothing was charged")
	for _, msg := range logged.all() {
		require.NotContains(t, msg, "saving model", "a lost stream is not a backend failure")
		require.NotContains(t, msg, "moved under this run", "a lost stream is not a conflict")
	}
	require.Equal(t, workIDs(taken[1:]), workIDs(fetch()), "the later row is still the new holder's")
}
