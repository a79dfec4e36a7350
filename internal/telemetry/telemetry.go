// Package telemetry sets up OpenTelemetry tracing for one mcpcancel
// process from the standard OTEL_* environment variables, and hands the
// parts that trace (gRPC servers and clients, the gateway, the worker)
// what they need.
//
// Tracing is on when OTEL_TRACES_EXPORTER names an exporter other than
// "none", or when an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); OTEL_SDK_DISABLED=true turns it
// off. Exporters come from the contrib autoexport package (otlp, over
// OTEL_EXPORTER_OTLP_PROTOCOL grpc or http/protobuf), except "console",
// which writes to the writer Options names (stderr: stdout carries MCP
// under dev --stdio). Sampling and batching follow OTEL_TRACES_SAMPLER
// and OTEL_BSP_*, the resource OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES. Propagation is W3C trace context and baggage.
//
// OpenTelemetry's API is global by design (otelgrpc and every library
// look the provider up there), so Setup installs the provider globally,
// and Enabled says whether it did. With tracing off nothing is installed
// and the callers skip their tracing code: it costs a load of one bool.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// enabled says whether Setup installed a tracer provider that exports.
var enabled atomic.Bool

// Enabled says whether this process traces. Callers test it before doing
// any tracing work, so that a process without OTEL_* pays nothing.
func Enabled() bool { return enabled.Load() }

// Options configure Setup. The zero value traces to nowhere but the
// environment's choice, with service name "mcpcancel".
type Options struct {
	// Service is the default service.name; OTEL_SERVICE_NAME wins.
	Service string
	// Version is service.version, if set.
	Version string
	// Console is where OTEL_TRACES_EXPORTER=console writes (default
	// stderr).
	Console io.Writer
}

// ShutdownTimeout bounds the flush of spans still queued at shutdown.
const ShutdownTimeout = 5 * time.Second

// Setup reads the environment and, if it asks for traces, installs a
// tracer provider and the W3C propagators. The returned func flushes what
// is queued (within ShutdownTimeout) and uninstalls the provider; it is
// safe to call more than once. With tracing off it does nothing.
func Setup(ctx context.Context, opts Options) (shutdown func() error, err error) {
	nothing := func() error { return nil }
	name, on := exporterName()
	if !on {
		return nothing, nil
	}
	exp, err := newExporter(ctx, name, opts.Console)
	if err != nil {
		return nothing, fmt.Errorf("telemetry: %w", err)
	}
	res, err := newResource(ctx, opts)
	if err != nil {
		return nothing, fmt.Errorf("telemetry: %w", err)
	}
	// A console is read by a person as things happen; anything else gets
	// batches.
	export := sdktrace.WithBatcher(exp)
	if name == "console" {
		export = sdktrace.WithSyncer(exp)
	}
	tp := sdktrace.NewTracerProvider(export, sdktrace.WithResource(res))
	uninstall := Install(tp)
	var once atomic.Bool
	return func() error {
		if !once.CompareAndSwap(false, true) {
			return nil
		}
		uninstall()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			return fmt.Errorf("telemetry: flushing spans: %w", err)
		}
		return nil
	}, nil
}

// Install makes tp this process's tracer provider, with the W3C
// propagators, as Setup does; for tests and benchmarks that bring their
// own provider. The returned func uninstalls it (it does not shut tp
// down).
func Install(tp trace.TracerProvider) (uninstall func()) {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator())
	enabled.Store(true)
	return func() {
		enabled.Store(false)
		otel.SetTracerProvider(noop.NewTracerProvider())
	}
}

// exporterName is the traces exporter the environment names, and whether
// tracing is on at all.
func exporterName() (string, bool) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return "", false
	}
	name := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	switch {
	case name == "none":
		return "", false
	case name != "":
		return name, true
	case os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
		return "otlp", true
	}
	return "", false
}

// ErrExporter means OTEL_TRACES_EXPORTER names more than one exporter,
// which this setup does not support.
var ErrExporter = errors.New("OTEL_TRACES_EXPORTER: name one exporter (otlp, console or none)")

func newExporter(ctx context.Context, name string, console io.Writer) (sdktrace.SpanExporter, error) {
	if strings.Contains(name, ",") {
		return nil, ErrExporter
	}
	if name == "console" {
		if console == nil {
			console = os.Stderr
		}
		return stdouttrace.New(stdouttrace.WithWriter(console))
	}
	return autoexport.NewSpanExporter(ctx)
}

func newResource(ctx context.Context, opts Options) (*resource.Resource, error) {
	service := opts.Service
	if service == "" {
		service = "mcpcancel"
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", service)}
	if opts.Version != "" {
		attrs = append(attrs, attribute.String("service.version", opts.Version))
	}
	// Later detectors win: the environment overrides the defaults.
	return resource.New(ctx, resource.WithAttributes(attrs...), resource.WithTelemetrySDK(), resource.WithFromEnv())
}

// Propagator is W3C trace context and baggage.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Carrier is ctx's trace context as W3C fields (traceparent, tracestate,
// baggage), for a hop that carries it in a message rather than in gRPC
// metadata; nil with tracing off or no trace.
func Carrier(ctx context.Context) map[string]string {
	if !Enabled() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	Propagator().Inject(ctx, carrier)
	if len(carrier) == 0 {
		return nil
	}
	return carrier
}

// Tracer is the named tracer of the installed provider. Callers check
// Enabled first; it is looked up each time, so a provider installed later
// (a test's) is the one used.
func Tracer(name string) trace.Tracer {
	return otel.GetTracerProvider().Tracer(name)
}
