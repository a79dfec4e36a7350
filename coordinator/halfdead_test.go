package coordinator_test

import (
	"strings"
	"testing"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/faultproxy"
	"github.com/mcpcancel/mcpcancel/internal/grpcserver"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// halfDeadEnv is a coordinator whose transport keepalive is far beyond
// the test, a worker with the hold tool attached through a proxy that can lose replies,
// and a client of each reaching them directly.
type halfDeadEnv struct {
	cli   pb.CoordinatorServiceClient
	proxy *faultproxy.Proxy
	hold  *holdTool
	w     *testcluster.Worker
	etcd  *etcdtest.Cluster
}

func newHalfDeadEnv(t *testing.T, ttl time.Duration) *halfDeadEnv {
	e := &halfDeadEnv{etcd: etcdtest.Single(t), hold: newHoldTool(false)}
	lax := grpcserver.Keepalive{Time: time.Hour, Timeout: time.Hour}
	co := testcluster.StartCoordinatorKeepalive(t, e.etcd.Client(), coordinator.Options{Name: "a", LeaseTTL: ttl}, lax)
	e.proxy = faultproxy.Start(t, co.Addr)
	// The worker's own keepalive is the default (10 s + 5 s): only the
	// worker noticing the dead link can beat the bounds below.
	e.w = testcluster.StartWorker(t, worker.Options{Coordinator: e.proxy.Addr(), Name: "halfdead"}, e.hold.register)
	e.cli = co.Client(t)
	waitTools(t, e.cli, "hold")
	return e
}

// Regression (issue 14, fault lost_complete_reply, seed
// 1796124566952747474): the link from a worker to the coordinators lost
// every reply from the moment the worker's Complete committed. Each retry
// rode the same dead transport until keepalive ended it (10 s + 5 s), so
// the gateway told the client "worker lost" for a call that completed. A
// settle attempt that goes unanswered now makes the worker redial; the
// retry of the Complete that won is recognised as won, and the result
// goes out within the lease TTL plus 10 s, here well within keepalive's
// 15 s, though the first fresh connection is lost to the fault too.
//
// The TTL is long enough (heartbeats every 2 s, silence noticed after 6 s)
// that the settle attempts' own 2 s deadline is what finds the dead link.
func TestCompleteOnAHalfDeadLink(t *testing.T) {
	const ttl = 6 * time.Second
	e := newHalfDeadEnv(t, ttl)
	lease := e.w.Status().Lease
	b, err := e.cli.Begin(t.Context(), &pb.BeginRequest{Key: key("conn:halfdead", num(1)), Tool: "hold", Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.w.Client(t).Execute(t.Context(), &pb.ExecuteRequest{
		CallId: b.CallId, Fence: b.Fence, Tool: "hold", ArgumentsJson: []byte(`{}`), Deadline: b.Deadline, Worker: b.Worker,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := e.hold.next(t)
	e.proxy.SilenceFor(faultproxy.SilentReplies, 1) // the worker's first redial loses its replies too
	lost := time.Now()
	h.release <- worker.Text("kept")
	final := (&execStream{stream: s}).final(t)
	took := time.Since(lost)
	t.Logf("result out %v after the replies were lost", took.Round(time.Millisecond))
	if final.GetResult() == nil || !strings.Contains(string(final.GetResult().GetResultJson()), "kept") {
		t.Fatalf("final event = %v, want the result", final)
	}
	if bound := 10 * time.Second; took > bound {
		t.Fatalf("the result took %v; keepalive alone takes 15 s, the bound is %v", took, bound)
	}
	if got := outcomes(auditsFrom(t, e.etcd.Client())[b.CallId]); len(got) != 1 || got[0] != "completed" {
		t.Fatalf("audit = %v, want [completed]", got)
	}
	testcluster.WaitFor(t, "the worker to re-attach", func() bool { return e.w.Status().Coordinator != "" })
	if got := e.w.Status().Lease; got != lease {
		t.Fatalf("the worker re-attached under lease %x, not its own %x: its other calls were failed", got, lease)
	}
}

// The other direction of the same fault: a stop order sent on a control
// stream whose replies are lost never arrives. The coordinator echoes
// heartbeats; a worker that hears nothing for three intervals redials and
// re-attaches, and re-reads its stop orders, so a cancelled call's handler
// stops within a few heartbeat intervals, not keepalive's 15 s.
func TestStopOrderOnAHalfDeadLink(t *testing.T) {
	const ttl = 3 * time.Second
	e := newHalfDeadEnv(t, ttl)
	k := key("conn:halfdead-stop", num(1))
	b, err := e.cli.Begin(t.Context(), &pb.BeginRequest{Key: k, Tool: "hold", Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.w.Client(t).Execute(t.Context(), &pb.ExecuteRequest{
		CallId: b.CallId, Fence: b.Fence, Tool: "hold", ArgumentsJson: []byte(`{}`), Deadline: b.Deadline, Worker: b.Worker,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := e.hold.next(t)
	e.proxy.SilenceFor(faultproxy.SilentReplies, 1) // the worker's first redial loses its replies too
	r, err := e.cli.Cancel(t.Context(), &pb.CancelRequest{Target: &pb.CancelRequest_Key{Key: k}, Initiator: pb.Initiator_INITIATOR_OPERATOR, Reason: "stop"})
	if err != nil || r.Result != pb.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("cancel = %v, %v; want CANCELLED", r, err)
	}
	cancelled := time.Now()
	select {
	case <-h.ctx.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the handler was not stopped within keepalive's 15 s")
	}
	took := time.Since(cancelled)
	t.Logf("handler stopped %v after the cancel", took.Round(time.Millisecond))
	if bound := ttl + 3*time.Second; took > bound {
		t.Fatalf("the stop order took %v; the bound is %v", took, bound)
	}
	final := (&execStream{stream: s}).final(t)
	if final.GetCancelled() == nil || final.GetCancelled().GetInitiator() != pb.Initiator_INITIATOR_OPERATOR {
		t.Fatalf("final event = %v, want cancelled by the operator", final)
	}
}
