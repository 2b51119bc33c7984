package core

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/ports"
)

// drainBench is a worker on the memory backend whose batches the drain
// benchmarks drive directly, with its flushers running.
type drainBench struct {
	w       *Worker
	backend ports.Backend
}

// newDrainBench registers n perspectives applying every benchEvent with
// latency (a handler calling out) and builds the worker with opts.
func newDrainBench(b *testing.B, n int, latency time.Duration, opts Options) *drainBench {
	b.Helper()
	backend := memory.New(memory.Options{}).Backend()
	reg := NewRegistry()
	require.NoError(b, RegisterEvent[benchEvent](reg, "bench.event"))
	for i := range n {
		p := NewPerspective[benchModel](fmt.Sprintf("p%d", i))
		MustHandle(p, func(_ context.Context, m benchModel, e benchEvent) (benchModel, error) {
			if latency > 0 {
				time.Sleep(latency) //nolint:forbidigo // the latency of a handler's call, not a synchronization
			}
			m.Count++
			m.Sum += e.N
			return m, nil
		})
		require.NoError(b, reg.AddPerspective(p))
	}
	opts.Logger = slog.New(slog.DiscardHandler)
	w, err := New(backend, reg, &opts)
	require.NoError(b, err)
	require.NoError(b, w.completer.Start(b.Context()))
	b.Cleanup(func() { require.NoError(b, w.completer.Stop(context.Background())) })
	require.NoError(b, reg.RegisterSubscriptions(b.Context(), backend.Events))
	_, err = backend.Claimer.InstanceHeartbeat(b.Context(), &ports.InstanceHeartbeatParams{InstanceID: w.InstanceID(), StaleThreshold: w.opts.Claims.StaleInstanceThreshold})
	require.NoError(b, err)
	return &drainBench{w: w, backend: backend}
}

// run drains, b.N times, a batch of streams new streams of events events
// each (appended untimed) and reports the time per apply.
func (db *drainBench) run(b *testing.B, streams, events, perspectives int) {
	b.Helper()
	evs := make([]any, events)
	for i := range evs {
		evs[i] = benchEvent{N: int64(i), Pad: "0123456789abcdef0123456789abcdef"}
	}
	ids := make([]uuid.UUID, streams)
	b.ReportAllocs()
	for range b.N {
		b.StopTimer()
		for i := range ids {
			ids[i] = uuid.New()
			_, err := db.w.reg.Append(b.Context(), db.backend.Events, ids[i], 0, evs...)
			require.NoError(b, err)
		}
		b.StartTimer()
		db.w.drain.ProcessBatch(b.Context(), ids)
		require.NoError(b, db.w.completer.FlushNow(b.Context()))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*streams*events*perspectives), "ns/apply")
}

// BenchmarkDrainBatch measures the engine's own cost of one batch on the
// memory backend, from the fetch to the acknowledged completions: 100
// streams of 20 events, each event applied by 1, 2 or 5 perspectives.
func BenchmarkDrainBatch(b *testing.B) {
	for _, n := range []int{1, 2, 5} {
		b.Run(fmt.Sprintf("perspectives=%d", n), func(b *testing.B) {
			newDrainBench(b, n, 0, Options{}).run(b, 100, 20, n)
		})
	}
}

// BenchmarkDrainBatchSlowApplies measures a batch of 10 streams of 10
// events, each applied by 5 perspectives whose applies take 200µs (a
// handler that calls out), at several MaxPerspectivesPerStream: the
// perspectives of a stream wait for each other only up to that bound.
func BenchmarkDrainBatchSlowApplies(b *testing.B) {
	for _, mcp := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("maxConcurrentPerspectives=%d", mcp), func(b *testing.B) {
			newDrainBench(b, 5, 200*time.Microsecond, Options{Drain: DrainOptions{MaxPerspectivesPerStream: mcp}}).run(b, 10, 10, 5)
		})
	}
}
