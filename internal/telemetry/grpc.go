package telemetry

import (
	"context"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// noHealth leaves gRPC health checks (probes, every few seconds) out of
// the traces.
var noHealth = otelgrpc.WithFilter(filters.Not(filters.HealthCheck()))

// ServerOption gives a gRPC server a span per RPC, parented by the
// caller's trace context; with tracing off it is a no-op option.
func ServerOption() grpc.ServerOption {
	if !Enabled() {
		return grpc.EmptyServerOption{}
	}
	return grpc.StatsHandler(otelgrpc.NewServerHandler(noHealth))
}

// DialOption gives a gRPC client a span per RPC, whose context travels
// to the server; with tracing off it is a no-op option.
func DialOption() grpc.DialOption {
	if !Enabled() {
		return grpc.EmptyDialOption{}
	}
	return grpc.WithStatsHandler(otelgrpc.NewClientHandler(noHealth))
}

// TraceID is the trace id of ctx's span, in hex, or of the trace context
// the gRPC caller sent when this process does not trace itself; "" if
// there is none. The audit records it, so that it names the call's trace
// whether or not the coordinator exports spans.
func TraceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String()
	}
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok || len(md.Get("traceparent")) == 0 {
		return ""
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, metadataCarrier(md)))
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// metadataCarrier reads gRPC metadata as a propagation carrier.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
