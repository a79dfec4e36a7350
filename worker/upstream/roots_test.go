package upstream_test

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// A fronted tool runs once per call, for a 2026-07-28 client too, though
// server-everything asks its client for roots (roots/list) 350 ms after
// initialize and again from get-roots-list when it has none yet: roots
// are the session's, so neither request is tied to the lone call in
// flight (which would answer it by multi round-trip and run the tool
// again). The tap counts the tools/call the server received; the audit
// has one record per call.
func TestFrontedToolRunsOnceWhenTheServerListsRoots(t *testing.T) {
	const getRoots = "get-roots-list"
	cmd, tp := stdioEverything(t)
	st := startStack(t, upstream.Options{Command: cmd}, longOp, getRoots)
	s := connectVersion(t, st.url, "2026-07-28", &mcp.Root{URI: "file:///client", Name: "client"})

	// At once, as a host does: the call is likely in flight when the
	// server's roots/list after initialize arrives.
	res, err := s.CallTool(t.Context(), callParams(longOp, `{"duration":1,"steps":5}`))
	if err != nil || res.IsError {
		t.Fatalf("%s = %+v, %v", longOp, res, err)
	}
	res, err = s.CallTool(t.Context(), &mcp.CallToolParams{Name: getRoots, Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("%s = %+v, %v", getRoots, res, err)
	}
	msgs := tp.messages(t)
	for _, tool := range []string{longOp, getRoots} {
		n := 0
		for _, m := range msgs {
			if m.Dir == "in" && m.Method == "tools/call" && m.Params.Name == tool {
				n++
			}
		}
		if n != 1 {
			t.Errorf("the server ran %s %d times for one call; want once", tool, n)
		}
		checkAudit(t, st, tool, "completed", "")
		if recs := st.audits(t, tool); len(recs[0].ChildRequests) != 0 {
			t.Errorf("%s's record lists requests toward its client %+v; roots/list is the session's", tool, recs[0].ChildRequests)
		}
	}
}

// A 2025 client's own upstream session asks that client for its roots,
// outside any call: get-roots-list shows the client's roots, and runs
// once.
func TestRootsListAskedOfTheClientSession(t *testing.T) {
	cmd, tp := stdioEverything(t)
	st := startStack(t, upstream.Options{Command: cmd}, "get-roots-list")
	s := connectVersion(t, st.url, "2025-11-25", &mcp.Root{URI: "file:///mine", Name: "mine"})
	res, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: "get-roots-list", Arguments: map[string]any{}})
	if err != nil || res.IsError || !strings.Contains(text(res), "file:///mine") {
		t.Fatalf("get-roots-list = %+v, %v; want the client's root file:///mine", res, err)
	}
	if c := findCall(tp.messages(t), "get-roots-list", ""); c == nil {
		t.Fatal("the server did not receive the call")
	}
	checkAudit(t, st, "get-roots-list", "completed", "")
	if recs := st.audits(t, "get-roots-list"); len(recs[0].ChildRequests) != 0 {
		t.Errorf("the call's record lists requests toward its client %+v; roots/list is the session's", recs[0].ChildRequests)
	}
}

// connectVersion is a Go SDK client session with the gateway speaking
// version, declaring roots.
func connectVersion(t *testing.T, url, version string, roots ...*mcp.Root) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "upstream-test", Version: "1"}, nil)
	c.AddRoots(roots...)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connecting to the gateway: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}
