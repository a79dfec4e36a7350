package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// askStack is etcd, a coordinator, a worker with a tool that reports its
// call's session, and two gateways.
func askStack(t *testing.T) (*testcluster.Worker, []string) {
	t.Helper()
	cl := etcdtest.Single(t)
	coord := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{})
	conn := coord.Conn(t)
	c := pb.NewCoordinatorServiceClient(conn)
	w := testcluster.StartWorker(t, worker.Options{Coordinator: coord.Addr, Name: "asker"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "whoami", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(_ context.Context, call *worker.Call) (*worker.Result, error) {
			return worker.Text(call.Session()), nil
		})
	})
	waitFor(t, "the whoami tool", func() bool {
		resp, err := c.ListTools(t.Context(), nil)
		return err == nil && len(resp.Tools) >= 1
	})
	var urls []string
	for range 2 {
		_, url := testcluster.StartGateway(t, conn, gateway.Options{})
		urls = append(urls, url)
	}
	return w, urls
}

// askSession opens a 2025 session that declares caps, learns its scope
// through whoami, and opens its GET stream; what the stream carries comes
// on the channel, which closes when the stream ends. It returns once a
// log the worker sends the session arrives there: the gateway's watch of
// session notifications is live.
func askSession(t *testing.T, w *testcluster.Worker, url, caps string) (session, scope string, heard <-chan map[string]any) {
	t.Helper()
	init := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":` + caps + `,"clientInfo":{"name":"t","version":"0"}}}`
	resp, _ := testcluster.PostMCP(t, url, "", "", init)
	session = resp.Header.Get("Mcp-Session-Id")
	testcluster.PostMCP(t, url, "", session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	_, body := testcluster.PostMCP(t, url, "", session, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`)
	var result struct {
		Result struct {
			Content []struct{ Text string }
		}
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			json.Unmarshal([]byte(data), &result)
		}
	}
	if len(result.Result.Content) != 1 || !strings.HasPrefix(result.Result.Content[0].Text, "session:") {
		t.Fatalf("whoami answered %s", body)
	}
	scope = result.Result.Content[0].Text
	ch := getStream(t, url, session)
	waitFor(t, "a session log on the GET stream", func() bool {
		w.NotifySession(scope, "notifications/message", map[string]any{"level": "info", "data": "warm-up"})
		select {
		case m := <-ch:
			return m["method"] == "notifications/message"
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
	return session, scope, ch
}

type asked struct {
	raw json.RawMessage
	err error
}

// A worker asks a client session for its roots outside any call: the
// request comes on the session's GET stream under an id naming the
// worker; another client's answer under that id does not reach it; the
// client's answer, POSTed to the other replica, does.
func TestAskSessionAnsweredThroughAnotherReplica(t *testing.T) {
	w, urls := askStack(t)
	session, scope, heard := askSession(t, w, urls[0], `{"roots":{}}`)
	intruder, _, _ := askSession(t, w, urls[1], `{"roots":{}}`)
	got := make(chan asked, 1)
	go func() { // owned: ends with the answer or the test's context
		raw, err := w.AskSession(t.Context(), scope, "roots/list", map[string]any{})
		got <- asked{raw, err}
	}()
	req := nextOn(t, heard, "roots/list")
	id, _ := req["id"].(string)
	if !strings.HasPrefix(id, "mcpcancel-session.") || !strings.HasSuffix(id, ".asker") {
		t.Fatalf("roots/list came under id %v, want the gateway's session request id naming the worker", req["id"])
	}
	answer := func(session, uri string) {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]any{"roots": []any{map[string]any{"uri": uri}}}})
		if r, _ := testcluster.PostMCP(t, urls[1], "", session, string(b)); r.StatusCode != http.StatusAccepted {
			t.Fatalf("the answer was refused with %d", r.StatusCode)
		}
	}
	answer(intruder, "file:///not-yours")
	select {
	case a := <-got:
		t.Fatalf("another session's answer reached the request: %s %v", a.raw, a.err)
	default:
	}
	answer(session, "file:///mine")
	a := <-got
	if a.err != nil || !strings.Contains(string(a.raw), "file:///mine") {
		t.Fatalf("AskSession = %s, %v; want the client's roots", a.raw, a.err)
	}
}

// A request the client did not declare the capability for is never sent:
// the gateway answers for the client with -32601.
func TestAskSessionUndeclaredIsRefused(t *testing.T) {
	w, urls := askStack(t)
	_, scope, heard := askSession(t, w, urls[0], `{"roots":{}}`)
	_, err := w.AskSession(t.Context(), scope, "sampling/createMessage", map[string]any{"messages": []any{}, "maxTokens": 1})
	var ce *worker.ClientError
	if !errors.As(err, &ce) || ce.Code != -32601 {
		t.Fatalf("AskSession = %v, want the gateway's -32601", err)
	}
	// A log sent after the request follows the same path: had the request
	// gone out, it would come before the log.
	w.NotifySession(scope, "notifications/message", map[string]any{"level": "info", "data": "after"})
	bound := time.After(20 * time.Second) // a bound, not a wait for anything
	for {
		select {
		case m, ok := <-heard:
			if !ok {
				t.Fatal("the GET stream ended")
			}
			if m["method"] == "sampling/createMessage" {
				t.Fatalf("the client was sent a request it did not declare: %v", m)
			}
			if p, _ := m["params"].(map[string]any); m["method"] == "notifications/message" && p["data"] == "after" {
				return
			}
		case <-bound:
			t.Fatal("the log sent after the refusal never came")
		}
	}
}

// A request the worker gives up is cancelled at the client, naming its
// id; the client's late answer is ignored.
func TestAskSessionWithdrawnIsCancelledAtTheClient(t *testing.T) {
	w, urls := askStack(t)
	session, scope, heard := askSession(t, w, urls[0], `{"roots":{}}`)
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan asked, 1)
	go func() { // owned: ends when ctx is cancelled below
		raw, err := w.AskSession(ctx, scope, "roots/list", map[string]any{})
		got <- asked{raw, err}
	}()
	id := nextOn(t, heard, "roots/list")["id"]
	cancel()
	if a := <-got; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("AskSession = %s, %v; want it given up", a.raw, a.err)
	}
	c := nextOn(t, heard, "notifications/cancelled")
	if p, _ := c["params"].(map[string]any); p["requestId"] != id {
		t.Fatalf("cancelled %v, want the request %v", c, id)
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]any{"roots": []any{}}})
	if r, _ := testcluster.PostMCP(t, urls[0], "", session, string(b)); r.StatusCode != http.StatusAccepted {
		t.Fatalf("the late answer was refused with %d; it is ignored, not an error", r.StatusCode)
	}
}

// AskSession names a client session: a 2026-07-28 request belongs to
// none, and only the three requests toward a client may be asked.
func TestAskSessionBadInput(t *testing.T) {
	w := worker.New(worker.Options{})
	for _, tc := range []struct{ session, method string }{
		{"", "roots/list"}, {"stream:abc", "roots/list"}, {"session:abc", "tools/call"},
	} {
		if _, err := w.AskSession(t.Context(), tc.session, tc.method, nil); !errors.Is(err, worker.ErrNoSession) {
			t.Errorf("AskSession(%q, %q) = %v, want ErrNoSession", tc.session, tc.method, err)
		}
	}
}
