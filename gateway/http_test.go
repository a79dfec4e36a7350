package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
)

// session opens a 2025-11-25 session with raw HTTP and returns its id.
func openSession(t *testing.T, url string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, id)
	}
	return id
}

// callStream POSTs a tools/call and returns the messages of its SSE
// stream, read to the end.
type streamResult struct {
	msgs []map[string]any
	err  error
}

func startCall(t *testing.T, url, session string, id any, tool string, args any, token any) <-chan streamResult {
	return startCallAs(t, url, "", session, id, tool, args, token)
}

// startCallAs is startCall with a bearer token, if not empty.
func startCallAs(t *testing.T, url, bearer, session string, id any, tool string, args any, token any) <-chan streamResult {
	req := callRequest(t, url, bearer, session, id, tool, args, token)
	out := make(chan streamResult, 1)
	go func() { // owned: the test reads out
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- streamResult{err: err}
			return
		}
		defer resp.Body.Close()
		out <- streamResult{msgs: readSSE(resp.Body)}
	}()
	return out
}

// callRequest is the POST of a tools/call in a 2025 session.
func callRequest(t *testing.T, url, bearer, session string, id any, tool string, args any, token any) *http.Request {
	params := map[string]any{"name": tool, "arguments": args}
	if token != nil {
		params["_meta"] = map[string]any{"progressToken": token}
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return req
}

func readSSE(r io.Reader) []map[string]any {
	var msgs []map[string]any
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			var m map[string]any
			if json.Unmarshal(bytes.TrimSpace(data), &m) == nil {
				msgs = append(msgs, m)
			}
		}
		if err != nil {
			return msgs
		}
	}
}

func cancelMsg(id any, reason string) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": map[string]any{"requestId": id, "reason": reason}})
	return string(b)
}

func hasResponse(msgs []map[string]any) bool {
	for _, m := range msgs {
		if _, ok := m["id"]; ok && m["method"] == nil {
			return true
		}
	}
	return false
}

// The race, end to end: many calls whose cancel lands near their
// completion, concurrently. For every call, a response on the wire if and
// only if the audit says completed.
func TestRaceEndToEnd(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 200
	}
	st := newStack(t, stackOptions{})
	const sessions = 16
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = openSession(t, st.urls[0])
	}
	type result struct {
		session  string
		id       int
		response bool
	}
	results := make([]result, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := range sessions {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				ms := rand.IntN(8)
				done := startCall(t, st.urls[0], ids[g], i, "sleep", map[string]any{"seconds": float64(ms) / 1000, "steps": 1}, nil)
				timer := time.NewTimer(time.Duration(rand.IntN(60000)) * time.Microsecond)
				<-timer.C
				if status, body := post(t, st.urls[0], ids[g], cancelMsg(i, "race")); status != http.StatusAccepted || len(body) > 0 {
					t.Errorf("cancel answered %d %q", status, body)
				}
				r := <-done
				if r.err != nil {
					t.Errorf("call %d: %v", i, r.err)
				}
				results[i] = result{ids[g], i, hasResponse(r.msgs)}
			}
		})
	}
	wg.Wait()
	var completed, cancelled int
	audits := map[string]map[string][]string{}
	for _, s := range ids {
		audits[s] = map[string][]string{}
		for id, as := range st.audits(t, "session:"+s) {
			for _, a := range as {
				audits[s][id] = append(audits[s][id], a.Outcome)
			}
		}
	}
	for _, r := range results {
		got := audits[r.session][fmt.Sprint(r.id)]
		if len(got) == 0 {
			t.Fatalf("call %d has no audit record", r.id)
		}
		switch got[0] {
		case "completed":
			completed++
			if !r.response {
				t.Fatalf("call %d completed but no response reached the wire", r.id)
			}
		case "cancelled":
			cancelled++
			if r.response {
				t.Fatalf("call %d was cancelled but a response reached the wire", r.id)
			}
		default:
			t.Fatalf("call %d: audit %v", r.id, got)
		}
	}
	t.Logf("%d calls: %d completed, %d cancelled", n, completed, cancelled)
	if completed == 0 || cancelled == 0 {
		t.Fatal("the race was not exercised")
	}
}

