package conformance

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/vantage-go/vantage/core"
	"github.com/vantage-go/vantage/ports"
)

// runEngineTraces runs the scenarios of the engine's spans: a request's
// trace reaches the applies of the events it appended, whichever instance
// applies them, through the trace context the backend stores with each
// event; failures, rewinds and lifecycle stages show in their spans.
func runEngineTraces(t *testing.T, newBackend NewBackendFunc) {
	t.Helper()
	group(t, "EngineTraces", map[string]func(t *testing.T){
		"AppliesLinkToTheAppend":    func(t *testing.T) { testApplySpans(t, newBackend) },
		"FailedApplyMarksItsSpan":   func(t *testing.T) { testFailedApplySpan(t, newBackend) },
		"RewindLinksToTheLateEvent": func(t *testing.T) { testRewindSpan(t, newBackend) },
		"LifecycleStagesHaveSpans":  func(t *testing.T) { testStageSpans(t, newBackend) },
	})
}

// recordedSpans is an SDK TracerProvider that keeps every span that ends
// and pokes a scenario's progress when one does, so scenarios wait for
// spans as they wait for the engine's hooks.
type recordedSpans struct {
	*sdktrace.TracerProvider
	rec *tracetest.SpanRecorder
}

func newRecordedSpans(t *testing.T, pr *progress) *recordedSpans {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSpanProcessor(pokeOnEnd{pr}))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.WithoutCancel(t.Context()))) })
	return &recordedSpans{TracerProvider: tp, rec: rec}
}

// request starts the span of a request, as the application's own
// instrumentation would.
func (r *recordedSpans) request(ctx context.Context) (context.Context, trace.Span) {
	return r.Tracer("conformance").Start(ctx, "request")
}

// named returns the ended spans called name.
func (r *recordedSpans) named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// ended returns the ended span whose context is sc, nil if none.
func (r *recordedSpans) ended(sc trace.SpanContext) sdktrace.ReadOnlySpan {
	for _, s := range r.rec.Ended() {
		if s.SpanContext().Equal(sc) {
			return s
		}
	}
	return nil
}

// pokeOnEnd is a span processor that pokes a progress when a span ends.
type pokeOnEnd struct{ pr *progress }

func (p pokeOnEnd) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (p pokeOnEnd) OnEnd(sdktrace.ReadOnlySpan)                     { p.pr.poke() }
func (p pokeOnEnd) Shutdown(context.Context) error                  { return nil }
func (p pokeOnEnd) ForceFlush(context.Context) error                { return nil }

// spanAttrs returns a span's attributes by key.
func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

// requireBatchParent checks that s is a child of a drain batch's span,
// which is a root, and returns that batch span.
func requireBatchParent(t *testing.T, spans *recordedSpans, s sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	t.Helper()
	batch := spans.ended(s.Parent())
	require.NotNil(t, batch, "%s: its parent span ended", s.Name())
	require.Equal(t, "vantage.batch", batch.Name(), "%s: a child of a drain batch", s.Name())
	require.False(t, batch.Parent().IsValid(), "a batch is a root span")
	return batch
}

// waitStartupScan waits until w's startup scan completed. The scan runs
// the lifecycle stages and repairs the rewinds it finds outside any batch,
// so their spans are roots; a scenario that expects them to be children of
// a batch waits for it first.
func waitStartupScan(t *testing.T, w *core.Worker) {
	t.Helper()
	select {
	case <-w.StartupScanComplete():
	case <-time.After(scenarioTimeout):
		t.Fatal("the startup scan did not complete")
	}
}

// spanSeen records the span contexts the engine's callbacks found in
// their contexts, by a key of the scenario's.
type spanSeen struct {
	mu   sync.Mutex
	seen map[string]trace.SpanContext
}

func (s *spanSeen) add(key string, ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]trace.SpanContext{}
	}
	s.seen[key] = trace.SpanContextFromContext(ctx)
}

func (s *spanSeen) get(key string) trace.SpanContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[key]
}

