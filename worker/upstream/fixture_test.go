package upstream_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// fixtureServerEnv, when set, makes the test binary run, instead of the
// tests, fixtureServer on stdio: a fronted server built on the Go SDK.
const fixtureServerEnv = "UPSTREAM_TEST_FIXTURE_SERVER"

// What the fixture server declares, for tests to compare with what the
// gateway shows its clients.
const (
	fixtureName         = "fixture"
	fixtureTitle        = "Fixture server"
	fixtureVersion      = "1.2.3"
	fixtureInstructions = "Call burst to hear progress; app is an MCP App."
	fixtureAppURI       = "ui://fixture/app.html"
	fixtureAppMIME      = "text/html;profile=mcp-app"
	fixtureAppHTML      = "<html><body>fixture app</body></html>"
)

// fixtureMeta is the _meta the fixture gives its tool, resource, prompt
// and their results: MCP Apps' ui and a vendor's key, to pass whole.
func fixtureMeta() mcp.Meta {
	return mcp.Meta{
		"ui":                      map[string]any{"resourceUri": fixtureAppURI, "visibility": []any{"model", "app"}},
		"com.example/fixture-key": map[string]any{"nested": []any{1.0, "two"}},
	}
}

type burstArgs struct {
	N int `json:"n"`
}

// fixtureServer has:
//   - burst {n}: n progress notifications, back to back, then its result;
//   - ask: asks its client's name by multi round-trip (2026-07-28), and
//     greets it;
//   - app: a tool whose _meta names the ui:// resource that renders it;
//   - the ui:// resource, and a prompt, each with _meta;
//   - serverInfo with a title, and instructions.
func fixtureServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: fixtureName, Title: fixtureTitle, Version: fixtureVersion},
		&mcp.ServerOptions{Instructions: fixtureInstructions})
	mcp.AddTool(s, &mcp.Tool{Name: "burst", Description: "progress, n times, then the result"},
		func(ctx context.Context, req *mcp.CallToolRequest, args burstArgs) (*mcp.CallToolResult, any, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				for i := 1; i <= args.N; i++ {
					req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: float64(args.N)})
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("burst %d", args.N)}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "ask", Description: "asks its client's name by multi round-trip"},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			if r, ok := req.Params.InputResponses["name"].(*mcp.ElicitResult); ok {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("hello %v (%s)", r.Content["name"], r.Action)}}}, nil, nil
			}
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"name": &mcp.ElicitParams{
				Message:         "Your name?",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}},
			}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "app", Description: "an MCP App", Meta: fixtureMeta()},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Meta: fixtureMeta(), Content: []mcp.Content{&mcp.TextContent{Text: "app"}}}, nil, nil
		})
	s.AddResource(&mcp.Resource{URI: fixtureAppURI, Name: "app", MIMEType: fixtureAppMIME, Meta: fixtureMeta()},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: fixtureAppURI, MIMEType: fixtureAppMIME, Text: fixtureAppHTML, Meta: fixtureMeta()}}}, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "greet", Description: "a greeting", Meta: fixtureMeta()},
		func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Meta: fixtureMeta(), Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "hello"}}}}, nil
		})
	return s
}

// runFixtureServer serves fixtureServer on stdio until its client leaves.
func runFixtureServer() int {
	if err := fixtureServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// fixtureStdio fronts the fixture server over stdio: this test binary,
// told so by its environment.
func fixtureStdio() upstream.Options {
	return upstream.Options{Command: []string{os.Args[0]}, Env: []string{fixtureServerEnv + "=1"}}
}

// fixtureHTTP fronts the fixture server over Streamable HTTP: stateful,
// as 2025-era servers are, or stateless, so that the adapter speaks
// 2026-07-28 with it.
func fixtureHTTP(t *testing.T, stateless bool) upstream.Options {
	t.Helper()
	srv := fixtureServer()
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: stateless}))
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	return upstream.Options{URL: hs.URL}
}
