package ports_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/ports"
)

func TestWakeMerge(t *testing.T) {
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	many := make([]uuid.UUID, ports.WakeStreamsMax)
	for i := range many {
		many[i] = uuid.New()
	}
	for name, tc := range map[string]struct {
		w, o, want ports.Wake
	}{
		"StreamsUnited":          {ports.Wake{Streams: []uuid.UUID{a, b}}, ports.Wake{Streams: []uuid.UUID{b, c}}, ports.Wake{Streams: []uuid.UUID{a, b, c}}},
		"UnknownStaysUnknown":    {ports.Wake{Streams: []uuid.UUID{a}}, ports.Wake{}, ports.Wake{}},
		"UnknownAbsorbsStreams":  {ports.Wake{}, ports.Wake{Streams: []uuid.UUID{a}}, ports.Wake{}},
		"ReconnectedKept":        {ports.Wake{Reconnected: true, Streams: []uuid.UUID{a}}, ports.Wake{Streams: []uuid.UUID{b}}, ports.Wake{Reconnected: true, Streams: []uuid.UUID{a, b}}},
		"ReconnectedFromEither":  {ports.Wake{}, ports.Wake{Reconnected: true}, ports.Wake{Reconnected: true}},
		"PastTheBoundIsUnknown":  {ports.Wake{Streams: many}, ports.Wake{Streams: []uuid.UUID{a}}, ports.Wake{}},
		"AtTheBoundKeepsStreams": {ports.Wake{Streams: many[:ports.WakeStreamsMax-1]}, ports.Wake{Streams: []uuid.UUID{many[0]}}, ports.Wake{Streams: many[:ports.WakeStreamsMax-1]}},
	} {
		t.Run(name, func(t *testing.T) {
			w0 := append([]uuid.UUID(nil), tc.w.Streams...)
			require.Equal(t, tc.want, tc.w.Merge(tc.o))
			require.Equal(t, w0, append([]uuid.UUID(nil), tc.w.Streams...), "w is not modified")
		})
	}
}

func TestOfferWake(t *testing.T) {
	a, b := uuid.New(), uuid.New()
	ch := make(chan ports.Wake, 1)
	ports.OfferWake(ch, ports.Wake{Streams: []uuid.UUID{a}})
	ports.OfferWake(ch, ports.Wake{Streams: []uuid.UUID{b}})
	require.Equal(t, ports.Wake{Streams: []uuid.UUID{a, b}}, <-ch, "the second wake merged into the buffered one")
	require.Empty(t, ch)

	ports.OfferWake(ch, ports.Wake{Reconnected: true})
	require.Equal(t, ports.Wake{Reconnected: true}, <-ch, "an empty channel takes the wake as it is")
}
