package upstream_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// TestToolsRegistered: the coordinator offers server-everything's tools
// with their schemas and annotations, filtered by the allow and deny
// lists.
func TestToolsRegistered(t *testing.T) {
	cmd, _ := stdioEverything(t)
	cfg, err := upstream.ParseConfig([]byte(`{"allow": ["echo", "trigger-*", "get-env"], "deny": ["get-env"]}`))
	if err != nil {
		t.Fatal(err)
	}
	st := startStack(t, upstream.Options{Command: cmd, Config: cfg}, longOp, "echo")
	tools := st.waitTools(t, func(map[string]*pb.Tool) bool { return true })
	for name := range tools {
		if name != "echo" && !strings.HasPrefix(name, "trigger-") {
			t.Errorf("tool %q offered; the allow list does not name it", name)
		}
	}
	if tools["get-env"] != nil {
		t.Error("get-env offered though denied")
	}
	lr := tools[longOp]
	if lr.GetTitle() != "Trigger Long Running Operation Tool" || !strings.Contains(lr.GetDescription(), "long running operation") {
		t.Errorf("title %q, description %q", lr.GetTitle(), lr.GetDescription())
	}
	var schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(lr.GetInputSchemaJson(), &schema); err != nil || schema.Type != "object" || schema.Properties["duration"] == nil || schema.Properties["steps"] == nil {
		t.Errorf("input schema %s (%v); want an object with duration and steps", lr.GetInputSchemaJson(), err)
	}
	var ann mcp.ToolAnnotations
	if err := json.Unmarshal(lr.GetAnnotationsJson(), &ann); err != nil || !ann.ReadOnlyHint || !ann.IdempotentHint || ann.DestructiveHint == nil || *ann.DestructiveHint {
		t.Errorf("annotations %s (%v); want readOnly, idempotent, not destructive", lr.GetAnnotationsJson(), err)
	}
}

// TestListChangedRefreshes: when the server's tool list changes it sends
// notifications/tools/list_changed, and the adapter re-registers the new
// list with the coordinator, output schema included. The server is a Go
// SDK server over Streamable HTTP.
func TestListChangedRefreshes(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "changing", Version: "1"}, nil)
	type in struct {
		Text string `json:"text"`
	}
	type out struct {
		Upper string `json:"upper"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "first", Description: "the first tool"}, func(context.Context, *mcp.CallToolRequest, in) (*mcp.CallToolResult, out, error) {
		return nil, out{}, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(h)
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	st := startStack(t, upstream.Options{URL: hs.URL}, "first")

	mcp.AddTool(srv, &mcp.Tool{Name: "second", Description: "added later"}, func(_ context.Context, _ *mcp.CallToolRequest, a in) (*mcp.CallToolResult, out, error) {
		return nil, out{Upper: strings.ToUpper(a.Text)}, nil
	})
	tools := st.waitTools(t, func(m map[string]*pb.Tool) bool { return m["second"] != nil })
	if !strings.Contains(string(tools["second"].GetOutputSchemaJson()), `"upper"`) {
		t.Errorf("output schema %s; want the upper property", tools["second"].GetOutputSchemaJson())
	}
	srv.RemoveTools("first")
	st.waitTools(t, func(m map[string]*pb.Tool) bool { return m["first"] == nil && m["second"] != nil })

	s := connect(t, st.url)
	res, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: "second", Arguments: map[string]any{"text": "abc"}})
	if err != nil || res.IsError {
		t.Fatalf("second = %+v, %v", res, err)
	}
	if b, _ := json.Marshal(res.StructuredContent); string(b) != `{"upper":"ABC"}` {
		t.Errorf("structured content %s", b)
	}
}

// TestMaxConcurrency: with MaxConcurrency 1, calls reach the server one at
// a time. The first call holds the only slot until the test releases it;
// no other may reach the server meanwhile.
func TestMaxConcurrency(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "counting", Version: "1"}, nil)
	var mu sync.Mutex
	running, peak := 0, 0
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	mcp.AddTool(srv, &mcp.Tool{Name: "work"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		entered <- struct{}{}
		<-release
		mu.Lock()
		running--
		mu.Unlock()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	st := startStack(t, upstream.Options{URL: hs.URL, MaxConcurrency: 1}, "work")
	s := connect(t, st.url)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			res, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: "work", Arguments: map[string]any{}})
			if err != nil || res.IsError {
				t.Errorf("work = %+v, %v", res, err)
			}
		})
	}
	<-entered
	// Without the cap the other three arrive within milliseconds.
	select {
	case <-entered:
		close(release)
		wg.Wait()
		t.Fatal("a second call reached the server while the first held the only slot")
	case <-time.After(500 * time.Millisecond):
	}
	close(release)
	wg.Wait()
	if peak != 1 {
		t.Fatalf("%d calls ran at once upstream; want 1", peak)
	}
}
