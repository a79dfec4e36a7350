package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// A 2025 client that asked for a JSON response (no stream) cannot hear a
// request toward it: the tool's question is refused at once and the
// client gets the tool's own answer to that, never the question in place
// of its result.
func TestJSONResponseCarriesNoRequests(t *testing.T) {
	st := newStack(t, stackOptions{})
	testcluster.StartWorker(t, worker.Options{Coordinator: st.coord.Addr, Name: "fixtures"}, demo.RegisterFixtures)
	st.waitForTool(t, "test_elicitation")
	post := func(session, body string) (*http.Response, []byte) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a question swallowed by the response waits out the call
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, st.urls[0], strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, _ := post("", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"json-only","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize: %d, no session", resp.StatusCode)
	}
	post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	_, body := post(sid, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"test_elicitation","arguments":{"message":"who are you?"}}}`)
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Result struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"result"`
	}
	if err := json.Unmarshal(body, &m); err != nil || m.Method != "" || string(m.ID) != "1" {
		t.Fatalf("tools/call answered %s; want its own response, not a request toward the client", body)
	}
	if !m.Result.IsError || len(m.Result.Content) == 0 || !strings.Contains(m.Result.Content[0].Text, "cannot hear requests") {
		t.Fatalf("tools/call = %s; want the tool's error saying the client cannot hear its question", body)
	}
}
