package worker_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// A gateway whose client left tells the worker before its cancellation
// commits (CallersGone): the handler stops at once, while the call is
// still running at the coordinator, and the call then ends as the
// gateway's cancellation decides, with no Cancel of the worker's own and
// the handler's real stop time in the audit. Only the connection that
// runs the call may stop it so.
func TestCallersGoneStopsTheHandlerBeforeTheDecision(t *testing.T) {
	cl := etcdtest.Single(t)
	coord := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{})
	c := coord.Client(t)
	wt := startWaitCalls(t, c, coord.Addr, "gone")
	k := &pb.CallKey{Scope: "conn:gone", RequestId: &pb.RequestId{Kind: &pb.RequestId_Number{Number: 1}}}
	bg, stream := wt.run(t, k)
	decideBy := timestamppb.New(time.Now().Add(time.Minute))

	// Another connection, as another gateway replica that learnt the id.
	other, err := wt.w.Client(t).CallersGone(t.Context(), &pb.CallersGoneRequest{CallIds: []string{bg.CallId}, DecideBy: decideBy})
	if err != nil || other.GetStopped() != 0 {
		t.Fatalf("CallersGone from another connection: %v, %v; want nothing stopped", other, err)
	}
	if n := testcluster.Gauge(t, wt.w.Registry(), "mcpcancel_worker_running_handlers"); n != 1 {
		t.Fatalf("%v handlers running after another connection's CallersGone, want 1", n)
	}

	before := testcluster.HandledRPCs(t, coord.Server.Registry())["Cancel"]
	own, err := wt.wc.CallersGone(t.Context(), &pb.CallersGoneRequest{CallIds: []string{bg.CallId}, DecideBy: decideBy})
	if err != nil || own.GetStopped() != 1 {
		t.Fatalf("CallersGone from the call's own connection: %v, %v; want it stopped", own, err)
	}
	testcluster.WaitFor(t, "the handler to return", func() bool {
		return testcluster.Gauge(t, wt.w.Registry(), "mcpcancel_worker_running_handlers") == 0
	})
	got, err := c.GetCall(t.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: bg.CallId}})
	if err != nil || got.GetCall().GetState() != pb.CallState_CALL_STATE_RUNNING {
		t.Fatalf("the call once its handler returned: %v, %v; want it still running, undecided", got, err)
	}

	// The gateway's cancellation arrives, and decides.
	resp, err := c.Cancel(t.Context(), &pb.CancelRequest{Target: &pb.CancelRequest_Key{Key: k}, Initiator: pb.Initiator_INITIATOR_DISCONNECT, Reason: "stdio connection closed"})
	if err != nil || resp.GetResult() != pb.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("the gateway's cancel: %v, %v; want it to win", resp, err)
	}
	ev := lastEvent(t, stream)
	if e := ev.GetCancelled(); e == nil || e.GetInitiator() != pb.Initiator_INITIATOR_DISCONNECT || e.GetReason() != "stdio connection closed" {
		t.Fatalf("the stream ended with %v; want cancelled as the gateway's cancel decided", ev)
	}
	awaitIdle(t, wt.w)
	if n := testcluster.HandledRPCs(t, coord.Server.Registry())["Cancel"] - before; n != 1 {
		t.Errorf("the coordinator answered %v Cancels, want 1 (the gateway's): the worker cancelled on its own", n)
	}
	var a *coordinator.AuditRecord
	testcluster.WaitFor(t, "the audit's stopped_at", func() bool {
		as := testcluster.Audits(t, cl.Client())[bg.CallId]
		if len(as) != 1 {
			t.Fatalf("audit records of the call: %v, want one", as)
		}
		a = as[0]
		return a.StoppedAt != nil
	})
	if a.Outcome != "cancelled" || a.Initiator != "disconnect" || !a.StoppedAt.Before(a.SettledAt) {
		t.Errorf("audit: %s by %s, stopped %v, settled %v; want cancelled by disconnect, stopped before settled", a.Outcome, a.Initiator, a.StoppedAt, a.SettledAt)
	}
}

// A call stopped by CallersGone whose decision does not come by
// decide_by (its gateway died before its cancel went out) is cancelled
// by the worker itself, as a caller gone.
func TestCallersGoneWithoutADecision(t *testing.T) {
	cl := etcdtest.Single(t)
	coord := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{})
	c := coord.Client(t)
	wt := startWaitCalls(t, c, coord.Addr, "undecided")
	k := &pb.CallKey{Scope: "conn:undecided", RequestId: &pb.RequestId{Kind: &pb.RequestId_Number{Number: 1}}}
	bg, stream := wt.run(t, k)
	// A decide_by in the past waits the least the worker allows.
	own, err := wt.wc.CallersGone(t.Context(), &pb.CallersGoneRequest{CallIds: []string{bg.CallId}, DecideBy: timestamppb.Now()})
	if err != nil || own.GetStopped() != 1 {
		t.Fatalf("CallersGone: %v, %v; want the call stopped", own, err)
	}
	ev := lastEvent(t, stream)
	if e := ev.GetCancelled(); e == nil || e.GetInitiator() != pb.Initiator_INITIATOR_DISCONNECT || e.GetReason() != worker.ReasonCallerGone {
		t.Fatalf("the stream ended with %v; want cancelled by the worker as %q", ev, worker.ReasonCallerGone)
	}
	got, err := c.GetCall(t.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: bg.CallId}})
	if err != nil || got.GetCall().GetState() != pb.CallState_CALL_STATE_CANCELLED || got.GetCall().GetReason() != worker.ReasonCallerGone {
		t.Errorf("the call: %v, %v; want cancelled by the worker", got, err)
	}
}

