package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/vantage-go/vantage/health"
)

// telemetry is what -metrics and -trace install: the OpenTelemetry SDK
// with a Prometheus exporter served over HTTP, and a tracer provider that
// keeps spans in memory so that the demo can print one order's trace.
type telemetry struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
	spans   *tracetest.InMemoryExporter

	server *http.Server
	mux    *http.ServeMux
	addr   string // where the server listens, "" without -metrics
	served chan error
	close  []func(context.Context) error
}

func newTelemetry(cfg config, out io.Writer) (*telemetry, error) {
	t := &telemetry{tracers: noop.NewTracerProvider()}
	if cfg.metrics != "" {
		// A registry of its own: the demo's page shows Vantage's
		// instruments and nothing of the Go runtime's.
		registry := prometheus.NewRegistry()
		exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutScopeInfo())
		if err != nil {
			return nil, fmt.Errorf("building the Prometheus exporter: %w", err)
		}
		provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
		t.meters = provider
		t.close = append(t.close, provider.Shutdown)

		ln, err := net.Listen("tcp", cfg.metrics)
		if err != nil {
			return nil, fmt.Errorf("-metrics: %w", err)
		}
		t.mux = http.NewServeMux()
		t.mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
		t.server = &http.Server{Handler: t.mux, ReadHeaderTimeout: 5 * time.Second}
		t.addr = ln.Addr().String()
		t.served = make(chan error, 1)
		go func() { t.served <- t.server.Serve(ln) }()
		fmt.Fprintf(out, "serving metrics on http://%s/metrics, health on /livez and /readyz\n", t.addr)
	}
	if cfg.trace {
		t.spans = tracetest.NewInMemoryExporter()
		provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(t.spans))
		t.tracers = provider
		t.close = append(t.close, provider.Shutdown)
	}
	return t, nil
}

// serveHealth mounts the worker's health probes next to the metrics.
func (t *telemetry) serveHealth(w health.Reporter) {
	if t.mux != nil {
		health.Register(t.mux, w)
	}
}

// Close stops the server and flushes the providers.
func (t *telemetry) Close(ctx context.Context) error {
	var errs []error
	if t.server != nil {
		errs = append(errs, t.server.Shutdown(ctx))
		if err := <-t.served; !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	for _, c := range slices.Backward(t.close) {
		errs = append(errs, c(ctx))
	}
	return errors.Join(errs...)
}

// printMetrics scrapes the demo's own endpoint and prints Vantage's series
// (histogram buckets left out: their count and sum are printed).
func (t *telemetry) printMetrics(ctx context.Context, out io.Writer) error {
	if t.addr == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+t.addr+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("scraping the metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("scraping the metrics: %s", resp.Status)
	}
	fmt.Fprintf(out, "metrics (from http://%s/metrics, buckets left out):\n", t.addr)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "vantage_") || strings.Contains(line, "_bucket{") {
			continue
		}
		fmt.Fprintln(out, "  "+line)
	}
	return sc.Err()
}

// tracedOrder is the span under which the demo appends the order whose
// trace -trace prints.
const tracedOrder = "place order"

// printTrace prints the trace of the traced order: the application's span
// that appended it and every span of the engine linked to it (the applies
// of its events, each in its batch's trace). Call it once the workers
// stopped, so that every batch span has ended.
func (t *telemetry) printTrace(out io.Writer) {
	if t.spans == nil {
		return
	}
	spans := t.spans.GetSpans()
	byID := make(map[trace.SpanID]tracetest.SpanStub, len(spans))
	var root *tracetest.SpanStub
	for i, s := range spans {
		byID[s.SpanContext.SpanID()] = s
		if s.Name == tracedOrder {
			root = &spans[i]
		}
	}
	if root == nil {
		fmt.Fprintln(out, "trace: the traced order's span was not recorded")
		return
	}
	fmt.Fprintf(out, "trace of one order: span %q in trace %s (%s)\n", root.Name, root.SpanContext.TraceID(), describe(root.Attributes))
	var linked []tracetest.SpanStub
	for _, s := range spans {
		for _, l := range s.Links {
			if l.SpanContext.SpanID() == root.SpanContext.SpanID() {
				linked = append(linked, s)
				break
			}
		}
	}
	slices.SortFunc(linked, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	for _, s := range linked {
		attrs := attribute.NewSet(s.Attributes...)
		version, _ := attrs.Value("vantage.event.version")
		typ, _ := attrs.Value("vantage.event.type")
		where := "no parent"
		if p, ok := byID[s.Parent.SpanID()]; ok {
			where = fmt.Sprintf("in %s %s (%s)", p.Name, p.SpanContext.TraceID().String()[:8], describe(p.Attributes))
		}
		fmt.Fprintf(out, "  links to it: %-28s v%-2s %-22s %7s  %s\n", s.Name, version.String(), typ.String(), s.EndTime.Sub(s.StartTime).Round(time.Microsecond), where)
	}
	if len(linked) == 0 {
		fmt.Fprintln(out, "  no engine span links to it")
	}
}

// describe renders the attributes that name an event, in a fixed order.
func describe(attrs []attribute.KeyValue) string {
	var parts []string
	for _, kv := range attrs {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}
