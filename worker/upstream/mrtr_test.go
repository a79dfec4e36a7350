package upstream_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// A fronted server that asks its client something the 2026-07-28 way (an
// input_required result with inputRequests) is answered by the client of
// the call: a 2025-11-25 client gets elicitation/create on the call's
// stream, a 2026-07-28 client the gateway's own input_required; the
// adapter's SDK retries the server with the answer, and the client gets
// the server's result.
func TestUpstreamMultiRoundTripRelayed(t *testing.T) {
	for _, tr := range []struct {
		name string
		opts func(*testing.T) upstream.Options
	}{
		{"stdio", func(*testing.T) upstream.Options { return fixtureStdio() }},
		{"http-2026", func(t *testing.T) upstream.Options { return fixtureHTTP(t, true) }},
	} {
		t.Run(tr.name, func(t *testing.T) {
			st := startStack(t, tr.opts(t), "ask")
			for _, era := range []string{"2025-11-25", "2026-07-28"} {
				t.Run(era, func(t *testing.T) {
					asked := 0
					c := mcp.NewClient(&mcp.Implementation{Name: "upstream-test", Version: "1"}, &mcp.ClientOptions{
						ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
							asked++
							return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
						},
					})
					cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: st.url}, &mcp.ClientSessionOptions{ProtocolVersion: era})
					if err != nil {
						t.Fatal(err)
					}
					defer cs.Close()
					res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "ask", Arguments: map[string]any{}})
					if err != nil || res.IsError || text(res) != "hello Ada (accept)" {
						t.Fatalf("ask = %+v, %v; want the server's greeting of the client's answer", res, err)
					}
					if asked != 1 {
						t.Fatalf("the client was asked %d times; want once", asked)
					}
				})
			}
		})
	}
}

// A client that cancels its call while the server's question waits for
// its answer: the call is settled once, cancelled by the client, and its
// record says the question was pending then (the gateway cancels it at
// the client); the server is not retried.
func TestUpstreamMultiRoundTripCancelled(t *testing.T) {
	opts, tp := fixtureStdio(), &tap{file: filepath.Join(t.TempDir(), "wire.log")}
	opts.Command = append([]string{"node", filepath.Join("testdata", "tap.mjs"), tp.file, "--"}, opts.Command...)
	st := startStack(t, opts, "ask")
	asked, done := make(chan struct{}), make(chan struct{})
	c := mcp.NewClient(&mcp.Implementation{Name: "upstream-test", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			close(asked)
			select {
			case <-ctx.Done():
			case <-done:
			}
			return nil, context.Canceled
		},
	})
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: st.url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	defer close(done) // before the close, which waits for the handler
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { // owned: the test reads errc
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask", Arguments: map[string]any{}})
		errc <- err
	}()
	select {
	case <-asked:
	case err := <-errc:
		t.Fatalf("the call ended (%v) before its client was asked", err)
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the call returned normally after its cancel")
	}
	testcluster.WaitFor(t, "the cancelled record", func() bool { return len(st.audits(t, "ask")) == 1 })
	checkAudit(t, st, "ask", "cancelled", "client")
	if ch := st.audits(t, "ask")[0].ChildRequests; len(ch) != 1 || ch[0].Method != "elicitation/create" || ch[0].Outcome != "cancelled" {
		t.Errorf("the call's record lists %+v; want its elicitation cancelled", ch)
	}
	n := 0
	for _, m := range tp.messages(t) {
		if m.Dir == "in" && m.Method == "tools/call" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the server got %d tools/call; want 1 (no retry after the cancel)", n)
	}
}