// A cancel POSTed to a second gateway replica, in the same session, stops
// a call started through the first.
func TestCancelFromOtherReplica(t *testing.T) {
	st := newStack(t, stackOptions{gateways: 2})
	sid := openSession(t, st.urls[0])
	done := startCall(t, st.urls[0], sid, "job-1", "sleep", map[string]any{"seconds": 30, "steps": 300}, "p")
	waitFor(t, "the call to run", func() bool {
		resp, err := st.c.ListWorkers(t.Context(), nil)
		return err == nil && len(resp.Workers) == 1 && resp.Workers[0].InFlight == 1
	})
	if status, _ := post(t, st.urls[1], sid, cancelMsg("job-1", "from b")); status != http.StatusAccepted {
		t.Fatalf("cancel on the second replica: %d", status)
	}
	r := <-done
	if hasResponse(r.msgs) {
		t.Fatalf("a response went out after the cancel: %v", r.msgs)
	}
	as := st.audits(t, "session:"+sid)[`"job-1"`]
	if len(as) != 1 || as[0].Outcome != "cancelled" || as[0].Reason != "from b" {
		t.Fatalf("audit = %+v", as)
	}
}

// DELETE ends the session and cancels its calls; the POST stream ends
// without a response.
func TestDeleteCancelsSessionCalls(t *testing.T) {
	st := newStack(t, stackOptions{})
	sid := openSession(t, st.urls[0])
	done := startCall(t, st.urls[0], sid, 1, "sleep", map[string]any{"seconds": 30, "steps": 300}, nil)
	waitFor(t, "the call to run", func() bool {
		resp, err := st.c.ListWorkers(t.Context(), nil)
		return err == nil && len(resp.Workers) == 1 && resp.Workers[0].InFlight == 1
	})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodDelete, st.urls[0], nil)
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE: %v %v", resp, err)
	}
	resp.Body.Close()
	if r := <-done; hasResponse(r.msgs) {
		t.Fatalf("response after DELETE: %v", r.msgs)
	}
	as := st.audits(t, "session:"+sid)["1"]
	if len(as) != 1 || as[0].Outcome != "cancelled" || as[0].Initiator != "disconnect" {
		t.Fatalf("audit = %+v", as)
	}
	if status, _ := post(t, st.urls[0], sid, `{"jsonrpc":"2.0","id":9,"method":"ping"}`); status != http.StatusNotFound {
		t.Fatalf("the deleted session still answers: %d", status)
	}
}

// The gateway's own timeout cancels the call and answers the waiting
// client with an error result.
func TestTimeoutAnswersWithError(t *testing.T) {
	st := newStack(t, stackOptions{gw: gateway.Options{CallTimeout: 300 * time.Millisecond}})
	sid := openSession(t, st.urls[0])
	r := <-startCall(t, st.urls[0], sid, 1, "sleep", map[string]any{"seconds": 30}, nil)
	if len(r.msgs) != 1 {
		t.Fatalf("messages = %v", r.msgs)
	}
	res, _ := r.msgs[0]["result"].(map[string]any)
	if res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), "timed out") {
		t.Fatalf("result = %v", r.msgs[0])
	}
	as := st.audits(t, "session:"+sid)["1"]
	if len(as) != 1 || as[0].Outcome != "cancelled" || as[0].Initiator != "timeout" {
		t.Fatalf("audit = %+v", as)
	}
}

