package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	mcpgoclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// A client built on a widely used third-party SDK, mark3labs' mcp-go,
// in each era, over Streamable HTTP and over stdio: it lists the tools
// at once, calls one, hears every progress notification of a call before
// its result, in order, answers a tool's elicitation (2026-07-28: as a
// multi round-trip), and cancels a call, which the worker's handler
// really stops and the audit records once as the client's cancel. Over
// 2025-11-25 HTTP the SDK sends no cancel and closes the request's
// stream, which is no cancel in that era: the call is not the client's
// cancel; the gateway cancels it as a disconnect once it cannot write to
// the stream any more (here its next progress), as nothing could deliver
// its answer.
func TestMcpgoClient(t *testing.T) {
	for _, tr := range []string{"http", "stdio"} {
		for _, version := range []string{"2025-11-25", "2026-07-28"} {
			t.Run(tr+"/"+version, func(t *testing.T) { testMcpgoClient(t, tr, version) })
		}
	}
}

func testMcpgoClient(t *testing.T, tr, version string) {
	st := newStack(t, stackOptions{})
	testcluster.StartWorker(t, worker.Options{Coordinator: st.coord.Addr, Name: "asker"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "ask_name"}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
			res, err := c.Elicit(ctx, &mcp.ElicitParams{Message: "Your name?", RequestedSchema: map[string]any{
				"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}},
			}})
			if err != nil {
				return nil, err
			}
			return worker.Text(fmt.Sprintf("%s: %v", res.Action, res.Content["name"])), nil
		})
	})
	st.waitForTool(t, "ask_name")

	var tp transport.Interface
	switch tr {
	case "http":
		h, err := transport.NewStreamableHTTP(st.urls[0])
		if err != nil {
			t.Fatal(err)
		}
		tp = h
	case "stdio":
		outR, inW := st.stdioPipes(t)
		tp = transport.NewIO(outR, inW, io.NopCloser(strings.NewReader("")))
	}
	cl := mcpgoclient.NewClient(tp, mcpgoclient.WithProtocolVersion(version), mcpgoclient.WithElicitationHandler(namer{}))
	if err := cl.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	var progressMu sync.Mutex
	progress := map[string][]float64{} // by token
	cl.OnNotification(func(n mcpgo.JSONRPCNotification) {
		if n.Method != "notifications/progress" {
			return
		}
		tok := fmt.Sprint(n.Params.AdditionalFields["progressToken"])
		p, _ := n.Params.AdditionalFields["progress"].(float64)
		progressMu.Lock()
		progress[tok] = append(progress[tok], p)
		progressMu.Unlock()
	})
	progressOf := func(tok string) []float64 {
		progressMu.Lock()
		defer progressMu.Unlock()
		return append([]float64(nil), progress[tok]...)
	}
	init, err := cl.Initialize(t.Context(), mcpgo.InitializeRequest{Params: mcpgo.InitializeParams{
		ProtocolVersion: version, ClientInfo: mcpgo.Implementation{Name: "mcpgo-test", Version: "1"},
		Capabilities: mcpgo.ClientCapabilities{Elicitation: &mcpgo.ElicitationCapability{}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if init.ProtocolVersion != version {
		t.Fatalf("negotiated %s, want %s", init.ProtocolVersion, version)
	}

	// Listed at once.
	tools, err := cl.ListTools(t.Context(), mcpgo.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	for _, want := range []string{"echo", "sleep", "ask_name"} {
		if !strings.Contains(","+strings.Join(names, ",")+",", ","+want+",") {
			t.Fatalf("tools/list: %v lacks %s", names, want)
		}
	}

	// A call.
	call := func(ctx context.Context, name string, args map[string]any, token string) (*mcpgo.CallToolResult, error) {
		req := mcpgo.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = name, args
		if token != "" {
			req.Params.Meta = &mcpgo.Meta{ProgressToken: token}
		}
		return cl.CallTool(ctx, req)
	}
	res, err := call(t.Context(), "echo", map[string]any{"text": "hello from mcp-go"}, "")
	if err != nil || res.IsError || !strings.Contains(mcpgoText(res), "hello from mcp-go") {
		t.Fatalf("echo: %+v, %v", res, err)
	}

	// Every progress notification before the result, in order.
	res, err = call(t.Context(), "sleep", map[string]any{"seconds": 0.2, "steps": 20}, "burst")
	if err != nil || res.IsError {
		t.Fatalf("sleep: %+v, %v", res, err)
	}
	got := progressOf("burst")
	if len(got) != 20 {
		t.Fatalf("heard %d progress notifications before the result, want 20: %v", len(got), got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("progress out of order: %v", got)
		}
	}

	// An elicitation, answered.
	res, err = call(t.Context(), "ask_name", nil, "")
	if err != nil || res.IsError || mcpgoText(res) != "accept: Ada" {
		t.Fatalf("ask_name: %+v (%q), %v", res, mcpgoText(res), err)
	}

	// A cancel: over 2025-11-25 HTTP the SDK sends none, so the call is
	// short enough to wait for.
	seconds, closeOnly := 20.0, tr == "http" && version == "2025-11-25"
	if closeOnly {
		seconds = 1
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { // owned: the test waits on errc
		_, err := call(ctx, "sleep", map[string]any{"seconds": seconds, "steps": 200}, "long")
		errc <- err
	}()
	waitFor(t, "the long call's progress", func() bool { return len(progressOf("long")) >= 2 })
	cancel()
	// mcp-go's stream reader ends with the cancelled request and closes
	// its response channel, and its select may take that before ctx.Done:
	// "unexpected nil response" is then its report of the same cancel
	// (mcp-go v1.2.1, client/transport/streamable_http.go; seen once in
	// CI on 2026-07-28 HTTP). What the gateway did is checked below.
	if err := <-errc; !errors.Is(err, context.Canceled) && (err == nil || !strings.Contains(err.Error(), "unexpected nil response")) {
		t.Fatalf("the cancelled call: %v", err)
	}
	// Two sleeps, each with one record, their handlers returned: the
	// burst completed, the long one as the client's cancel left it.
	var outcomes []string
	waitFor(t, "both sleeps' records", func() bool {
		outcomes = nil
		for _, as := range st.allAudits(t) {
			if len(as) == 1 && as[0].Tool == "sleep" && as[0].StoppedAt != nil {
				outcomes = append(outcomes, as[0].Outcome+"/"+as[0].Initiator)
			}
		}
		return len(outcomes) == 2
	})
	slices.Sort(outcomes)
	want := []string{"cancelled/client", "completed/"}
	if closeOnly {
		// Its next progress, 5 ms later, finds the stream closed.
		want = []string{"cancelled/disconnect", "completed/"}
	}
	if !slices.Equal(outcomes, want) {
		t.Fatalf("the sleeps' records: %v, want %v", outcomes, want)
	}
}

// namer answers every elicitation with the name Ada.
type namer struct{}

func (namer) Elicit(context.Context, mcpgo.ElicitationRequest) (*mcpgo.ElicitationResult, error) {
	return &mcpgo.ElicitationResult{ElicitationResponse: mcpgo.ElicitationResponse{
		Action: mcpgo.ElicitationResponseActionAccept, Content: map[string]any{"name": "Ada"},
	}}, nil
}

func mcpgoText(r *mcpgo.CallToolResult) string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(mcpgo.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
