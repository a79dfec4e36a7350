package surface

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// TestListsArePaginated: the gateway answers resources/list from the
// catalogue 100 a page; the Go SDK client following nextCursor gets all
// of a worker's 250 resources, in the worker's order, and a cursor the
// gateway did not make is invalid params.
func TestListsArePaginated(t *testing.T) {
	const n = 250
	s := startSystem(t, func(w *worker.Worker) {
		read := func(context.Context, *worker.Call) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{}, nil
		}
		for i := range n {
			w.HandleResource(&worker.Resource{URI: fmt.Sprintf("page://%03d", i), Name: fmt.Sprint(i)}, read)
		}
	})
	session := initialize(t, s.url)
	var first []byte
	var page struct {
		Result struct {
			Resources  []json.RawMessage `json:"resources"`
			NextCursor string            `json:"nextCursor"`
		} `json:"result"`
	}
	// The gateway hears of the worker's offers through the coordinator's
	// watch, a moment after the worker attached.
	testcluster.WaitFor(t, "the worker's resources in the gateway's catalogue", func() bool {
		_, first = testcluster.PostMCP(t, s.url, "", session, `{"jsonrpc":"2.0","id":2,"method":"resources/list"}`)
		return json.Unmarshal(first, &page) == nil && len(page.Result.Resources) > 0
	})
	if len(page.Result.Resources) != 100 || page.Result.NextCursor == "" {
		t.Fatalf("first page %s: %d resources, cursor %q; want 100 and a cursor", first, len(page.Result.Resources), page.Result.NextCursor)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "pages", Version: "1"}, nil).Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: s.url, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	i := 0
	for r, err := range cs.Resources(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("page://%03d", i); r.URI != want {
			t.Fatalf("resource %d is %s; want %s", i, r.URI, want)
		}
		i++
	}
	if i != n {
		t.Fatalf("listed %d resources; want %d", i, n)
	}
	_, err = cs.ListResources(t.Context(), &mcp.ListResourcesParams{Cursor: "not-ours"})
	if err == nil || !strings.Contains(err.Error(), "invalid cursor") {
		t.Fatalf("a foreign cursor: %v; want invalid cursor", err)
	}
}

// TestPromptListChangedReachesSessions: when a worker's prompts change,
// a 2025-11-25 session hears notifications/prompts/list_changed on its
// GET stream, and not a tools list_changed.
func TestPromptListChangedReachesSessions(t *testing.T) {
	s := startSystem(t, func(w *worker.Worker) {
		demo.Register(w)
		demo.RegisterFixtures(w)
	})
	session := initialize(t, s.url)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET stream: %s", resp.Status)
	}
	testcluster.PostMCP(t, s.url, "", session, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"test_trigger_prompt_change","arguments":{}}}`)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "notifications/tools/list_changed") {
			t.Fatalf("a prompt change was told as a tools change: %s", line)
		}
		if strings.Contains(line, "notifications/prompts/list_changed") {
			return
		}
	}
	t.Fatalf("the GET stream ended without notifications/prompts/list_changed: %v", sc.Err())
}
