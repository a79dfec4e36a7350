package worker

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/telemetry"
)

// tracerName names the worker's spans' instrumentation scope.
const tracerName = "github.com/mcpcancel/mcpcancel/worker"

// startHandlerSpan starts the span of a tool's handler, a child of the
// Execute RPC's span (and so of the client's trace), named as the GenAI
// conventions name a tool's execution. It returns ctx unchanged and a nil
// span when the process does not trace.
func startHandlerSpan(ctx context.Context, req *pb.ExecuteRequest) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return ctx, nil
	}
	return telemetry.Tracer(tracerName).Start(ctx, "execute_tool "+req.GetTool(),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", req.GetTool()),
			attribute.String("mcpcancel.call.id", req.GetCallId()),
		))
}

// endHandlerSpan records that the handler returned, and why its context
// ended if it did (a stop order, shutdown, the caller gone, the deadline),
// then ends the span.
func endHandlerSpan(ctx context.Context, span trace.Span, res *Result, herr error, stoppedAt time.Time) {
	if span == nil {
		return
	}
	attrs := []attribute.KeyValue{attribute.Bool("mcpcancel.handler.cancelled", ctx.Err() != nil)}
	if cause := context.Cause(ctx); cause != nil {
		attrs = append(attrs, attribute.String("mcpcancel.handler.cause", stopCause(cause)))
	}
	switch {
	case herr != nil:
		span.SetStatus(codes.Error, herr.Error())
		attrs = append(attrs, attribute.String("error.type", "handler_error"))
	case res != nil && res.IsError:
		attrs = append(attrs, attribute.String("error.type", "tool_error"))
	}
	span.AddEvent("mcpcancel.handler.stopped", trace.WithTimestamp(stoppedAt), trace.WithAttributes(attrs...))
	span.End(trace.WithTimestamp(stoppedAt))
}

// stopCause names why a handler's context ended.
func stopCause(cause error) string {
	switch {
	case errors.Is(cause, errStopped):
		return "stop_order"
	case errors.Is(cause, errShutdown):
		return "shutdown"
	case errors.Is(cause, errLeaseLost):
		return "lease_lost"
	case errors.Is(cause, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(cause, errCallerGone), errors.Is(cause, context.Canceled):
		return "caller_gone" // told so (CallersGone), or its stream ended
	default:
		return "other"
	}
}
