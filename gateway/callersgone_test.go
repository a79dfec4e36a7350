package gateway_test

import (
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/faultproxy"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

// When a stdio client leaves, its calls' handlers stop before their
// cancellation is decided: the gateway tells the worker at once
// (CallersGone), directly, while its cancel goes to the coordinator. Here
// the link to the coordinator is slow, so the decision comes long after;
// the handler's stop still precedes it in the audit, and the decision is
// the gateway's, with no cancel of the worker's own.
func TestStdioDisconnectStopsHandlersBeforeTheDecision(t *testing.T) {
	st := newStack(t, stackOptions{})
	link := faultproxy.Start(t, st.coord.Addr)
	g := gateway.New(gateway.Options{Coordinator: testcluster.Conn(t, link.Addr())})
	t.Cleanup(func() { g.Close() })
	c := serveStdio(t, g)
	c.initialize(t, "2025-11-25")
	c.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sleep","arguments":{"seconds":600,"steps":1}}}`)
	waitFor(t, "the handler to run", func() bool {
		return testcluster.Gauge(t, st.w.Registry(), "mcpcancel_worker_running_handlers") == 1
	})
	before := testcluster.HandledRPCs(t, st.coord.Server.Registry())["Cancel"]
	link.Set(faultproxy.Delay, 300*time.Millisecond)
	c.in.Close() // the client leaves
	if err := <-c.done; err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
	c.done <- nil // for the cleanup

	var a []string
	waitFor(t, "the audit's stopped_at", func() bool {
		as := st.allAudits(t)
		a = a[:0]
		for id, rs := range as {
			for _, r := range rs {
				if r.StoppedAt == nil {
					return false
				}
				if r.Outcome != "cancelled" || r.Initiator != "disconnect" || r.Reason != "stdio connection closed" {
					t.Fatalf("call %s: %s by %s (%q); want cancelled by the disconnect", id, r.Outcome, r.Initiator, r.Reason)
				}
				if !r.StoppedAt.Before(r.SettledAt) {
					t.Fatalf("call %s: handler stopped %v, settled %v; want the handler stopped first", id, r.StoppedAt, r.SettledAt)
				}
				a = append(a, id)
			}
		}
		return len(a) == 1
	})
	if n := testcluster.HandledRPCs(t, st.coord.Server.Registry())["Cancel"] - before; n != 1 {
		t.Errorf("the coordinator answered %v Cancels, want 1 (the gateway's)", n)
	}
}
