// Package otlp sends captured queries as OpenTelemetry spans (cistern
// capture --otlp), following the database semantic conventions. Query texts
// leave sanitized (capture.Sanitize: literals as ?, no comments) and error
// messages cut to their code, unless Options.QueryText is "raw". Capture
// never waits for the collector: queries go through a bounded queue, and a
// full queue drops and counts (Stats); spans the collector refused or never
// got are counted too.
package otlp

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/cistern-ebpf/cistern/capture"
)

// Options configure New.
type Options struct {
	Endpoint string // host:port, or http(s)://host:port
	Protocol string // grpc (default, port 4317) or http (4318)
	Queue    int    // queries waiting for the exporter (default 4096)
	Timeout  time.Duration
	// QueryText: "sanitized" (default: db.query.text with its literals as
	// ?, errors as their code) or "raw" (the statement and message as
	// captured, secrets included).
	QueryText string
}

// Query text modes (Options.QueryText, capture's --query-text).
const (
	TextSanitized = "sanitized"
	TextRaw       = "raw"
)

// Stats count what happened to the queries handed to Send.
type Stats struct {
	Queued   uint64 // accepted into the queue
	Dropped  uint64 // queue full (the collector is slow or down)
	Exported uint64 // spans the collector accepted
	Failed   uint64 // spans in batches the collector refused or never got
	Unsent   uint64 // after Close: queued, but still waiting when it gave up
}

// Exporter turns queries into spans.
type Exporter struct {
	q        chan capture.Query
	tp       *sdktrace.TracerProvider
	tr       trace.Tracer
	wg       sync.WaitGroup
	queued   atomic.Uint64
	dropped  atomic.Uint64
	counting *countingExporter
	raw      bool
	san      capture.Sanitizer // run's
}

// New connects lazily (no collector needed to start) and starts the
// goroutine that makes spans.
func New(opt Options) (*Exporter, error) {
	if opt.Queue <= 0 {
		opt.Queue = 4096
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 5 * time.Second
	}
	raw := false
	switch opt.QueryText {
	case "", TextSanitized:
	case TextRaw:
		raw = true
	default:
		return nil, optionErrorf("--otlp-query-text %q: want sanitized or raw", opt.QueryText)
	}
	host, insecure, err := endpoint(opt.Endpoint)
	if err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	switch opt.Protocol {
	case "", "grpc":
		o := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(host), otlptracegrpc.WithTimeout(opt.Timeout),
			otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: false})}
		if insecure {
			o = append(o, otlptracegrpc.WithInsecure())
		}
		exp, err = otlptracegrpc.New(context.Background(), o...)
	case "http":
		o := []otlptracehttp.Option{otlptracehttp.WithEndpoint(host), otlptracehttp.WithTimeout(opt.Timeout),
			otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false})}
		if insecure {
			o = append(o, otlptracehttp.WithInsecure())
		}
		exp, err = otlptracehttp.New(context.Background(), o...)
	default:
		return nil, optionErrorf("--otlp-protocol %q: want grpc or http", opt.Protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	host2, _ := os.Hostname()
	res := resource.NewSchemaless(attribute.String("service.name", "cistern-capture"), attribute.String("host.name", host2))
	e := &Exporter{q: make(chan capture.Query, opt.Queue), counting: &countingExporter{SpanExporter: exp}, raw: raw}
	// Blocking: the SDK's own queue never drops uncounted; the one place a
	// span can be dropped is e.q, counted.
	e.tp = sdktrace.NewTracerProvider(sdktrace.WithResource(res),
		sdktrace.WithBatcher(e.counting, sdktrace.WithBlocking(), sdktrace.WithMaxQueueSize(opt.Queue),
			sdktrace.WithMaxExportBatchSize(min(512, opt.Queue)), sdktrace.WithBatchTimeout(time.Second), sdktrace.WithExportTimeout(opt.Timeout)))
	// Export errors are counted (Stats), not logged per batch.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	e.tr = e.tp.Tracer("github.com/cistern-ebpf/cistern/capture")
	e.wg.Add(1)
	go e.run()
	return e, nil
}

// OptionError is a bad option (protocol, query text, endpoint): the
// caller's input is wrong (the CLI exits with status 2).
type OptionError struct{ Err error }

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

func optionErrorf(format string, a ...any) error {
	return &OptionError{fmt.Errorf(format, a...)}
}

// endpoint accepts host:port or a URL; a URL with https uses TLS.
func endpoint(s string) (host string, insecure bool, err error) {
	if s == "" {
		return "", false, optionErrorf("--otlp: give the collector's HOST:PORT")
	}
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return "", false, optionErrorf("--otlp %q: want HOST:PORT or http(s)://HOST:PORT", s)
		}
		return u.Host, u.Scheme != "https", nil
	}
	return s, true, nil
}

// Send hands q to the exporter without waiting: a full queue (Queue
// queries here and as many in the SDK's batcher) drops it.
func (e *Exporter) Send(q capture.Query) {
	select {
	case e.q <- q:
		e.queued.Add(1)
	default:
		e.dropped.Add(1)
	}
}

func (e *Exporter) run() {
	defer e.wg.Done()
	for q := range e.q {
		e.span(q)
	}
}

// Close sends what is queued (waiting at most wait) and stops.
func (e *Exporter) Close(wait time.Duration) Stats {
	close(e.q)
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	e.tp.Shutdown(ctx)
	st := e.Stats()
	if done := st.Exported + st.Failed; st.Queued > done {
		st.Unsent = st.Queued - done
	}
	return st
}

// Stats reads the counters.
func (e *Exporter) Stats() Stats {
	return Stats{Queued: e.queued.Load(), Dropped: e.dropped.Load(), Exported: e.counting.ok.Load(), Failed: e.counting.failed.Load()}
}

// Counters for --metrics.
func (e *Exporter) Counters() map[string]uint64 {
	s := e.Stats()
	return map[string]uint64{"otlp_spans_queued": s.Queued, "otlp_spans_dropped_queue_full": s.Dropped,
		"otlp_spans_exported": s.Exported, "otlp_spans_failed": s.Failed}
}

// countingExporter counts the spans of each batch by its outcome.
type countingExporter struct {
	sdktrace.SpanExporter
	ok, failed atomic.Uint64
}

func (c *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		c.failed.Add(uint64(len(spans)))
	} else {
		c.ok.Add(uint64(len(spans)))
	}
	return err
}
