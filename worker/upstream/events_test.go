package upstream_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/nodetest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// The events extension of a fronted server (testdata/events_server.mjs,
// on the TypeScript SDK, fronted over stdio and over Streamable HTTP)
// through a real gateway, coordinator and worker, to raw 2026-07-28
// clients over HTTP and stdio.

const meta2026 = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

// eventsFixture fronts the events server over stdio.
func eventsFixture(t *testing.T) upstream.Options {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", "events_server.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	return upstream.Options{Command: []string{"node", script, filepath.Join(nodetest.Install(t), "node_modules")}}
}

// post2026 sends one 2026-07-28 request over HTTP and returns the
// messages of its response, in order.
func post2026(t *testing.T, url string, id int, method, params string) []json.RawMessage {
	t.Helper()
	if params != "" {
		params += ","
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{%s%s}}`, id, method, params, meta2026)
	ctx, cancel := context.WithTimeout(t.Context(), eventsWait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name := nameOf(params); name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: HTTP %s: %s", method, resp.Status, b)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		return []json.RawMessage{b}
	}
	var out []json.RawMessage
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok {
			out = append(out, bytes.Clone(data))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: reading its stream: %v", method, err)
	}
	return out
}

// eventsWait bounds one request of these tests.
const eventsWait = time.Minute

// nameOf is params' name, for Mcp-Name.
func nameOf(params string) string {
	var p struct {
		Name string `json:"name"`
	}
	json.Unmarshal([]byte("{"+strings.TrimSuffix(params, ",")+"}"), &p)
	return p.Name
}

// postStatus sends one 2026-07-28 request whose answer is a JSON body,
// and returns its HTTP status and message.
func postStatus(t *testing.T, url string, id int, method, params string) (int, rpcMsg) {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{%s,%s}}`, id, method, params, meta2026)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, decodeMsg(t, b)
}