// Regression (found by test/robustness): the coordinator caps deadlines,
// and the timeout's message named the gateway's own --call-timeout
// instead of the time the call really had.
func TestTimeoutMessageSaysTheGrantedTime(t *testing.T) {
	st := newStack(t, stackOptions{
		gw:    gateway.Options{CallTimeout: time.Hour},
		coord: coordinator.Options{MaxTimeout: 300 * time.Millisecond},
	})
	sid := openSession(t, st.urls[0])
	r := <-startCall(t, st.urls[0], sid, 1, "sleep", map[string]any{"seconds": 30}, nil)
	if len(r.msgs) != 1 {
		t.Fatalf("messages = %v", r.msgs)
	}
	res, _ := r.msgs[0]["result"].(map[string]any)
	if text := fmt.Sprint(res["content"]); res["isError"] != true || !strings.Contains(text, "timed out after 300ms") {
		t.Fatalf("result = %v, want the 300ms the coordinator granted", r.msgs[0])
	}
}

// Origin validation guards against DNS rebinding.
func TestOriginValidation(t *testing.T) {
	st := newStack(t, stackOptions{})
	for _, tc := range []struct {
		origin string
		want   int
	}{
		{"", http.StatusOK},
		{"http://localhost:3000", http.StatusOK},
		{"http://127.0.0.1", http.StatusOK},
		{"http://evil.example", http.StatusForbidden},
		{"null", http.StatusForbidden},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, st.urls[0], strings.NewReader(
			`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("Origin %q: %d, want %d", tc.origin, resp.StatusCode, tc.want)
		}
	}
}

// A 2025 POST stream that merely drops does not cancel its call (the
// spec says it SHOULD NOT): the call runs on and completes.
func TestDroppedPostDoesNotCancel(t *testing.T) {
	st := newStack(t, stackOptions{})
	sid := openSession(t, st.urls[0])
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sleep","arguments":{"seconds":0.5,"steps":5}}}`
	ctx, drop := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, st.urls[0], strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	drop() // the client goes away mid-call
	resp.Body.Close()
	waitFor(t, "the call to settle", func() bool { return len(st.audits(t, "session:"+sid)["1"]) == 1 })
	if as := st.audits(t, "session:"+sid)["1"]; as[0].Outcome != "completed" {
		t.Fatalf("audit = %+v, want completed", as[0])
	}
}

// Malformed input gets the JSON-RPC error it deserves; notifications are
// never answered; unknown methods get -32601.
func TestMalformedInput(t *testing.T) {
	st := newStack(t, stackOptions{})
	sid := openSession(t, st.urls[0])
	for _, tc := range []struct {
		body   string
		status int
		code   float64
	}{
		{`{not json`, http.StatusBadRequest, -32700},
		{`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, http.StatusBadRequest, -32600},
		{`{"jsonrpc":"1.0","id":1,"method":"ping"}`, http.StatusBadRequest, -32600},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, http.StatusBadRequest, -32600},
		{`{"jsonrpc":"2.0","id":1,"method":"no/such/method"}`, http.StatusOK, -32601},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"arguments":{}}}`, http.StatusOK, -32602},
		{`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"nope"}}`, http.StatusOK, -32602},
		{`{"jsonrpc":"2.0","method":"no/such/notification"}`, http.StatusAccepted, 0},
	} {
		status, body := post(t, st.urls[0], sid, tc.body)
		if status != tc.status {
			t.Errorf("%s: status %d, want %d (%s)", tc.body, status, tc.status, body)
			continue
		}
		if tc.code == 0 {
			if len(body) != 0 {
				t.Errorf("%s: a notification was answered: %s", tc.body, body)
			}
			continue
		}
		if msgs := readSSE(bytes.NewReader(body)); len(msgs) == 1 { // tools/call answers on a stream
			body, _ = json.Marshal(msgs[0])
		}
		var m struct {
			Error struct{ Code float64 } `json:"error"`
		}
		if err := json.Unmarshal(body, &m); err != nil || m.Error.Code != tc.code {
			t.Errorf("%s: answer %s, want code %v", tc.body, body, tc.code)
		}
	}
	// The session still works.
	if status, body := post(t, st.urls[0], sid, `{"jsonrpc":"2.0","id":9,"method":"ping"}`); status != http.StatusOK || !strings.Contains(string(body), `"result"`) {
		t.Fatalf("ping after bad input: %d %s", status, body)
	}
}

// Regression: a request id with control characters crashed the
// coordinator (Go quoting is not JSON). It is an ordinary id.
func TestControlCharacterRequestID(t *testing.T) {
	st := newStack(t, stackOptions{})
	sid := openSession(t, st.urls[0])
	id := "a\u0001b\u2028\xff"
	r := <-startCall(t, st.urls[0], sid, id, "echo", map[string]any{"text": "ok"}, nil)
	if !hasResponse(r.msgs) {
		t.Fatalf("no response: %v", r.msgs)
	}
	var found bool
	for key, as := range st.audits(t, "session:"+sid) {
		var back string
		if err := json.Unmarshal([]byte(key), &back); err != nil {
			t.Fatalf("audit request_id %s is not JSON: %v", key, err)
		}
		found = found || as[0].Outcome == "completed"
	}
	if !found {
		t.Fatal("no completed audit record")
	}
	// The coordinator is still up.
	if r := <-startCall(t, st.urls[0], sid, 2, "echo", map[string]any{"text": "ok"}, nil); !hasResponse(r.msgs) {
		t.Fatal("the coordinator did not survive")
	}
}

// Cancels that find their calls are never rate limited: sixty calls
// started on one replica, all cancelled at once through the other.
func TestManyCancelsFromOtherReplica(t *testing.T) {
	st := newStack(t, stackOptions{gateways: 2})
	sid := openSession(t, st.urls[0])
	const n = 60
	var streams []<-chan streamResult
	for i := range n {
		streams = append(streams, startCall(t, st.urls[0], sid, i, "sleep", map[string]any{"seconds": 30, "steps": 300}, nil))
	}
	waitFor(t, "the calls to run", func() bool {
		resp, err := st.c.ListWorkers(t.Context(), nil)
		return err == nil && len(resp.Workers) == 1 && resp.Workers[0].InFlight == n
	})
	for i := range n {
		if status, _ := post(t, st.urls[1], sid, cancelMsg(i, "all at once")); status != http.StatusAccepted {
			t.Fatalf("cancel %d: %d", i, status)
		}
	}
	for i, done := range streams {
		if r := <-done; hasResponse(r.msgs) {
			t.Fatalf("call %d was answered after its cancel", i)
		}
	}
	for id, as := range st.audits(t, "session:"+sid) {
		if len(as) != 1 || as[0].Outcome != "cancelled" {
			t.Fatalf("call %s audit = %+v", id, as)
		}
	}
}

// getStream opens session's GET stream. What it carries comes on the
// channel, which closes when the stream ends; past the channel's buffer
// messages are dropped (a test reads what it needs). The test's cleanup
// closes the stream and waits for its reader.
func getStream(t *testing.T, url, session string) <-chan map[string]any {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET stream: %v %v", resp, err)
	}
	heard := make(chan map[string]any, 4096)
	done := make(chan struct{})
	t.Cleanup(func() { resp.Body.Close(); <-done })
	go func() { // owned: ends when the cleanup closes the body, and is waited for
		defer close(done)
		defer close(heard)
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadBytes('\n')
			if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				var m map[string]any
				if json.Unmarshal(bytes.TrimSpace(data), &m) == nil {
					select {
					case heard <- m:
					default: // the test reads what it needs; drop the rest
					}
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return heard
}

// nextOn is the next message with this method on a stream getStream
// opened.
func nextOn(t *testing.T, heard <-chan map[string]any, method string) map[string]any {
	t.Helper()
	bound := time.NewTimer(20 * time.Second) // a bound, not a synchronisation
	defer bound.Stop()
	for {
		select {
		case m, ok := <-heard:
			if !ok {
				t.Fatalf("the stream ended before a %s", method)
			}
			if m["method"] == method {
				return m
			}
		case <-bound.C:
			t.Fatalf("no %s on the stream within 20s", method)
		}
	}
}
