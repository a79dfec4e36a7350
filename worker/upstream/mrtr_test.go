package upstream_test

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// A fronted server that asks its client something the 2026-07-28 way (an
// input_required result with inputRequests) is answered by the client of
// the call: a 2025-11-25 client gets elicitation/create on the call's
// stream, a 2026-07-28 client the gateway's own input_required; the
// adapter's SDK retries the server with the answer, and the client gets
// the server's result.
func TestUpstreamMultiRoundTripRelayed(t *testing.T) {
	for _, tr := range []struct {
		name string
		opts func(*testing.T) upstream.Options
	}{
		{"stdio", func(*testing.T) upstream.Options { return fixtureStdio() }},
		{"http-2026", func(t *testing.T) upstream.Options { return fixtureHTTP(t, true) }},
	} {
		t.Run(tr.name, func(t *testing.T) {
			st := startStack(t, tr.opts(t), "ask")
			for _, era := range []string{"2025-11-25", "2026-07-28"} {
				t.Run(era, func(t *testing.T) {
					asked := 0
					c := mcp.NewClient(&mcp.Implementation{Name: "upstream-test", Version: "1"}, &mcp.ClientOptions{
						ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
							asked++
							return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
						},
					})
					cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: st.url}, &mcp.ClientSessionOptions{ProtocolVersion: era})
					if err != nil {
						t.Fatal(err)
					}
					defer cs.Close()
					res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "ask", Arguments: map[string]any{}})
					if err != nil || res.IsError || text(res) != "hello Ada (accept)" {
						t.Fatalf("ask = %+v, %v; want the server's greeting of the client's answer", res, err)
					}
					if asked != 1 {
						t.Fatalf("the client was asked %d times; want once", asked)
					}
				})
			}
		})
	}
}