// rpcMsg is a JSON-RPC message as the tests read it.
type rpcMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		EventID string `json:"eventId"`
		Meta    struct {
			SubscriptionID json.RawMessage `json:"io.modelcontextprotocol/subscriptionId"`
		} `json:"_meta"`
	} `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func decodeMsg(t *testing.T, raw json.RawMessage) rpcMsg {
	t.Helper()
	var m rpcMsg
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return m
}

// last is the final message of a response: its result or error.
func last(t *testing.T, msgs []json.RawMessage) rpcMsg {
	t.Helper()
	if len(msgs) == 0 {
		t.Fatal("no response")
	}
	return decodeMsg(t, msgs[len(msgs)-1])
}

func TestEventsPassThrough(t *testing.T) {
	for _, srv := range []struct {
		name string
		opts func(*testing.T) upstream.Options
	}{{"stdio", eventsFixture}, {"http-2025", eventsHTTPFixture}, {"http-2026", eventsHTTP2026Fixture}} {
		t.Run(srv.name, func(t *testing.T) { testEventsPassThrough(t, startStack(t, srv.opts(t), "await_cancelled")) })
	}
}

// testEventsPassThrough runs the checks of the extension on st, which
// fronts the events server.
func testEventsPassThrough(t *testing.T, st *stack) {
	t.Run("discover", func(t *testing.T) {
		var r struct {
			Capabilities struct {
				Extensions map[string]json.RawMessage `json:"extensions"`
			} `json:"capabilities"`
		}
		json.Unmarshal(last(t, post2026(t, st.url, 1, "server/discover", "")).Result, &r)
		if _, ok := r.Capabilities.Extensions["io.modelcontextprotocol/events"]; !ok {
			t.Fatalf("server/discover extensions %v; want io.modelcontextprotocol/events", r.Capabilities.Extensions)
		}
	})

	t.Run("list", func(t *testing.T) {
		var r struct {
			Events []struct {
				Name     string          `json:"name"`
				Delivery []string        `json:"delivery"`
				Meta     json.RawMessage `json:"_meta"`
			} `json:"events"`
		}
		json.Unmarshal(last(t, post2026(t, st.url, 2, "events/list", "")).Result, &r)
		var names []string
		for _, e := range r.Events {
			names = append(names, e.Name)
			if e.Name == "ticks" && (!slices.Equal(e.Delivery, []string{"poll", "push"}) || !sameJSON(e.Meta, json.RawMessage(`{"com.example/fixture":{"kept":true}}`))) {
				t.Errorf("ticks: delivery %v, _meta %s; want [poll push] (webhook dropped) and the server's _meta", e.Delivery, e.Meta)
			}
		}
		// Both of the server's pages; "hooks" offers webhook only, which
		// the gateway cannot deliver.
		if !slices.Equal(names, []string{"ticks", "polled"}) {
			t.Fatalf("events/list names %v; want [ticks polled]", names)
		}
	})

	t.Run("poll", func(t *testing.T) {
		m := last(t, post2026(t, st.url, 3, "events/poll", `"name":"polled","arguments":{},"cursor":null`))
		var r struct {
			ResultType string                     `json:"resultType"`
			Events     []struct{ EventID string } `json:"events"`
			Cursor     string                     `json:"cursor"`
			Vendor     json.RawMessage            `json:"com.example/vendor"`
			Meta       map[string]json.RawMessage `json:"_meta"`
		}
		if err := json.Unmarshal(m.Result, &r); err != nil || m.Error != nil {
			t.Fatalf("events/poll: %s %v", m.Result, m.Error)
		}
		delete(r.Meta, "io.modelcontextprotocol/serverInfo") // the v2 SDK stamps every result with it
		meta, _ := json.Marshal(r.Meta)
		if len(r.Events) != 3 || r.Events[2].EventID != "e3" || r.Cursor != "c3" || r.ResultType != "complete" ||
			!sameJSON(r.Vendor, json.RawMessage(`{"polledWith":null}`)) || !sameJSON(meta, json.RawMessage(`{"com.example/fixture":"poll"}`)) {
			t.Fatalf("events/poll result %s; want the server's three events, cursor, vendor field and _meta", m.Result)
		}
		checkEventsAudit(t, st, "events/poll", "3", "completed")
	})

	t.Run("stream", func(t *testing.T) {
		const n = 20
		msgs := post2026(t, st.url, 4, "events/stream", fmt.Sprintf(`"name":"ticks","arguments":{"n":%d,"gap":2,"terminate":true}`, n))
		var ids, signals []string
		for i, raw := range msgs {
			m := decodeMsg(t, raw)
			if string(m.Params.Meta.SubscriptionID) != "4" && m.Method != "" {
				t.Errorf("message %d %s: subscription id %s; want the client's id 4", i, m.Method, m.Params.Meta.SubscriptionID)
			}
			switch m.Method {
			case "notifications/events/event":
				ids = append(ids, m.Params.EventID)
			case "":
			default:
				signals = append(signals, fmt.Sprintf("%s after %d", m.Method, len(ids)))
			}
		}
		// The gap's fresh active and the termination, where the server
		// sent them.
		if want := []string{"notifications/events/active after 0", "notifications/events/active after 2", fmt.Sprintf("notifications/events/terminated after %d", n)}; !slices.Equal(signals, want) {
			t.Errorf("signals %q; want %q", signals, want)
		}
		if first := decodeMsg(t, msgs[0]); first.Method != "notifications/events/active" {
			t.Errorf("first message %s; want notifications/events/active", msgs[0])
		}
		for i := range n {
			if i >= len(ids) || ids[i] != fmt.Sprintf("e%d", i+1) {
				t.Fatalf("events %v; want e1..e%d in order", ids, n)
			}
		}
		end := last(t, msgs)
		var r struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		}
		json.Unmarshal(end.Result, &r)
		if string(r.Meta["io.modelcontextprotocol/subscriptionId"]) != "4" {
			t.Fatalf("final result %s; want the client's id 4 as its subscription id", end.Result)
		}
		checkEventsAudit(t, st, "events/stream", "4", "completed")
	})

	t.Run("refused", func(t *testing.T) {
		for i, method := range []string{"events/subscribe", "events/unsubscribe"} {
			status, m := postStatus(t, st.url, 50+i, method, `"name":"ticks","arguments":{},"delivery":{"mode":"webhook","url":"https://example.com/h","secret":"whsec_x"}`)
			if status != http.StatusNotFound || m.Error == nil || m.Error.Code != -32601 || !strings.Contains(m.Error.Message, "does not deliver webhooks") {
				t.Fatalf("%s: HTTP %d %+v; want 404 and -32601 saying the gateway delivers no webhooks", method, status, m.Error)
			}
		}
		m := last(t, post2026(t, st.url, 6, "events/poll", `"name":"nope","arguments":{}`))
		if m.Error == nil || m.Error.Code != -32023 {
			t.Fatalf("events/poll of an unknown event: %+v; want NotFound (-32023)", m.Error)
		}
		c := &rpcClient{url: st.url, era: "2025-11-25"}
		for _, method := range []string{"events/list", "events/poll", "events/stream"} {
			c.session = initSession(t, c.url, c.era)
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":%q,"params":{"name":"ticks"}}`, method)
			m := last(t, sseMessages(t, c.url, map[string]string{"Mcp-Protocol-Version": c.era, "Mcp-Session-Id": c.session}, body))
			if m.Error == nil || m.Error.Code != -32601 {
				t.Errorf("2025-11-25 %s: %s; want -32601", method, m.Result)
			}
		}
	})

	t.Run("close", func(t *testing.T) { streamClosed(t, st) })
	t.Run("stdio", func(t *testing.T) { streamCancelledOnStdio(t, st) })
}

