// Package enginebench holds benchmark bodies shared by the backends'
// benchmarks, so each backend measures the same scenario.
package enginebench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/proccpu"
	"github.com/vantage-go/vantage/ports"
)

type tick struct {
	N int `json:"n"`
}

type sum struct {
	Total  int `json:"total"`
	Events int `json:"events"`
}

// Rewind appends n events (leaving a gap near the end), lets a
// worker apply them, then per iteration appends one late event into a gap
// and waits for its rewind.
func Rewind(b *testing.B, backend ports.Backend, n int64, snapshotEvery int) {
	reg := core.NewRegistry()
	require.NoError(b, core.RegisterEvent[tick](reg, "tick"))
	p := core.NewPerspective[sum]("sum")
	core.MustHandle(p, func(_ context.Context, m sum, e tick) (sum, error) {
		m.Total += e.N
		m.Events++
		return m, nil
	})
	require.NoError(b, reg.AddPerspective(p))
	require.NoError(b, reg.RegisterSubscriptions(b.Context(), backend.Events))

	stream := uuid.New()
	gaps := int64(b.N) + 1
	const chunk = 1000
	var evs []ports.NewEvent
	for v := int64(1); v <= n; v++ {
		if v > n-gaps-10 && v <= n-10 {
			continue // room for one late event per iteration
		}
		ne, err := reg.Encode(tick{N: 1})
		require.NoError(b, err)
		ne.Version = v
		evs = append(evs, ne)
		if len(evs) == chunk {
			_, err := backend.Events.EventsAppend(b.Context(), &ports.EventsAppendParams{StreamID: stream, Events: evs})
			require.NoError(b, err)
			evs = nil
		}
	}
	if len(evs) > 0 {
		_, err := backend.Events.EventsAppend(b.Context(), &ports.EventsAppendParams{StreamID: stream, Events: evs})
		require.NoError(b, err)
	}
	processed := make(chan core.PerspectiveEventProcessed, 1000)
	rewinds := make(chan core.RewindInfo, 10)
	opts := core.Options{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Drain:  core.DrainOptions{PollingInterval: 5 * time.Millisecond, Batcher: core.DrainBatcherOptions{SlidingWindow: time.Millisecond, MaxWait: 2 * time.Millisecond}, PerspectiveBatchSize: 1000}, Claims: core.ClaimOptions{Interval: 5 * time.Millisecond, NotifyHealthyInterval: 5 * time.Millisecond},
		Rewind: core.RewindOptions{Debounce: time.Millisecond, MaxDebounce: time.Millisecond, SnapshotEvery: snapshotEvery},
		Hooks: core.Hooks{
			OnPerspectiveEventProcessed: func(e core.PerspectiveEventProcessed) { processed <- e },
			OnRewind:                    func(i core.RewindInfo) { rewinds <- i },
		},
	}
	w, err := core.New(backend, reg, &opts)
	require.NoError(b, err)
	require.NoError(b, w.Start(b.Context()))
	defer func() { require.NoError(b, w.Stop(context.Background())) }()
	for e := range processed {
		if e.LastVersion == n {
			break
		}
	}
	b.ResetTimer()
	replayed := 0
	for i := range b.N {
		late, err := reg.Encode(tick{N: 1})
		require.NoError(b, err)
		late.Version = n - 10 - int64(i)
		_, err = backend.Events.EventsAppend(b.Context(), &ports.EventsAppendParams{StreamID: stream, Events: []ports.NewEvent{late}})
		require.NoError(b, err)
		info := <-rewinds
		replayed += info.Replayed
	}
	b.StopTimer()
	b.ReportMetric(float64(replayed)/float64(b.N), "replayed/op")
}

// CatchUp appends perStream events to each of streams new streams of
// backend, with no worker running, then starts a worker with opts over
// perspectives perspectives (each summing the events) and returns how long
// it took from Start until every perspective had applied every event. opts
// is the caller's copy: its Logger defaults to a discarding one and its
// OnPerspectiveEventProcessed hook is taken.
func CatchUp(b *testing.B, backend ports.Backend, perspectives, streams, perStream int, opts core.Options) time.Duration {
	took, _ := CatchUpCPU(b, backend, perspectives, streams, perStream, opts)
	return took
}

// CatchUpCPU is CatchUp, and also returns the CPU time the process used
// during the catch-up, every goroutine and the garbage collector included
// (0 where the platform does not tell). Unlike the time taken, it hardly
// depends on how the scheduler and other processes share the cores.
func CatchUpCPU(b *testing.B, backend ports.Backend, perspectives, streams, perStream int, opts core.Options) (took, cpu time.Duration) {
	b.Helper()
	reg := core.NewRegistry()
	require.NoError(b, core.RegisterEvent[tick](reg, "tick"))
	for i := range perspectives {
		p := core.NewPerspective[sum](fmt.Sprintf("sum%d", i))
		core.MustHandle(p, func(_ context.Context, m sum, e tick) (sum, error) {
			m.Total += e.N
			m.Events++
			return m, nil
		})
		require.NoError(b, reg.AddPerspective(p))
	}
	events := make([]any, perStream)
	for i := range events {
		events[i] = tick{N: 1}
	}
	for range streams {
		_, err := reg.Append(b.Context(), backend.Events, uuid.New(), ports.ExpectNoStream, events...)
		require.NoError(b, err)
	}

	want := int64(perspectives * streams * perStream)
	var applied atomic.Int64
	done := make(chan struct{})
	caughtUp := sync.OnceFunc(func() { close(done) })
	opts.Hooks.OnPerspectiveEventProcessed = func(e core.PerspectiveEventProcessed) {
		if applied.Add(int64(e.EventCount)) >= want {
			caughtUp()
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w, err := core.New(backend, reg, &opts)
	require.NoError(b, err)
	// The appends' garbage is collected now rather than during the
	// catch-up, which would pay for it otherwise.
	runtime.GC()
	start, startCPU := time.Now(), proccpu.Used()
	require.NoError(b, w.Start(b.Context()))
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("catch-up applied %d of %d events in 5 minutes", applied.Load(), want)
	}
	took, cpu = time.Since(start), proccpu.Used()-startCPU
	require.NoError(b, w.Stop(context.Background()))
	return took, cpu
}
