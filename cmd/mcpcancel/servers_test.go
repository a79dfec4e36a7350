package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/nodetest"
)

const longOp = "trigger-long-running-operation"

// TestMultiServerWorkerFromConfig runs a coordinator, a worker and a
// gateway, the worker and the gateway configured by --config files. The
// worker fronts two real server-everything processes, alpha and beta,
// each behind a wire tap and with a policy of its own. A Go SDK client
// sees both toolsets under their servers' prefixes, calls a tool in each,
// and runs the long operation in both at once, cancelling alpha's: alpha
// alone receives notifications/cancelled, for its own request; beta's
// call completes with all its progress; the audit records each under its
// prefixed name with its own outcome.
func TestMultiServerWorkerFromConfig(t *testing.T) {
	clients := nodetest.Install(t)
	server := filepath.Join(clients, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	tap, err := filepath.Abs(filepath.Join("..", "..", "worker", "upstream", "testdata", "tap.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	wire := map[string]string{"alpha": filepath.Join(dir, "alpha.log"), "beta": filepath.Join(dir, "beta.log")}
	stdio := func(name string) string {
		return strconv.Quote(fmt.Sprintf("node '%s' '%s' -- node '%s' stdio", tap, wire[name], server))
	}
	coord, coordAddr := startCoordinator(t)
	workerCfg := writeConfig(t, "worker.yaml", fmt.Sprintf(`
coordinator: %s
name: multi
servers:
  alpha:
    stdio: %s
    deny: [get-env]
  beta:
    stdio: %s
    sessions: shared
    allow: [echo, %s]
    tools:
      %s: {timeout: 1m}
`, coordAddr, stdio("alpha"), stdio("beta"), longOp, longOp))
	wk := start(t, nil, "worker", "--config", workerCfg)
	wk.waitLine(t, "worker: ")
	gw := start(t, nil, "gateway", "--config", writeConfig(t, "gateway.json", `{"http": "127.0.0.1:0", "coordinator": "`+coordAddr+`"}`))
	url := gw.waitLine(t, "mcp: ")

	var mu sync.Mutex
	progress := map[string]int{}
	alphaTwice := make(chan struct{})
	cs := mcpSession(t, url, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			tok, _ := r.Params.ProgressToken.(string)
			if progress[tok]++; tok == "alpha" && progress[tok] == 2 {
				close(alphaTwice)
			}
		},
	})
	checkToolsets(t, cs)
	for _, srv := range []string{"alpha", "beta"} {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: srv + "_echo", Arguments: map[string]any{"message": "to " + srv}})
		if err != nil || res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "to "+srv) {
			t.Fatalf("%s_echo = %+v, %v; want its echo", srv, res, err)
		}
	}

	alphaCtx, cancelAlpha := context.WithCancel(t.Context())
	defer cancelAlpha()
	alphaErr, betaErr := make(chan error, 1), make(chan error, 1)
	var betaRes *mcp.CallToolResult
	go func() { // waited for below
		p := &mcp.CallToolParams{Name: "alpha_" + longOp, Arguments: map[string]any{"duration": 6, "steps": 4}}
		p.SetProgressToken("alpha")
		_, err := cs.CallTool(alphaCtx, p)
		alphaErr <- err
	}()
	go func() { // waited for below
		p := &mcp.CallToolParams{Name: "beta_" + longOp, Arguments: map[string]any{"duration": 6, "steps": 4}}
		p.SetProgressToken("beta")
		var err error
		betaRes, err = cs.CallTool(t.Context(), p)
		betaErr <- err
	}()
	select {
	case <-alphaTwice:
	case err := <-alphaErr:
		t.Fatalf("alpha's call ended before two progress notifications: %v", err)
	}
	cancelAlpha()
	if err := <-alphaErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("alpha's call = %v, want cancelled", err)
	}
	if err := <-betaErr; err != nil || betaRes.IsError || !strings.Contains(betaRes.Content[0].(*mcp.TextContent).Text, "Long running operation completed") {
		t.Fatalf("beta's call = %+v, %v; want its result", betaRes, err)
	}
	// The go-sdk client hands a response to its caller as it reads it but
	// queues notifications for a handler goroutine, so the last progress
	// may reach the handler just after CallTool returns.
	poll(t, "beta's client to get all 4 progress notifications", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return progress["beta"] == 4
	})

	// The cancel reached alpha's server, for its own id, and not beta's.
	callID, cancelled, _ := upstreamWire(t, wire["alpha"])
	if callID == "" || len(cancelled) != 1 || cancelled[0] != callID {
		t.Errorf("alpha: upstream tools/call id %q, notifications/cancelled for %v; want one, naming that id", callID, cancelled)
	}
	if _, cancelled, progress := upstreamWire(t, wire["beta"]); len(cancelled) != 0 || progress != 4 {
		t.Errorf("beta: notifications/cancelled for %v and %d progress sent; want none and 4", cancelled, progress)
	}
	client := pb.NewCoordinatorServiceClient(dialTest(t, coordAddr))
	poll(t, "alpha's cancelled record and beta's completed one", func() bool {
		c, err1 := client.ListAudit(t.Context(), &pb.ListAuditRequest{Outcome: "cancelled"})
		d, err2 := client.ListAudit(t.Context(), &pb.ListAuditRequest{Outcome: "completed"})
		return err1 == nil && err2 == nil && len(c.Records) == 1 && c.Records[0].Tool == "alpha_"+longOp &&
			slices.ContainsFunc(d.Records, func(r *pb.AuditRecord) bool { return r.Tool == "beta_"+longOp })
	})

	for _, p := range []*proc{gw, wk, coord} {
		p.signal(t, syscall.SIGTERM)
		if code := p.exitCode(t); code != 0 {
			t.Errorf("exited %d after SIGTERM", code)
		}
	}
}

