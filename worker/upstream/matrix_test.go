package upstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// Fronted servers built on two SDKs (the official Go SDK, and mark3labs'
// mcp-go), over stdio and Streamable HTTP, to clients of both eras: the
// gateway lists their tools, a call runs the server's tool once, and a
// client's cancel (notifications/cancelled in 2025-11-25, the request's
// stream closed in 2026-07-28) reaches the server's handler, which sees
// its context end, and is audited once. Both counts come from the server
// itself (its tally tool), not from what the gateway says.
func TestForeignSDKMatrix(t *testing.T) {
	for _, srv := range []struct {
		name string
		opts func(*testing.T) upstream.Options
	}{
		{"go-sdk/stdio", func(*testing.T) upstream.Options {
			return upstream.Options{Command: []string{os.Args[0]}, Env: []string{matrixServerEnv + "=go-sdk"}}
		}},
		{"go-sdk/http", func(t *testing.T) upstream.Options { return matrixHTTP(t, matrixGoSDK(newTally()).handler()) }},
		{"mcp-go/stdio", func(*testing.T) upstream.Options {
			return upstream.Options{Command: []string{os.Args[0]}, Env: []string{matrixServerEnv + "=mcp-go"}}
		}},
		{"mcp-go/http", func(t *testing.T) upstream.Options {
			return matrixHTTP(t, mcpgoserver.NewStreamableHTTPServer(matrixMcpgo(newTally())))
		}},
	} {
		t.Run(srv.name, func(t *testing.T) {
			st := startStack(t, srv.opts(t), "once", "hold", "tally")
			for i, era := range []string{"2025-11-25", "2026-07-28"} {
				t.Run(era, func(t *testing.T) { testMatrix(t, st, era, i) })
			}
		})
	}
}

// testMatrix runs one era's checks on st, which has audited holdsBefore
// calls of hold.
func testMatrix(t *testing.T, st *stack, era string, holdsBefore int) {
	c := &rpcClient{url: st.url, era: era}
	var list struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	c.call(t, "tools/list", "", &list)
	if names := fmt.Sprint(list.Tools); !strings.Contains(names, "{once}") || !strings.Contains(names, "{hold}") {
		t.Fatalf("tools/list: %s", names)
	}

	key := strings.ReplaceAll(t.Name(), "/", "-")
	var res struct {
		Content []struct{ Text string } `json:"content"`
	}
	c.call(t, "tools/call", fmt.Sprintf(`"name":"once","arguments":{"key":%q}`, key+"-once"), &res)
	if len(res.Content) != 1 || res.Content[0].Text != "ran 1" {
		t.Fatalf("once: %+v", res)
	}
	if got := tallyOf(t, c, key+"-once"); got.Runs != 1 {
		t.Errorf("the server ran once %d times for one call", got.Runs)
	}

	// hold runs until its client cancels it.
	ctx, closeStream := context.WithCancel(t.Context())
	defer closeStream()
	h, body, id := c.request(t, "tools/call", fmt.Sprintf(`"name":"hold","arguments":{"key":%q}`, key+"-hold"))
	streamDone := make(chan []json.RawMessage, 1)
	go func() { // owned: ends when the call's stream does, which the cancel ends; waited for below
		msgs, _ := postMessages(ctx, st.url, h, body) // the cancel may end it with an error
		streamDone <- msgs
	}()
	testcluster.WaitFor(t, "the server runs hold", func() bool { return tallyOf(t, c, key+"-hold").Runs == 1 })
	if era == "2026-07-28" {
		closeStream() // the cancel of 2026-07-28 HTTP
	} else {
		resp, b := testcluster.PostMCP(t, st.url, "", c.session,
			fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"matrix"}}`, id))
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("notifications/cancelled: %s %s", resp.Status, b)
		}
	}
	testcluster.WaitFor(t, "the server's handler sees its context end", func() bool { return tallyOf(t, c, key+"-hold").Cancels == 1 })
	if msgs := <-streamDone; era == "2025-11-25" {
		for _, m := range msgs {
			if strings.Contains(string(m), `"result"`) || strings.Contains(string(m), `"error"`) {
				t.Errorf("the cancelled call was answered: %s", m)
			}
		}
	}
	if got := tallyOf(t, c, key+"-hold"); got.Runs != 1 || got.Cancels != 1 {
		t.Errorf("hold: the server ran it %d times and saw %d cancels; want 1 and 1", got.Runs, got.Cancels)
	}
	testcluster.WaitFor(t, "hold's audit record", func() bool { return len(st.audits(t, "hold")) > holdsBefore })
	holds := st.audits(t, "hold")
	if len(holds) != holdsBefore+1 {
		t.Fatalf("%d audit records of hold, want %d", len(holds), holdsBefore+1)
	}
	for _, a := range holds {
		if a.Outcome != "cancelled" || a.Initiator != "client" {
			t.Errorf("hold audited %s by %s, want cancelled by the client", a.Outcome, a.Initiator)
		}
	}
}

// request is what call sends, without sending it: the headers, the body
// and the request's id.
func (c *rpcClient) request(t *testing.T, method, params string) (map[string]string, string, int) {
	t.Helper()
	h := map[string]string{"Mcp-Protocol-Version": c.era}
	meta := ""
	if c.era == "2026-07-28" {
		h["Mcp-Method"] = method
		meta = fmt.Sprintf(`,"_meta":{"io.modelcontextprotocol/protocolVersion":%q,"io.modelcontextprotocol/clientCapabilities":{}}`, c.era)
		var name struct {
			Name string `json:"name"`
		}
		json.Unmarshal([]byte("{"+params+"}"), &name)
		h["Mcp-Name"] = name.Name
	} else {
		if c.session == "" {
			c.session = initSession(t, c.url, c.era)
		}
		h["Mcp-Session-Id"] = c.session
	}
	c.id++
	return h, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{%s%s}}`, c.id, method, params, meta), c.id
}

