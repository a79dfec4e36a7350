package coordinator

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpcancel/mcpcancel/internal/telemetry"
)

// Span events on the RPC's server span (internal/grpcserver gives every
// RPC one when the process traces): where Begin placed a call, and what a
// decision came to. The audit record carries the call's trace id either
// way (callRecord.TraceID).

// tracePlacement notes on Begin's span the worker the call was placed on.
func tracePlacement(ctx context.Context, rec *callRecord) {
	if !telemetry.Enabled() {
		return
	}
	trace.SpanFromContext(ctx).AddEvent("mcpcancel.placed", trace.WithAttributes(
		attribute.String("mcpcancel.call.id", rec.CallID),
		attribute.String("mcpcancel.worker", rec.Worker),
		attribute.String("gen_ai.tool.name", rec.Tool),
		attribute.String("mcpcancel.retry_of", rec.RetryOf),
	))
}

// traceDecision notes on the deciding RPC's span what d came to: its
// outcome, initiator and reason if it won, else the decision that had won
// before it.
func traceDecision(ctx context.Context, rec *callRecord, d decision, v verdict, err error) {
	if !telemetry.Enabled() || err != nil {
		return
	}
	outcome, initiator, reason := d.outcome(), d.initiator, d.reason
	if v.result != won && v.by != nil {
		outcome, initiator, reason = v.by.State, v.by.Initiator, v.by.Reason
	}
	trace.SpanFromContext(ctx).AddEvent("mcpcancel.decision", trace.WithAttributes(
		attribute.String("mcpcancel.call.id", rec.CallID),
		attribute.Bool("mcpcancel.decision.won", v.result == won),
		attribute.String("mcpcancel.outcome", outcome),
		attribute.String("mcpcancel.initiator", initiator),
		attribute.String("mcpcancel.reason", reason),
	))
}