// streamClosed opens a held stream over HTTP, reads two events, and
// closes the request's stream: the server sees its request cancelled,
// and the call is audited once, cancelled by its client.
func streamClosed(t *testing.T, st *stack) {
	ctx, cancel := context.WithCancel(t.Context())
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":10,"method":"events/stream","params":{"name":"ticks","arguments":{"n":2,"hold":true,"key":"closed"},%s}}`, meta2026)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, st.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "events/stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	var events int
	for events < 2 && sc.Scan() {
		if data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok && decodeMsg(t, data).Method == "notifications/events/event" {
			events++
		}
	}
	if events < 2 {
		t.Fatalf("the stream ended after %d events: %v", events, sc.Err())
	}
	cancel() // closes the request's stream
	resp.Body.Close()
	awaitUpstreamCancel(t, st, "closed")
	checkEventsAudit(t, st, "events/stream", "10", "cancelled")
}

// awaitUpstreamCancel asks the server, through the gateway, to answer
// once it saw the held stream of key cancelled.
func awaitUpstreamCancel(t *testing.T, st *stack, key string) {
	t.Helper()
	var r struct {
		Content []struct{ Text string } `json:"content"`
	}
	m := last(t, post2026(t, st.url, 100, "tools/call", fmt.Sprintf(`"name":"await_cancelled","arguments":{"key":%q}`, key)))
	json.Unmarshal(m.Result, &r)
	if len(r.Content) != 1 || r.Content[0].Text != "cancelled "+key {
		t.Fatalf("await_cancelled %s: %+v", key, r)
	}
}

// checkEventsAudit waits until the call of method with the client's
// request id is audited, and checks it was audited once, with outcome.
func checkEventsAudit(t *testing.T, st *stack, method, requestID, outcome string) {
	t.Helper()
	var recs []*coordinator.AuditRecord
	testcluster.WaitFor(t, "the audit of "+method+" "+requestID, func() bool {
		recs = nil
		for _, rs := range testcluster.Audits(t, st.etcd) {
			for _, r := range rs {
				if r.Method == method && string(r.RequestID) == requestID {
					recs = append(recs, r)
				}
			}
		}
		return len(recs) > 0
	})
	if len(recs) != 1 || recs[0].Outcome != outcome {
		b, _ := json.Marshal(recs)
		t.Fatalf("audit of %s %s: %s; want one record, %s", method, requestID, b, outcome)
	}
	if outcome == "cancelled" && recs[0].Initiator != "client" {
		t.Fatalf("audit of %s %s: cancelled by %s; want client", method, requestID, recs[0].Initiator)
	}
}

