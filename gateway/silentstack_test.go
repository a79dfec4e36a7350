package gateway_test

import (
	"context"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/faultproxy"
	"github.com/mcpcancel/mcpcancel/internal/grpcserver"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// silentStack is a coordinator whose keepalive is far out of reach (so
// only the lease and the gateway's probe can act), a demo worker reached
// through proxies both ways (it advertises the one in front of it, so the
// gateway's Execute streams run through it too), a gateway, and one
// client session.
type silentStack struct {
	cli               *clientv3.Client
	toCoord, toWorker *faultproxy.Proxy
	url, sid          string
}

func newSilentStack(t *testing.T, ttl time.Duration) *silentStack {
	t.Helper()
	st := &silentStack{cli: etcdtest.Single(t).Client()}
	lax := grpcserver.Keepalive{Time: time.Hour, Timeout: time.Hour}
	co := testcluster.StartCoordinatorKeepalive(t, st.cli, coordinator.Options{LeaseTTL: ttl}, lax)
	st.toCoord = faultproxy.Start(t, co.Addr)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st.toWorker = faultproxy.Start(t, lis.Addr().String())
	w := worker.New(worker.Options{Coordinator: st.toCoord.Addr(), Name: "silent", Advertise: st.toWorker.Addr(), DrainTimeout: time.Second})
	demo.Register(w)
	ctx, stopWorker := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx, lis) }() // owned: waited in the cleanup
	t.Cleanup(func() { stopWorker(); <-ran })
	<-w.Ready()
	conn := co.Conn(t)
	c := pb.NewCoordinatorServiceClient(conn)
	_, st.url = testcluster.StartGateway(t, conn, gateway.Options{ProbeInterval: time.Second})
	waitFor(t, "the demo tools", func() bool {
		resp, err := c.ListTools(t.Context(), nil)
		return err == nil && len(resp.Tools) >= 3
	})
	st.sid = openSession(t, st.url)
	return st
}

// silence makes the worker silent both ways, for good, until the test
// ends (healed before the worker stops).
func (st *silentStack) silence(t *testing.T) {
	st.toCoord.Set(faultproxy.Silent, 0)
	st.toWorker.Set(faultproxy.Silent, 0)
	t.Cleanup(func() { st.toCoord.Reset(); st.toWorker.Reset() })
}

// wantOneWorkerLost checks the session's one call was decided once, as
// failed/worker_lost.
func (st *silentStack) wantOneWorkerLost(t *testing.T) {
	t.Helper()
	var got []string
	for _, a := range testcluster.Audits(t, st.cli) {
		for _, rec := range a {
			if rec.Scope == "session:"+st.sid {
				got = append(got, rec.Outcome+"/"+rec.Initiator)
			}
		}
	}
	if len(got) != 1 || got[0] != "failed/worker_lost" {
		t.Fatalf("decisions = %v, want one failed/worker_lost", got)
	}
}
