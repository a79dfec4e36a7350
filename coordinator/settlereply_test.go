package coordinator_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/worker"
)

// dropFirstReply is a client interceptor that loses the first reply of
// method after the call committed, as a connection cut at that moment
// would.
func dropFirstReply(method string, dropped *atomic.Bool) grpc.DialOption {
	return grpc.WithUnaryInterceptor(func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoke(ctx, m, req, reply, cc, opts...)
		if err == nil && strings.HasSuffix(m, "/"+method) && dropped.CompareAndSwap(false, true) {
			return status.Error(codes.Unavailable, "error reading from server: EOF")
		}
		return err
	})
}

// A retried Fail whose first attempt won is recognised as won, and the
// reply to a decision that lost names the one that won.
func TestSettleRepliesNameTheWinner(t *testing.T) {
	e := newEnv(t, envOptions{})
	b := e.begin(t, e.c, key("conn:winner", num(1)), "hold")
	ref := &pb.CallRef{CallId: b.CallId, Fence: b.Fence, Worker: b.Worker}
	fail := &pb.FailRequest{Call: ref, Initiator: pb.Initiator_INITIATOR_TOOL, Reason: "broke"}
	for i := range 2 { // the second is a retry of the first
		r, err := e.c.Fail(t.Context(), fail)
		if err != nil {
			t.Fatal(err)
		}
		if r.Result != pb.SettleResult_SETTLE_RESULT_WON {
			t.Fatalf("fail attempt %d = %v, want WON", i, r.Result)
		}
	}
	cr, err := e.c.Complete(t.Context(), &pb.CompleteRequest{Call: ref})
	if err != nil {
		t.Fatal(err)
	}
	if cr.Result != pb.SettleResult_SETTLE_RESULT_ALREADY_FAILED || cr.WinnerInitiator != pb.Initiator_INITIATOR_TOOL || cr.WinnerReason != "broke" {
		t.Fatalf("complete after fail = %v", cr)
	}
	other := &pb.FailRequest{Call: ref, Initiator: pb.Initiator_INITIATOR_WORKER_LOST, Reason: "gone"}
	if r, err := e.c.Fail(t.Context(), other); err != nil || r.Result != pb.SettleResult_SETTLE_RESULT_ALREADY_FAILED || r.WinnerReason != "broke" {
		t.Fatalf("another fail = %v, %v; want ALREADY_FAILED naming the first", r, err)
	}
	cancel, err := e.c.Cancel(t.Context(), &pb.CancelRequest{
		Target: &pb.CancelRequest_Key{Key: key("conn:winner", num(1))}, Initiator: pb.Initiator_INITIATOR_CLIENT,
	})
	if err != nil {
		t.Fatal(err)
	}
	if cancel.Result != pb.CancelResult_CANCEL_RESULT_ALREADY_FAILED || cancel.WinnerInitiator != pb.Initiator_INITIATOR_TOOL {
		t.Fatalf("cancel after fail = %v", cancel)
	}
	if got := outcomes(e.audits(t, b.CallId)); len(got) != 2 || got[0] != "failed" || got[1] != "cancel_lost" {
		t.Fatalf("audit = %v, want [failed cancel_lost]: one decision, and the client's late cancel", got)
	}
}

// A call cancelled by an operator while its handler runs ends, on the
// Execute stream, with a Cancelled event naming the operator and the
// reason, so that a gateway answers a client that did not cancel.
func TestExecuteNamesWhoCancelled(t *testing.T) {
	e := newEnv(t, envOptions{stubborn: true})
	b := e.begin(t, e.c, key("conn:operator", num(1)), "hold")
	s := e.execute(t, b, "hold", `{}`)
	h := e.hold.next(t)
	if _, err := e.c.CancelScope(t.Context(), &pb.CancelScopeRequest{
		Scope: "conn:operator", Initiator: pb.Initiator_INITIATOR_OPERATOR, Reason: "maintenance",
	}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, h)
	h.release <- worker.Text("too late")
	final := s.final(t)
	c := final.GetCancelled()
	if c == nil || c.Initiator != pb.Initiator_INITIATOR_OPERATOR || c.Reason != "maintenance" {
		t.Fatalf("final event = %v, want Cancelled by the operator for maintenance", final)
	}
}

func echoText(_ context.Context, c *worker.Call) (*worker.Result, error) {
	var a struct{ Text string }
	if err := c.Bind(&a); err != nil {
		return nil, err
	}
	return worker.Text(a.Text), nil
}