// matrixTally is what a matrix server counted for a key.
type matrixTally struct {
	Runs    int `json:"runs"`
	Cancels int `json:"cancels"`
}

func tallyOf(t *testing.T, c *rpcClient, key string) matrixTally {
	t.Helper()
	var res struct {
		Content []struct{ Text string } `json:"content"`
	}
	c.call(t, "tools/call", fmt.Sprintf(`"name":"tally","arguments":{"key":%q}`, key), &res)
	var got matrixTally
	if len(res.Content) != 1 || json.Unmarshal([]byte(res.Content[0].Text), &got) != nil {
		t.Fatalf("tally: %+v", res)
	}
	return got
}

// matrixServerEnv, when set, makes the test binary run a matrix server
// on stdio instead of the tests: "go-sdk" or "mcp-go".
const matrixServerEnv = "UPSTREAM_TEST_MATRIX_SERVER"

// runMatrixServer serves the matrix server of sdk on stdio.
func runMatrixServer(sdk string) int {
	var err error
	switch sdk {
	case "go-sdk":
		err = matrixGoSDK(newTally()).Run(context.Background(), &mcp.StdioTransport{})
	case "mcp-go":
		err = mcpgoserver.ServeStdio(matrixMcpgo(newTally()))
	default:
		err = fmt.Errorf("no matrix server on %q", sdk)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// tally counts, per key, the runs of the tools once and hold, and the
// runs of hold that saw their context end.
type tally struct {
	mu sync.Mutex
	m  map[string]*matrixTally
}

func newTally() *tally { return &tally{m: map[string]*matrixTally{}} }

func (ta *tally) note(key string, f func(*matrixTally)) matrixTally {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if ta.m[key] == nil {
		ta.m[key] = &matrixTally{}
	}
	f(ta.m[key])
	return *ta.m[key]
}

func (ta *tally) text(key string) string {
	b, _ := json.Marshal(ta.note(key, func(*matrixTally) {}))
	return string(b)
}

// hold runs until ctx ends, which it counts.
func (ta *tally) hold(ctx context.Context, key string) error {
	ta.note(key, func(m *matrixTally) { m.Runs++ })
	<-ctx.Done()
	ta.note(key, func(m *matrixTally) { m.Cancels++ })
	return ctx.Err()
}

type keyArgs struct {
	Key string `json:"key"`
}

// goSDKServer is the matrix server on the official Go SDK.
type goSDKServer struct{ *mcp.Server }

func (s goSDKServer) handler() http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.Server }, nil)
}

func matrixGoSDK(ta *tally) goSDKServer {
	s := mcp.NewServer(&mcp.Implementation{Name: "matrix-go-sdk", Version: "1"}, nil)
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	mcp.AddTool(s, &mcp.Tool{Name: "once"}, func(_ context.Context, _ *mcp.CallToolRequest, a keyArgs) (*mcp.CallToolResult, any, error) {
		return text(fmt.Sprintf("ran %d", ta.note(a.Key, func(m *matrixTally) { m.Runs++ }).Runs)), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "hold"}, func(ctx context.Context, _ *mcp.CallToolRequest, a keyArgs) (*mcp.CallToolResult, any, error) {
		return nil, nil, ta.hold(ctx, a.Key)
	})
	mcp.AddTool(s, &mcp.Tool{Name: "tally"}, func(_ context.Context, _ *mcp.CallToolRequest, a keyArgs) (*mcp.CallToolResult, any, error) {
		return text(ta.text(a.Key)), nil, nil
	})
	return goSDKServer{s}
}

// matrixMcpgo is the matrix server on mcp-go.
func matrixMcpgo(ta *tally) *mcpgoserver.MCPServer {
	s := mcpgoserver.NewMCPServer("matrix-mcp-go", "1")
	key := mcpgo.WithString("key", mcpgo.Required())
	s.AddTool(mcpgo.NewTool("once", key), func(_ context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		return mcpgo.NewToolResultText(fmt.Sprintf("ran %d", ta.note(r.GetString("key", ""), func(m *matrixTally) { m.Runs++ }).Runs)), nil
	})
	s.AddTool(mcpgo.NewTool("hold", key), func(ctx context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		return nil, ta.hold(ctx, r.GetString("key", ""))
	})
	s.AddTool(mcpgo.NewTool("tally", key), func(_ context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		return mcpgo.NewToolResultText(ta.text(r.GetString("key", ""))), nil
	})
	return s
}

// matrixHTTP fronts h, a Streamable HTTP server, over HTTP.
func matrixHTTP(t *testing.T, h http.Handler) upstream.Options {
	hs := httptest.NewServer(h)
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	return upstream.Options{URL: hs.URL}
}
