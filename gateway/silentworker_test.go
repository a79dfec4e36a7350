package gateway_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/faultproxy"
	"github.com/mcpcancel/mcpcancel/internal/grpcserver"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// A worker blackholed both ways mid-call (no FIN, no RST; keepalive set
// far out of reach, so only the lease and the gateway's probe can act):
// its call is FAILED as worker_lost, and its client, still waiting, gets an
// error within the lease TTL plus 10 s of the silence.
func TestSilentWorkersClientIsAnswered(t *testing.T) {
	const ttl = 3 * time.Second
	cli := etcdtest.Single(t).Client()
	lax := grpcserver.Keepalive{Time: time.Hour, Timeout: time.Hour}
	co := testcluster.StartCoordinatorKeepalive(t, cli, coordinator.Options{LeaseTTL: ttl}, lax)
	toCoord := faultproxy.Start(t, co.Addr)
	// The worker advertises the proxy in front of it, so the gateway's
	// Execute stream runs through the blackhole too.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	toWorker := faultproxy.Start(t, lis.Addr().String())
	w := worker.New(worker.Options{Coordinator: toCoord.Addr(), Name: "silent", Advertise: toWorker.Addr(), DrainTimeout: time.Second})
	demo.Register(w)
	ctx, stopWorker := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx, lis) }() // owned: waited in the cleanup
	t.Cleanup(func() { stopWorker(); <-ran })
	<-w.Attached()
	c := co.Client(t)
	_, url := testcluster.StartGateway(t, c, gateway.Options{ProbeInterval: time.Second})
	waitFor(t, "the demo tools", func() bool {
		resp, err := c.ListTools(t.Context(), nil)
		return err == nil && len(resp.Tools) >= 3
	})
	sid := openSession(t, url)
	running := make(chan struct{})
	call := startCallSeen(t, url, sid, 1, "sleep", map[string]any{"seconds": 60, "steps": 1000}, "p", running)
	<-running

	toCoord.Set(faultproxy.Silent, 0)
	toWorker.Set(faultproxy.Silent, 0)
	t.Cleanup(func() { toCoord.Reset(); toWorker.Reset() }) // before the worker stops
	silenced := time.Now()
	var r streamResult
	select {
	case r = <-call:
	case <-time.After(ttl + 10*time.Second):
		t.Fatalf("the silent worker's client had no answer %v after the silence (lease TTL %v)", ttl+10*time.Second, ttl)
	}
	t.Logf("answered %v after the silence (lease TTL %v)", time.Since(silenced).Round(time.Millisecond), ttl)
	if !hasResponse(r.msgs) || !strings.Contains(fmt.Sprint(r.msgs), "lost") || !strings.Contains(fmt.Sprint(r.msgs), "isError:true") {
		t.Fatalf("the silent worker's client got %v", r.msgs)
	}
	as := testcluster.Audits(t, cli)
	var got []string
	for _, a := range as {
		for _, rec := range a {
			if rec.Scope == "session:"+sid {
				got = append(got, rec.Outcome+"/"+rec.Initiator)
			}
		}
	}
	if len(got) != 1 || got[0] != "failed/worker_lost" {
		t.Fatalf("decisions = %v, want one failed/worker_lost", got)
	}
}
