package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
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
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// The rules of 2026-07-28 that the gateway applies before a request is
// handled, each against the real system: etcd, a coordinator, a worker
// serving the demo and conformance fixture tools, and a gateway.

// fixtureURL starts the system with the fixture tools and returns the
// gateway's MCP URL.
func fixtureURL(t *testing.T) string {
	t.Helper()
	_, url := fixtureGateway(t)
	return url
}

// fixtureGateway is fixtureURL's gateway, and its URL.
func fixtureGateway(t *testing.T) (*gateway.Gateway, string) {
	t.Helper()
	cl := etcdtest.Single(t)
	coord := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{})
	testcluster.StartWorker(t, worker.Options{Coordinator: coord.Addr, Name: "fixtures"}, func(w *worker.Worker) {
		demo.Register(w)
		demo.RegisterFixtures(w)
	})
	conn := coord.Conn(t)
	c := pb.NewCoordinatorServiceClient(conn)
	waitFor(t, "the fixture tools", func() bool {
		resp, err := c.ListTools(t.Context(), nil)
		return err == nil && len(resp.Tools) > 10
	})
	return testcluster.StartGateway(t, conn, gateway.Options{})
}

// envelope is a complete 2026-07-28 _meta; caps are the client's.
func envelope(caps map[string]any) map[string]any {
	return map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": caps,
	}
}

// headers2026 are the headers a conforming client mirrors for method
// and name.
func headers2026(method, name string) map[string]string {
	h := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": method}
	if name != "" {
		h["Mcp-Name"] = name
	}
	return h
}

type rpcMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code int             `json:"code"`
		Data json.RawMessage `json:"data"`
	} `json:"error"`
}

// post sends one request and returns the status and every message of
// the answer, JSON or SSE, read to its end.
func post26(t *testing.T, url string, body any, headers map[string]string) (int, []rpcMsg) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var msgs []rpcMsg
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var m rpcMsg
		if len(raw) > 0 && json.Unmarshal(raw, &m) == nil {
			msgs = append(msgs, m)
		}
		return resp.StatusCode, msgs
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var m rpcMsg
			json.Unmarshal([]byte(data), &m)
			msgs = append(msgs, m)
		}
	}
	return resp.StatusCode, msgs
}

func request(id any, method string, params map[string]any) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}
}

// wantError checks the status and that the last message is an error
// with code, answering id.
func wantError(t *testing.T, status int, msgs []rpcMsg, wantStatus, code int, id string) {
	t.Helper()
	if status != wantStatus || len(msgs) == 0 {
		t.Fatalf("status %d, %d messages; want %d and an error", status, len(msgs), wantStatus)
	}
	last := msgs[len(msgs)-1]
	if last.Error == nil || last.Error.Code != code || string(last.ID) != id {
		t.Fatalf("answer %+v (id %s); want error %d for id %s", last.Error, last.ID, code, id)
	}
}

func Test20260728EnvelopeRequired(t *testing.T) {
	url := fixtureURL(t)
	for _, tc := range []struct {
		name string
		meta map[string]any
	}{
		{"no _meta", nil},
		{"no protocol version", map[string]any{"io.modelcontextprotocol/clientCapabilities": map[string]any{}}},
		{"no client capabilities", map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
		{"capabilities not an object", map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": "all"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			params := map[string]any{}
			if tc.meta != nil {
				params["_meta"] = tc.meta
			}
			status, msgs := post26(t, url, request(7, "server/discover", params), headers2026("server/discover", ""))
			wantError(t, status, msgs, http.StatusBadRequest, -32602, "7")
		})
	}
	t.Run("clientInfo is optional", func(t *testing.T) {
		status, msgs := post26(t, url, request(8, "server/discover", map[string]any{"_meta": envelope(map[string]any{})}), headers2026("server/discover", ""))
		if status != http.StatusOK || len(msgs) != 1 || msgs[0].Error != nil {
			t.Fatalf("status %d, %+v", status, msgs)
		}
	})
}

func Test20260728RemovedMethods(t *testing.T) {
	url := fixtureURL(t)
	for _, method := range []string{"initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe", "no/such/method"} {
		t.Run(method, func(t *testing.T) {
			status, msgs := post26(t, url, request("r-1", method, map[string]any{"_meta": envelope(map[string]any{})}), headers2026(method, ""))
			wantError(t, status, msgs, http.StatusNotFound, -32601, `"r-1"`)
		})
	}
}

