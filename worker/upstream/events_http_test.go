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

// eventsHTTPFixture runs the events server over Streamable HTTP (the
// TypeScript SDK's StreamableHTTPServerTransport, a 2025-11-25 session
// each) and fronts it by its URL. The server stops with the test.
func eventsHTTPFixture(t *testing.T) upstream.Options {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", "events_server.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", script, filepath.Join(nodetest.Install(t), "node_modules"), "--http")
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
