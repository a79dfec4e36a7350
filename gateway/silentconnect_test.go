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

// Regression (issue 14, test/robustness silent_worker, seed
// 1796124566952747474): a call placed on a worker that had just gone
// silent, before its lease ran out, was failed by the janitor within the
// TTL, but its client was answered only 15 s later. The gateway had no
// connection to that worker yet, and a fresh one to a silent peer never
// completes its handshake: Execute waited for it, and the quiet-stream
// probe started only once Execute returned. The probe now watches from
// before the stream opens.
func TestCallToANewlySilentWorkerIsAnswered(t *testing.T) {
	const ttl = 3 * time.Second
	cli := etcdtest.Single(t).Client()
	lax := grpcserver.Keepalive{Time: time.Hour, Timeout: time.Hour}
	co := testcluster.StartCoordinatorKeepalive(t, cli, coordinator.Options{LeaseTTL: ttl}, lax)
	toCoord := faultproxy.Start(t, co.Addr)
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

	// Silent before the gateway ever dialled the worker; the coordinator
	// still places calls on it until its lease runs out.
	toCoord.Set(faultproxy.Silent, 0)
	toWorker.Set(faultproxy.Silent, 0)
	t.Cleanup(func() { toCoord.Reset(); toWorker.Reset() }) // before the worker stops
	silenced := time.Now()
	call := startCall(t, url, sid, 1, "echo", map[string]any{"text": "hi"}, nil)
	var r streamResult
	select {
	case r = <-call:
	case <-time.After(ttl + 10*time.Second):
		t.Fatalf("the client had no answer %v after the silence (lease TTL %v)", ttl+10*time.Second, ttl)
	}
	t.Logf("answered %v after the silence (lease TTL %v)", time.Since(silenced).Round(time.Millisecond), ttl)
	if r.err != nil || !hasResponse(r.msgs) || !strings.Contains(fmt.Sprint(r.msgs), "isError:true") {
		t.Fatalf("the client got %v (%v), want an error result", r.msgs, r.err)
	}
	var got []string
	for _, a := range testcluster.Audits(t, cli) {
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