func Test20260728HeaderChecks(t *testing.T) {
	url := fixtureURL(t)
	call := func(args map[string]any) map[string]any {
		return request(3, "tools/call", map[string]any{"name": "test_custom_headers", "arguments": args, "_meta": envelope(map[string]any{})})
	}
	with := func(extra map[string]string) map[string]string {
		h := headers2026("tools/call", "test_custom_headers")
		maps.Copy(h, extra)
		return h
	}
	hello := map[string]any{"region": "Hello"}
	for _, tc := range []struct {
		name    string
		body    map[string]any
		headers map[string]string
		ok      bool
	}{
		{"mirrored", call(hello), with(map[string]string{"Mcp-Param-Region": "Hello"}), true},
		{"base64", call(hello), with(map[string]string{"Mcp-Param-Region": "=?base64?SGVsbG8=?="}), true},
		{"base64 without padding", call(hello), with(map[string]string{"Mcp-Param-Region": "=?base64?SGVsbG8?="}), false},
		{"base64 with bad characters", call(hello), with(map[string]string{"Mcp-Param-Region": "=?base64?SGVs!!!bG8=?="}), false},
		{"no suffix is literal", call(map[string]any{"region": "=?base64?SGVsbG8="}), with(map[string]string{"Mcp-Param-Region": "=?base64?SGVsbG8="}), true},
		{"header missing", call(hello), with(nil), false},
		{"header without argument", call(map[string]any{}), with(map[string]string{"Mcp-Param-Region": "Hello"}), false},
		{"null argument, no header", call(map[string]any{"region": nil}), with(nil), true},
		{"integer compared as a number", call(map[string]any{"priority": 42}), with(map[string]string{"Mcp-Param-Priority": "42.0"}), true},
		{"integer differs", call(map[string]any{"priority": 42}), with(map[string]string{"Mcp-Param-Priority": "43"}), false},
		{"boolean", call(map[string]any{"verbose": false}), with(map[string]string{"Mcp-Param-Verbose": "false"}), true},
		{"boolean differs", call(map[string]any{"verbose": true}), with(map[string]string{"Mcp-Param-Verbose": "TRUE"}), false},
		{"name header missing", call(map[string]any{}), map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call"}, false},
		{"name header differs", call(map[string]any{}), headers2026("tools/call", "echo"), false},
		{"name header in base64", call(map[string]any{}), headers2026("tools/call", "=?base64?dGVzdF9jdXN0b21faGVhZGVycw==?="), true},
		{"method header missing", call(map[string]any{}), map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Name": "test_custom_headers"}, false},
		{"method header in another case", call(map[string]any{}), headers2026("TOOLS/CALL", "test_custom_headers"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, msgs := post26(t, url, tc.body, tc.headers)
			if !tc.ok {
				wantError(t, status, msgs, http.StatusBadRequest, -32020, "3")
				return
			}
			if status != http.StatusOK || len(msgs) == 0 || msgs[len(msgs)-1].Error != nil {
				t.Fatalf("status %d, %+v; want the call to run", status, msgs)
			}
		})
	}
}

func Test20260728MissingClientCapability(t *testing.T) {
	url := fixtureURL(t)
	call := func(caps map[string]any) (int, []rpcMsg) {
		return post26(t, url, request(5, "tools/call", map[string]any{"name": "test_missing_capability", "arguments": map[string]any{}, "_meta": envelope(caps)}),
			headers2026("tools/call", "test_missing_capability"))
	}
	status, msgs := call(map[string]any{"elicitation": map[string]any{}})
	wantError(t, status, msgs, http.StatusBadRequest, -32021, "5")
	var data struct {
		Required map[string]json.RawMessage `json:"requiredCapabilities"`
	}
	if json.Unmarshal(msgs[0].Error.Data, &data) != nil || string(data.Required["sampling"]) != "{}" || len(data.Required) != 1 {
		t.Errorf("error data %s; want requiredCapabilities {\"sampling\":{}}", msgs[0].Error.Data)
	}
	// Declared, the tool runs (and says it cannot sample through the gateway).
	status, msgs = call(map[string]any{"sampling": map[string]any{}})
	if status != http.StatusOK || len(msgs) == 0 || msgs[len(msgs)-1].Error != nil {
		t.Fatalf("with sampling declared: status %d, %+v", status, msgs)
	}
	// The requirement is the gateway's; clients never see the key.
	_, msgs = post26(t, url, request(6, "tools/list", map[string]any{"_meta": envelope(map[string]any{})}), headers2026("tools/list", ""))
	if len(msgs) != 1 || bytes.Contains(msgs[0].Result, []byte("io.mcpcancel/")) {
		t.Errorf("tools/list shows the gateway's annotation: %s", msgs[0].Result)
	}
}

func Test20260728LogsOnlyWithLogLevel(t *testing.T) {
	url := fixtureURL(t)
	logs := func(meta map[string]any) int {
		_, msgs := post26(t, url, request(9, "tools/call", map[string]any{"name": "test_logging_tool", "arguments": map[string]any{}, "_meta": meta}),
			headers2026("tools/call", "test_logging_tool"))
		if len(msgs) == 0 || msgs[len(msgs)-1].Result == nil {
			t.Fatalf("no result: %+v", msgs)
		}
		n := 0
		for _, m := range msgs {
			if m.Method == "notifications/message" {
				n++
			}
		}
		return n
	}
	if n := logs(envelope(map[string]any{})); n != 0 {
		t.Errorf("%d log messages without a log level; want none", n)
	}
	meta := envelope(map[string]any{})
	meta["io.modelcontextprotocol/logLevel"] = "info"
	if n := logs(meta); n != 3 {
		t.Errorf("%d log messages at level info; want 3", n)
	}
}

func Test20260728EmptyCatalogue(t *testing.T) {
	url := fixtureURL(t)
	for _, method := range []string{"prompts/list", "resources/list", "resources/templates/list", "tools/list"} {
		_, msgs := post26(t, url, request(1, method, map[string]any{"_meta": envelope(map[string]any{})}), headers2026(method, ""))
		var r struct {
			TTL   *int   `json:"ttlMs"`
			Scope string `json:"cacheScope"`
		}
		if len(msgs) != 1 || json.Unmarshal(msgs[0].Result, &r) != nil || r.TTL == nil || *r.TTL < 0 || r.Scope != "private" {
			t.Errorf("%s: %+v; want a result with ttlMs and cacheScope", method, msgs)
		}
	}
	uri := "test://nothing-here"
	status, msgs := post26(t, url, request(2, "resources/read", map[string]any{"uri": uri, "_meta": envelope(map[string]any{})}), headers2026("resources/read", uri))
	wantError(t, status, msgs, http.StatusOK, -32602, "2")
	if !bytes.Contains(msgs[0].Error.Data, []byte(uri)) {
		t.Errorf("resource-not-found data %s does not name %s", msgs[0].Error.Data, uri)
	}
}

func Test20260728ListenTagsSubscriptionID(t *testing.T) {
	url := fixtureURL(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	b, _ := json.Marshal(request("listen:0", "subscriptions/listen", map[string]any{
		"_meta": envelope(map[string]any{}), "notifications": map[string]any{"toolsListChanged": true},
	}))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers2026("subscriptions/listen", "") {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := bufio.NewScanner(resp.Body)
	next := func() rpcMsg {
		t.Helper()
		for events.Scan() {
			if data, ok := strings.CutPrefix(events.Text(), "data: "); ok {
				var m rpcMsg
				json.Unmarshal([]byte(data), &m)
				return m
			}
		}
		t.Fatalf("listen stream ended: %v", events.Err())
		return rpcMsg{}
	}
	tagged := func(m rpcMsg, method string) {
		t.Helper()
		var p struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		}
		json.Unmarshal(m.Params, &p)
		if m.Method != method || string(p.Meta["io.modelcontextprotocol/subscriptionId"]) != `"listen:0"` {
			t.Fatalf("got %s %s; want %s tagged with subscriptionId \"listen:0\"", m.Method, m.Params, method)
		}
	}
	tagged(next(), "notifications/subscriptions/acknowledged") // first, and tagged too
	status, msgs := post26(t, url, request(1, "tools/call", map[string]any{"name": "test_trigger_tool_change", "arguments": map[string]any{}, "_meta": envelope(map[string]any{})}),
		headers2026("tools/call", "test_trigger_tool_change"))
	if status != http.StatusOK || len(msgs) == 0 || msgs[len(msgs)-1].Result == nil {
		t.Fatalf("trigger: status %d, %+v", status, msgs)
	}
	tagged(next(), "notifications/tools/list_changed")
}
