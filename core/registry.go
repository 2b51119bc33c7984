package core

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"bytes"
	"encoding"

	"github.com/google/uuid"

	"github.com/vantage-go/vantage/core/internal/perspective"
	"github.com/vantage-go/vantage/ports"
)

// Registry errors. Compare with errors.Is.
var (
	// ErrUnknownEventType reports an event type name or Go type that was not
	// registered with RegisterEvent.
	ErrUnknownEventType = perspective.ErrUnknownEventType
	// ErrDuplicate reports a second registration of the same name or type.
	ErrDuplicate = errors.New("duplicate registration")
	// ErrNoHandler reports an event a perspective has no apply function for.
	ErrNoHandler = perspective.ErrNoHandler
	// ErrUndecodable reports a stored payload that does not decode into its
	// registered Go type.
	ErrUndecodable = perspective.ErrUndecodable
)

// Registry holds the event types and perspectives of an application. Register
// everything before the Worker starts; a Registry is safe for concurrent use.
type Registry struct {
	mu           sync.RWMutex
	byName       map[string]*eventType
	byGoType     map[reflect.Type]*eventType
	perspectives map[string]registered

	receptors []receptor
	// receptorStages has bit 1<<stage set once a receptor of that stage is
	// added, so the drain path asks hasReceptors without taking mu.
	receptorStages atomic.Uint32

	// byType caches the subscriptions per event type, for appends; nil
	// after AddPerspective until the next append rebuilds it.
	byType atomic.Pointer[map[string][]ports.Subscription]
}

type eventType struct {
	name   string
	goType reflect.Type
	decode func(data []byte) (any, error)
	// shareable is set when copies of a decoded value share nothing a
	// handler could mutate (see immutable), so one decoded value may be
	// handed to every perspective applying the event.
	shareable bool
}

// immutable reports whether copies of a value of type t share nothing
// mutable: t holds no pointer, slice, map, channel, function or interface,
// directly or in its fields and elements. time.Time counts as immutable: its
// *time.Location is never modified.
func immutable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128, reflect.String:
		return true
	case reflect.Array:
		return immutable(t.Elem())
	case reflect.Struct:
		if t == reflect.TypeFor[time.Time]() {
			return true
		}
		for i := range t.NumField() {
			if !immutable(t.Field(i).Type) {
				return false
			}
		}
		return true
	default:
		return false
	}
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{
		byName:       map[string]*eventType{},
		byGoType:     map[reflect.Type]*eventType{},
		perspectives: map[string]registered{},
	}
}

// RegisterSubscriptions records with the store which perspectives apply
// which event types, so appends fan out work rows for them. Worker.Start
// calls it; Append and AppendTx carry the subscriptions of the events they
// append, so call it yourself only when events are appended by other means
// (another service, raw EventsAppend calls) before any worker started.
func (r *Registry) RegisterSubscriptions(ctx context.Context, store ports.EventStore) error {
	if err := store.SubscriptionsRegister(ctx, &ports.SubscriptionsRegisterParams{Subscriptions: r.Subscriptions()}); err != nil {
		return fmt.Errorf("registering subscriptions: %w", err)
	}
	return nil
}

// subscriptionsOf returns the subscriptions of the given event types.
func (r *Registry) subscriptionsOf(news []ports.NewEvent) []ports.Subscription {
	byType := r.byType.Load()
	if byType == nil {
		// Built and stored under the read lock, so AddPerspective (which
		// resets it under the write lock) cannot interleave.
		r.mu.RLock()
		m := map[string][]ports.Subscription{}
		for _, s := range r.subscriptionsLocked() {
			m[s.EventType] = append(m[s.EventType], s)
		}
		byType = &m
		r.byType.Store(byType)
		r.mu.RUnlock()
	}
	if len(news) == 1 {
		return (*byType)[news[0].Type]
	}
	var out []ports.Subscription
	seen := map[string]bool{}
	for _, ne := range news {
		if !seen[ne.Type] {
			seen[ne.Type] = true
			out = append(out, (*byType)[ne.Type]...)
		}
	}
	return out
}

// RegisterEvent registers the Go type E under a stable type name, the name
// stored with every event and used to route it to perspectives. Payloads are
// JSON. It returns ErrDuplicate if the name or the type is already registered.
func RegisterEvent[E any](r *Registry, name string) error {
	if r == nil {
		return fmt.Errorf("registering event %q: nil registry", name)
	}
	if name == "" {
		return fmt.Errorf("registering event %T: empty type name", *new(E))
	}
	t := reflect.TypeFor[E]()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byName[name]; ok {
		return fmt.Errorf("registering event %q: %w: name already registered", name, ErrDuplicate)
	}
	if prev, ok := r.byGoType[t]; ok {
		return fmt.Errorf("registering event %q: %w: %s already registered as %q", name, ErrDuplicate, t, prev.name)
	}
	unmarshal := json.Unmarshal
	if copiesInput(t) {
		unmarshal = decodePayload
	}
	et := &eventType{name: name, goType: t, shareable: immutable(t), decode: func(data []byte) (any, error) {
		if isNullPayload(data) {
			return nil, errNullPayload
		}
		var e E
		if err := unmarshal(data, &e); err != nil {
			return nil, err
		}
		return e, nil
	}}
	r.byName[name] = et
	r.byGoType[t] = et
	return nil
}

