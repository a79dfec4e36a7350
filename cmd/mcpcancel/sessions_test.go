package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/nodetest"
)

// sessionRun is what one client saw of server-everything's per-session
// state: the answers to its requests, the log messages and the resource
// updates it heard.
type sessionRun struct {
	Results map[string]json.RawMessage
	Logs    []logSeen
	Updates []string
}

type logSeen struct {
	Level string
	Data  string
}

const watchedDoc = "demo://resource/static/document/architecture.md"

// levelAtLeast says whether level is at or above min.
func levelAtLeast(level, min string) bool {
	order := []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}
	return slices.Index(order, level) >= slices.Index(order, min)
}

// check says what of r breaks the session it asked for: logs below level,
// updates of resources it did not subscribe to (or none, when it did).
func (r sessionRun) check(level string, subscribed bool) error {
	for _, l := range r.Logs {
		if !levelAtLeast(l.Level, level) {
			return fmt.Errorf("a %s log at level %s: %q", l.Level, level, l.Data)
		}
	}
	for _, u := range r.Updates {
		if !subscribed || u != watchedDoc {
			return fmt.Errorf("an update of %s (subscribed: %v)", u, subscribed)
		}
	}
	if subscribed && len(r.Updates) == 0 {
		return fmt.Errorf("no update of the subscribed resource")
	}
	return nil
}

// tsSession runs test/clients/sessions2025.mjs (the official TypeScript
// v1 client) against target (--url or --stdio) and parses what it saw.
func tsSession(t *testing.T, target []string, level string, subscribe bool) sessionRun {
	t.Helper()
	args := append([]string{"sessions2025.mjs"}, target...)
	args = append(args, "--level", level, "--toggle-logs", "--toggle-updates", "--max-ms", "12000")
	if subscribe {
		args = append(args, "--subscribe", watchedDoc, "--logs", "1", "--updates", "1")
	} else {
		args = append(args, "--max-ms", "6000") // long enough for the immediate update and log, had they come
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := nodetest.Node(t, ctx, args...).Output()
	if err != nil {
		t.Fatalf("sessions2025.mjs %v: %v\n%s", target, err, out)
	}
	r := sessionRun{Results: map[string]json.RawMessage{}}
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var e struct {
			Event, Request, Level, URI string
			Data                       any
			Result                     json.RawMessage
		}
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("sessions2025.mjs printed %q", line)
		}
		switch e.Event {
		case "result":
			r.Results[e.Request] = e.Result
		case "log":
			r.Logs = append(r.Logs, logSeen{e.Level, fmt.Sprint(e.Data)})
		case "updated":
			r.Updates = append(r.Updates, e.URI)
		case "error":
			t.Fatalf("sessions2025.mjs %v: %s", target, line)
		}
	}
	return r
}

