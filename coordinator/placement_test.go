package coordinator_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
)

// A session closed through one replica takes no new call through another,
// whose gateway may not have heard of the close yet.
func TestBeginRefusedInClosedSession(t *testing.T) {
	e := newEnv(t, envOptions{replicas: 2})
	const sid = "closed-elsewhere-0123456789"
	if _, err := e.c.OpenSession(t.Context(), &pb.OpenSessionRequest{Session: &pb.Session{SessionId: sid, Principal: "alice"}}); err != nil {
		t.Fatal(err)
	}
	k := key(coordinator.SessionScopePrefix+sid, num(1))
	running := e.begin(t, e.c, k, "hold")
	other := e.coords[1].Client(t)
	closed, err := other.CloseSession(t.Context(), &pb.CloseSessionRequest{SessionId: sid, Principal: "alice"})
	if err != nil || closed.Cancelled != 1 {
		t.Fatalf("close = %v, %v; want the running call cancelled", closed, err)
	}
	_, err = e.c.Begin(t.Context(), &pb.BeginRequest{Key: key(coordinator.SessionScopePrefix+sid, num(2)), Tool: "hold", Principal: "alice"})
	if status.Code(err) != codes.FailedPrecondition || coordinator.ErrorReason(err) != "SESSION_CLOSED" {
		t.Fatalf("begin in a closed session = %v, want FAILED_PRECONDITION SESSION_CLOSED", err)
	}
	_, err = e.c.OpenSession(t.Context(), &pb.OpenSessionRequest{Session: &pb.Session{SessionId: sid, Principal: "alice"}})
	if coordinator.ErrorReason(err) != "DUPLICATE_REQUEST_ID" {
		t.Fatalf("opening the closed session again = %v, want it refused", err)
	}
	if got := outcomes(e.audits(t, running.CallId)); len(got) != 1 || got[0] != "cancelled" {
		t.Fatalf("audit of the running call = %v, want [cancelled]", got)
	}
}

// A worker refuses an Execute that names another worker; one that names
// none is not checked.
func TestWorkerRefusesAnotherWorkersCall(t *testing.T) {
	e := newEnv(t, envOptions{})
	b := e.begin(t, e.c, key("conn:misrouted", num(1)), "echo")
	s, err := e.wc.Execute(t.Context(), &pb.ExecuteRequest{
		CallId: b.CallId, Fence: b.Fence, Tool: "echo", ArgumentsJson: []byte(`{"text":"x"}`), Worker: "w2",
	})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("execute for w2 on w1 = %v, want FAILED_PRECONDITION", err)
	}
	s, err = e.wc.Execute(t.Context(), &pb.ExecuteRequest{
		CallId: b.CallId, Fence: b.Fence, Tool: "echo", ArgumentsJson: []byte(`{"text":"x"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if final := (&execStream{stream: s}).final(t); final.GetResult() == nil {
		t.Fatalf("execute naming no worker ended with %v, want the result", final)
	}
}
