package gateway_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/gateway"
)

// Graceful shutdown: the gateway stops accepting, lets calls finish for
// the grace period, then cancels the rest with reason "shutdown" and
// answers nothing for them. (goleak in TestMain checks nothing is left.)
func TestGracefulShutdown(t *testing.T) {
	// The short call needs 0.1 s of the grace; the margin is for loaded
	// machines, where a short call cut by the grace ends completed and
	// cancel_lost instead.
	const grace = 2 * time.Second
	st := newStack(t, stackOptions{})
	g := gateway.New(gateway.Options{Coordinator: st.conn})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + lis.Addr().String() + "/mcp"
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- g.ServeHTTP(ctx, lis, grace) }()

	sid := openSession(t, url)
	short := startCall(t, url, sid, 1, "sleep", map[string]any{"seconds": 0.1, "steps": 1}, nil)
	long := startCall(t, url, sid, 2, "sleep", map[string]any{"seconds": 30, "steps": 300}, nil)
	waitFor(t, "both calls to run", func() bool {
		resp, err := st.c.ListWorkers(t.Context(), nil)
		return err == nil && resp.Workers[0].InFlight == 2
	})
	begun := time.Now()
	stop()
	if r := <-short; !hasResponse(r.msgs) {
		t.Fatalf("the short call did not finish during the grace period: %v", r.msgs)
	}
	// Its client did not cancel it and is still waiting: it is told why
	// the call ended.
	if r := <-long; !hasResponse(r.msgs) || !strings.Contains(fmt.Sprint(r.msgs), "shut down") {
		t.Fatalf("the long call's client was not told of the shutdown: %v", r.msgs)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begun); took > 5*grace {
		t.Fatalf("shutdown took %v with a %v grace", took, grace)
	}
	as := st.audits(t, "session:"+sid)
	if a := as["1"]; len(a) != 1 || a[0].Outcome != "completed" {
		t.Fatalf("call 1 audit = %+v", a)
	}
	if a := as["2"]; len(a) != 1 || a[0].Outcome != "cancelled" || a[0].Initiator != "shutdown" {
		t.Fatalf("call 2 audit = %+v", a)
	}
	if _, err := net.DialTimeout("tcp", lis.Addr().String(), time.Second); err == nil {
		t.Fatal("still accepting connections after shutdown")
	}
}