// streamCancelledOnStdio opens a held stream from a 2026-07-28 client on
// the gateway's stdio, reads its events, and cancels it with
// notifications/cancelled.
func streamCancelledOnStdio(t *testing.T, st *stack) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { // owned: ends when stdin is closed below
		done <- st.gw.ServeStdio(context.Background(), inR, outW)
		outW.Close()
	}()
	lines := make(chan rpcMsg, 100)
	go func() { // owned: ends when ServeStdio closes stdout
		defer close(lines)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			var m rpcMsg
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
	}()
	defer func() {
		inW.Close()
		<-done
		for range lines {
		}
	}()
	wait, stop := context.WithTimeout(t.Context(), eventsWait)
	defer stop()
	recv := func() rpcMsg { // the next message, within eventsWait
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatal("the gateway closed stdout")
			}
			return m
		case <-wait.Done():
			t.Fatalf("no message from the gateway within %v", eventsWait)
		}
		panic("unreachable")
	}
	send := func(s string) {
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	send(fmt.Sprintf(`{"jsonrpc":"2.0","id":"s1","method":"events/stream","params":{"name":"ticks","arguments":{"n":3,"hold":true,"key":"stdio"},%s}}`, meta2026))
	var ids []string
	for len(ids) < 3 {
		if m := recv(); m.Method == "notifications/events/event" {
			if string(m.Params.Meta.SubscriptionID) != `"s1"` {
				t.Fatalf("event %s: subscription id %s; want \"s1\"", m.Params.EventID, m.Params.Meta.SubscriptionID)
			}
			ids = append(ids, m.Params.EventID)
		}
	}
	if !slices.Equal(ids, []string{"e1", "e2", "e3"}) {
		t.Fatalf("events %v; want e1 e2 e3", ids)
	}
	// A second stream on the same connections while s1 is held: its
	// events reach it, tagged with its own id, and it ends with its result.
	send(fmt.Sprintf(`{"jsonrpc":"2.0","id":"s2","method":"events/stream","params":{"name":"ticks","arguments":{"n":2},%s}}`, meta2026))
	var ids2 []string
	for {
		m := recv()
		if m.Method == "notifications/events/event" {
			if string(m.Params.Meta.SubscriptionID) != `"s2"` {
				t.Fatalf("event %s for subscription %s while only s2 sends; want \"s2\"", m.Params.EventID, m.Params.Meta.SubscriptionID)
			}
			ids2 = append(ids2, m.Params.EventID)
		}
		if string(m.ID) == `"s2"` {
			break
		}
	}
	if !slices.Equal(ids2, []string{"e1", "e2"}) {
		t.Fatalf("s2's events %v; want e1 e2", ids2)
	}
	send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"s1",%s}}`, meta2026))
	awaitUpstreamCancel(t, st, "stdio")
	checkEventsAudit(t, st, "events/stream", `"s1"`, "cancelled")
	// Nothing answers the cancelled request: no response with its id.
	send(fmt.Sprintf(`{"jsonrpc":"2.0","id":"p","method":"ping","params":{%s}}`, meta2026))
	for {
		m := recv()
		if string(m.ID) == `"s1"` {
			t.Fatalf("the cancelled stream was answered: %s %+v", m.Result, m.Error)
		}
		if string(m.ID) == `"p"` {
			break
		}
	}
}

// In a group of two servers, event types are listed under their server's
// prefix, and a poll or stream of a prefixed name reaches its server
// under the server's own name (the fixture knows no other).
func TestEventsInAGroup(t *testing.T) {
	st := startBare(t)
	runGroup(t, st, groupServer{"a", eventsFixture(t)}, groupServer{"b", eventsFixture(t)})
	st.waitTools(t, func(tools map[string]*pb.Tool) bool {
		return tools["a_await_cancelled"] != nil && tools["b_await_cancelled"] != nil
	})
	var r struct {
		Events []struct {
			Name string `json:"name"`
		} `json:"events"`
	}
	json.Unmarshal(last(t, post2026(t, st.url, 1, "events/list", "")).Result, &r)
	var names []string
	for _, e := range r.Events {
		names = append(names, e.Name)
	}
	if !slices.Equal(names, []string{"a_ticks", "a_polled", "b_ticks", "b_polled"}) {
		t.Fatalf("events/list names %v; want each server's under its prefix", names)
	}
	m := last(t, post2026(t, st.url, 2, "events/poll", `"name":"b_polled","arguments":{}`))
	if m.Error != nil || !strings.Contains(string(m.Result), `"eventId":"e3"`) {
		t.Fatalf("events/poll b_polled: %s %+v; want the server's events", m.Result, m.Error)
	}
	msgs := post2026(t, st.url, 3, "events/stream", `"name":"a_ticks","arguments":{"n":2}`)
	var ids []string
	for _, raw := range msgs {
		if m := decodeMsg(t, raw); m.Method == "notifications/events/event" {
			ids = append(ids, m.Params.EventID)
		}
	}
	if !slices.Equal(ids, []string{"e1", "e2"}) || last(t, msgs).Error != nil {
		t.Fatalf("events/stream a_ticks: events %v, end %s; want e1 e2 and its result", ids, msgs[len(msgs)-1])
	}
}
