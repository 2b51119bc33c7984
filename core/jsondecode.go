package core

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Event payloads are decoded with json.Decoders kept in a pool rather than
// with json.Unmarshal. Unmarshal builds its decoding state afresh for every
// call, on memory the allocator hands out cold; in a catch-up, where every
// event is decoded once, that state cost as much as the decoding itself. A
// Decoder keeps its state, and its buffer, from one payload to the next.
//
// The result is Unmarshal's: a payload the Decoder does not take whole and
// without error (a syntax error, a type mismatch, data after the value) is
// decoded again by json.Unmarshal, into a zeroed value, so its error is
// Unmarshal's too. The one difference is where the input lies while it is
// decoded: in the Decoder's buffer, which the next payload overwrites,
// instead of the event's Data. The json package requires UnmarshalJSON and
// UnmarshalText to copy what they keep of their input, but an
// implementation that keeps it anyway would see it change; types that
// reach such a method (see copiesInput) are decoded with Unmarshal.

// pooledPayloadMax bounds the payloads decoded with a pooled Decoder, whose
// buffer grows to the largest payload it decoded: larger ones are rare, and
// their decoding dwarfs what the pool saves.
const pooledPayloadMax = 64 << 10

// payloadDecoder is a json.Decoder reading a payload from a reader it owns.
type payloadDecoder struct {
	src bytes.Reader
	dec *json.Decoder
}

var payloadDecoders = sync.Pool{New: func() any {
	d := &payloadDecoder{}
	d.dec = json.NewDecoder(&d.src)
	return d
}}

// decodePayload decodes data into v, a pointer to a zero value of a type
// for which copiesInput holds, as json.Unmarshal(data, v) does.
func decodePayload(data []byte, v any) error {
	if len(data) > pooledPayloadMax {
		return json.Unmarshal(data, v)
	}
	d := payloadDecoders.Get().(*payloadDecoder)
	d.src.Reset(data)
	start := d.dec.InputOffset()
	err := d.dec.Decode(v)
	if err == nil && d.dec.InputOffset()-start == int64(len(data)) {
		d.src.Reset(nil)
		payloadDecoders.Put(d) // it took the whole payload: its state is clean
		return nil
	}
	// The Decoder failed or stopped before the end of data, where
	// Unmarshal fails unless only white space follows. The Decoder may hold
	// the failure or the rest of data: it is dropped.
	reflect.ValueOf(v).Elem().SetZero()
	return json.Unmarshal(data, v)
}

// isNullPayload reports whether data, an event's JSON payload, is null:
// it holds no event. json.Unmarshal takes null without an error and leaves
// the value as it was (zero), so the registry refuses it before.
func isNullPayload(data []byte) bool {
	return bytes.Equal(bytes.Trim(data, " \t\r\n"), []byte("null"))
}

var (
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// copiesInput reports whether decoding JSON into a value of type t keeps
// nothing of the input but copies: no type t reaches implements
// json.Unmarshaler or encoding.TextUnmarshaler, whose methods get slices of
// the input, except types known to parse it (time.Time, uuid.UUID) or copy
// it (json.RawMessage).
func copiesInput(t reflect.Type) bool {
	return copiesInputSeen(t, map[reflect.Type]bool{})
}

func copiesInputSeen(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return true // being checked further up: its answer is that one
	}
	seen[t] = true
	switch t {
	case reflect.TypeFor[time.Time](), reflect.TypeFor[uuid.UUID](), reflect.TypeFor[json.RawMessage]():
		return true
	}
	if t.Kind() == reflect.Interface {
		// Decoded into only when nil, with the generic types.
		return true
	}
	for _, u := range []reflect.Type{t, reflect.PointerTo(t)} {
		if u.Implements(jsonUnmarshalerType) || u.Implements(textUnmarshalerType) {
			return false
		}
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return copiesInputSeen(t.Elem(), seen)
	case reflect.Map:
		return copiesInputSeen(t.Key(), seen) && copiesInputSeen(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if !copiesInputSeen(t.Field(i).Type, seen) {
				return false
			}
		}
	}
	return true
}
