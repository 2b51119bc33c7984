package core

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

type payloadEvent struct {
	N    int64             `json:"n"`
	Name string            `json:"name"`
	Tags []string          `json:"tags"`
	Meta map[string]any    `json:"meta"`
	At   time.Time         `json:"at"`
	ID   uuid.UUID         `json:"id"`
	Raw  json.RawMessage   `json:"raw"`
	Next *payloadEvent     `json:"next"`
	Refs map[string]string `json:"refs"`
}

// keepsInput keeps the slice UnmarshalJSON gets, against the json package's
// contract.
type keepsInput struct{ kept []byte }

func (k *keepsInput) UnmarshalJSON(data []byte) error {
	k.kept = data
	return nil
}

type textKey string

func (k *textKey) UnmarshalText(text []byte) error {
	*k = textKey(text)
	return nil
}

// decodePayload decodes as json.Unmarshal does, value and error, whatever
// the payload, and one payload after another.
func TestDecodePayloadMatchesUnmarshal(t *testing.T) {
	t.Parallel()

	payloads := []string{
		`{"n":1,"name":"a","tags":["x","y"],"meta":{"k":[1,"2",null]},"at":"2026-01-02T03:04:05Z","id":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","raw":{"a":1},"next":{"n":2},"refs":{"r":"s"}}`,
		`{"n":2}`,
		`  {"n":3}`,
		`{"n":4}  `,
		"{\"n\":5}\n",
		`{"n":6}{"n":7}`,
		`{"n":8} x`,
		`{"n":"nine"}`,
		`{"n":10,"tags":"not a list","name":"after the mismatch"}`,
		`{"n":11,`,
		`{"n":12}}`,
		`[1,2]`,
		`null`,
		`12`,
		`"s"`,
		``,
		`   `,
		`{"name":"` + strings.Repeat("é", pooledPayloadMax) + `"}`,
		`{"n":13,"name":"last"}`,
	}
	for range 2 {
		for _, p := range payloads {
			var want, got payloadEvent
			wantErr := json.Unmarshal([]byte(p), &want)
			gotErr := decodePayload([]byte(p), &got)
			if wantErr != nil {
				require.EqualError(t, gotErr, wantErr.Error(), p)
			} else {
				require.NoError(t, gotErr, p)
			}
			require.Equal(t, want, got, p)
		}
	}
}

// Payloads are decoded concurrently, each into its own value.
func TestDecodePayloadConcurrently(t *testing.T) {
	t.Parallel()

	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				var got payloadEvent
				data := []byte(`{"n":` + strings.Repeat("1", 1+(i+j)%15) + `,"tags":["t"]}`)
				var want payloadEvent
				require.NoError(t, json.Unmarshal(data, &want))
				require.NoError(t, decodePayload(data, &got))
				require.Equal(t, want, got)
			}
		})
	}
	wg.Wait()
}

// Types whose decoding may keep slices of the input are decoded from the
// event's data, as json.Unmarshal does.
func TestCopiesInput(t *testing.T) {
	t.Parallel()

	type recursive struct {
		Children []*recursive
		Parent   *recursive
	}
	type keepsInField struct{ K keepsInput }
	type keepsInMapKey struct{ M map[textKey]int }
	for _, typ := range []reflect.Type{
		reflect.TypeFor[payloadEvent](),
		reflect.TypeFor[recursive](),
		reflect.TypeFor[placed](),
		reflect.TypeFor[map[string][]any](),
		reflect.TypeFor[[4]uuid.UUID](),
	} {
		require.True(t, copiesInput(typ), typ.String())
	}
	for _, typ := range []reflect.Type{
		reflect.TypeFor[keepsInput](),
		reflect.TypeFor[*keepsInput](),
		reflect.TypeFor[keepsInField](),
		reflect.TypeFor[keepsInMapKey](),
		reflect.TypeFor[[]textKey](),
	} {
		require.False(t, copiesInput(typ), typ.String())
	}

	r := NewRegistry()
	require.NoError(t, RegisterEvent[keepsInField](r, "keeps"))
	first := []byte(`{"K":"first"}`)
	v, err := r.byName["keeps"].decode(first)
	require.NoError(t, err)
	_, err = r.byName["keeps"].decode([]byte(`{"K":"other"}`))
	require.NoError(t, err)
	require.Equal(t, `"first"`, string(v.(keepsInField).K.kept))
}
