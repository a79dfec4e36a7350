package coordinator_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/faultproxy"
	"github.com/mcpcancel/mcpcancel/internal/grpcserver"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// Regression (issue 14): a worker that went silent mid-call, blackholed
// both ways (no FIN, no RST), kept its lease as long as its stream
// lingered, and its call stayed open with no decision. The coordinator
// now keeps a lease alive only while it hears from the worker, so the
// call fails as worker_lost within the TTL plus the janitor's reaction.
// The coordinator's transport keepalive is set far beyond the test, so
// that only the lease's own liveness can end it.
func TestSilentWorkerLosesItsCall(t *testing.T) {
	const ttl = 3 * time.Second
	cli := etcdtest.Single(t).Client()
	lax := grpcserver.Keepalive{Time: time.Hour, Timeout: time.Hour}
	co := testcluster.StartCoordinatorKeepalive(t, cli, coordinator.Options{Name: "a", LeaseTTL: ttl}, lax)
	toCoord := faultproxy.Start(t, co.Addr)
	hold := newHoldTool(false)
	w := testcluster.StartWorker(t, worker.Options{Coordinator: toCoord.Addr(), Name: "silent"}, hold.register)
	toWorker := faultproxy.Start(t, w.Addr)
	c := co.Client(t)
	waitTools(t, c, "hold")

	b, err := c.Begin(t.Context(), &pb.BeginRequest{Key: key("conn:silent", num(1)), Tool: "hold", Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := pb.NewWorkerServiceClient(testcluster.Conn(t, toWorker.Addr())).Execute(t.Context(), &pb.ExecuteRequest{
		CallId: b.CallId, Fence: b.Fence, Tool: "hold", ArgumentsJson: []byte(`{}`), Deadline: b.Deadline, Worker: b.Worker,
	})
	if err != nil {
		t.Fatal(err)
	}
	hold.next(t)
	toCoord.Set(faultproxy.Silent, 0)
	toWorker.Set(faultproxy.Silent, 0)
	silenced := time.Now()
	var call *pb.Call
	testcluster.WaitFor(t, "the silent worker's call to fail", func() bool {
		r, err := c.GetCall(t.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: b.CallId}})
		call = r.GetCall()
		return err == nil && call.State != pb.CallState_CALL_STATE_RUNNING
	})
	took := time.Since(silenced)
	t.Logf("silent worker's call %s after %v (lease TTL %v)", call.State, took.Round(time.Millisecond), ttl)
	if call.State != pb.CallState_CALL_STATE_FAILED || call.Initiator != pb.Initiator_INITIATOR_WORKER_LOST {
		t.Fatalf("call = %v by %v, want FAILED by worker_lost", call.State, call.Initiator)
	}
	if took > ttl+10*time.Second {
		t.Fatalf("the call failed %v after the worker went silent; the bound is the TTL plus 10s", took)
	}
	if got := outcomes(auditsFrom(t, cli)[b.CallId]); len(got) != 1 || got[0] != "failed" {
		t.Fatalf("audit = %v, want [failed]", got)
	}
	// Let the worker find its way back, so that it stops cleanly.
	toCoord.Reset()
	toWorker.Reset()
	stream.CloseSend()
}

// A worker that says nothing after its hello loses its lease within the
// TTL, though its stream stays open.
func TestLeaseKeptOnlyWhileHeard(t *testing.T) {
	const ttl = time.Second
	cli := etcdtest.Single(t).Client()
	lax := grpcserver.Keepalive{Time: time.Hour, Timeout: time.Hour}
	co := testcluster.StartCoordinatorKeepalive(t, cli, coordinator.Options{Name: "a", LeaseTTL: ttl}, lax)
	c := co.Client(t)
	attach := func(name string) {
		s, err := c.Attach(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Hello{Hello: &pb.WorkerHello{
			Name: name, Address: "127.0.0.1:9",
		}}}); err != nil {
			t.Fatal(err)
		}
		if m, err := s.Recv(); err != nil || m.GetAttached() == nil {
			t.Fatalf("attach %s: %v %v", name, m, err)
		}
	}
	attach("mute")
	workerKey := func(name string) bool {
		r, err := cli.Get(t.Context(), prefix+"workers/"+name, clientv3.WithCountOnly())
		return err == nil && r.Count == 1
	}
	start := time.Now()
	testcluster.WaitFor(t, "the mute worker's lease to expire", func() bool { return !workerKey("mute") })
	if took := time.Since(start); took > 2*ttl {
		t.Fatalf("the mute worker kept its lease %v; the TTL is %v", took, ttl)
	}
}