// MustRegisterEvent is RegisterEvent that panics on error, for package-level
// set-up code.
func MustRegisterEvent[E any](r *Registry, name string) {
	if err := RegisterEvent[E](r, name); err != nil {
		panic(err)
	}
}

// TypeName returns the registered name of event's Go type.
func (r *Registry) TypeName(event any) (string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	et, ok := r.byGoType[reflect.TypeOf(event)]
	if !ok {
		return "", fmt.Errorf("%w: %T", ErrUnknownEventType, event)
	}
	return et.name, nil
}

// errNullPayload is the error of a payload that is JSON null.
var errNullPayload = errors.New("the payload is JSON null")

// Encode turns a registered event value into a NewEvent ready to append.
// An event that encodes as JSON null (a nil pointer) holds nothing to
// apply: Encode refuses it with an error wrapping ports.ErrInvalidArgument.
func (r *Registry) Encode(event any) (ports.NewEvent, error) {
	name, err := r.TypeName(event)
	if err != nil {
		return ports.NewEvent{}, err
	}
	data, err := json.Marshal(event)
	if err != nil {
		return ports.NewEvent{}, fmt.Errorf("encoding %s: %w", name, err)
	}
	if isNullPayload(data) {
		return ports.NewEvent{}, fmt.Errorf("encoding %s: %w (a nil %T?): %w", name, errNullPayload, event, ports.ErrInvalidArgument)
	}
	return ports.NewEvent{Type: name, Data: data}, nil
}

// Decode turns a stored event into its registered Go value.
func (r *Registry) Decode(e ports.Event) (any, error) {
	v, _, err := r.decode(e)
	return v, err
}

// decode is Decode that also reports whether the value may be shared by
// every perspective applying the event (see eventType.shareable).
func (r *Registry) decode(e ports.Event) (any, bool, error) {
	r.mu.RLock()
	et, ok := r.byName[e.Type]
	r.mu.RUnlock()
	if !ok {
		return nil, false, fmt.Errorf("%w: %q", ErrUnknownEventType, e.Type)
	}
	v, err := et.decode(e.Data)
	if err != nil {
		return nil, et.shareable, fmt.Errorf("%w: decoding %s event %s: %w", ErrUndecodable, e.Type, e.ID, err)
	}
	return v, et.shareable, nil
}

// Perspective is the set of apply functions that build a model of type M
// from the events of one stream. M is stored as JSON, so its exported fields
// (or its MarshalJSON) define what is persisted.
type Perspective[M any] struct {
	name     string
	mu       sync.Mutex
	handlers map[reflect.Type]func(ctx context.Context, m M, e any) (M, error)
	byName   map[string]func(ctx context.Context, m M, e any) (M, error)
	indexes  []ports.ModelIndex // declared by Index (index.go)
}

// NewPerspective returns an empty perspective with a stable name (stored with
// every work row and cursor; renaming it starts over).
func NewPerspective[M any](name string) *Perspective[M] {
	return &Perspective[M]{name: name, handlers: map[reflect.Type]func(context.Context, M, any) (M, error){}}
}

// Name returns the perspective's name.
func (p *Perspective[M]) Name() string { return p.name }

// Handle adds the apply function for events of type E. The function receives
// the model so far and returns the next one: the events of a stream come in
// version order, each with the model that reflects exactly the events
// before it (the dead-lettered ones excepted), and each once. An error, a
// panic, or running past Options.Drain.ApplyTimeout (the context is then
// cancelled) fails the event: it is retried with backoff, then
// dead-lettered. Use EventFromContext for the event's id, stream, version
// and metadata. Handle returns ErrDuplicate if E already has a function.
func Handle[M, E any](p *Perspective[M], apply func(ctx context.Context, model M, event E) (M, error)) error {
	if p == nil || apply == nil {
		return errors.New("core.Handle: nil perspective or apply function")
	}
	t := reflect.TypeFor[E]()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byName != nil {
		return fmt.Errorf("perspective %q: handlers cannot be added after the perspective was registered", p.name)
	}
	if _, ok := p.handlers[t]; ok {
		return fmt.Errorf("perspective %q: %w: apply function for %s", p.name, ErrDuplicate, t)
	}
	p.handlers[t] = func(ctx context.Context, m M, e any) (M, error) { return apply(ctx, m, e.(E)) }
	return nil
}

