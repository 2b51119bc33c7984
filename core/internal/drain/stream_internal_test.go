package drain

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vantage-go/vantage/core/internal/perspective"
	"github.com/vantage-go/vantage/core/internal/stage"
	"github.com/vantage-go/vantage/ports"
)

type placed struct {
	ID string `json:"id"`
}

type tagged struct{ Tags []string }

// jsonRegistry decodes "placed" events, whose values may be shared, and
// "tagged" ones, whose values hold a slice and may not.
type jsonRegistry struct{}

func (jsonRegistry) Lookup(string) (perspective.Perspective, bool) { return nil, false }

func (jsonRegistry) HasReceptors(...stage.Stage) bool { return false }

func (jsonRegistry) Decode(e ports.Event) (any, bool, error) {
	if e.Type == "placed" {
		var v placed
		return v, true, json.Unmarshal(e.Data, &v)
	}
	var v tagged
	err := json.Unmarshal(e.Data, &v)
	return v, false, err
}

// A decoded value is shared by the perspectives applying the event only
// when nothing in it can be mutated through a copy.
func TestStreamWorkDecodeSharing(t *testing.T) {
	t.Parallel()

	r := jsonRegistry{}
	sw := &streamWork{events: []ports.Event{
		{ID: uuid.New(), Type: "placed", Version: 1, Data: []byte(`{"id":"a"}`)},
		{ID: uuid.New(), Type: "tagged", Version: 2, Data: []byte(`{"Tags":["x"]}`)},
	}, decoded: make([]decodedEvent, 2)}
	a, err := sw.decode(r, 0)
	require.NoError(t, err)
	b, err := sw.decode(r, 0)
	require.NoError(t, err)
	require.Equal(t, placed{ID: "a"}, b)
	require.True(t, sw.decoded[0].shareable, "placed holds only a string: decoded once")
	require.Equal(t, a, b)

	first, err := sw.decode(r, 1)
	require.NoError(t, err)
	first.(tagged).Tags[0] = "mutated by a handler"
	second, err := sw.decode(r, 1)
	require.NoError(t, err)
	require.Equal(t, tagged{Tags: []string{"x"}}, second, "a slice is decoded afresh for each perspective")
}

// The perspectives of a stream decode its events concurrently, sharing what
// the first of them computed.
func TestStreamWorkDecodeConcurrently(t *testing.T) {
	t.Parallel()

	ev := ports.Event{ID: uuid.New(), Type: "placed", Version: 1, Data: []byte(`{"id":"a"}`)}
	sw := &streamWork{events: []ports.Event{ev}, decoded: make([]decodedEvent, 1)}
	type got struct {
		value any
		err   error
	}
	results := make([]got, 8)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			v, err := sw.decode(jsonRegistry{}, 0)
			results[i] = got{value: v, err: err}
		})
	}
	wg.Wait()
	for _, g := range results {
		require.NoError(t, g.err)
		require.Equal(t, placed{ID: "a"}, g.value)
	}
}
