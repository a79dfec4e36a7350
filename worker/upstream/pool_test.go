package upstream_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// client is a Go SDK client of the gateway: one 2025-era HTTP session,
// with the log messages it received, and a tick for each progress
// notification.
type client struct {
	sess     *mcp.ClientSession
	progress chan struct{}

	mu   sync.Mutex
	logs []*mcp.LoggingMessageParams
}

func (st *stack) connect(t testing.TB) *client {
	t.Helper()
	c := &client{progress: make(chan struct{}, 16)}
	cl := mcp.NewClient(&mcp.Implementation{Name: "pool-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			select {
			case c.progress <- struct{}{}:
			default:
			}
		},
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			if rootsLog(r.Params) {
				return // its answer to our roots/list, once per session: not what these tests count
			}
			c.mu.Lock()
			c.logs = append(c.logs, r.Params)
			c.mu.Unlock()
		},
	})
	// 2025-era: a session, which per-client upstream sessions follow.
	s, err := cl.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: st.url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c.sess = s
	return c
}

func (c *client) text(t testing.TB, tool string, args map[string]any) string {
	t.Helper()
	res, err := c.sess.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var b strings.Builder
	for _, ct := range res.Content {
		if tc, ok := ct.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if res.IsError {
		return "ERROR: " + b.String()
	}
	return b.String()
}

// rootsLog says whether server-everything sent p about the roots it got
// (the Go SDK client declares roots, so the server asks after initialize,
// and the client answers on its GET stream).
func rootsLog(p *mcp.LoggingMessageParams) bool {
	s, _ := p.Data.(string)
	return strings.HasPrefix(s, "Roots updated") || strings.HasPrefix(s, "Client returned no roots")
}

func (c *client) levels() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, l := range c.logs {
		out = append(out, string(l.Level))
	}
	return out
}

// toggleState calls server-everything's toggle-simulated-logging, whose
// answer says whether logging was on for the session before: state the
// server keeps per session.
func toggleState(t *testing.T, c *client) string {
	t.Helper()
	s := c.text(t, "toggle-simulated-logging", nil)
	switch {
	case strings.HasPrefix(s, "Started"):
		return "started"
	case strings.HasPrefix(s, "Stopped"):
		return "stopped"
	}
	t.Fatalf("toggle-simulated-logging answered %q", s)
	return ""
}

// TestPerClientSessionState: with per-client upstream sessions each
// client of the gateway has server-everything's per-session state to
// itself, over stdio (a process each) and HTTP (an MCP session each); with
// a shared connection, one client's toggle is seen by the other.
func TestPerClientSessionState(t *testing.T) {
	for _, tc := range []struct {
		name, transport string
		mode            upstream.SessionMode
		second          string // what the second client's toggle finds
		sessions        int
	}{
		{"stdio/per-client", "stdio", upstream.PerClient, "started", 2},
		{"stdio/shared", "stdio", upstream.Shared, "stopped", 0},
		{"http/per-client", "http", upstream.PerClient, "started", 2},
		{"http/shared", "http", upstream.Shared, "stopped", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := upstream.Options{Sessions: tc.mode}
			if tc.transport == "stdio" {
				opts.Command = []string{"node", everything(t), "stdio"}
			} else {
				opts.URL = httpEverything(t)
			}
			st := startStack(t, opts, "toggle-simulated-logging")
			a, b := st.connect(t), st.connect(t)
			if got := toggleState(t, a); got != "started" {
				t.Fatalf("first client's toggle: %s", got)
			}
			if got := toggleState(t, b); got != tc.second {
				t.Fatalf("second client's toggle: %s, want %s", got, tc.second)
			}
			if n := st.adapter.UpstreamSessions(); n != tc.sessions {
				t.Fatalf("%d upstream sessions, want %d", n, tc.sessions)
			}
			if tc.transport == "stdio" && tc.mode == upstream.PerClient {
				if pids := st.adapter.SessionPIDs(); len(pids) != 2 || pids[0] == pids[1] || slices.Contains(pids, st.adapter.PID()) {
					t.Fatalf("per-client pids %v (shared %d): want two processes of their own", pids, st.adapter.PID())
				}
			}
		})
	}
}