// run begins a call of "wait" under k and executes it, returning once
// its handler runs; the stream stays open.
func (wt *waitCalls) run(tb testing.TB, k *pb.CallKey) (*pb.BeginResponse, pb.WorkerService_ExecuteClient) {
	tb.Helper()
	return wt.runIn(tb, tb.Context(), k)
}

// runIn is run with the Execute stream's context derived from ctx.
func (wt *waitCalls) runIn(tb testing.TB, ctx context.Context, k *pb.CallKey) (*pb.BeginResponse, pb.WorkerService_ExecuteClient) {
	tb.Helper()
	bg, err := wt.c.Begin(tb.Context(), &pb.BeginRequest{Key: k, Tool: "wait"})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second) // bounds lastEvent
	tb.Cleanup(cancel)
	stream, err := wt.wc.Execute(ctx, &pb.ExecuteRequest{CallId: bg.CallId, Fence: bg.Fence, Tool: "wait", Worker: bg.Worker, Deadline: bg.Deadline})
	if err != nil {
		tb.Fatal(err)
	}
	select {
	case <-wt.started:
	case <-tb.Context().Done():
		tb.Fatal("the handler did not start")
	}
	return bg, stream
}

// stopAMinuteAhead stops the call through CallersGone from its own
// connection, with its decision due in a minute, and returns once the
// handler has returned; it returns decide_by.
func (wt *waitCalls) stopAMinuteAhead(tb testing.TB, callID string) time.Time {
	tb.Helper()
	decideBy := time.Now().Add(time.Minute)
	own, err := wt.wc.CallersGone(tb.Context(), &pb.CallersGoneRequest{CallIds: []string{callID}, DecideBy: timestamppb.New(decideBy)})
	if err != nil || own.GetStopped() != 1 {
		tb.Fatalf("CallersGone: %v, %v; want the call stopped", own, err)
	}
	testcluster.WaitFor(tb, "the handler to return", func() bool {
		return testcluster.Gauge(tb, wt.w.Registry(), "mcpcancel_worker_running_handlers") == 0
	})
	return decideBy
}

// lastEvent reads the stream to its end (bounded by run's context) and
// returns its last event.
func lastEvent(tb testing.TB, stream pb.WorkerService_ExecuteClient) *pb.ExecuteResponse {
	tb.Helper()
	var last *pb.ExecuteResponse
	for {
		ev, err := stream.Recv()
		if err != nil {
			return last
		}
		last = ev
	}
}

// A call stopped by CallersGone waits for its decision, but not past the
// worker's drain: a worker shutting down (here while the decision is a
// minute away) settles the call itself, as a caller gone, and stops.
// Found by the soak: a worker stuck in its drain past its grace.
func TestCallersGoneDoesNotHoldTheDrain(t *testing.T) {
	cl := etcdtest.Single(t)
	coord := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{})
	c := coord.Client(t)
	wt := startWaitCallsWith(t, c, worker.Options{Coordinator: coord.Addr, Name: "draining", DrainTimeout: 100 * time.Millisecond})
	k := &pb.CallKey{Scope: "conn:draining", RequestId: &pb.RequestId{Kind: &pb.RequestId_Number{Number: 1}}}
	bg, stream := wt.run(t, k)
	decideBy := wt.stopAMinuteAhead(t, bg.CallId)
	if err := wt.w.Close(); err != nil {
		t.Fatal(err)
	}
	if time.Now().After(decideBy) {
		t.Fatal("the worker's drain waited for the decision until decide_by")
	}
	ev := lastEvent(t, stream)
	if e := ev.GetCancelled(); e == nil || e.GetInitiator() != pb.Initiator_INITIATOR_DISCONNECT || e.GetReason() != worker.ReasonCallerGone {
		t.Fatalf("the stream ended with %v; want cancelled by the worker as %q", ev, worker.ReasonCallerGone)
	}
	got, err := c.GetCall(t.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: bg.CallId}})
	if err != nil || got.GetCall().GetState() != pb.CallState_CALL_STATE_CANCELLED {
		t.Errorf("the call: %v, %v; want it cancelled", got, err)
	}
}

// A call stopped by CallersGone waits for its decision until decide_by
// only while its Execute stream is open: once the gateway ends the
// stream it has learnt the decision, given up on it, or gone, and a
// decision that created the call's record (its gateway failed it by its
// placement) sends the worker no stop order. The worker then settles the
// call itself a moment later, not at decide_by (held 20 s, such a call
// stays counted in flight: most likely the fault harness's one failure
// of that kind).
func TestCallersGoneStreamEndCutsTheWait(t *testing.T) {
	cl := etcdtest.Single(t)
	coord := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{})
	c := coord.Client(t)
	wt := startWaitCalls(t, c, coord.Addr, "ended")
	k := &pb.CallKey{Scope: "conn:ended", RequestId: &pb.RequestId{Kind: &pb.RequestId_Number{Number: 1}}}
	ctx, endStream := context.WithCancel(t.Context())
	bg, _ := wt.runIn(t, ctx, k)
	decideBy := wt.stopAMinuteAhead(t, bg.CallId)
	endStream() // the gateway gives up, with no decision made
	testcluster.WaitFor(t, "the worker to settle the call", func() bool {
		return testcluster.Gauge(t, wt.w.Registry(), "mcpcancel_worker_calls_in_flight") == 0
	})
	if time.Now().After(decideBy) {
		t.Fatal("the worker held the call until decide_by after its stream ended")
	}
	got, err := c.GetCall(t.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: bg.CallId}})
	if err != nil || got.GetCall().GetState() != pb.CallState_CALL_STATE_CANCELLED || got.GetCall().GetReason() != worker.ReasonCallerGone {
		t.Errorf("the call: %v, %v; want cancelled by the worker as %q", got, err, worker.ReasonCallerGone)
	}
}
