package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/nodetest"
)

// TestDevUpstreamStdio runs `mcpcancel dev --upstream-stdio` fronting the
// real server-everything behind a wire tap. A 2025-era TypeScript client
// cancels trigger-long-running-operation after two progress notifications:
// the server receives notifications/cancelled naming its own request id
// and keeps sending progress, the client gets nothing more, the audit has
// the cancel. SIGTERM then stops dev and the server with it.
func TestDevUpstreamStdio(t *testing.T) {
	clients := nodetest.Install(t)
	tap, err := filepath.Abs(filepath.Join("..", "..", "worker", "upstream", "testdata", "tap.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	wire := filepath.Join(t.TempDir(), "wire.log")
	server := filepath.Join(clients, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	p := start(t, nil, "dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0",
		"--upstream-stdio", fmt.Sprintf("node '%s' '%s' -- node '%s' stdio", tap, wire, server))
	coordAddr := p.waitLine(t, "coordinator: ")
	url := p.waitLine(t, "mcp: ")

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := nodetest.Node(t, ctx, "call2025.mjs", "--url", url, "--tool", "trigger-long-running-operation",
		"--args", `{"duration":6,"steps":4}`, "--cancel-after-progress", "2", "--linger-ms", "8000", "--no-wire")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("call2025.mjs: %v\n%s", err, out)
	}
	events := map[string]int{}
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var e struct{ Event string }
		json.Unmarshal(line, &e)
		events[e.Event]++
	}
	if events["cancel_sent"] != 1 || events["progress"] != 2 || events["late"] != 0 || events["result"] != 0 {
		t.Fatalf("client events %v; want 2 progress, the cancel, nothing late, no result\n%s", events, out)
	}

	callID, cancelled, progress := upstreamWire(t, wire)
	if callID == "" || len(cancelled) != 1 || cancelled[0] != callID {
		t.Fatalf("upstream tools/call id %q, notifications/cancelled for %v; want one, naming the upstream id", callID, cancelled)
	}
	if progress != 4 {
		t.Errorf("the server sent %d progress notifications; want all 4 (it ignores the cancel)", progress)
	}
	client := pb.NewCoordinatorServiceClient(dialTest(t, coordAddr))
	poll(t, "the cancelled record", func() bool {
		resp, err := client.ListAudit(t.Context(), &pb.ListAuditRequest{Outcome: "cancelled"})
		return err == nil && len(resp.Records) == 1 && resp.Records[0].Tool == "trigger-long-running-operation"
	})

	p.signal(t, syscall.SIGTERM)
	if code := p.exitCode(t); code != 0 {
		t.Fatalf("dev exited %d after SIGTERM", code)
	}
	for _, pid := range serverPIDs(t, wire) {
		poll(t, fmt.Sprintf("upstream process %d to end", pid), func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH })
	}
}

// upstreamWire reads the tap's log: the id of the tools/call the server
// received, the ids its notifications/cancelled named, and how many
// progress notifications it sent.
func upstreamWire(t *testing.T, file string) (callID string, cancelled []string, progress int) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		dir, msg, _ := strings.Cut(line, " ")
		var m struct {
			ID     json.RawMessage
			Method string
			Params struct {
				RequestID json.RawMessage `json:"requestId"`
			}
		}
		if (dir != "in" && dir != "out") || json.Unmarshal([]byte(msg), &m) != nil {
			continue
		}
		switch {
		case dir == "in" && m.Method == "tools/call":
			callID = string(m.ID)
		case dir == "in" && m.Method == "notifications/cancelled":
			cancelled = append(cancelled, string(m.Params.RequestID))
		case dir == "out" && m.Method == "notifications/progress":
			progress++
		}
	}
	return callID, cancelled, progress
}

// serverPIDs are the tap's and the server's process ids from the log.
func serverPIDs(t *testing.T, file string) []int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, line := range strings.Split(string(b), "\n") {
		var pid int
		if _, err := fmt.Sscanf(line, "tap %d", &pid); err == nil {
			pids = append(pids, pid)
		} else if _, err := fmt.Sscanf(line, "server %d", &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	// A tap and a server for each run: the shared connection's, and one
	// for each client session (per-client upstream sessions).
	if len(pids) == 0 || len(pids)%2 != 0 {
		t.Fatalf("process ids %v in the tap's log; want a tap's and a server's for each run", pids)
	}
	return pids
}

// TestUpstreamCommandLines checks the upstream flags' usage errors, in
// process.
func TestUpstreamCommandLines(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(cfg, []byte(`{"alow": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"demo and upstream", []string{"worker", "--demo", "--upstream-stdio", "x"}, 2, "--demo and an upstream server cannot share a worker"},
		{"two upstreams", []string{"worker", "--upstream-stdio", "x", "--upstream-http", "http://127.0.0.1:1/mcp"}, 2, "not both"},
		{"bad quoting", []string{"worker", "--upstream-stdio", "node 'x"}, 2, "--upstream-stdio: command has an unterminated quote"},
		{"negative concurrency", []string{"worker", "--upstream-stdio", "x", "--max-concurrency", "-1"}, 2, "--max-concurrency must not be negative"},
		{"config without upstream", []string{"worker", "--demo", "--upstream-config", cfg}, 2, "need --upstream-stdio or --upstream-http"},
		{"bad config", []string{"worker", "--upstream-stdio", "sh", "--upstream-config", cfg, "--coordinator", "127.0.0.1:1"}, 1, `unknown field "alow"`},
		{"no such command", []string{"worker", "--upstream-stdio", "mcpcancel-no-such-server"}, 2, `--upstream-stdio: exec: "mcpcancel-no-such-server": executable file not found`},
		{"bad connect timeout", []string{"worker", "--upstream-stdio", "sh", "--upstream-connect-timeout", "0s"}, 2, "--upstream-connect-timeout must be positive"},
		{"dev two upstreams", []string{"dev", "--upstream-stdio", "x", "--upstream-http", "http://127.0.0.1:1/mcp"}, 2, "not both"},
		{"help", []string{"help", "worker"}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Main(t.Context(), tc.args, &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr.String(), tc.code, tc.stderr)
			}
			if tc.name == "help" {
				inOrder(t, "stdout", stdout.String(), []string{"--max-concurrency int", "--upstream-config file", "--upstream-http URL", "--upstream-stdio command"})
			}
		})
	}
}