// TestPerClientSessionEnds: a client's DELETE closes its upstream
// session (over stdio, its process exits); the other client's stays.
func TestPerClientSessionEnds(t *testing.T) {
	st := startStack(t, upstream.Options{Command: []string{"node", everything(t), "stdio"}}, "echo")
	a, b := st.connect(t), st.connect(t)
	a.text(t, "echo", map[string]any{"message": "a"})
	b.text(t, "echo", map[string]any{"message": "b"})
	if n := st.adapter.UpstreamSessions(); n != 2 {
		t.Fatalf("%d upstream sessions, want 2", n)
	}
	before := st.adapter.SessionPIDs()
	if err := a.sess.Close(); err != nil { // DELETE
		t.Fatal(err)
	}
	testcluster.WaitFor(t, "the ended client's upstream session to close", func() bool { return st.adapter.UpstreamSessions() == 1 })
	after := st.adapter.SessionPIDs()
	if len(after) != 1 || !slices.Contains(before, after[0]) {
		t.Fatalf("pids before %v, after %v", before, after)
	}
	if got := b.text(t, "echo", map[string]any{"message": "still"}); got != "Echo: still" {
		t.Fatalf("the other client's echo: %q", got)
	}
	if pids := st.adapter.SessionPIDs(); !slices.Equal(pids, after) {
		t.Fatalf("the other client's process changed: %v, was %v", pids, after)
	}
}

// TestPerClientPoolFull: with room for one upstream session, a second
// client's call fails at once while the first client's call runs, and
// once it ended the second client's session takes the place of the idle
// first one.
func TestPerClientPoolFull(t *testing.T) {
	st := startStack(t, upstream.Options{Command: []string{"node", everything(t), "stdio"}, MaxSessions: 1}, "trigger-long-running-operation")
	a, b := st.connect(t), st.connect(t)
	a.text(t, "echo", map[string]any{"message": "warm"})
	first := st.adapter.SessionPIDs()
	long := make(chan string, 1)
	params := &mcp.CallToolParams{Name: "trigger-long-running-operation", Arguments: map[string]any{"duration": 3, "steps": 3}}
	params.SetProgressToken("long")
	go func() { // ends with the call, waited below
		res, err := a.sess.CallTool(context.Background(), params)
		switch {
		case err != nil:
			long <- err.Error()
		case res.IsError:
			long <- "tool error"
		default:
			long <- "ok"
		}
	}()
	// Its first progress is from the upstream: the call holds the upstream
	// session. (The worker counting it in flight is not enough: until the
	// call reaches the pool, the session is idle and b's call may take it.)
	select {
	case <-a.progress:
	case <-time.After(20 * time.Second):
		t.Fatal("no progress from the long call")
	}
	if got := b.text(t, "echo", map[string]any{"message": "b"}); !strings.Contains(got, "every upstream session is busy") {
		t.Fatalf("second client's call while the pool is full: %q", got)
	}
	if got := <-long; got != "ok" {
		t.Fatalf("the long call: %s", got)
	}
	if got := b.text(t, "echo", map[string]any{"message": "b"}); got != "Echo: b" {
		t.Fatalf("second client's call once the first is idle: %q", got)
	}
	if pids := st.adapter.SessionPIDs(); len(pids) != 1 || pids[0] == first[0] {
		t.Fatalf("pids %v, first client's was %v: want the first evicted", pids, first)
	}
}

// TestPerClientIdleReaped: an upstream session unused for IdleTimeout is
// closed; the client's next call starts a new one.
func TestPerClientIdleReaped(t *testing.T) {
	st := startStack(t, upstream.Options{Command: []string{"node", everything(t), "stdio"}, IdleTimeout: 300 * time.Millisecond}, "echo")
	a := st.connect(t)
	a.text(t, "echo", map[string]any{"message": "a"})
	testcluster.WaitFor(t, "the idle upstream session to be reaped", func() bool { return st.adapter.UpstreamSessions() == 0 })
	if got := a.text(t, "echo", map[string]any{"message": "again"}); got != "Echo: again" {
		t.Fatalf("echo after reaping: %q", got)
	}
}

// TestPerClientLogs: server-everything's simulated logs (sent outside any
// call) reach only the client whose upstream session sent them, at the
// level that client set; another client hears none of them.
func TestPerClientLogs(t *testing.T) {
	st := startStack(t, upstream.Options{Command: []string{"node", everything(t), "stdio"}}, "toggle-simulated-logging")
	loud, quiet, silent := st.connect(t), st.connect(t), st.connect(t)
	for c, level := range map[*client]mcp.LoggingLevel{loud: "debug", quiet: "emergency", silent: "debug"} {
		if err := c.sess.SetLoggingLevel(t.Context(), &mcp.SetLoggingLevelParams{Level: level}); err != nil {
			t.Fatal(err)
		}
	}
	silent.text(t, "echo", map[string]any{"message": "here"}) // has an upstream session, never toggles
	toggleState(t, loud)
	toggleState(t, quiet)
	// One message at once, then one every 5 s, each of a random level.
	testcluster.WaitFor(t, "two simulated logs at the loud client", func() bool { return len(loud.levels()) >= 2 })
	for _, l := range quiet.levels() {
		if l != "emergency" {
			t.Fatalf("the client at emergency got a %s message", l)
		}
	}
	if got := silent.levels(); len(got) != 0 {
		t.Fatalf("a client that turned no logging on got logs %v", got)
	}
}
