package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// connect opens a Go SDK client session to a gateway, recording the wire.
func connect(t *testing.T, url, version string, w *wire, progress chan<- *mcp.ProgressNotificationParams) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "gosdk-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			if progress != nil {
				progress <- r.Params
			}
		},
	})
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: w.client(), MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// The Go SDK client cancels a sleep after progress starts, speaking
// 2025-11-25 (a session; notifications/cancelled) and 2026-07-28 (no
// session; it closes the request's stream): the wire carries no response
// and no error for it, progress stops, the worker's handler really
// returned, and the audit has one cancelled record.
func TestGoSDKCancel(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) { testGoSDKCancel(t, version) })
	}
}

func testGoSDKCancel(t *testing.T, version string) {
	st := newStack(t, stackOptions{})
	var w wire
	progress := make(chan *mcp.ProgressNotificationParams, 100)
	cs := connect(t, st.urls[0], version, &w, progress)

	ctx, cancel := context.WithCancel(t.Context())
	params := &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"seconds": 20, "steps": 200}}
	params.SetProgressToken("tok-1")
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, params)
		errc <- err
	}()
	for range 2 {
		<-progress
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("CallTool = %v, want context.Canceled", err)
	}
	id := requestIDOf(w.snapshot(), "sleep")
	idKey, _ := json.Marshal(id)
	var rec *coordinator.AuditRecord
	waitFor(t, "the cancelled record and its stopped_at", func() bool {
		for _, as := range st.allAudits(t) {
			if len(as) == 1 && as[0].Tool == "sleep" && string(as[0].RequestID) == string(idKey) && as[0].StoppedAt != nil {
				rec = as[0]
				return true
			}
		}
		return false
	})
	if rec.Outcome != "cancelled" || rec.Initiator != "client" {
		t.Fatalf("audit = %+v", rec)
	}
	if version == "2025-11-25" && rec.Scope != "session:"+w.sessionID() {
		t.Fatalf("scope = %s, want the session", rec.Scope)
	}
	if version == "2026-07-28" && !strings.HasPrefix(rec.Scope, "stream:") {
		t.Fatalf("scope = %s, want a stream scope", rec.Scope)
	}
	if got := responsesTo(w.snapshot(), id); len(got) != 0 {
		t.Fatalf("the wire carried %d responses for cancelled request %v: %v", len(got), id, got[0].body)
	}
	// The session still works.
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "still here"}})
	if err != nil || !strings.Contains(textOf(res), "still here") {
		t.Fatalf("echo after cancel = %v, %v", res, err)
	}
}

// Completion wins: a cancel sent after the result was written changes
// nothing, is not answered, and is audited once as cancel_lost.
func TestGoSDKCompletionWins(t *testing.T) {
	st := newStack(t, stackOptions{})
	var w wire
	cs := connect(t, st.urls[0], "2025-11-25", &w, nil)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil || textOf(res) != "hi" {
		t.Fatalf("echo = %v, %v", res, err)
	}
	id := requestIDOf(w.snapshot(), "echo")
	idKey, _ := json.Marshal(id)
	status, body := post(t, st.urls[0], w.sessionID(), fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%s,"reason":"too late"}}`, idKey))
	if status != http.StatusAccepted || len(body) != 0 {
		t.Fatalf("late cancel answered %d %q, want 202 and no body", status, body)
	}
	scope := "session:" + w.sessionID()
	waitFor(t, "cancel_lost", func() bool { return len(st.audits(t, scope)[string(idKey)]) == 2 })
	as := st.audits(t, scope)[string(idKey)]
	if as[0].Outcome != "completed" || as[1].Outcome != "cancel_lost" || as[1].Reason != "too late" {
		t.Fatalf("audit = %s %s", as[0].Outcome, as[1].Outcome)
	}
}

// post sends one raw JSON-RPC message in a session and returns the answer.
func post(t *testing.T, url, session, body string) (int, []byte) {
	t.Helper()
	resp, b := authedPost(t, url, "", session, body)
	return resp.StatusCode, b
}

func textOf(r *mcp.CallToolResult) string {
	if r == nil || len(r.Content) == 0 {
		return ""
	}
	if tc, ok := r.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}

// A worker with a new tool joins: clients that can hear the gateway are
// told the tool list changed (2025: on the GET stream; 2026: on
// subscriptions/listen), and the new tool is listed.
func TestToolsListChanged(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			st := newStack(t, stackOptions{})
			changed := make(chan struct{}, 10)
			c := mcp.NewClient(&mcp.Implementation{Name: "gosdk-test", Version: "1"}, &mcp.ClientOptions{
				ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
			})
			cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: st.urls[0], MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cs.Close() })
			testcluster.StartWorker(t, worker.Options{Coordinator: st.coord.Addr, Name: "w2"}, func(w *worker.Worker) {
				w.Handle(worker.Tool{Name: "newcomer"}, func(context.Context, *worker.Call) (*worker.Result, error) {
					return worker.Text("hello"), nil
				})
			})
			select {
			case <-changed:
			case <-time.After(10 * time.Second):
				t.Fatal("no notifications/tools/list_changed")
			}
			res, err := cs.ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range res.Tools {
				names = append(names, tl.Name)
			}
			if !slices.Contains(names, "newcomer") {
				t.Fatalf("tools = %v", names)
			}
		})
	}
}
