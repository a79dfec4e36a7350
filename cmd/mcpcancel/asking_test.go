package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/nodetest"
)

// TestDevUpstreamAsksItsClient runs `mcpcancel dev --upstream-stdio`
// fronting the real server-everything, which registers its sampling,
// elicitation and roots tools because the adapter declares those
// capabilities. The official TypeScript client (sdk 1.32.2) declares them
// too, and each tool returns what the client's handler answered: the
// server's request went through the adapter and the gateway to the
// client, and the answer back, under the gateway's own id.
func TestDevUpstreamAsksItsClient(t *testing.T) {
	url := devFrontingEverything(t)
	for _, tc := range []struct {
		tool, args, request string
		want                []string
	}{
		{"trigger-sampling-request", `{"prompt":"hello","maxTokens":5}`, "sampling_request", []string{"a sampled answer"}},
		{"trigger-elicitation-request", `{}`, "elicitation_request", []string{"Ada Lovelace"}},
		{"get-roots-list", `{}`, "roots_request", []string{"file:///srv/project", "project"}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := nodetest.Node(t, ctx, "asking2025.mjs", "--url", url, "--tool", tc.tool, "--args", tc.args, "--no-wire",
				"--sampling-text", "a sampled answer", "--elicit-content", `{"name":"Ada Lovelace"}`,
				"--roots", `[{"uri":"file:///srv/project","name":"project"}]`)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("asking2025.mjs: %v\n%s", err, out)
			}
			var result, request string
			for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
				var e struct {
					Event     string
					RequestID any
					Result    json.RawMessage
				}
				json.Unmarshal(line, &e)
				switch e.Event {
				case "result":
					result = string(e.Result)
				case tc.request:
					request = fmt.Sprint(e.RequestID)
				}
			}
			if !strings.HasPrefix(request, "mcpcancel-") {
				t.Fatalf("the client got no %s under the gateway's id (%q)\n%s", tc.request, request, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(result, w) {
					t.Errorf("%s returned %s; want it to hold %q", tc.tool, result, w)
				}
			}
		})
	}
	// The server's URLElicitationRequiredError (-32042) reaches the client
	// as the JSON-RPC error it is, with its elicitations, not as a failure.
	t.Run("trigger-url-elicitation/errorPath", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cmd := nodetest.Node(t, ctx, "asking2025.mjs", "--url", url, "--tool", "trigger-url-elicitation", "--no-wire",
			"--args", `{"url":"https://example.test/authorise","errorPath":true}`)
		out, _ := cmd.Output() // the call's error is the point: the script exits 1
		var got struct {
			Code int64
			Data struct {
				Elicitations []struct {
					Mode, URL, ElicitationID string
				}
			}
		}
		for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
			var e struct {
				Event, Phase string
			}
			if json.Unmarshal(line, &e) == nil && e.Event == "error" && e.Phase == "call" {
				json.Unmarshal(line, &got)
			}
		}
		if got.Code != -32042 || len(got.Data.Elicitations) != 1 || got.Data.Elicitations[0].Mode != "url" || got.Data.Elicitations[0].ElicitationID == "" {
			t.Fatalf("the client got %+v, want the server's -32042 with one URL elicitation\n%s", got, out)
		}
	})
}

// Two clients, each with one call in flight through its own upstream
// session (the default, per-client): each server request is related to
// the lone call of the session it came on, whatever the other client
// runs. Each client's sampling handler holds its answer until both
// requests have arrived, so the calls overlap; before, the adapter
// counted every call in flight and refused both requests ("several
// calls are in flight").
func TestDevUpstreamTowardTwoClientsAtOnce(t *testing.T) {
	url := devFrontingEverything(t)
	var mu sync.Mutex
	waiting := 2
	arrived := make(chan struct{}) // closed once both handlers run
	results := make(chan string, 2)
	errs := make(chan error, 2)
	for _, name := range []string{"alice", "bob"} {
		entered := sync.OnceFunc(func() {
			mu.Lock()
			defer mu.Unlock()
			if waiting--; waiting == 0 {
				close(arrived)
			}
		})
		c := mcp.NewClient(&mcp.Implementation{Name: name, Version: "0"}, &mcp.ClientOptions{
			CreateMessageHandler: func(ctx context.Context, _ *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
				entered()
				select {
				case <-arrived:
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(20 * time.Second): // a bound, not a wait for anything
					return nil, errors.New("the other client's sampling request never came")
				}
				return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "sampled for " + name}}, nil
			},
		})
		cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1},
			&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		go func() { // ends with the call, bounded below
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "trigger-sampling-request", Arguments: map[string]any{"prompt": "hi", "maxTokens": 5}})
			if err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				return
			}
			b, _ := json.Marshal(res)
			results <- name + " " + string(b)
		}()
	}
	for range 2 {
		select {
		case r := <-results:
			name, body, _ := strings.Cut(r, " ")
			if !strings.Contains(body, "sampled for "+name) || strings.Contains(body, `"isError":true`) {
				t.Errorf("%s's call returned %s, want its own sampled answer", name, body)
			}
		case err := <-errs:
			t.Error(err)
		case <-time.After(2 * time.Minute):
			t.Fatal("the calls did not return")
		}
	}
	select {
	case <-arrived:
	default:
		t.Error("the two sampling requests never overlapped")
	}
}

// devFrontingEverything runs `mcpcancel dev` fronting server-everything
// over stdio (an upstream session per client, the default) and returns
// its MCP URL.
func devFrontingEverything(t *testing.T) string {
	t.Helper()
	server := filepath.Join(nodetest.Install(t), "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	p := start(t, nil, "dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0",
		"--upstream-stdio", fmt.Sprintf("node '%s' stdio", server))
	p.waitLine(t, "coordinator: ")
	return p.waitLine(t, "mcp: ")
}

// TestDevUpstreamRootsOutsideAnyCall: server-everything asks its client
// for roots/list 350 ms after initialize, when the call that opened the
// client's upstream session (a quick echo) has ended. The request is the
// client's all the same (its upstream session is its own): the adapter
// asks the client session itself, the gateway issues it on the client's
// GET stream under an id naming the worker, and the client's answer goes
// back to the server, which logs how many roots it got, to that client.
func TestDevUpstreamRootsOutsideAnyCall(t *testing.T) {
	url := devFrontingEverything(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := nodetest.Node(t, ctx, "asking2025.mjs", "--url", url, "--tool", "echo", "--args", `{"message":"hi"}`, "--no-wire",
		"--roots", `[{"uri":"file:///srv/project","name":"project"}]`, "--until-log", "Roots updated")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("asking2025.mjs: %v\n%s", err, out)
	}
	var resultAt, rootsAt = -1, -1
	var rootsID string
	var seen bool
	for i, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var e struct {
			Event     string
			RequestID any
			Seen      bool
		}
		json.Unmarshal(line, &e)
		switch e.Event {
		case "result":
			resultAt = i
		case "roots_request":
			rootsAt, rootsID = i, fmt.Sprint(e.RequestID)
		case "until_log":
			seen = e.Seen
		}
	}
	if resultAt < 0 || rootsAt < resultAt {
		t.Fatalf("want the echo's result, then the roots/list request outside it\n%s", out)
	}
	if !strings.HasPrefix(rootsID, "mcpcancel-session.") {
		t.Errorf("roots/list came under id %q, want the gateway's session request id", rootsID)
	}
	if !seen {
		t.Errorf("the server never logged that it got the client's roots\n%s", out)
	}
	if !bytes.Contains(out, []byte("Roots updated: 1 root(s) received from client")) {
		t.Errorf("the server's log does not count the client's one root\n%s", out)
	}
}
