package upstream_test

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mcpcancel/mcpcancel/internal/nodetest"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// eventsHTTPFixture runs the events server over Streamable HTTP on the
// TypeScript SDK v1 (StreamableHTTPServerTransport: a 2025-11-25 session
// each, with Mcp-Session-Id, cancelled by notifications/cancelled).
func eventsHTTPFixture(t *testing.T) upstream.Options {
	return eventsHTTPServer(t, "events_server.mjs", "--http")
}

// eventsHTTP2026Fixture runs it on the TypeScript SDK v2
// (createMcpHandler: 2026-07-28, no session; it checks each request's
// headers and _meta, and a request's stream closed cancels it).
func eventsHTTP2026Fixture(t *testing.T) upstream.Options {
	return eventsHTTPServer(t, "events_server2026.mjs")
}

// eventsHTTPServer runs the script of testdata over Streamable HTTP, and
// fronts it by the URL it prints. The server stops with the test.
func eventsHTTPServer(t *testing.T, name string, args ...string) upstream.Options {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", append([]string{script, filepath.Join(nodetest.Install(t), "node_modules")}, args...)...)
	cmd.Stderr = t.Output()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	// The first line, or EOF if it exits first.
	line, err := bufio.NewReader(out).ReadBytes('\n')
	var ready struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(line, &ready); err != nil || ready.URL == "" {
		t.Fatalf("the events server did not start: %q %v", line, err)
	}
	return upstream.Options{URL: ready.URL}
}
