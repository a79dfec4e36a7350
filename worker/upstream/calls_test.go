package upstream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// session is a Go SDK client session with the gateway (2025-era, so it
// has a session id and sends notifications/cancelled).
type session struct {
	*mcp.ClientSession
	mu       sync.Mutex
	progress []float64
	seen     chan struct{} // gets a value on each progress notification
}

func connect(t *testing.T, url string) *session {
	t.Helper()
	s := &session{seen: make(chan struct{}, 100)}
	c := mcp.NewClient(&mcp.Implementation{Name: "upstream-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			s.mu.Lock()
			s.progress = append(s.progress, req.Params.Progress)
			s.mu.Unlock()
			s.seen <- struct{}{}
		},
	})
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connecting to the gateway: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	s.ClientSession = cs
	return s
}

// waitProgress waits for the next progress notification.
func (s *session) waitProgress(t *testing.T) {
	t.Helper()
	select {
	case <-s.seen:
	case <-time.After(30 * time.Second):
		t.Fatal("no progress notification")
	}
}

func callParams(tool, args string) *mcp.CallToolParams {
	p := &mcp.CallToolParams{Name: tool, Arguments: json.RawMessage(args)}
	p.SetProgressToken("tok")
	return p
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestEchoWinsAgainstLateCancel: server-everything's echo completes; a
// cancel that arrives after the result changes nothing: the client has its
// result, the audit says completed and then cancel_lost, and the server
// never hears of the cancel.
func TestEchoWinsAgainstLateCancel(t *testing.T) {
	cmd, tp := stdioEverything(t)
	st := startStack(t, upstream.Options{Command: cmd}, "echo")
	s := connect(t, st.url)
	res, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hello"}})
	if err != nil || res.IsError || text(res) != "Echo: hello" {
		t.Fatalf("echo = %+v, %v; want the text %q", res, err, "Echo: hello")
	}
	recs := st.audits(t, "echo")
	if len(recs) != 1 || recs[0].Outcome != "completed" {
		t.Fatalf("audit before the cancel: %+v", recs)
	}
	// Cancel the finished call, naming the client's id, on the session.
	postCancel(t, st.url, s.ID(), recs[0].RequestID)
	testcluster.WaitFor(t, "the cancel_lost record", func() bool { return len(st.audits(t, "echo")) == 2 })
	recs = st.audits(t, "echo")
	if recs[0].Outcome != "completed" || recs[1].Outcome != "cancel_lost" {
		t.Fatalf("audit outcomes %s, %s; want completed, cancel_lost", recs[0].Outcome, recs[1].Outcome)
	}
	if got := cancelled(tp.messages(t)); len(got) != 0 {
		t.Fatalf("the server received notifications/cancelled for %v after the call completed", got)
	}
}

// postCancel sends notifications/cancelled for id on a 2025 session.
func postCancel(t *testing.T, url, sessionID string, id json.RawMessage) {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%s,"reason":"too late"}}`, id)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", sessionID)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST notifications/cancelled: %s", resp.Status)
	}
}

// TestServerKilledMidCall: the server's process group is killed while a
// call runs. The call fails with a clear error result, and the next call
// succeeds: on the shared connection the adapter starts the server again;
// a client session's own server is started afresh at its next call.
func TestServerKilledMidCall(t *testing.T) {
	for _, mode := range []upstream.SessionMode{upstream.Shared, upstream.PerClient} {
		t.Run(string(mode), func(t *testing.T) {
			cmd, _ := stdioEverything(t)
			st := startStack(t, upstream.Options{Command: cmd, Sessions: mode}, longOp, "echo")
			s := connect(t, st.url)
			done := callInBackground(t, s, callParams(longOp, `{"duration":60,"steps":60}`))
			s.waitProgress(t) // the server is working on the call
			pid := st.adapter.PID()
			if mode == upstream.PerClient {
				pid = st.adapter.SessionPIDs()[0]
			}
			if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			o := await(t, done, "its server was killed")
			if o.err != nil || !o.res.IsError || !strings.Contains(text(o.res), "went away during the call") {
				t.Fatalf("call = %q, %v; want an error result saying the server went away", text(o.res), o.err)
			}
			t.Logf("the client got: %s", text(o.res))
			// The worker lost its server: not the tool's own failure.
			checkAudit(t, st, longOp, "failed", "worker_lost")

			if mode == upstream.Shared {
				testcluster.WaitFor(t, "the restarted server", func() bool { p := st.adapter.PID(); return p != 0 && p != pid })
			}
			res, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "again"}})
			if err != nil || res.IsError || text(res) != "Echo: again" {
				t.Fatalf("echo after the restart = %+v, %v", res, err)
			}
			if mode == upstream.PerClient {
				if pids := st.adapter.SessionPIDs(); len(pids) != 1 || pids[0] == pid {
					t.Fatalf("the client session's servers: %v; want a new one in place of %d", pids, pid)
				}
			}
		})
	}
}

// TestIDsNeverConfused: two sessions call the same tool with the same
// client request id at once. Upstream they have different ids; cancelling
// one cancels only it upstream, and the other completes. Both go over
// the shared connection, where their upstream ids share one space (each
// client session's own connection has a space of its own).
func TestIDsNeverConfused(t *testing.T) {
	cmd, tp := stdioEverything(t)
	st := startStack(t, upstream.Options{Command: cmd, Sessions: upstream.Shared}, longOp)
	a, b := connect(t, st.url), connect(t, st.url)
	ctxA, cancelA := context.WithCancel(t.Context())
	defer cancelA()
	errA := make(chan error, 1)
	go func() {
		_, err := a.CallTool(ctxA, callParams(longOp, `{"duration":30,"steps":30}`))
		errA <- err
	}()
	resB := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := b.CallTool(t.Context(), callParams(longOp, `{"duration":3,"steps":6}`))
		if err != nil {
			t.Errorf("call B: %v", err)
		}
		resB <- res
	}()
	a.waitProgress(t)
	b.waitProgress(t) // both run upstream now
	cancelA()
	if err := <-errA; err == nil {
		t.Error("call A returned normally after its cancel")
	}
	res := <-resB
	if res == nil || res.IsError || !strings.Contains(text(res), "Steps: 6") {
		t.Fatalf("call B = %+v; want its result", res)
	}

	recs := st.audits(t, longOp)
	testcluster.WaitFor(t, "both calls settled", func() bool { recs = st.audits(t, longOp); return len(recs) == 2 })
	if !bytes.Equal(recs[0].RequestID, recs[1].RequestID) || recs[0].Scope == recs[1].Scope {
		t.Fatalf("the two calls had request ids %s, %s in scopes %s, %s; the test needs the same id in two scopes",
			recs[0].RequestID, recs[1].RequestID, recs[0].Scope, recs[1].Scope)
	}
	outcomes := map[string]int{}
	for _, r := range recs {
		outcomes[r.Outcome]++
	}
	if outcomes["cancelled"] != 1 || outcomes["completed"] != 1 {
		t.Fatalf("outcomes %v; want one cancelled and one completed", outcomes)
	}

	msgs := tp.messages(t)
	upA, upB := findCall(msgs, longOp, `"steps":30`), findCall(msgs, longOp, `"steps":6`)
	if upA == nil || upB == nil {
		t.Fatal("the server did not receive both calls")
	}
	if bytes.Equal(upA.ID, upB.ID) {
		t.Fatalf("both calls had upstream id %s", upA.ID)
	}
	testcluster.WaitFor(t, "the upstream cancel", func() bool { return len(cancelled(tp.messages(t))) > 0 })
	if got := cancelled(tp.messages(t)); len(got) != 1 || got[0] != string(upA.ID) {
		t.Fatalf("the server received notifications/cancelled for %v; want only A's upstream id %s (B's is %s)", got, upA.ID, upB.ID)
	}
	t.Logf("client id %s in both sessions; upstream ids A=%s (cancelled) B=%s", recs[0].RequestID, upA.ID, upB.ID)
}

// TestShutdownKillsTheServer: stopping the adapter ends the server and
// everything in its process group: here a shell's background sleep that
// neither reads stdin nor exits with its parent, the tap and
// server-everything.
func TestShutdownKillsTheServer(t *testing.T) {
	cmd, tp := stdioEverything(t)
	sleepFile := filepath.Join(t.TempDir(), "sleep.pid")
	quoted := make([]string, len(cmd))
	for i, a := range cmd {
		quoted[i] = "'" + a + "'"
	}
	sh := []string{"sh", "-c", "sleep 600 & echo $! > '" + sleepFile + "'; exec " + strings.Join(quoted, " ")}
	st := startStack(t, upstream.Options{Command: sh}, "echo")
	taps, servers := tp.pids(t)
	b, err := os.ReadFile(sleepFile)
	sleepPID, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || sleepPID == 0 || len(taps) != 1 || len(servers) != 1 || st.adapter.PID() != taps[0] {
		t.Fatalf("sleep pid %q (%v), tap pids %v, server pids %v, adapter's child %d", b, err, taps, servers, st.adapter.PID())
	}
	st.stopAdapter()
	if st.adapter.PID() != 0 {
		t.Error("the adapter still reports a child after stopping")
	}
	for _, pid := range []int{sleepPID, taps[0], servers[0]} {
		testcluster.WaitFor(t, fmt.Sprintf("process %d to end", pid), func() bool {
			return syscall.Kill(pid, 0) == syscall.ESRCH
		})
	}
}

// TestToolTimeout: a tool's configured timeout cancels the call upstream
// (notifications/cancelled with the server's id) and fails it with a
// message saying so.
func TestToolTimeout(t *testing.T) {
	cmd, tp := stdioEverything(t)
	cfg, err := upstream.ParseConfig([]byte(`{"tools": {"` + longOp + `": {"timeout": "1s"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	st := startStack(t, upstream.Options{Command: cmd, Config: cfg}, longOp)
	s := connect(t, st.url)
	res, err := s.CallTool(t.Context(), callParams(longOp, `{"duration":60,"steps":60}`))
	if err != nil || !res.IsError || !strings.Contains(text(res), "took longer than its 1s timeout") {
		t.Fatalf("call = %q, %v; want an error result about the timeout", text(res), err)
	}
	checkAudit(t, st, longOp, "failed", "tool")
	up := findCall(tp.messages(t), longOp, `"steps":60`)
	testcluster.WaitFor(t, "the upstream cancel", func() bool { return len(cancelled(tp.messages(t))) == 1 })
	if got := cancelled(tp.messages(t)); up == nil || got[0] != string(up.ID) {
		t.Fatalf("notifications/cancelled for %v; want the upstream id of the call", got)
	}
}

// outcome is how a tools/call ended, for the client.
type outcome struct {
	res *mcp.CallToolResult
	err error
}

// await waits for the outcome of a call whose end the test brought about.
func await(t *testing.T, done <-chan outcome, why string) outcome {
	t.Helper()
	select {
	case o := <-done:
		return o
	case <-time.After(60 * time.Second):
		t.Fatalf("the call did not end after %s", why)
		return outcome{}
	}
}

// callInBackground calls a tool; the channel gets the outcome.
func callInBackground(t *testing.T, s *session, p *mcp.CallToolParams) <-chan outcome {
	done := make(chan outcome, 1)
	go func() { // owned: the test reads done
		res, err := s.CallTool(t.Context(), p)
		done <- outcome{res, err}
	}()
	return done
}
