package enginetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/vantage-go/vantage/adapters/memory"
	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/internal/metricstest"
	"github.com/vantage-go/vantage/ports"
)

// TestMetrics checks the engine's metrics on the memory backend against a
// known workload (see metricstest.Run).
func TestMetrics(t *testing.T) {
	t.Parallel()

	metricstest.Run(t, func(t *testing.T) ports.Backend {
		store := memory.New(memory.Options{})
		t.Cleanup(func() { _ = store.Close() })
		return store.Backend()
	}, metricstest.Features{Notifications: true})
}

// meterProvider returns an SDK MeterProvider read by the returned reader,
// shut down at cleanup.
func meterProvider(t *testing.T) (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, provider.Shutdown(context.Background())) })
	return provider, reader
}

var totalAttr = attribute.String("vantage.perspective", "total")

// A rewind and a rebuild are counted by kind, with the events they
// replayed; the late event the rewind applied counts as applied.
func TestMetricsRewindAndRebuild(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	reg := testRegistry(t)
	provider, reader := meterProvider(t)
	opts := rewindOptions(t)
	opts.Telemetry.MeterProvider = provider
	processed := reportProcessed(&opts, 100)
	rewinds := make(chan core.RewindInfo, 10)
	opts.Hooks.OnRewind = func(i core.RewindInfo) { rewinds <- i }
	w := startWorker(t, b, reg, opts)
	stream := uuid.New()
	appendAt(t, reg, b, stream, 1, 3)
	waitForVersion(t, processed, 3)
	appendAt(t, reg, b, stream, 2)
	info := waitFor(t, rewinds, "the rewind")
	require.Equal(t, 1, info.New)
	n, err := w.Rebuild(t.Context(), "total", stream)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 3, waitFor(t, rewinds, "the rebuild").Replayed)

	m := metricstest.Collect(t, reader)
	rewind, rebuild := attribute.String("vantage.rewind.kind", "rewind"), attribute.String("vantage.rewind.kind", "rebuild")
	require.Equal(t, int64(1), m.Sum("vantage.rewinds", totalAttr, rewind))
	require.Equal(t, int64(1), m.Sum("vantage.rewinds", totalAttr, rebuild))
	require.Equal(t, int64(info.Replayed), m.Sum("vantage.rewind.events", totalAttr, rewind))
	require.Equal(t, int64(3), m.Sum("vantage.rewind.events", totalAttr, rebuild))
	require.Equal(t, uint64(1), m.HistCount("vantage.rewind.duration", totalAttr, rewind))
	require.Equal(t, uint64(1), m.HistCount("vantage.rewind.duration", totalAttr, rebuild))
	require.Equal(t, int64(3), m.Sum("vantage.perspective.events", totalAttr, attribute.String("vantage.outcome", "applied")),
		"two events drained, the late one rewound; the rebuild applies nothing new")
}

// An apply that ignores its cancelled context is counted once abandoned,
// and reported stuck while it runs on.
func TestMetricsAbandonedApply(t *testing.T) {
	t.Parallel()

	b := memory.New(memory.Options{}).Backend()
	release := make(chan struct{})
	returned := make(chan struct{})
	reg := registryWith(t, func(_ context.Context, m total, e added) (total, error) {
		if e.N == 1 {
			defer close(returned)
			<-release // ignores its context
		}
		return m, nil
	})
	provider, reader := meterProvider(t)
	opts := quietOptions(t)
	opts.Telemetry.MeterProvider = provider
	opts.Drain.ApplyTimeout = 20 * time.Millisecond
	opts.Drain.ApplyAbandonGrace = 20 * time.Millisecond
	opts.Retries.Event = core.Backoff{Initial: time.Hour, Max: time.Hour}
	abandoned := make(chan core.AbandonedApply, 1)
	opts.Hooks.OnApplyAbandoned = func(a core.AbandonedApply) { abandoned <- a }
	startWorker(t, b, reg, opts)
	appendAdded(t, reg, b, uuid.New(), 1)
	waitFor(t, abandoned, "the apply to be abandoned")

	m := metricstest.Collect(t, reader)
	require.Equal(t, int64(1), m.Sum("vantage.apply.abandoned", totalAttr))
	require.Equal(t, int64(1), m.GaugeInt(t, "vantage.apply.stuck"), "the abandoned apply still runs")
	close(release)
	waitFor(t, returned, "the abandoned apply to return")
}

// Flush calls that fail are retried in place and measured with their
// outcome; a model save that fails is a backend error of its perspective.
func TestMetricsFlushRetriesAndBackendErrors(t *testing.T) {
	t.Parallel()

	mem := memory.New(memory.Options{}).Backend()
	b := mem
	cursors := &flakyCursors{CursorStore: mem.Cursors}
	cursors.failuresLeft.Store(2)
	b.Cursors = cursors
	saves := &failingSaves{ModelStore: mem.Models, saves: make(chan error, 10)}
	saves.left.Store(1)
	b.Models = saves
	b.ModelBatch = nil // every save goes through failingSaves
	reg := testRegistry(t)
	provider, reader := meterProvider(t)
	opts := quietOptions(t)
	opts.Telemetry.MeterProvider = provider
	opts.Retries.Flush.Backoff = core.Backoff{Initial: time.Millisecond, Max: time.Millisecond}
	flushed := make(chan core.CompletionsFlushed, 10)
	opts.Hooks.OnCompletionsFlushed = func(c core.CompletionsFlushed) { flushed <- c }
	startWorker(t, b, reg, opts)
	appendAdded(t, reg, b, uuid.New(), 1, 2)
	waitFor(t, flushed, "the completion to be flushed after its retries")

	m := metricstest.Collect(t, reader)
	completions := attribute.String("vantage.flusher", "completions")
	require.Equal(t, int64(2), m.Sum("vantage.completion.flush.retries", completions))
	require.Equal(t, uint64(2), m.HistCount("vantage.completion.flush.duration", completions, attribute.String("vantage.outcome", "error")))
	require.Equal(t, uint64(1), m.HistCount("vantage.completion.flush.duration", completions, attribute.String("vantage.outcome", "ok")))
	require.Equal(t, uint64(3), m.HistCount("vantage.completion.flush.size", completions), "every call, retries included")
	require.Zero(t, m.SumAll("vantage.completion.flush.dropped"))
	require.Equal(t, int64(1), m.Sum("vantage.perspective.backend_errors", totalAttr))
}
