package rebuild

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core/internal/base"
	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

var errCannotReplay = errors.New("cannot replay")

// rebuilder rebuilds the streams of "p", failing the stream fail with err.
type rebuilder struct {
	streams []uuid.UUID
	fail    uuid.UUID
	err     error

	mu      sync.Mutex
	rebuilt []uuid.UUID
}

func (r *rebuilder) Open(perspective string) (Streams, error) {
	if perspective != "p" {
		return nil, errCannotReplay
	}
	return r, nil
}

func (r *rebuilder) Failed(err error) bool { return errors.Is(err, errCannotReplay) }

func (r *rebuilder) Count(context.Context, []uuid.UUID) (int64, error) {
	return int64(len(r.streams)), nil
}

func (r *rebuilder) Each(_ context.Context, _ []uuid.UUID, after uuid.UUID, fn func(uuid.UUID) error) error {
	for _, s := range r.streams {
		if after != uuid.Nil && bytes.Compare(s[:], after[:]) <= 0 {
			continue
		}
		if err := fn(s); err != nil {
			return err
		}
	}
	return nil
}

func (r *rebuilder) Rebuild(_ context.Context, stream uuid.UUID) (int, error) {
	if stream == r.fail {
		return 0, r.err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rebuilt = append(r.rebuilt, stream)
	return 2, nil
}

// queue returns a Queue over a memory backend holding one request of "p",
// and the request.
func queue(t *testing.T, rb *rebuilder) (*Queue, *memory.Store, ports.RebuildRequest) {
	t.Helper()
	clock := clocktest.NewFake()
	store := memory.New(memory.Options{Clock: clock})
	t.Cleanup(func() { _ = store.Close() })
	req, err := store.RebuildRequest(t.Context(), &ports.RebuildRequestParams{Perspective: "p", Now: clock.Now()})
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	q := New(base.NewEnv(clock, true, log), Config{
		Rebuilds: store, InstanceID: uuid.New(), PollInterval: time.Hour, LockTimeout: time.Minute, KeepAlive: 10 * time.Second,
		Perspectives: func() []string { return []string{"p"} }, Rebuilder: rb,
	})
	return q, store, req
}

func sortedStreams(n int) []uuid.UUID {
	out := make([]uuid.UUID, n)
	for i := range out {
		out[i] = uuid.New()
	}
	slices.SortFunc(out, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return out
}

// A claimed request is carried out stream by stream and finished done
// with its figures.
func TestRequestCarriedOutAndFinished(t *testing.T) {
	t.Parallel()

	rb := &rebuilder{streams: sortedStreams(3)}
	q, store, req := queue(t, rb)
	q.claimAll(t.Context(), []string{"p"})

	require.Equal(t, rb.streams, rb.rebuilt)
	got, err := store.RebuildGet(t.Context(), &ports.RebuildGetParams{ID: req.ID})
	require.NoError(t, err)
	require.Equal(t, ports.RebuildDone, got.Status)
	require.Equal(t, ports.RebuildFigures{StreamsTotal: 3, StreamsDone: 3, EventsReplayed: 6, ResumeAfter: rb.streams[2]}, got.RebuildFigures)
}

// An event its perspective cannot replay fails the request for good; any
// other error releases it with the streams done so far, and the next
// claim resumes after them.
func TestRequestFailedOrReleased(t *testing.T) {
	t.Parallel()

	streams := sortedStreams(3)
	failed := &rebuilder{streams: streams, fail: streams[1], err: errCannotReplay}
	q, store, req := queue(t, failed)
	q.claimAll(t.Context(), []string{"p"})
	got, err := store.RebuildGet(t.Context(), &ports.RebuildGetParams{ID: req.ID})
	require.NoError(t, err)
	require.Equal(t, ports.RebuildFailed, got.Status)
	require.Contains(t, got.Error, errCannotReplay.Error())

	released := &rebuilder{streams: streams, fail: streams[1], err: errors.New("connection refused")}
	q, store, req = queue(t, released)
	q.claimAll(t.Context(), []string{"p"})
	got, err = store.RebuildGet(t.Context(), &ports.RebuildGetParams{ID: req.ID})
	require.NoError(t, err)
	require.Equal(t, ports.RebuildPending, got.Status, "released")
	require.Equal(t, streams[0], got.ResumeAfter)
	require.Equal(t, int64(1), got.StreamsDone)

	released.fail = uuid.Nil
	q.claimAll(t.Context(), []string{"p"})
	require.Equal(t, []uuid.UUID{streams[0], streams[1], streams[2]}, released.rebuilt, "resumed after the streams done")
	got, err = store.RebuildGet(t.Context(), &ports.RebuildGetParams{ID: req.ID})
	require.NoError(t, err)
	require.Equal(t, ports.RebuildDone, got.Status)
}
