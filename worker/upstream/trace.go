package upstream

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/telemetry"
)

// withTrace passes the call's trace context to the fronted server in the
// request's _meta (traceparent, tracestate, baggage), as the MCP semantic
// conventions propagate it. Without a trace it adds nothing.
func withTrace(ctx context.Context, p *mcp.CallToolParams) {
	carrier := telemetry.Carrier(ctx)
	if carrier == nil {
		return
	}
	if p.Meta == nil {
		p.Meta = mcp.Meta{}
	}
	for k, v := range carrier {
		p.Meta[k] = v
	}
}
