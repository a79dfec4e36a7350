package gateway_test

import (
	"testing"

	"github.com/mcpcancel/mcpcancel/gateway"
)

// histogramCount is the sample count of one series of a gateway histogram.
func histogramCount(t *testing.T, g *gateway.Gateway, name string, labels ...string) uint64 {
	t.Helper()
	mfs, err := g.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, labels) && len(m.GetLabel()) == len(labels)/2 {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

// The semantic conventions' mcp.server.operation.duration counts every
// request by method and error.type: completed calls without one, a tool
// error, a cancel that won, a JSON-RPC error by its code, and a method
// nobody knows as _OTHER.
func TestOperationDurationHistogram(t *testing.T) {
	st := newStack(t, stackOptions{})
	g := st.gateways[0]
	sid := openSession(t, st.urls[0])
	for i := range 2 {
		if r := <-startCall(t, st.urls[0], sid, 100+i, "echo", map[string]any{"text": "x"}, nil); !hasResponse(r.msgs) {
			t.Fatal("echo not answered")
		}
	}
	<-startCall(t, st.urls[0], sid, 200, "sleep", map[string]any{"seconds": -1}, nil) // a tool error
	done := startCall(t, st.urls[0], sid, 300, "sleep", map[string]any{"seconds": 30, "steps": 300}, nil)
	waitFor(t, "the sleep to run", func() bool { return metric(t, g, "mcpcancel_gateway_calls_in_flight") == 1 })
	post(t, st.urls[0], sid, cancelMsg(300, "stop"))
	<-done
	<-startCall(t, st.urls[0], sid, 400, "no-such-tool", map[string]any{}, nil)
	post(t, st.urls[0], sid, `{"jsonrpc":"2.0","id":500,"method":"made/up"}`)
	const name = "mcp_server_operation_duration_seconds"
	for _, tc := range []struct {
		labels []string
		want   uint64
	}{
		{[]string{"mcp_method_name", "tools/call", "error_type", ""}, 2},
		{[]string{"mcp_method_name", "tools/call", "error_type", "tool_error"}, 1},
		{[]string{"mcp_method_name", "tools/call", "error_type", "cancelled"}, 1},
		{[]string{"mcp_method_name", "tools/call", "error_type", "-32602"}, 1},
		{[]string{"mcp_method_name", "_OTHER", "error_type", "-32601"}, 1},
		{[]string{"mcp_method_name", "made/up", "error_type", "-32601"}, 0},
	} {
		if got := histogramCount(t, g, name, tc.labels...); got != tc.want {
			t.Errorf("%s%v count = %d, want %d", name, tc.labels, got, tc.want)
		}
	}
}
