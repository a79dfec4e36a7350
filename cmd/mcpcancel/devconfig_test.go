package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/nodetest"
)

// TestDevUpstreamConfig runs `mcpcancel dev` fronting server-everything
// with --upstream-config denying get-env: the gateway lists the server's
// other tools but not get-env (which would hand the dev process's
// environment to any client), and lists and reads its resources and
// prompts.
func TestDevUpstreamConfig(t *testing.T) {
	server := filepath.Join(nodetest.Install(t), "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	cfg := filepath.Join(t.TempDir(), "tools.json")
	if err := os.WriteFile(cfg, []byte(`{"deny": ["get-env"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, nil, "dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0",
		"--upstream-stdio", "node '"+server+"' stdio", "--upstream-config", cfg)
	url := p.waitLine(t, "mcp: ")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "dev-config-test", Version: "1"}, nil).Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	var tools []string
	poll(t, "server-everything's tools", func() bool {
		tools = nil
		res, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			return false
		}
		for _, tool := range res.Tools {
			tools = append(tools, tool.Name)
		}
		return len(tools) > 1
	})
	for _, name := range tools {
		if name == "get-env" {
			t.Fatalf("get-env is listed though the config denies it: %v", tools)
		}
	}
	prompts, err := cs.ListPrompts(t.Context(), nil)
	if err != nil || len(prompts.Prompts) == 0 {
		t.Fatalf("prompts/list = %v, %v; want server-everything's prompts", prompts, err)
	}
	res, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "demo://resource/static/document/architecture.md"})
	if err != nil || len(res.Contents) != 1 || res.Contents[0].Text == "" {
		t.Fatalf("resources/read = %v, %v; want the document", res, err)
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.exitCode(t); code != 0 {
		t.Fatalf("dev exited %d after SIGTERM", code)
	}
}