// checkToolsets waits until the gateway lists both servers' tools, and
// checks that each is prefixed and filtered by its own server's policy.
func checkToolsets(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	tools := map[string]bool{}
	poll(t, "both servers' tools", func() bool {
		res, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			return false
		}
		clear(tools)
		for _, tool := range res.Tools {
			tools[tool.Name] = true
		}
		return tools["alpha_"+longOp] && tools["beta_"+longOp]
	})
	for name := range tools {
		if !strings.HasPrefix(name, "alpha_") && !strings.HasPrefix(name, "beta_") {
			t.Errorf("tool %q is listed without a server's prefix", name)
		}
	}
	for name, want := range map[string]bool{"alpha_echo": true, "alpha_get-sum": true, "alpha_get-env": false, "beta_echo": true, "beta_get-sum": false} {
		if tools[name] != want {
			t.Errorf("%s listed: %v, want %v (each server's own policy)", name, tools[name], want)
		}
	}
}

// TestServersConfigErrors checks that a bad "servers" is refused before
// anything starts, naming the server and what is wrong.
func TestServersConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		args       []string
		stderr     string
	}{
		{"and an upstream flag", `{"servers": {"a": {"stdio": "sh"}}}`, []string{"--upstream-stdio", "sh"}, "servers and the --upstream-* flags of a single server cannot be used together"},
		{"and demo", `{"demo": true, "servers": {"a": {"stdio": "sh"}}}`, nil, "--demo and an upstream server cannot share a worker"},
		{"unknown key", `{"servers": {"a": {"stdio": "sh", "alow": ["x"]}}}`, nil, `servers.a: unknown field "alow"`},
		{"bad name", `{"servers": {"a_b": {"stdio": "sh"}}}`, nil, `servers.a_b: upstream: a server name is 1 to 32 letters, digits and '-'`},
		{"stdio and http", `{"servers": {"a": {"stdio": "sh", "http": "http://127.0.0.1:1/mcp"}}}`, nil, `servers.a: give one of "stdio" (a command) and "http" (a URL)`},
		{"neither", `{"servers": {"a": {"sessions": "shared"}}}`, nil, `servers.a: give one of "stdio"`},
		{"no such program", `{"servers": {"a": {"stdio": "mcpcancel-no-such-server"}}}`, nil, `servers.a: stdio: exec: "mcpcancel-no-such-server": executable file not found`},
		{"bad sessions", `{"servers": {"a": {"stdio": "sh", "sessions": "each"}}}`, nil, `servers.a: sessions: upstream sessions must be`},
		{"bad pattern", `{"servers": {"a": {"stdio": "sh", "deny": ["["]}}}`, nil, `servers.a: bad tool pattern "["`},
		{"bad timeout", `{"servers": {"a": {"stdio": "sh", "tools": {"*": {"timeout": "soon"}}}}}`, nil, `servers.a: time: invalid duration "soon"`},
		{"credentials for stdio", `{"servers": {"a": {"stdio": "sh", "header-file": "h"}}}`, nil, "servers.a: header-file and token-url are credentials for an http server"},
		{"not an object", `{"servers": ["a"]}`, nil, "servers: want an object of servers by name"},
		{"empty", `{"servers": {}}`, nil, "servers: want an object of servers by name"},
	} {
		for _, role := range []string{"worker", "dev"} {
			t.Run(role+"/"+tc.name, func(t *testing.T) {
				if role == "dev" && tc.name == "and demo" {
					t.Skip("dev has no --demo")
				}
				cfg := writeConfig(t, "c.json", tc.file)
				var stdout, stderr bytes.Buffer
				code := Main(t.Context(), append([]string{role, "--config", cfg}, tc.args...), &stdout, &stderr)
				if code != 2 || !strings.Contains(stderr.String(), tc.stderr) {
					t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr.String(), tc.stderr)
				}
			})
		}
	}
}

// TestDevFrontsServersFromConfig runs `mcpcancel dev --config` with two
// servers: the dev gateway lists both toolsets, prefixed.
func TestDevFrontsServersFromConfig(t *testing.T) {
	server := filepath.Join(nodetest.Install(t), "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	cmd := strconv.Quote("node '" + server + "' stdio")
	cfg := writeConfig(t, "dev.json", `{
		"http": "127.0.0.1:0", "coordinator-listen": "127.0.0.1:0",
		"servers": {"one": {"stdio": `+cmd+`, "allow": ["echo"]}, "two": {"stdio": `+cmd+`, "allow": ["get-sum"]}}
	}`)
	p := start(t, nil, "dev", "--config", cfg)
	url := p.waitLine(t, "mcp: ")
	cs := mcpSession(t, url, nil)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var names []string
	poll(t, "both servers' tools", func() bool {
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			return false
		}
		names = names[:0]
		for _, tool := range res.Tools {
			names = append(names, tool.Name)
		}
		return len(names) >= 2
	})
	slices.Sort(names)
	if strings.Join(names, " ") != "one_echo two_get-sum" {
		t.Errorf("tools %v; want one_echo and two_get-sum, each server's one allowed tool", names)
	}
	sum, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "two_get-sum", Arguments: map[string]any{"a": 2, "b": 3}})
	if err != nil || sum.IsError || !strings.Contains(sum.Content[0].(*mcp.TextContent).Text, "5") {
		t.Errorf("two_get-sum = %+v, %v; want 5", sum, err)
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.exitCode(t); code != 0 {
		t.Fatalf("dev exited %d after SIGTERM", code)
	}
}
