package core

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/internal/clocktest"
	"github.com/vantage-go/vantage/ports"
)

// Benchmarks of the engine's hot in-process pieces: the
// sliding window that batches drain signals, and the typed decode and apply
// behind the type-erased perspective. Run them with
// `go test -run '^$' -bench . -benchmem ./core/...` (make bench-go).

func benchIDs(n int) []uuid.UUID {
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.New()
	}
	return ids
}

// newWindowWorker returns an unstarted worker on a fake clock whose sliding
// window closes at maxSize ids.
func newWindowWorker(tb testing.TB, maxSize int) (*Worker, *clocktest.Fake) {
	tb.Helper()
	clock := clocktest.NewFake()
	w, err := New(newIdleBackend(), NewRegistry(), &Options{
		Clock:        clock,
		DrainBatcher: DrainBatcherOptions{MaxSize: maxSize},
	})
	require.NoError(tb, err)
	return w, clock
}

// BenchmarkSlidingWindowBySize measures collecting a full batch: the first
// id starts the window, the rest is already queued and the window closes on
// MaxSize without waiting (the catch-up case).
func BenchmarkSlidingWindowBySize(b *testing.B) {
	for _, n := range []int{30, 1000} {
		b.Run(fmt.Sprintf("ids=%d", n), func(b *testing.B) {
			w, _ := newWindowWorker(b, n)
			ids := benchIDs(n)
			b.ReportAllocs()
			for b.Loop() {
				w.consumers.queue.Push(ids...)
				batch := w.consumers.collectWindow(b.Context(), w.consumers.queue.Take(1), time.Hour, nil)
				if len(batch) != n {
					b.Fatalf("window closed with %d ids, want %d", len(batch), n)
				}
				w.consumers.queue.Done(batch)
			}
		})
	}
}

// BenchmarkSlidingWindowByTimer measures a window that closes on its
// timer: one id, then the fake clock passes the sliding window. It includes
// the goroutine hand-off the real consumer loop does not pay.
func BenchmarkSlidingWindowByTimer(b *testing.B) {
	w, clock := newWindowWorker(b, 1000)
	id := benchIDs(1)
	out := make(chan []uuid.UUID)
	b.ReportAllocs()
	for b.Loop() {
		w.consumers.queue.Push(id...)
		first := w.consumers.queue.Take(1)
		go func() { out <- w.consumers.collectWindow(b.Context(), first, time.Hour, nil) }()
		<-clock.WaitTimers(1)
		clock.Advance(SlidingWindowDefault)
		w.consumers.queue.Done(<-out)
	}
}

// benchModel is the model of the apply benchmarks.
type benchModel struct {
	Count int64 `json:"count"`
	Last  int64 `json:"last"`
	Sum   int64 `json:"sum"`
}

type benchEvent struct {
	N   int64  `json:"n"`
	Pad string `json:"pad"`
}

// newBenchPerspective registers benchEvent and a perspective folding it.
func newBenchPerspective(b *testing.B) (*Registry, perspective) {
	b.Helper()
	reg := NewRegistry()
	require.NoError(b, RegisterEvent[benchEvent](reg, "bench.event"))
	p := NewPerspective[benchModel]("bench")
	require.NoError(b, Handle(p, func(ctx context.Context, m benchModel, e benchEvent) (benchModel, error) {
		ev, _ := EventFromContext(ctx)
		m.Count++
		m.Last = ev.Version
		m.Sum += e.N
		return m, nil
	}))
	require.NoError(b, reg.AddPerspective(p))
	erased, ok := reg.perspective("bench")
	require.True(b, ok)
	return reg, erased
}

func benchEventOf(b *testing.B, version int64) ports.Event {
	b.Helper()
	data, err := json.Marshal(benchEvent{N: version, Pad: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"})
	require.NoError(b, err)
	return ports.Event{ID: uuid.New(), StreamID: uuid.New(), Type: "bench.event", Version: version, Data: data, CreatedAt: time.Now()}
}

// BenchmarkDecode measures Registry.Decode: the JSON payload of a ~100 byte
// event into its registered Go type.
func BenchmarkDecode(b *testing.B) {
	reg, _ := newBenchPerspective(b)
	ev := benchEventOf(b, 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Decode(ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyTyped measures what the engine does per event and
// perspective in memory: Decode, the event context, and the typed apply
// function behind the type-erased perspective (map lookup, assertion,
// recover guard).
func BenchmarkApplyTyped(b *testing.B) {
	reg, p := newBenchPerspective(b)
	ev := benchEventOf(b, 1)
	model, err := p.decodeModel(nil)
	require.NoError(b, err)
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		decoded, err := reg.Decode(ev)
		if err != nil {
			b.Fatal(err)
		}
		if model, err = p.apply(withEvent(ctx, &ev), model, ev.Type, decoded); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkModelRoundTrip measures a model's decode at load and encode at
// save through the type-erased perspective (once per PerspectiveBatchSize
// events and per drain of a pair).
func BenchmarkModelRoundTrip(b *testing.B) {
	_, p := newBenchPerspective(b)
	data, err := p.encodeModel(benchModel{Count: 123, Last: 123, Sum: 7626})
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		m, err := p.decodeModel(data)
		if err != nil {
			b.Fatal(err)
		}
		if data, err = p.encodeModel(m); err != nil {
			b.Fatal(err)
		}
	}
}
