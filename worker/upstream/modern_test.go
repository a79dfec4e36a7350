package upstream_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// TestModernHTTPCancelClosesTheStream: against a 2026-07-28 server (the Go
// SDK's, stateless) the adapter negotiates 2026-07-28, and cancelling a
// call closes the call's request stream, the 2026-07-28 cancellation; the
// client gets no result and the audit has the cancel.
func TestModernHTTPCancelClosesTheStream(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "modern", Version: "1"}, nil)
	release := make(chan struct{})
	sawCancel := make(chan bool, 1)
	mcp.AddTool(srv, &mcp.Tool{Name: "block"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		if tok := req.Params.GetProgressToken(); tok != nil {
			req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1})
		}
		select {
		case <-ctx.Done():
			sawCancel <- true
		case <-release:
			sawCancel <- false
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "late"}}}, nil, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	t.Cleanup(func() {
		close(release)
		if <-sawCancel {
			t.Log("the server's tool saw the cancellation")
		} else {
			t.Log("the Go SDK's stateless server did not cancel its tool when the stream closed")
		}
	})
	closes := &streamCloses{m: map[string]bool{}}
	st := startStack(t, upstream.Options{URL: hs.URL, HTTPClient: &http.Client{Transport: closes}}, "block")

	s := connect(t, st.url)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { _, err := s.CallTool(ctx, callParams("block", `{}`)); errc <- err }()
	s.waitProgress(t)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the call returned normally after its cancel")
	}
	if v := closes.version("tools/call"); v != "2026-07-28" {
		t.Fatalf("tools/call sent with MCP-Protocol-Version %q; want 2026-07-28", v)
	}
	testcluster.WaitFor(t, "the adapter to close the call's stream", func() bool { return closes.closed("tools/call") })
	testcluster.WaitFor(t, "the cancelled record", func() bool { return len(st.audits(t, "block")) == 1 })
	checkAudit(t, st, "block", "cancelled", "client")
}
