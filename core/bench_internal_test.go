package core

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

// Benchmarks of the engine's hot in-process pieces: the typed decode and
// apply behind the type-erased perspective. (The drain queue's and the
// sliding window's are in their packages.) Run them with
// `go test -run '^$' -bench . -benchmem ./core/...` (make bench-go).

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
func newBenchPerspective(b *testing.B) (*Registry, registered) {
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