// goSession does what sessions2025.mjs does with the Go SDK's client.
func goSession(t *testing.T, transport mcp.Transport, level string, subscribe bool) sessionRun {
	t.Helper()
	var mu sync.Mutex
	r := sessionRun{Results: map[string]json.RawMessage{}}
	heard := make(chan struct{}, 100)
	c := mcp.NewClient(&mcp.Implementation{Name: "sessions-go", Version: "1"}, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			mu.Lock()
			r.Logs = append(r.Logs, logSeen{string(req.Params.Level), fmt.Sprint(req.Params.Data)})
			mu.Unlock()
			heard <- struct{}{}
		},
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			mu.Lock()
			r.Updates = append(r.Updates, req.Params.URI)
			mu.Unlock()
			heard <- struct{}{}
		},
	})
	cs, err := c.Connect(t.Context(), transport, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	put := func(name string, v any, err error) {
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, _ := json.Marshal(v)
		mu.Lock()
		r.Results[name] = b
		mu.Unlock()
	}
	put("logging/setLevel", struct{}{}, cs.SetLoggingLevel(t.Context(), &mcp.SetLoggingLevelParams{Level: mcp.LoggingLevel(level)}))
	if subscribe {
		put("resources/subscribe", struct{}{}, cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: watchedDoc}))
	}
	for _, tool := range []string{"toggle-simulated-logging", "toggle-subscriber-updates"} {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
		put(tool, res, err)
	}
	enough := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(r.Logs) >= 1 && len(r.Updates) >= 1
	}
	wait := time.NewTimer(6 * time.Second)
	if subscribe {
		wait.Reset(12 * time.Second)
	}
	defer wait.Stop()
	for !subscribe || !enough() {
		select {
		case <-heard:
		case <-wait.C:
			mu.Lock()
			defer mu.Unlock()
			return r
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return r
}

// sessionIDs are the upstream session ids in server-everything's texts:
// the direct and the gateway's runs have different ones.
var sessionIDs = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

func modIDs(b []byte) []byte { return sessionIDs.ReplaceAll(b, []byte("<id>")) }

// sameAnswers compares the answers two runs got, as JSON, modulo ids.
func sameAnswers(t *testing.T, what string, direct, through sessionRun) {
	t.Helper()
	for req, want := range direct.Results {
		var a, b any
		json.Unmarshal(want, &a)
		json.Unmarshal(through.Results[req], &b)
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if !bytes.Equal(modIDs(ja), modIDs(jb)) {
			t.Errorf("%s: %s answered %s directly, %s through the gateway", what, req, ja, jb)
		}
	}
	ack := func(r sessionRun) []string {
		var out []string
		for _, l := range r.Logs {
			if bytes.HasPrefix([]byte(l.Data), []byte("Received Subscribe")) {
				out = append(out, l.Level+" "+string(modIDs([]byte(l.Data))))
			}
		}
		return out
	}
	if a, b := ack(direct), ack(through); !slices.Equal(a, b) {
		t.Errorf("%s: the subscribe's log %q directly, %q through the gateway", what, a, b)
	}
}

// TestDevUpstreamSessionsDifferential: server-everything behind
// `mcpcancel dev --upstream-stdio` keeps each client's session apart, as
// it does for a client talking to it directly. Two clients at once: one
// at level info subscribes to a resource, the other at level emergency
// subscribes to nothing; both turn on simulated logs and updates. The
// subscriber hears the resource's updates and the subscribe's info log;
// the other hears no update and no log below emergency. What the official
// TypeScript v1 client and the Go SDK's client see through the gateway
// equals what they see directly (answers, the subscribe's log), and obeys
// the same rules.
func TestDevUpstreamSessionsDifferential(t *testing.T) {
	clients := nodetest.Install(t)
	server := filepath.Join(clients, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			var upstream []string
			var directTS []string
			var directGo func() mcp.Transport
			if transport == "stdio" {
				upstream = []string{"--upstream-stdio", fmt.Sprintf("node '%s' stdio", server)}
				directTS = []string{"--stdio", fmt.Sprintf("node '%s' stdio", server)}
				directGo = func() mcp.Transport { return &mcp.CommandTransport{Command: nodeCommand(server)} }
			} else {
				direct := httpEverything(t, server)
				upstream = []string{"--upstream-http", direct}
				directTS = []string{"--url", direct}
				directGo = func() mcp.Transport { return &mcp.StreamableClientTransport{Endpoint: direct} }
			}
			p := start(t, nil, append([]string{"dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0"}, upstream...)...)
			p.waitLine(t, "coordinator: ")
			url := p.waitLine(t, "mcp: ")
			ts := func(level string, subscribe, gw bool) sessionRun {
				if gw {
					return tsSession(t, []string{"--url", url}, level, subscribe)
				}
				return tsSession(t, directTS, level, subscribe)
			}
			gosdk := func(level string, subscribe, gw bool) sessionRun {
				if gw {
					return goSession(t, &mcp.StreamableClientTransport{Endpoint: url}, level, subscribe)
				}
				return goSession(t, directGo(), level, subscribe)
			}
			for _, c := range []struct {
				name string
				do   func(string, bool, bool) sessionRun
			}{{"typescript-v1", ts}, {"go-sdk", gosdk}} {
				t.Run(c.name, func(t *testing.T) {
					var wg sync.WaitGroup
					var sub, other, subDirect sessionRun
					wg.Go(func() { sub = c.do("info", true, true) })
					wg.Go(func() { other = c.do("emergency", false, true) })
					wg.Go(func() { subDirect = c.do("info", true, false) })
					wg.Wait()
					if err := subDirect.check("info", true); err != nil {
						t.Fatalf("directly, the subscriber: %v", err)
					}
					if err := sub.check("info", true); err != nil {
						t.Errorf("through the gateway, the subscriber: %v", err)
					}
					if err := other.check("emergency", false); err != nil {
						t.Errorf("through the gateway, the other client: %v", err)
					}
					sameAnswers(t, c.name, subDirect, sub)
				})
			}
		})
	}
}

// httpEverything runs server-everything over Streamable HTTP and returns
// its URL.
func httpEverything(t *testing.T, server string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "node", server, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+port)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }() // reaped here; waited for in cleanup
	t.Cleanup(func() { cancel(); <-exited })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr + "/mcp"
		}
		select {
		case <-exited:
			t.Fatal("server-everything exited")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("server-everything did not listen")
		}
	}
}

// nodeCommand runs server-everything over stdio, for a client to talk to
// it directly.
func nodeCommand(server string) *exec.Cmd { return exec.Command("node", server, "stdio") }
