package telemetry_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/mcpcancel/mcpcancel/internal/telemetry"
)

// otelVars are every variable these tests set, cleared first so the
// machine's environment does not leak in.
var otelVars = []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SERVICE_NAME"}

func clearEnv(t *testing.T) {
	for _, k := range otelVars {
		t.Setenv(k, "")
	}
}

// lockedBuffer is a console the exporter and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSetupOff: without OTEL_* (or with them saying none or disabled)
// nothing is installed and the gRPC options are no-ops.
func TestSetupOff(t *testing.T) {
	for _, tc := range []struct{ name, key, value string }{
		{"nothing set", "", ""},
		{"exporter none", "OTEL_TRACES_EXPORTER", "none"},
		{"sdk disabled", "OTEL_SDK_DISABLED", "true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			if tc.key != "" {
				t.Setenv(tc.key, tc.value)
			}
			if tc.key == "OTEL_SDK_DISABLED" {
				t.Setenv("OTEL_TRACES_EXPORTER", "console")
			}
			stop, err := telemetry.Setup(t.Context(), telemetry.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			if telemetry.Enabled() {
				t.Fatal("tracing is on")
			}
			if _, ok := otel.GetTracerProvider().Tracer("x").Start(t.Context(), "s"); ok.SpanContext().IsValid() {
				t.Fatal("the global provider makes real spans")
			}
		})
	}
}

// TestSetupConsole: OTEL_TRACES_EXPORTER=console writes each span as it
// ends, with the service name, and the W3C propagators are installed.
func TestSetupConsole(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	var out lockedBuffer
	stop, err := telemetry.Setup(t.Context(), telemetry.Options{Service: "mcpcancel-test", Console: &out})
	if err != nil {
		t.Fatal(err)
	}
	if !telemetry.Enabled() {
		t.Fatal("tracing is off")
	}
	_, span := telemetry.Tracer("test").Start(t.Context(), "the span")
	span.End()
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(trace.ContextWithSpan(t.Context(), span), carrier)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if telemetry.Enabled() {
		t.Fatal("still on after shutdown")
	}
	got := out.String()
	id := span.SpanContext().TraceID().String()
	for _, want := range []string{`"Name":"the span"`, id, "mcpcancel-test"} {
		if !strings.Contains(got, want) {
			t.Errorf("console output lacks %s:\n%s", want, got)
		}
	}
	if !strings.Contains(carrier["traceparent"], id) {
		t.Errorf("traceparent injected = %q, want trace %s", carrier["traceparent"], id)
	}
	if err := stop(); err != nil { // twice is fine
		t.Fatal(err)
	}
}

// TestSetupTwoExporters: a list of exporters is refused, not half-honoured.
func TestSetupTwoExporters(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp,console")
	stop, err := telemetry.Setup(t.Context(), telemetry.Options{})
	defer stop()
	if !errors.Is(err, telemetry.ErrExporter) || telemetry.Enabled() {
		t.Fatalf("Setup = %v, enabled %v; want ErrExporter, off", err, telemetry.Enabled())
	}
}

// TestTraceID reads the trace id from the span in ctx, or else from the
// traceparent a gRPC caller sent.
func TestTraceID(t *testing.T) {
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	md := metadata.Pairs("traceparent", "00-"+id+"-00f067aa0ba902b7-01")
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"none", context.Background(), ""},
		{"from metadata", metadata.NewIncomingContext(context.Background(), md), id},
		{"bad metadata", metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", "junk")), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := telemetry.TraceID(tc.ctx); got != tc.want {
				t.Fatalf("TraceID = %q, want %q", got, tc.want)
			}
		})
	}
}