// MustHandle is Handle that panics on error, for set-up code.
func MustHandle[M, E any](p *Perspective[M], apply func(ctx context.Context, model M, event E) (M, error)) {
	if err := Handle(p, apply); err != nil {
		panic(err)
	}
}

// registered is what a registry holds of a Perspective or a Projection.
type registered interface {
	Name() string
	bind(r *Registry) ([]string, error)
	eventTypes() []string
	decodeModel(data []byte) (any, error)
	encodeModel(model any) ([]byte, error)
	apply(ctx context.Context, model any, typ string, event any) (any, error)
	Indexes() []ports.ModelIndex
}

// Registrable is implemented by *Perspective[M] for every M.
type Registrable interface {
	registered
}

func (p *Perspective[M]) bind(r *Registry) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byName != nil {
		return nil, fmt.Errorf("perspective %q: %w: already registered", p.name, ErrDuplicate)
	}
	if len(p.handlers) == 0 {
		return nil, fmt.Errorf("perspective %q has no apply functions", p.name)
	}
	byName := make(map[string]func(context.Context, M, any) (M, error), len(p.handlers))
	for t, h := range p.handlers {
		et, ok := r.byGoType[t]
		if !ok {
			return nil, fmt.Errorf("perspective %q handles %s: %w (call RegisterEvent first)", p.name, t, ErrUnknownEventType)
		}
		byName[et.name] = h
	}
	p.byName = byName
	return p.eventTypesLocked(), nil
}

func (p *Perspective[M]) eventTypes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.eventTypesLocked()
}

func (p *Perspective[M]) eventTypesLocked() []string {
	return slices.Sorted(maps.Keys(p.byName))
}

func (p *Perspective[M]) decodeModel(data []byte) (any, error) {
	var m M
	if len(data) == 0 {
		return m, nil
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("decoding model of perspective %q: %w", p.name, err)
	}
	return m, nil
}

func (p *Perspective[M]) encodeModel(model any) ([]byte, error) {
	data, err := json.Marshal(model.(M))
	if err != nil {
		return nil, fmt.Errorf("encoding model of perspective %q: %w", p.name, err)
	}
	return data, nil
}

func (p *Perspective[M]) apply(ctx context.Context, model any, typ string, event any) (next any, err error) {
	h, ok := p.byName[typ] // immutable after bind
	if !ok {
		return model, fmt.Errorf("perspective %q, event type %q: %w", p.name, typ, ErrNoHandler)
	}
	defer func() {
		if r := recover(); r != nil {
			next, err = model, fmt.Errorf("perspective %q panicked applying %q: %v", p.name, typ, r)
		}
	}()
	return h(ctx, model.(M), event)
}

// AddPerspective registers a perspective built with NewPerspective and
// Handle. Every event type it handles must be registered first. It returns
// ErrDuplicate for a second perspective of the same name.
func (r *Registry) AddPerspective(p Registrable) error {
	if p == nil || reflect.ValueOf(p).IsNil() {
		return errors.New("adding perspective: nil perspective")
	}
	if p.Name() == "" {
		return errors.New("adding perspective: empty name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.perspectives[p.Name()]; ok {
		return fmt.Errorf("adding perspective %q: %w", p.Name(), ErrDuplicate)
	}
	if _, err := p.bind(r); err != nil {
		return fmt.Errorf("adding perspective: %w", err)
	}
	r.perspectives[p.Name()] = p
	r.byType.Store(nil)
	return nil
}

// Perspectives returns the registered perspective names, sorted.
func (r *Registry) Perspectives() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.perspectives))
}

// Subscriptions returns every (event type, perspective) pair, sorted.
func (r *Registry) Subscriptions() []ports.Subscription {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.subscriptionsLocked()
}

func (r *Registry) subscriptionsLocked() []ports.Subscription {
	var subs []ports.Subscription
	for _, p := range r.perspectives {
		for _, t := range p.eventTypes() {
			subs = append(subs, ports.Subscription{EventType: t, Perspective: p.Name()})
		}
	}
	slices.SortFunc(subs, func(a, b ports.Subscription) int {
		return cmp.Or(strings.Compare(a.EventType, b.EventType), strings.Compare(a.Perspective, b.Perspective))
	})
	return subs
}

func (r *Registry) perspective(name string) (registered, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.perspectives[name]
	return p, ok
}

// subscribers maps each event type to the perspectives that apply it,
// sorted: PerspectivesFor of every type at once.
func (r *Registry) subscribers() map[string][]string {
	out := map[string][]string{}
	for _, s := range r.Subscriptions() {
		out[s.EventType] = append(out[s.EventType], s.Perspective)
	}
	return out
}

// PerspectivesFor returns the perspectives that apply events of a type.
func (r *Registry) PerspectivesFor(eventType string) []string {
	var out []string
	for _, s := range r.Subscriptions() {
		if s.EventType == eventType {
			out = append(out, s.Perspective)
		}
	}
	return out
}

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