// testApplySpans appends events under a request's span: each apply has a
// span of its own, a child of its drain batch's span, linked to the
// request's span and named by its event's attributes; the apply function
// runs under it and can start spans of its own under it.
func testApplySpans(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	pr := newProgress()
	spans := newRecordedSpans(t, pr)
	var seen spanSeen
	p := core.NewPerspective[trail]("alpha")
	core.MustHandle(p, func(ctx context.Context, m trail, _ tick) (trail, error) {
		ev, _ := core.EventFromContext(ctx)
		seen.add(ev.ID.String(), ctx)
		_, own := trace.SpanFromContext(ctx).TracerProvider().Tracer("handler").Start(ctx, "handler work")
		own.End()
		m.Versions = append(m.Versions, ev.Version)
		return m, nil
	})
	reg := newRegistry(t, p)
	opts := fastOptions()
	opts.Telemetry.TracerProvider = spans
	opts.Hooks = pr.hooks(core.Hooks{})
	startWorker(t, b, reg, opts)

	ctx, req := spans.request(t.Context())
	stream := uuid.Must(uuid.NewV7())
	res, err := reg.Append(ctx, b.Events, stream, 0, tick{N: 1}, tick{N: 2}, tick{N: 3})
	require.NoError(t, err)
	req.End()

	applied := func() bool {
		applies := spans.named("vantage.apply alpha")
		for _, a := range applies {
			if spans.ended(a.Parent()) == nil {
				return false // its batch is still running
			}
		}
		return len(applies) == len(res.Events)
	}
	pr.waitUntil(t, "every apply's span and its batch's ended", applied)

	byVersion := map[int64]sdktrace.ReadOnlySpan{}
	for _, a := range spans.named("vantage.apply alpha") {
		byVersion[spanAttrs(a)["vantage.event.version"].AsInt64()] = a
	}
	handlerSpans := spans.named("handler work")
	for _, e := range res.Events {
		a := byVersion[e.Version]
		require.NotNil(t, a, "the span of version %d", e.Version)
		require.Equal(t, trace.SpanKindConsumer, a.SpanKind())
		batch := requireBatchParent(t, spans, a)
		require.Positive(t, spanAttrs(batch)["vantage.batch.streams"].AsInt64())
		require.Positive(t, spanAttrs(batch)["vantage.batch.applied"].AsInt64())
		require.Len(t, a.Links(), 1, "version %d: one link, to its append", e.Version)
		require.Equal(t, req.SpanContext().WithRemote(true), a.Links()[0].SpanContext,
			"version %d: linked to the request's span through the trace context the backend stored", e.Version)
		require.Equal(t, map[attribute.Key]attribute.Value{
			"vantage.stream.id":     attribute.StringValue(stream.String()),
			"vantage.perspective":   attribute.StringValue("alpha"),
			"vantage.event.id":      attribute.StringValue(e.ID.String()),
			"vantage.event.type":    attribute.StringValue(typeTick),
			"vantage.event.version": attribute.Int64Value(e.Version),
		}, spanAttrs(a))
		require.Equal(t, codes.Unset, a.Status().Code)
		require.Equal(t, a.SpanContext(), seen.get(e.ID.String()), "version %d: the apply function runs under its span", e.Version)
		require.True(t, slices.ContainsFunc(handlerSpans, func(h sdktrace.ReadOnlySpan) bool { return h.Parent().Equal(a.SpanContext()) }),
			"version %d: a span the apply function started is a child of the apply's", e.Version)
	}
}

// testFailedApplySpan fails an apply: its span records the error and has
// status Error; the applies around it succeed.
func testFailedApplySpan(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	pr := newProgress()
	spans := newRecordedSpans(t, pr)
	poison := func(_ ports.Event, tk tick) error {
		if tk.Poison {
			return errors.New("poisoned tick")
		}
		return nil
	}
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, poison))
	opts := fastOptions()
	opts.Telemetry.TracerProvider = spans
	opts.Retries.MaxEventAttempts = 1 // dead-lettered at once: the pair goes on
	opts.Hooks = pr.hooks(core.Hooks{})
	startWorker(t, b, reg, opts)

	stream := uuid.Must(uuid.NewV7())
	_, err := reg.Append(t.Context(), b.Events, stream, 0, tick{N: 1}, tick{N: 2, Poison: true}, tick{N: 3})
	require.NoError(t, err)
	pr.waitUntil(t, "the applies of all three versions ended", func() bool { return len(spans.named("vantage.apply alpha")) >= 3 })

	for _, a := range spans.named("vantage.apply alpha") {
		version := spanAttrs(a)["vantage.event.version"].AsInt64()
		if version != 2 {
			require.Equal(t, codes.Unset, a.Status().Code, "version %d applied", version)
			continue
		}
		require.Equal(t, sdktrace.Status{Code: codes.Error, Description: "poisoned tick"}, a.Status())
		require.True(t, slices.ContainsFunc(a.Events(), func(e sdktrace.Event) bool {
			return e.Name == "exception" && slices.ContainsFunc(e.Attributes, func(kv attribute.KeyValue) bool {
				return kv.Key == "exception.message" && kv.Value.AsString() == "poisoned tick"
			})
		}), "the error is recorded on the span")
	}
}

