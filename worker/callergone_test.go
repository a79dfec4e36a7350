package worker_test

import (
	"testing"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/faultproxy"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// When its caller goes, a worker waits briefly for the coordinator's stop
// order before it cancels the call itself. The gateway closes the Execute
// stream the moment its cancel wins, and the order follows: here the
// worker's link to the coordinator delays it 50 ms, so the stream's end
// always comes first. The worker ends the call as the order says and
// sends no Cancel of its own (one would be answered "already cancelled").
// A caller that is truly gone, with nobody's cancel behind it, is still
// cancelled by the worker, as the caller's disconnect.
func TestCallerGoneWaitsForTheStopOrder(t *testing.T) {
	cl := etcdtest.Single(t)
	coord := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{})
	link := faultproxy.Start(t, coord.Addr)
	c := coord.Client(t)
	wt := startWaitCalls(t, c, link.Addr(), "gone")
	link.Set(faultproxy.Delay, 50*time.Millisecond)
	run := func(id int64, cancel bool) *pb.Call {
		t.Helper()
		callID := wt.end(t, id, cancel)
		got, err := c.GetCall(t.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: callID}})
		if err != nil {
			t.Fatal(err)
		}
		return got.GetCall()
	}

	before := testcluster.HandledRPCs(t, coord.Server.Registry())["Cancel"]
	call := run(1, true)
	if n := testcluster.HandledRPCs(t, coord.Server.Registry())["Cancel"] - before; n != 1 {
		t.Errorf("the coordinator answered %v Cancels, want 1 (the client's): the worker asked to cancel a call already cancelled", n)
	}
	if call.GetState() != pb.CallState_CALL_STATE_CANCELLED || call.GetInitiator() != pb.Initiator_INITIATOR_CLIENT || call.GetReason() != "the client's" {
		t.Errorf("the cancelled call: %v, want the client's cancellation", call)
	}

	call = run(2, false)
	if call.GetState() != pb.CallState_CALL_STATE_CANCELLED || call.GetInitiator() != pb.Initiator_INITIATOR_DISCONNECT || call.GetReason() != worker.ReasonCallerGone {
		t.Errorf("the call whose caller went: %v, want cancelled by the worker as the disconnect (%q)", call, worker.ReasonCallerGone)
	}
}
