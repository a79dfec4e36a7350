package coordinator_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
)

// Bad input to every RPC gets a clear status with a named reason, writes
// nothing, and breaks nothing.
func TestBadInput(t *testing.T) {
	e := newEnv(t, envOptions{})
	good := e.begin(t, e.c, key("conn:a", num(1)), "hold")
	e.execute(t, good, "hold", `{}`)
	h := e.hold.next(t)
	ref := func(id string, fence int64, worker string) *pb.CallRef {
		return &pb.CallRef{CallId: id, Fence: fence, Worker: worker}
	}
	client := pb.Initiator_INITIATOR_CLIENT
	cases := []struct {
		name   string
		call   func() error
		code   codes.Code
		reason string
	}{
		{"begin without key", func() error {
			_, err := e.c.Begin(t.Context(), &pb.BeginRequest{Tool: "hold"})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"begin with untyped id", func() error {
			_, err := e.c.Begin(t.Context(), &pb.BeginRequest{Key: &pb.CallKey{Scope: "conn:a", RequestId: &pb.RequestId{}}, Tool: "hold"})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"begin with 257-byte id", func() error {
			_, err := e.c.Begin(t.Context(), &pb.BeginRequest{Key: key("conn:a", text(strings.Repeat("x", 257))), Tool: "hold"})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"begin with slash in scope", func() error {
			_, err := e.c.Begin(t.Context(), &pb.BeginRequest{Key: key("conn:a/../b", num(2)), Tool: "hold"})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"begin with control char in scope", func() error {
			_, err := e.c.Begin(t.Context(), &pb.BeginRequest{Key: key("conn:\x00", num(2)), Tool: "hold"})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"begin unknown tool", func() error {
			_, err := e.c.Begin(t.Context(), &pb.BeginRequest{Key: key("conn:a", num(2)), Tool: "nope"})
			return err
		}, codes.NotFound, "UNKNOWN_TOOL"},
		{"begin id in flight", func() error {
			_, err := e.c.Begin(t.Context(), &pb.BeginRequest{Key: key("conn:a", num(1)), Tool: "hold"})
			return err
		}, codes.AlreadyExists, "DUPLICATE_REQUEST_ID"},
		{"cancel without target", func() error {
			_, err := e.c.Cancel(t.Context(), &pb.CancelRequest{Initiator: client})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"cancel without initiator", func() error {
			_, err := e.c.Cancel(t.Context(), &pb.CancelRequest{Target: &pb.CancelRequest_Key{Key: key("conn:a", num(1))}})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"cancel with oversized id", func() error {
			_, err := e.c.Cancel(t.Context(), &pb.CancelRequest{Target: &pb.CancelRequest_Key{Key: key("conn:a", text(strings.Repeat("é", 200)))}, Initiator: client})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"cancel by call with wrong fence", func() error {
			_, err := e.c.Cancel(t.Context(), &pb.CancelRequest{Target: &pb.CancelRequest_Call{Call: ref(good.CallId, good.Fence+1, "w1")}, Initiator: client})
			return err
		}, codes.FailedPrecondition, "FENCE_MISMATCH"},
		{"complete with wrong fence", func() error {
			_, err := e.c.Complete(t.Context(), &pb.CompleteRequest{Call: ref(good.CallId, good.Fence-1, "w1")})
			return err
		}, codes.FailedPrecondition, "FENCE_MISMATCH"},
		{"complete naming no worker", func() error {
			_, err := e.c.Complete(t.Context(), &pb.CompleteRequest{Call: ref(good.CallId, good.Fence, "")})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"fail naming no worker", func() error {
			_, err := e.c.Fail(t.Context(), &pb.FailRequest{Call: ref(good.CallId, good.Fence, ""), Initiator: client})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"complete by another worker", func() error {
			_, err := e.c.Complete(t.Context(), &pb.CompleteRequest{Call: ref(good.CallId, good.Fence, "w2")})
			return err
		}, codes.FailedPrecondition, "NOT_OWNER"},
		{"complete with malformed id", func() error {
			_, err := e.c.Complete(t.Context(), &pb.CompleteRequest{Call: ref("../../etc", 1, "w1")})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"complete unknown call", func() error {
			_, err := e.c.Complete(t.Context(), &pb.CompleteRequest{Call: ref(strings.Repeat("0", 32), 1, "w1")})
			return err
		}, codes.NotFound, "UNKNOWN_CALL"},
		{"fail without initiator", func() error {
			_, err := e.c.Fail(t.Context(), &pb.FailRequest{Call: ref(good.CallId, good.Fence, "w1")})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"get call with bad id", func() error {
			_, err := e.c.GetCall(t.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: "zz"}})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"list audit with bad token", func() error {
			_, err := e.c.ListAudit(t.Context(), &pb.ListAuditRequest{PageToken: "!!"})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"attach without hello", func() error {
			s, err := e.c.Attach(t.Context())
			if err != nil {
				return err
			}
			s.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Drain{Drain: &pb.Drain{}}})
			_, err = s.Recv()
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"attach with bad name", func() error {
			s, err := e.c.Attach(t.Context())
			if err != nil {
				return err
			}
			s.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Hello{Hello: &pb.WorkerHello{Name: "a/b", Address: "x:1"}}})
			_, err = s.Recv()
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"attach under a live worker's name", func() error {
			s, err := e.c.Attach(t.Context())
			if err != nil {
				return err
			}
			s.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Hello{Hello: &pb.WorkerHello{Name: "w1", Address: "x:1"}}})
			_, err = s.Recv()
			return err
		}, codes.AlreadyExists, "WORKER_NAME_IN_USE"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := e.revision(t)
			err := tc.call()
			if status.Code(err) != tc.code || coordinator.ErrorReason(err) != tc.reason {
				t.Fatalf("got %v (reason %q), want %v %s", err, coordinator.ErrorReason(err), tc.code, tc.reason)
			}
			if after := e.revision(t); after != before {
				t.Fatalf("etcd revision moved %d -> %d", before, after)
			}
		})
	}
	// The good call was never disturbed.
	if e.state(t, good.CallId) != pb.CallState_CALL_STATE_RUNNING {
		t.Fatal("bad input disturbed a running call")
	}
	h.release <- nil
}