// testRewindSpan appends a late event under a request's span: the rewind
// that applies it has a span, a child of the batch that ran it, which
// says what it replayed and links to the request.
func testRewindSpan(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	if b.Rewind == nil {
		t.Skip("adapter does not implement ports.RewindStore")
	}
	pr := newProgress()
	spans := newRecordedSpans(t, pr)
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, nil))
	opts := lifecycleOptions()
	opts.Telemetry.TracerProvider = spans
	opts.Hooks = pr.hooks(core.Hooks{})
	w := startWorker(t, b, reg, opts)

	// Versions 1, 2 and 4: version 3 arrives later, below the cursor.
	stream := uuid.Must(uuid.NewV7())
	var evs []ports.NewEvent
	for _, v := range []int64{1, 2, 4} {
		ne, err := reg.Encode(tick{N: int(v)})
		require.NoError(t, err)
		ne.Version = v
		evs = append(evs, ne)
	}
	_, err := b.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{StreamID: stream, Events: evs})
	require.NoError(t, err)
	pr.waitUntil(t, "the first three events applied", func() bool { return len(modelVersions(t, b, stream, "alpha")) == 3 })
	waitStartupScan(t, w) // from then on a drain runs the rewind

	ctx, req := spans.request(t.Context())
	late, err := reg.Encode(tick{N: 3})
	require.NoError(t, err)
	late.Version = 3
	late.Metadata = core.MetadataFromContext(ctx)
	_, err = b.Events.EventsAppend(t.Context(), &ports.EventsAppendParams{StreamID: stream, Events: []ports.NewEvent{late}})
	require.NoError(t, err)
	req.End()

	pr.waitUntil(t, "the rewind's span and its batch's ended", func() bool {
		rewinds := spans.named("vantage.rewind alpha")
		return len(rewinds) > 0 && spans.ended(rewinds[0].Parent()) != nil
	})
	require.Equal(t, []int64{1, 2, 3, 4}, modelVersions(t, b, stream, "alpha"))
	rw := spans.named("vantage.rewind alpha")[0]
	requireBatchParent(t, spans, rw)
	require.Equal(t, codes.Unset, rw.Status().Code)
	attrs := spanAttrs(rw)
	require.Equal(t, stream.String(), attrs["vantage.stream.id"].AsString())
	require.Equal(t, "alpha", attrs["vantage.perspective"].AsString())
	require.Equal(t, int64(3), attrs["vantage.rewind.trigger_version"].AsInt64())
	require.Equal(t, int64(4), attrs["vantage.rewind.replayed"].AsInt64(), "the replay from the start")
	require.Equal(t, int64(1), attrs["vantage.rewind.new"].AsInt64(), "the late event")
	require.Len(t, rw.Links(), 1, "one link, to the late event's append")
	require.Equal(t, req.SpanContext().WithRemote(true), rw.Links()[0].SpanContext)
}

// testStageSpans runs receptors at every lifecycle stage: each stage run
// has a span, its receptors run under it, and a failing inline receptor
// marks it.
func testStageSpans(t *testing.T, newBackend NewBackendFunc) {
	b := newBackend(t)(t)
	pr := newProgress()
	spans := newRecordedSpans(t, pr)
	var seen spanSeen
	reg := newRegistry(t, trailPerspective(t, "alpha", nil, nil))
	stages := []core.Stage{core.PrePerspective, core.PostPerspective, core.PostAllPerspectives, core.PostLifecycle}
	for _, st := range stages {
		require.NoError(t, core.AddReceptor(reg, st, core.Inline, func(ctx context.Context, _ tick, info core.StageInfo) error {
			seen.add(st.String()+"/"+info.Event.ID.String(), ctx)
			if st == core.PostPerspective {
				return errors.New("receptor refused")
			}
			return nil
		}))
	}
	opts := lifecycleOptions()
	opts.Telemetry.TracerProvider = spans
	opts.Hooks = pr.hooks(core.Hooks{OnLifecycleCompleted: func([]ports.Event) { pr.poke() }})
	waitStartupScan(t, startWorker(t, b, reg, opts)) // from then on the terminal stages run after a batch

	stream := uuid.Must(uuid.NewV7())
	res, err := reg.Append(t.Context(), b.Events, stream, 0, tick{N: 1})
	require.NoError(t, err)
	id := res.Events[0].ID
	pr.waitUntil(t, "a span of every stage ended", func() bool {
		for _, st := range stages {
			if len(spans.named("vantage.lifecycle "+st.String())) == 0 {
				return false
			}
		}
		return true
	})

	for _, st := range stages {
		ss := spans.named("vantage.lifecycle " + st.String())
		require.Len(t, ss, 1, "%s ran once", st)
		s := ss[0]
		requireBatchParent(t, spans, s)
		attrs := spanAttrs(s)
		require.Equal(t, st.String(), attrs["vantage.lifecycle.stage"].AsString())
		require.Equal(t, int64(1), attrs["vantage.lifecycle.events"].AsInt64())
		require.Equal(t, int64(1), attrs["vantage.lifecycle.claimed"].AsInt64())
		require.Equal(t, stream.String(), attrs["vantage.stream.id"].AsString())
		require.Equal(t, s.SpanContext(), seen.get(st.String()+"/"+id.String()), "%s: its receptors run under its span", st)
		if st != core.PostPerspective {
			require.Equal(t, codes.Unset, s.Status().Code, st.String())
			continue
		}
		require.Equal(t, "alpha", attrs["vantage.perspective"].AsString())
		require.Equal(t, codes.Error, s.Status().Code, "a failed inline receptor marks its stage")
		require.Len(t, s.Events(), 1)
		require.Equal(t, "exception", s.Events()[0].Name)
	}
}
