package upstream_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// TestCallLogsFromHTTPServer: a 2026-07-28 Go SDK server logs during a
// call, on the call's stream, at the level the request's _meta asks for.
// A 2026-07-28 client of the gateway asking for info gets the info
// message and not the debug one, on its call's stream (the adapter passes
// the level upstream and hands the call what its request's stream
// carries). A 2025-era client at debug gets both, through its session.
func TestCallLogsFromHTTPServer(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "chatty", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "chatty"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "debug", Data: "d"})
		req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: "i"})
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	st := startStack(t, upstream.Options{URL: hs.URL}, "chatty")

	for _, tc := range []struct {
		version string
		want    []string
	}{
		{"2026-07-28", []string{"info"}},
		{"2025-11-25", []string{"debug", "info"}},
	} {
		t.Run(tc.version, func(t *testing.T) {
			var mu sync.Mutex
			var levels []string
			c := mcp.NewClient(&mcp.Implementation{Name: "logs-test", Version: "1"}, &mcp.ClientOptions{
				LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
					mu.Lock()
					levels = append(levels, string(r.Params.Level))
					mu.Unlock()
				},
			})
			cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: st.url}, &mcp.ClientSessionOptions{ProtocolVersion: tc.version})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			p := &mcp.CallToolParams{Name: "chatty", Arguments: map[string]any{}}
			if tc.version == "2026-07-28" {
				p.Meta = mcp.Meta{"io.modelcontextprotocol/logLevel": "info"}
			} else if err := cs.SetLoggingLevel(t.Context(), &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
				t.Fatal(err)
			}
			res, err := cs.CallTool(t.Context(), p)
			if err != nil || text(res) != "done" {
				t.Fatalf("chatty: %v %v", res, err)
			}
			testcluster.WaitFor(t, "the logs", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(levels) >= len(tc.want)
			})
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(levels, tc.want) {
				t.Fatalf("logs at levels %v, want %v", levels, tc.want)
			}
		})
	}
}
