package upstream

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"

	"github.com/mcpcancel/mcpcancel/internal/telemetry"
)

// withTrace passes the call's trace context to the fronted server in the
// request's _meta (traceparent, tracestate, baggage), as the MCP semantic
// conventions propagate it. Without a trace it adds nothing.
func withTrace(ctx context.Context, p *mcp.CallToolParams) {
	if !telemetry.Enabled() {
		return
	}
	carrier := propagation.MapCarrier{}
	telemetry.Propagator().Inject(ctx, carrier)
	if len(carrier) == 0 {
		return
	}
	if p.Meta == nil {
		p.Meta = mcp.Meta{}
	}
	for k, v := range carrier {
		p.Meta[k] = v
	}
}
